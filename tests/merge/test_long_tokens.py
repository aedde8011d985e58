"""Very long chunks and tokens (runs of one letter, text without spaces): the same merges as the
reference trainer, whatever the tokens' lengths (ties are broken on their bytes as they are)."""

from __future__ import annotations

import random

import pytest
from reference import reference_train

from parbpe.merge.coordinator import learn_merges
from parbpe.merge.runs import RunEngine, prefers_runs
from parbpe.merge.table import build_table


def _letters(rng: random.Random, alphabet: str, n: int) -> bytes:
    return "".join(rng.choice(alphabet) for _ in range(n)).encode()


def _corpora() -> dict[str, tuple[dict[bytes, int], int]]:
    rng = random.Random(3)
    return {
        # Runs of one letter: tokens a, aa, aaaa, ... and ties between tokens that prefix each other.
        "runs": ({b"a" * 12000: 1, b"a" * 4999 + b"b": 2, b"b" * 4097: 1, b"=" * 3000: 3, b"ab" * 1500: 1}, 60),
        # Random letters with no space: one long chunk and a few shorter ones.
        "letters": ({_letters(rng, "abcd", 9000): 1, _letters(rng, "ab", 3000): 2, _letters(rng, "cd", 2000): 1},
                    80),
        # CJK without spaces: three bytes per character, long tokens of multi-byte text.
        "cjk": ({_letters(rng, "的一是不了人我在有他", 4000): 1, ("中文" * 800).encode(): 2}, 80),
    }


MODES = {
    "serial": {"max_batch_size": 1},
    "batchbpe": {},
    "exact": {"batching": "exact"},
}


def _merges(counts: dict[bytes, int], n: int, **kwargs) -> list[tuple[int, int]]:
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
    return learn_merges(table, [bytes([b]) for b in range(256)], n, **kwargs).merges


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("corpus", ["runs", "letters", "cjk"])
def test_long_tokens_give_the_reference_merges(corpus, mode):
    counts, n = _corpora()[corpus]
    kwargs = MODES[mode]
    expected = reference_train(counts, n, batched=mode == "batchbpe")
    assert _merges(counts, n, **kwargs) == expected
    if mode != "serial":
        assert _merges(counts, n, workers=2, min_tokens_per_worker=1, **kwargs) == expected


def test_a_run_of_one_letter_makes_doubling_tokens():
    # 2**12 a's: each serial merge doubles the token (ties with the leftovers go to the longer bytes).
    merges = _merges({b"a" * 4096: 1}, 12, max_batch_size=1)
    assert merges == [(97, 97)] + [(256 + k, 256 + k) for k in range(11)]


def _mixed(rng: random.Random) -> dict[bytes, int]:
    """Long runs of one token beside ordinary text: runs split by merges of their neighbours."""
    return {b"xy" * 7 + b"a" * 3001 + b"bbbaab" * 5 + b"c" * 999: 2, _letters(rng, "ab", 500) + b"a" * 777: 3,
            b"aaab": 5, b"bbba" * 40: 1, b"=" * 5000 + b"ab": 1, "中".encode() * 2000: 2}


@pytest.mark.parametrize("nonoverlap", [False, True])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("corpus", ["runs", "letters", "mixed"])
def test_the_run_engine_gives_the_reference_merges_and_tokens(corpus, mode, nonoverlap):
    counts, n = (_mixed(random.Random(7)), 120) if corpus == "mixed" else _corpora()[corpus]
    kwargs = MODES[mode]
    expected = reference_train(counts, n, batched=mode == "batchbpe", nonoverlap=nonoverlap)
    items = sorted(counts.items())
    tables = [build_table([c for c, _ in items], [k for _, k in items], 256 + n) for _ in range(2)]
    runs = learn_merges(tables[0], [bytes([b]) for b in range(256)], n, engine="runs", nonoverlap=nonoverlap,
                        **kwargs)
    chunk = learn_merges(tables[1], [bytes([b]) for b in range(256)], n, engine="chunk", nonoverlap=nonoverlap,
                         **kwargs)
    assert runs.merges == expected == chunk.merges
    assert isinstance(runs.engine, RunEngine)
    for c in range(len(items)):
        assert runs.engine.chunk_tokens(c) == chunk.engine.chunk_tokens(c)


def test_runs_are_chosen_when_they_shrink_the_table_and_any_worker_count_gives_the_same_merges():
    counts = {b"a" * 300_000: 1, b"b" * 70_000 + b"a" * 5: 2, b"hello": 4}
    items = sorted(counts.items())

    def table():
        return build_table([c for c, _ in items], [k for _, k in items], 1024)

    assert prefers_runs(table()) and not prefers_runs(build_table([_letters(random.Random(1), "ab", 70_000)],
                                                                  [1], 1024))
    reference = learn_merges(table(), [bytes([b]) for b in range(256)], 60, engine="chunk", max_batch_size=1).merges
    for kwargs in [{}, {"workers": 2, "min_tokens_per_worker": 1}, {"batching": "exact"}, {"max_batch_size": 1}]:
        result = learn_merges(table(), [bytes([b]) for b in range(256)], 60, **kwargs)
        assert isinstance(result.engine, RunEngine)
        if kwargs.get("batching") or kwargs.get("max_batch_size"):
            assert result.merges == reference
    batched = [learn_merges(table(), [bytes([b]) for b in range(256)], 60, **kw).merges
               for kw in [{}, {"workers": 2, "min_tokens_per_worker": 1}, {"engine": "chunk"}]]
    assert batched[0] == batched[1] == batched[2]


def test_the_run_log_is_compacted_and_grows_without_losing_runs():
    rng = random.Random(11)
    counts = {b"".join(rng.choice([b"a", b"b", b"ab", b"aaaa"]) * rng.randint(1, 40) for _ in range(30)): k + 1
              for k in range(40)}
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 400)
    result = learn_merges(table, [bytes([b]) for b in range(256)], 100, engine="runs", max_batch_size=3)
    assert result.merges == reference_train(counts, 100, batched=True, max_batch_size=3)
    engine = result.engine
    assert engine.runs == engine.used - engine.dead == int(engine.run_len.sum()) <= len(engine.tok)


@pytest.mark.parametrize("seed", range(6))
def test_prefers_runs_decides_as_the_runs_counted_whole(seed, monkeypatch):
    """prefers_runs' quick reject (tokens equal to the one before, chunk boundaries ignored) never
    decides otherwise than counting the runs: tables near RUNS_FACTOR, where chunk boundaries between
    equal tokens are what tips the balance, with small slices so that repeats are counted across them."""
    from parbpe.merge import runs as runs_module

    monkeypatch.setattr(runs_module, "MIN_RUN_TOKENS", 16)
    monkeypatch.setattr(runs_module, "SLICE", 37)
    rng = random.Random(seed)
    for _ in range(40):
        run_length = rng.choice([1, 2, 3, 4, 5])
        chunks = []
        for _ in range(rng.randint(3, 30)):
            letters = "".join(rng.choice("ab") * rng.randint(1, 2 * run_length) for _ in range(rng.randint(1, 8)))
            chunks.append(letters.encode())
        table = build_table(chunks, [1] * len(chunks), 1024)
        n = int(table.starts[-1])
        whole = n >= 16 and runs_module.RUNS_FACTOR * len(runs_module.run_starts(table)) <= n
        assert prefers_runs(table) == whole


@pytest.mark.parametrize("seed", range(4))
def test_runs_per_chunk_counts_each_chunks_runs(seed, monkeypatch):
    """runs_per_chunk against itertools.groupby on each chunk: empty chunks, equal bytes across chunk
    ends, slices cut anywhere."""
    import itertools

    import numpy as np

    from parbpe.merge import runs as runs_module

    monkeypatch.setattr(runs_module, "SLICE", 5 + seed)
    rng = random.Random(seed)
    chunks = [bytes(rng.choice(b"aab") for _ in range(rng.choice([0, 1, 2, 5, 12]))) for _ in range(60)]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)
    data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    expected = [sum(1 for _ in itertools.groupby(c)) for c in chunks]
    assert runs_module.runs_per_chunk(data, offsets).tolist() == expected

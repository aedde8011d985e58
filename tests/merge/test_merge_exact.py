"""The merge engine against the slow reference trainer: exact merges, serial and batched."""

from __future__ import annotations

import random

import numpy as np
import pytest
from corpora import random_corpus
from reference import reference_counts, reference_train

import parbpe
from parbpe.merge import coordinator
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table
from parbpe.patterns import PATTERNS

ENGINES = ["linked", "chunk"]


def engine_merges(counts: dict[bytes, int], n_merges: int, **kwargs) -> list[tuple[int, int]]:
    """Merges of learn_merges; with overlap counting, both engines must give the same."""
    if not kwargs.get("nonoverlap") and "engine" not in kwargs:
        results = [engine_merges(counts, n_merges, engine=e, **kwargs) for e in ENGINES]
        assert results[0] == results[1], "the linked and chunk engines disagree"
        return results[0]
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [n for _, n in items], 256 + n_merges)
    vocab = [bytes([b]) for b in range(256)]
    return learn_merges(table, vocab, n_merges, **kwargs).merges


def test_wikipedia_example_overlap():
    # aa x4 (overlapping in "aaa") -> aa; then (aa, a) ties (a, b) at 2 and wins on bytes "aa" > "a".
    assert engine_merges({b"aaabdaaabac": 1}, 3, max_batch_size=1) == [(97, 97), (256, 97), (257, 98)]


def test_wikipedia_example_nonoverlap():
    # nonoverlap: (a, a) counts 2, ties (a, b) at 2, and (a, b) wins on second bytes "b" > "a".
    assert engine_merges({b"aaabdaaabac": 1}, 3, max_batch_size=1, nonoverlap=True) == [
        (97, 98), (97, 256), (97, 257)
    ]


@pytest.mark.parametrize("nonoverlap", [False, True])
def test_repeated_character_chunk(nonoverlap):
    # aaaaaa -> aa aa aa -> aaaa aa -> aaaaaa
    assert engine_merges({b"aaaaaa": 1}, 3, max_batch_size=1, nonoverlap=nonoverlap) == [
        (97, 97), (256, 256), (257, 256)
    ]


def test_overlap_and_nonoverlap_differ_on_runs():
    # "aaa" x3 and "ab" x4: overlap counts (a, a) 6 > 4; nonoverlap counts it 3 < 4.
    counts = {b"aaa": 3, b"ab": 4}
    assert engine_merges(counts, 1, max_batch_size=1)[0] == (97, 97)
    assert engine_merges(counts, 1, max_batch_size=1, nonoverlap=True)[0] == (97, 98)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("nonoverlap", [False, True])
def test_serial_equals_reference_on_generated_corpora(seed, nonoverlap):
    rng = random.Random(seed)
    alphabet = rng.choice([b"ab", b"abc", b"aab", b"abcdefgh", b"xy "])
    counts = random_corpus(rng, alphabet, rng.randint(1, 40), rng.randint(2, 14))
    n = rng.randint(1, 60)
    assert engine_merges(counts, n, max_batch_size=1, nonoverlap=nonoverlap) == reference_train(
        counts, n, nonoverlap=nonoverlap
    )


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("nonoverlap", [False, True])
def test_batched_equals_reference_on_generated_corpora(seed, nonoverlap):
    rng = random.Random(1000 + seed)
    alphabet = rng.choice([b"ab", b"abc", b"abcdefgh", b"the quick", bytes(range(97, 123))])
    counts = random_corpus(rng, alphabet, rng.randint(5, 80), rng.randint(2, 16))
    n = rng.randint(5, 120)
    cap, max_batch = rng.choice([(2, 0), (1, 0), (4, 0), (2, 3), (2, 50)])
    assert engine_merges(counts, n, nonoverlap=nonoverlap, cap_divisor=cap, max_batch_size=max_batch) == (
        reference_train(counts, n, nonoverlap=nonoverlap, batched=True, cap_divisor=cap, max_batch_size=max_batch)
    )


def test_batched_wide_rounds_equal_reference():
    # Enough distinct pairs that rounds rank hundreds of pairs (the numpy pool path, not the heap).
    rng = random.Random(7)
    counts = random_corpus(rng, bytes(range(33, 127)), 3000, 10)
    n = 600
    merges = engine_merges(counts, n)
    assert merges == reference_train(counts, n, batched=True)
    assert len(merges) == n


def test_ties_break_on_bytes_not_order():
    # Every pair occurs once: the lexicographically greatest pair must win, whatever the chunk order.
    counts = {b"za": 1, b"ab": 1, b"zb": 1, b"ba": 1}
    assert engine_merges(counts, 1, max_batch_size=1) == [(ord("z"), ord("b"))]
    assert engine_merges(dict(reversed(list(counts.items()))), 1, max_batch_size=1) == [(ord("z"), ord("b"))]


def test_long_runs_of_one_byte():
    counts = {b"a" * 1000: 3, b"a" * 7: 5, b"ba" * 50: 2}
    for nonoverlap in (False, True):
        assert engine_merges(counts, 30, max_batch_size=1, nonoverlap=nonoverlap) == reference_train(
            counts, 30, nonoverlap=nonoverlap
        )
        assert engine_merges(counts, 30, nonoverlap=nonoverlap) == reference_train(
            counts, 30, nonoverlap=nonoverlap, batched=True
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_stops_early_when_no_pair_is_left(engine):
    items = {b"ab": 2, b"cd": 1}
    table = build_table(list(items), list(items.values()), 300)
    result = learn_merges(table, [bytes([b]) for b in range(256)], 10, max_batch_size=1, engine=engine)
    assert result.merges == [(97, 98), (99, 100)]
    assert result.stopped_early


@pytest.mark.parametrize("engine", ENGINES)
def test_table_tokens_equal_encoding_of_each_chunk(engine):
    # After training, the table holds every chunk's encoding: the tokenizer must reproduce it.
    rng = random.Random(3)
    counts = random_corpus(rng, b"abcde ", 300, 12)
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [n for _, n in items], 512)
    vocab = [bytes([b]) for b in range(256)]
    result = learn_merges(table, vocab, 200, engine=engine)
    tok = parbpe.Tokenizer(pattern=".+", merges=[(a, b, 256 + r) for r, (a, b) in enumerate(result.merges)])
    kept = [c for c, _ in items if len(c) > 1]
    for k, chunk in enumerate(kept):
        assert tok._encode_chunk(chunk.decode()) == result.engine.chunk_tokens(k)


TEXT_SAMPLES = [
    "Hello world! Hello there, world. It's 2024: the year's 12345 tests.\n\n  Indented   code();\n",
    "aaabdaaabac aaaaaa aaaa aaab   \t\r\n",
    "Ünïcödé wörds, 中文字符和日本語のテキスト, русский текст, عربى 😀😀 emoji!!! ...\n",
    "don't won't I'M YOU'RE they've we'll she'd <|endoftext|> after the special\n",
]


def _documents(seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(30):
        parts = [rng.choice(TEXT_SAMPLES)[rng.randint(0, 10):] for _ in range(rng.randint(1, 4))]
        docs.append(("<|endoftext|>" if rng.random() < 0.3 else " ").join(parts))
    return docs


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "gpt4o"])
@pytest.mark.parametrize("specials", [(), ("<|endoftext|>",)])
@pytest.mark.parametrize("pair_count", ["overlap", "nonoverlap"])
@pytest.mark.parametrize("batched", [False, True])
def test_train_on_text_equals_reference(tmp_path, pattern, specials, pair_count, batched):
    docs = _documents(hash((pattern, specials, pair_count)) % 1000)
    path = tmp_path / "corpus.jsonl"
    import json

    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    n_merges = 80
    vocab_size = 256 + n_merges + len(specials)
    result = parbpe.train([str(path)], vocab_size=vocab_size, pattern=pattern, special_tokens=specials,
                          pair_count=pair_count, max_batch_size=0 if batched else 1, workers=1)
    counts = reference_counts(docs, PATTERNS[pattern], specials)
    expected = reference_train(counts, n_merges, nonoverlap=pair_count == "nonoverlap", batched=batched)
    got = [(a, b) for a, b, _ in result.tokenizer.merges]
    assert got == expected
    assert result.tokenizer.n_vocab == vocab_size
    if specials:
        assert result.tokenizer.special_tokens == {"<|endoftext|>": vocab_size - 1}


def test_stop_list_tokens_leave_training():
    docs = ["the cat and the dog and the bird " * 5, "the end"]
    counts = reference_counts(docs, PATTERNS["gpt4"])
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "c.txt")
        with open(p, "w") as f:
            f.write(docs[0])
        result = parbpe.train([p], vocab_size=256 + 2 + 10, stop_list_size=2, workers=1, max_batch_size=1)
    tok = result.tokenizer
    # " the" (5x... more) and " and" are the two most frequent multi-character chunks.
    doc_counts = reference_counts([docs[0]], PATTERNS["gpt4"])
    top = sorted(((n, c) for c, n in doc_counts.items() if len(c.decode()) > 1), reverse=True)[:2]
    assert tok.stop_words == {top[0][1]: 256, top[1][1]: 257}
    rest = {c: n for c, n in doc_counts.items() if c not in tok.stop_words}
    base = [bytes([b]) for b in range(256)] + [top[0][1], top[1][1]]
    assert [(a, b) for a, b, _ in tok.merges] == reference_train(rest, 10, base_vocab=base)
    assert tok.encode_ordinary(" the") == [256]
    assert counts  # the reference saw text


def test_freq_cutoff_uses_global_counts(tmp_path):
    # Chunks: "rare" once per file (3 in all), " common" 9 times, " alpha"/" beta"/" gamma" once.
    for k, word in enumerate(["alpha", "beta", "gamma"]):
        (tmp_path / f"f{k}.txt").write_text(f"rare common common common {word}")
    result = parbpe.train([str(tmp_path)], vocab_size=300, freq_cutoff=3, workers=1)
    assert result.stats["unique_chunks"] == 5
    assert result.stats["training_chunks"] == 2  # "rare" survives: the cutoff sees global counts
    assert result.stats["dropped_by_freq_cutoff"] == 3


def test_linked_engine_refuses_nonoverlap():
    table = build_table([b"ab"], [1], 300)
    with pytest.raises(ValueError, match="overlapping pairs only"):
        learn_merges(table, [bytes([b]) for b in range(256)], 1, nonoverlap=True, engine="linked")


def test_token_dtype_switches_to_int32_for_large_vocabularies():
    assert build_table([b"ab"], [1], 65536).tokens.dtype == np.uint16
    assert build_table([b"ab"], [1], 65537).tokens.dtype == np.int32


def exact_result(counts: dict[bytes, int], n_merges: int, **kwargs):
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [n for _, n in items], 256 + n_merges)
    return learn_merges(table, [bytes([b]) for b in range(256)], n_merges, batching="exact", engine="linked",
                        **kwargs)


@pytest.mark.parametrize("seed", range(40))
def test_exact_batching_equals_serial_reference(seed):
    rng = random.Random(2000 + seed)
    alphabet = rng.choice([b"ab", b"abc", b"aab", b"abcdefgh", b"the quick", bytes(range(97, 123))])
    counts = random_corpus(rng, alphabet, rng.randint(5, 80), rng.randint(2, 16))
    n = rng.randint(5, 120)
    result = exact_result(counts, n, cap_divisor=rng.choice([1, 2, 4]))
    assert result.merges == reference_train(counts, n)
    assert engine_merges(counts, n, batching="exact") == result.merges  # the chunk engine runs serially


def test_exact_batching_makes_many_merges_per_round_on_wide_corpora():
    rng = random.Random(7)
    counts = random_corpus(rng, bytes(range(33, 127)), 2000, 10)
    result = exact_result(counts, 400)
    assert result.merges == reference_train(counts, 400)
    assert max(result.batch_sizes) > 10 and len(result.batch_sizes) < 200  # under half a round a merge


def test_exact_batching_with_ties_and_long_runs():
    ties = {b"za": 1, b"ab": 1, b"zb": 1, b"ba": 1, b"cd": 2, b"dc": 2}
    assert exact_result(ties, 4).merges == reference_train(ties, 4)
    runs = {b"a" * 1000: 3, b"a" * 7: 5, b"ba" * 50: 2, b"xyxyxy": 40}
    assert exact_result(runs, 30).merges == reference_train(runs, 30)


def test_exact_batching_through_train_equals_serial(tmp_path):
    rng = random.Random(4)
    words = ["".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(1, 8))) for _ in range(300)]
    (tmp_path / "t.txt").write_text(" ".join(rng.choice(words) for _ in range(20000)))
    serial = parbpe.train([str(tmp_path / "t.txt")], vocab_size=700, workers=1, max_batch_size=1)
    exact = parbpe.train([str(tmp_path / "t.txt")], vocab_size=700, workers=1, batching="exact")
    assert exact.tokenizer.merges == serial.tokenizer.merges
    assert exact.stats["rounds"] < serial.stats["rounds"] / 2


@pytest.mark.parametrize("first_width,growth", [(1, 2), (2, 4), (4, 3)])
def test_exact_batching_ranks_a_width_grown_from_its_prefixes(monkeypatch, first_width, growth):
    """Exact batching ranks only EXACT_GROWTH times the last prefix (EXACT_FIRST_WIDTH at first); a
    prefix cut short by that width still ends in serial BPE's merges, whatever the widths."""
    monkeypatch.setattr(coordinator, "EXACT_FIRST_WIDTH", first_width)
    monkeypatch.setattr(coordinator, "EXACT_GROWTH", growth)
    rng = random.Random(11)
    counts = random_corpus(rng, bytes(range(33, 127)), 2000, 10)
    result = exact_result(counts, 300)
    assert result.merges == reference_train(counts, 300)
    width = first_width
    for size in result.batch_sizes:
        assert size <= width
        width = max(first_width, growth * size)
    assert max(result.batch_sizes) > first_width  # the width grew


@pytest.mark.parametrize("jit_mode", ["off", "on"])
@pytest.mark.parametrize("settings", [{}, {"batching": "exact"}, {"max_batch_size": 1}, {"engine": "chunk"},
                                      {"nonoverlap": True}, {"allow": "superword"}])
def test_merges_do_not_depend_on_the_order_of_the_chunks(monkeypatch, jit_mode, settings):
    """learn_merges on the same chunks in byte order and shuffled makes the same merges (SuperBPE's
    stage 2 trains on its chunks in reduce-partition order, count/reduce.py), with the kernels and
    without, for every engine, batching and SuperBPE's rule."""
    from parbpe.merge.superword import superword_allowed

    monkeypatch.setenv("PARBPE_JIT", jit_mode)
    if settings.get("allow"):
        settings = {"allow": superword_allowed}
    rng = random.Random(len(settings))
    counts = random_corpus(rng, b"ab :c", 300, 14)
    items = sorted(counts.items())
    shuffled = items[:]
    rng.shuffle(shuffled)
    results = []
    for order in (items, shuffled):
        table = build_table([c for c, _ in order], [n for _, n in order], 256 + 80)
        results.append(learn_merges(table, [bytes([b]) for b in range(256)], 80, **settings).merges)
    assert results[0] == results[1] and len(results[0]) > 40

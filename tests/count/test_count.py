"""Counting in worker processes, with and without spills, gives exactly the in-process counts."""

from __future__ import annotations

import dataclasses
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reference import count_with, reference_counts

import parbpe
from parbpe.config import TrainConfig
from parbpe.io.plan import plan

WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "ζήτα", "中文", "😀", "1234", "don't", "  ", "\n", "x.y",
         "end.", "(paren)"]
SPECIAL = "<|endoftext|>"


def _texts(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for k in range(3):
        texts = _texts(rng, 40)
        texts[0] = texts[0] + SPECIAL + texts[1]
        pq.write_table(pa.table({"text": texts}), d / f"part-{k}.parquet", row_group_size=7)
    (d / "notes.txt").write_text("\n".join(rng.choice(WORDS) for _ in range(500)))
    return d


def _corpus_documents(corpus) -> list[str]:
    docs = [t for k in range(3) for t in pq.read_table(corpus / f"part-{k}.parquet").column("text").to_pylist()]
    return docs + [(corpus / "notes.txt").read_text()]


def test_counts_equal_the_reference(corpus, tmp_path):
    config = TrainConfig(special_tokens=(SPECIAL,), workers=1)
    counts, _ = count_with(plan([str(corpus)]), config, tmp_path)
    expected = reference_counts(_corpus_documents(corpus), config.pattern, (SPECIAL,))
    assert {c.encode(): n for c, n in counts.items()} == dict(expected)


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
@pytest.mark.parametrize("spill", [False, True])
def test_counts_identical_for_any_workers_start_method_and_spills(corpus, tmp_path, workers, start_method, spill):
    units = plan([str(corpus)])
    assert len(units) > 10
    os.makedirs(tmp_path / "serial")
    serial, _ = count_with(units, TrainConfig(special_tokens=(SPECIAL,), workers=1), tmp_path / "serial",
                           data_limit=None)
    seen = []
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    counts, result = count_with(units, TrainConfig(special_tokens=(SPECIAL,), workers=workers), run_dir,
                                start_method=start_method, data_limit=1 if spill else None,
                                on_progress=lambda *a: seen.append(a))
    assert counts == serial
    assert seen[-1][:3] == (len(units), len(units), result.stats.bytes)
    if spill:  # a limit of one byte spills after every batch: many runs, same counts
        assert result.spills >= len(units) - workers
        assert result.spills <= len(result.runs) <= result.spills + workers
    else:
        assert result.spills == 0 and len(result.runs) == workers


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    return d


def test_training_output_is_identical_for_any_worker_count_and_budget(corpus, tmp_path):
    outputs = []
    for workers, data_limit in ((1, None), (3, None), (2, 1)):
        out = tmp_path / f"w{workers}-{data_limit}"
        result = parbpe.train([str(corpus)], vocab_size=300, special_tokens=(SPECIAL,), workers=workers,
                              out_dir=str(out), data_limit=data_limit)
        assert (result.stats["spills"] > 0) == (data_limit is not None)
        outputs.append({name: (out / name).read_bytes() for name in ("parbpe.json", "tokenizer.json",
                                                                     "merges.txt", "tokenizer.tiktoken")})
    assert outputs[0] == outputs[1] == outputs[2]


def test_counts_file_is_identical_with_spills(corpus, tmp_path):
    files = []
    for workers, data_limit in ((1, None), (2, 1)):
        path = tmp_path / f"counts-{workers}.parquet"
        parbpe.count_to_file([str(corpus)], str(path), TrainConfig(workers=workers), data_limit=data_limit)
        files.append(path.read_bytes())
    assert files[0] == files[1]


def test_worker_error_names_the_unit(tmp_path, run_dir):
    pq.write_table(pa.table({"text": ["fine text"] * 3}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"body": ["no text column"]}), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"worker \d .*failed on .*b.parquet \(row group 0\).*no column 'text'"):
        count_with(plan([str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]), TrainConfig(workers=2),
                   run_dir)


def test_a_killed_worker_is_a_clear_error_not_a_hang(corpus, monkeypatch, run_dir):
    import signal

    import parbpe.count.counter as count_module
    from parbpe.run.pool import WorkerDied

    # With fork, the workers inherit this stand-in: each kills itself as the kernel's OOM killer would.
    monkeypatch.setattr(count_module, "count_unit", lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
    with pytest.raises(WorkerDied, match=r"worker \d \(counting .*\) died \(signal 9: probably out of memory; try"):
        count_with(plan([str(corpus)]), TrainConfig(workers=2), run_dir, start_method="fork")


def test_budget_too_small_for_one_unit_is_a_clear_error(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"memory budget 50.0 MB is too small for 2 worker\(s\).*use at least"):
        parbpe.train([str(corpus)], vocab_size=300, workers=2, memory_budget="50MB", tmp_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_spill_files_are_removed_on_error(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    pq.write_table(pa.table({"text": ["good text here"] * 50}), corpus / "a.parquet", row_group_size=5)
    (corpus / "z.jsonl").write_text('{"text": "fine"}\nnot json\n')
    spill_dir = tmp_path / "spills"
    spill_dir.mkdir()
    with pytest.raises(ValueError, match=r"z.jsonl:2: not valid JSON"):
        parbpe.train([str(corpus)], vocab_size=300, workers=1, tmp_dir=str(spill_dir), data_limit=1)
    assert list(spill_dir.iterdir()) == []


def _slow_partition_hash(row: bytes) -> int:
    """partitions.py's hash of one row, by the obvious Python loop."""
    total, power, mask = 0, 1, (1 << 64) - 1
    for b in row:
        total = (total + b * power) & mask
        power = power * 1099511628211 & mask
    h = (len(row) * 0x9E3779B97F4A7C15 & mask) ^ total
    h ^= h >> 31
    h = h * 0x9E3779B97F4A7C15 & mask
    h ^= h >> 29
    return h >> 33


def _hash_rows() -> list[bytes]:
    rng = random.Random(4)
    rows = [b"a" * 3000, b"", b"xyz", bytes(rng.getrandbits(8) for _ in range(2500)), b"q" * 1024, b"r" * 1025]
    return rows + [bytes([rng.randrange(256)]) * rng.randint(0, 30) for _ in range(3000)]


def test_long_chunks_hash_in_windows_to_the_same_partition(monkeypatch):
    """A chunk longer than a hashing window (hostile text: one chunk of megabytes) is hashed a
    window at a time; its partition is the one the whole-row hash gives (checked by an obvious
    polynomial hash in Python). numpy's hash: the JIT off."""
    import numpy as np

    import parbpe.count.partitions as partitions

    monkeypatch.setenv("PARBPE_JIT", "off")
    rows = _hash_rows()
    expected = np.array([_slow_partition_hash(r) for r in rows]) % (1 << 30)
    whole = partitions.partition_ids(pa.array(rows, type=pa.binary()), 1 << 30)
    monkeypatch.setattr(partitions, "_HASH_BYTES", 1024)
    windows = partitions.partition_ids(pa.array(rows, type=pa.binary()), 1 << 30)
    assert (whole == expected).all() and (windows == expected).all()


@pytest.mark.parametrize("n_partitions", [1, 7, 32, 300])  # 300: ids past one byte sort as int64
def test_a_run_file_holds_each_partitions_rows_in_its_batch_in_their_order(tmp_path, n_partitions):
    """write_run: record batch p holds exactly the rows of partition p, in the table's order (a stable
    sort by partition id)."""
    import numpy as np
    import pyarrow.ipc as ipc

    from parbpe.count.partitions import partition_ids, write_run
    from parbpe.count.pieces import SCHEMA

    rng = random.Random(n_partitions)
    chunks = sorted({"".join(rng.choice("abcé ") for _ in range(rng.randint(1, 12))) for _ in range(2000)})
    rng.shuffle(chunks)
    table = pa.table({"chunk": chunks, "count": list(range(len(chunks)))}, schema=SCHEMA)
    write_run(str(tmp_path / "run.arrow"), table, n_partitions)
    ids = partition_ids(table.column("chunk"), n_partitions)
    with pa.OSFile(str(tmp_path / "run.arrow"), "rb") as source:
        reader = ipc.open_file(source)
        assert reader.num_record_batches == n_partitions
        for p in range(n_partitions):
            batch = reader.get_batch(p)
            rows = np.flatnonzero(ids == p)
            assert batch.column(0).to_pylist() == [chunks[r] for r in rows]
            assert batch.column(1).to_pylist() == rows.tolist()


def test_the_partition_kernel_hashes_as_numpy_and_runs_only_where_numba_is_loaded(monkeypatch):
    """The numba kernel gives the slow hash's ids, on sliced arrays and strings too; under --jit auto
    it runs only in a process that has numba loaded already (no import for the hash alone)."""
    import numpy as np

    import parbpe.count.partitions as partitions
    from parbpe import jit

    pytest.importorskip("numba")
    rows = _hash_rows()
    monkeypatch.setenv("PARBPE_JIT", "on")
    assert partitions._kernel_hashes()
    for n_partitions in (1 << 30, 32, 1):
        expected = np.array([_slow_partition_hash(r) for r in rows]) % n_partitions
        assert (partitions.partition_ids(pa.array(rows, type=pa.binary()), n_partitions) == expected).all()
        sliced = pa.array(rows, type=pa.binary()).slice(7, 900)
        assert (partitions.partition_ids(sliced, n_partitions) == expected[7:907]).all()
    texts = ["", "é", "中文 text", "😀" * 50, "<|endoftext|>"]
    expected = np.array([_slow_partition_hash(t.encode()) for t in texts]) % 32
    assert (partitions.partition_ids(pa.chunked_array([texts[:2], texts[2:]], pa.string())) == expected).all()
    monkeypatch.setenv("PARBPE_JIT", "auto")
    assert partitions._kernel_hashes() == jit.loaded()
    monkeypatch.setattr(jit, "_numba_checked", False)  # as in a process that never imported numba
    assert not partitions._kernel_hashes()
    monkeypatch.setenv("PARBPE_JIT", "off")
    assert not partitions._kernel_hashes()


def _slow_cut(chunk: str, max_bytes: int) -> list[str]:
    """Characters taken greedily while the piece stays within max_bytes (one at least)."""
    pieces, piece = [], ""
    for ch in chunk:
        if piece and len((piece + ch).encode()) > max_bytes:
            pieces.append(piece)
            piece = ""
        piece += ch
    return pieces + [piece]


@pytest.mark.parametrize("max_bytes", [1, 2, 5, 16])
def test_max_chunk_bytes_cuts_long_chunks_on_character_boundaries(max_bytes, tmp_path):
    from collections import Counter

    from parbpe.count.counter import cut_chunk

    rng = random.Random(max_bytes)
    alphabet = "ab é中😀"
    docs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(200)]
    docs.append("x" * 1000 + " " + "中" * 300)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    expected: Counter = Counter()
    for chunk, n in reference_counts(docs, TrainConfig().pattern).items():
        text = chunk.decode("utf-8")
        assert [p.encode() for p in _slow_cut(text, max_bytes)] == cut_chunk(chunk, max_bytes)
        for piece in _slow_cut(text, max_bytes):
            expected[piece] += n
    for workers in (1, 2):
        config = TrainConfig(workers=workers, max_chunk_bytes=max_bytes)
        (tmp_path / f"w{workers}").mkdir()
        counts, _ = count_with(plan([str(tmp_path / "docs.jsonl")]), config, tmp_path / f"w{workers}")
        assert counts == dict(expected)
        assert max(len(c.encode()) for c in counts) <= max(max_bytes, 4)


def test_max_chunk_bytes_is_checked_and_recorded(tmp_path):
    with pytest.raises(ValueError, match="max_chunk_bytes must be >= 0"):
        TrainConfig(max_chunk_bytes=-3)
    (tmp_path / "a.txt").write_text("a" * 5000 + " bb " * 40)
    result = parbpe.train([str(tmp_path / "a.txt")], out_dir=str(tmp_path / "out"), vocab_size=270, workers=1,
                          max_chunk_bytes=64)
    assert result.stats["config"]["max_chunk_bytes"] == 64
    assert max(len(t) for t in result.tokenizer.vocab.values()) <= 64
    assert json.loads((tmp_path / "out" / "parbpe.json").read_text())["config"]["max_chunk_bytes"] == 64


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("spill", [False, True])
def test_parent_counting_a_shard_gives_the_same_counts(corpus, tmp_path, workers, spill):
    """Under a tight budget the parent counts shard 0 in a thread while workers count the rest."""
    units = plan([str(corpus)])
    (tmp_path / "serial").mkdir()
    serial, _ = count_with(units, TrainConfig(special_tokens=(SPECIAL,), workers=1), tmp_path / "serial")
    (tmp_path / "runs").mkdir()
    seen = []
    counts, result = count_with(units, TrainConfig(special_tokens=(SPECIAL,), workers=workers), tmp_path / "runs",
                                data_limit=1 if spill else None, parent_counts=True,
                                on_progress=lambda *a: seen.append(a))
    assert counts == serial
    assert seen[-1][:3] == (len(units), len(units), result.stats.bytes)
    names = {os.path.basename(r).split("-")[0] for r in result.runs}
    assert names == {f"w{r}" for r in range(workers)}  # one shard per rank, the parent's included
    assert (result.spills > 0) == spill


def test_an_error_in_the_parents_own_shard_names_the_unit(tmp_path, run_dir):
    pq.write_table(pa.table({"body": ["no text column"]}), tmp_path / "a-bad.parquet")  # shard 0: the parent's
    pq.write_table(pa.table({"text": ["fine text"] * 3}), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"worker 0 .*failed on .*a-bad.parquet \(row group 0\).*no column 'text'"):
        count_with(plan([str(tmp_path / "a-bad.parquet"), str(tmp_path / "b.parquet")]), TrainConfig(workers=2),
                   run_dir, parent_counts=True)


def test_a_killed_worker_beside_the_parents_shard_is_a_clear_error(corpus, monkeypatch, run_dir):
    import signal

    import parbpe.count.counter as count_module
    from parbpe.run.pool import WorkerDied

    parent, real = os.getpid(), count_module.count_unit

    def count_or_die(*args, **kwargs):  # workers kill themselves as the OOM killer would; the parent counts
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    monkeypatch.setattr(count_module, "count_unit", count_or_die)
    with pytest.raises(WorkerDied, match=r"worker 1 \(counting .*\) died \(signal 9: probably out of memory; try"):
        count_with(plan([str(corpus)]), TrainConfig(workers=2), run_dir, start_method="fork", parent_counts=True)


def test_a_tight_budget_has_the_parent_count_and_trains_the_same(corpus, tmp_path):
    import io
    import json

    from parbpe.run.memory import HELD_FACTOR, PARENT_COUNTING, WORKER_OVERHEAD, tree_rss
    from parbpe.run.progress import Progress

    # Room for 30 MB of counts per shard with the parent counting (the tree grows some 50 MB before
    # counting starts: 100 MB allowed), too little for two waiting workers' 64 MB. The room is above
    # what this process holds now, whatever earlier tests loaded into it (numba: 100 MB or more).
    budget = tree_rss() + 100 * 10**6 + PARENT_COUNTING + 2 * (WORKER_OVERHEAD + HELD_FACTOR * 30 * 10**6)
    outputs, notes = [], []
    for memory_budget in (None, budget):
        out = tmp_path / f"b{memory_budget}"
        stream = io.StringIO()
        result = parbpe.train([str(corpus)], vocab_size=300, special_tokens=(SPECIAL,), workers=2, out_dir=str(out),
                              memory_budget=memory_budget, progress=Progress("jsonl", stream))
        events = [json.loads(line) for line in stream.getvalue().splitlines()]
        notes.append([e["message"] for e in events if e.get("event") == "note" and "shard" in e.get("message", "")])
        outputs.append({name: (out / name).read_bytes() for name in ("tokenizer.json", "merges.txt")})
        assert result.stats["peak_rss_bytes"] > 0
    assert outputs[0] == outputs[1]
    assert notes[0] == [] and "counting in 2 shard(s), this process counting one" in notes[1][0]


def test_counting_allocates_from_the_system_pool_and_gives_the_pool_back(corpus, tmp_path, monkeypatch):
    import parbpe.count.counter as count_module
    from parbpe.run.memory import system_pool

    before = pa.default_memory_pool().backend_name
    with system_pool():
        assert pa.default_memory_pool().backend_name == "system"
    assert pa.default_memory_pool().backend_name == before
    seen = []
    real = count_module.count_unit

    def count_and_look(unit, shard):
        seen.append(pa.default_memory_pool().backend_name)
        return real(unit, shard)

    monkeypatch.setattr(count_module, "count_unit", count_and_look)
    (tmp_path / "runs").mkdir()
    count_with(plan([str(corpus)]), TrainConfig(workers=1), tmp_path / "runs")
    assert seen and set(seen) == {"system"} and pa.default_memory_pool().backend_name == before


@pytest.mark.parametrize("use_jit,mb", [("off", 4), ("on", 16)])
def test_a_piece_longer_than_a_processes_share_names_the_budget_that_fits(use_jit, mb, tmp_path):
    """One chunk of one two-byte character: counting it costs LONG_PIECE_NUMPY (or _JIT) a byte, more
    than the counting layout gives a process; the check refuses before it is counted, naming a budget
    at which the layout's share holds it. Many short pieces of the same length pass."""
    from parbpe.count.counter import ShardCounter
    from parbpe.run.memory import count_layout, parse_size

    if use_jit == "on":
        pytest.importorskip("numba")
    long = pa.array(["é" * (mb * 500_000)])  # with no cut
    budget, base, unit = 300 * 10**6, 100 * 10**6, 1
    config = TrainConfig(workers=1, memory_budget=budget, jit=use_jit)
    shard = ShardCounter(config, str(tmp_path), "w0", count_layout(budget, 1, base, unit).data_limit)
    shard.add_texts(pa.array(["é" * 7 + " "] * (mb * 125_000)))  # as many bytes of short pieces
    with pytest.raises(ValueError, match=rf"too small for a piece of {mb}.0 MB of text with no cut") as error:
        shard.add_texts(long)
    assert len(str(error.value).splitlines()) == 1
    named = parse_size("".join(str(error.value).split("use at least ")[1].split(" ")[:2]))
    fits = ShardCounter(dataclasses.replace(config, memory_budget=named), str(tmp_path), "w1",
                        count_layout(named, 1, base, unit).data_limit)
    fits.add_texts(long)
    assert fits.pieces.nbytes > 0

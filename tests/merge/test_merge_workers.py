"""The merge engine over worker processes gives the single-process merges, and fails cleanly."""

from __future__ import annotations

import os
import random
import signal

import pytest
from corpora import random_corpus
from reference import reference_train

from parbpe.merge import prepare
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table
from parbpe.merge.workers import SlicedEngine, slice_bounds

MODES = {"batchbpe": {}, "exact": {"batching": "exact"}, "serial": {"max_batch_size": 1}}


def _run(counts: dict[bytes, int], n: int, workers: int, **kwargs):
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
    result = learn_merges(table, [bytes([b]) for b in range(256)], n, workers=workers, min_tokens_per_worker=1,
                          **kwargs)
    return result.merges, [result.engine.chunk_tokens(c) for c in range(table.n_chunks)]


CORPORA = {
    "tiny": ({b"hello": 5, b"hell": 3, b"yellow": 2, b"low": 4, b"lower": 1}, 12),
    "ties": ({b"za": 1, b"ab": 1, b"zb": 1, b"ba": 1, b"cd": 2, b"dc": 2, b"xy": 2, b"yx": 2}, 6),
    "runs": ({b"a" * 1000: 3, b"a" * 7: 5, b"ba" * 50: 2, b"xyxyxy": 40, b"aab": 9}, 30),
    "wide": (random_corpus(random.Random(7), bytes(range(33, 127)), 3000, 10), 400),
}


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_workers_give_the_single_process_merges(corpus, mode):
    counts, n = CORPORA[corpus]
    single = _run(counts, n, 1, **MODES[mode])
    for workers in (2, 4):
        assert _run(counts, n, workers, **MODES[mode]) == single
    if mode != "batchbpe" and corpus != "wide":  # (the wide one is checked in test_merge_exact)
        assert single[0] == reference_train(counts, n)


def test_small_tables_merge_in_one_process():
    counts, n = CORPORA["wide"]
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
    result = learn_merges(table, [bytes([b]) for b in range(256)], 50, workers=2)  # far under MIN_TOKENS_PER_WORKER
    assert not isinstance(result.engine, type(table))  # the in-process engine, not the compacted table


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_start_methods_and_nonoverlap(start_method):
    counts, n = CORPORA["runs"]
    for kwargs in ({}, {"nonoverlap": True}, {"batching": "exact"}):
        assert _run(counts, n, 2, start_method=start_method, **kwargs) == _run(counts, n, 1, **kwargs)


def test_slices_are_balanced_by_tokens_not_chunks():
    table = build_table([b"x" * 2000] + [b"ab"] * 1000, [1] * 1001, 300)
    assert slice_bounds(table, 2) == [0, 1, 1001]  # the one long chunk holds half of all tokens


def test_a_worker_error_names_the_worker_and_its_slice():
    counts, n = CORPORA["wide"]
    items = sorted(counts.items())
    engine = SlicedEngine(build_table([c for c, _ in items], [k for _, k in items], 256 + n), 2)
    try:
        engine._send(("no such command",))
        with pytest.raises(RuntimeError, match=r"merge worker 0 \(chunks 0-\d+, pid \d+\) failed"):
            engine._gather()
    finally:
        engine.close()
    assert engine._procs == []


def test_a_killed_worker_is_an_error_not_a_hang():
    counts, n = CORPORA["wide"]
    items = sorted(counts.items())
    engine = SlicedEngine(build_table([c for c, _ in items], [k for _, k in items], 256 + n), 2)
    try:
        os.kill(engine._procs[1].pid, signal.SIGKILL)
        import numpy as np

        with pytest.raises(RuntimeError, match=r"merge worker 1 .* died"):
            engine.apply(np.array([97]), np.array([98]), np.array([256]))
    finally:
        engine.close()


def test_stats_split_out_the_messages_time():
    counts, n = CORPORA["wide"]
    items = sorted(counts.items())
    for workers in (1, 2):
        table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
        result = learn_merges(table, [bytes([b]) for b in range(256)], n, workers=workers, min_tokens_per_worker=1)
        seconds = result.seconds
        assert set(seconds) == {"counting", "selection", "applying", "updating", "replaying", "communication"}
        assert seconds["applying"] >= 0
        if workers == 1:
            assert seconds["communication"] == 0
        else:
            assert seconds["communication"] > 0  # every round sends the batch and gets answers back


# -- the shared table, the encoding in the workers, and what they leave behind -------------------

def _byte_table_and_stage1(seed: int, n_stage1: int = 60):
    from parbpe.merge.table import token_dtype

    counts = random_corpus(random.Random(seed), b"abcde fgh", 400, 12)
    items = sorted(counts.items())
    stage1 = learn_merges(build_table([c for c, _ in items], [k for _, k in items], 256 + n_stage1),
                          [bytes([b]) for b in range(256)], n_stage1, max_batch_size=7)
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + 200)
    assert table.tokens.dtype == token_dtype(456)
    return table, stage1


@pytest.fixture
def shm(tmp_path, monkeypatch):
    from parbpe.run.shared_arrays import SHM_DIR_VARIABLE

    monkeypatch.setenv(SHM_DIR_VARIABLE, str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("seed", range(3))
def test_encoding_in_workers_equals_encoding_here_and_they_merge_on(seed, shm):
    import dataclasses

    import numpy as np

    from parbpe.merge.encode import encode_byte_table

    table, stage1 = _byte_table_and_stage1(seed)
    expected = encode_byte_table(table, stage1.merges, stage1.batch_sizes)
    vocab = [bytes([b]) for b in range(256)]
    for a, b in stage1.merges:
        vocab.append(vocab[a] + vocab[b])
    alone = learn_merges(dataclasses.replace(expected, tokens=expected.tokens.copy(), lengths=expected.lengths.copy()),
                         list(vocab), 100)  # (an engine edits its table in place)
    table, stage1 = _byte_table_and_stage1(seed)
    encoded, sliced, workers = prepare.encode_for_merging(table, stage1.merges, stage1.batch_sizes, 456, workers=3,
                                                              min_bytes_per_worker=1, min_tokens_per_worker=1)
    assert workers == 3 and sliced is not None and sliced.workers == 3
    for name in ("tokens", "starts", "lengths", "counts"):
        assert np.array_equal(getattr(encoded, name), getattr(expected, name)), name
    assert encoded.tokens.dtype == expected.tokens.dtype
    result = learn_merges(encoded, list(vocab), 100, sliced=sliced)
    assert result.workers == 3 and result.merges == alone.merges
    assert [result.engine.chunk_tokens(c) for c in range(encoded.n_chunks)] == \
        [alone.engine.chunk_tokens(c) for c in range(encoded.n_chunks)]
    assert sliced._procs == [] and os.listdir(shm) == []  # stopped, and no block's name left


def test_a_table_the_kernels_encode_is_encoded_and_merged_here(shm, monkeypatch):
    """Where the kernels encode the table, it is encoded in this process (two threads) however many
    workers its bytes would have, and merge_workers keeps its merging here too."""
    pytest.importorskip("numba")
    import numpy as np

    from parbpe import jit
    from parbpe.merge import encode as encode_module
    from parbpe.merge import workers as workers_module
    from parbpe.merge.encode import encode_byte_table

    table, stage1 = _byte_table_and_stage1(2)
    expected = encode_byte_table(table, stage1.merges, stage1.batch_sizes)
    monkeypatch.setattr(prepare, "MIN_BYTES_PER_ENCODE_WORKER", 1)
    monkeypatch.setattr(encode_module, "TWO_THREADS_MIN_BYTES", 1)
    with jit.using("on"):
        encoded, sliced, workers = prepare.encode_for_merging(table, stage1.merges, stage1.batch_sizes, 456,
                                                                  workers=2, threads=2)
        assert (sliced, workers) == (None, 1)
        assert workers_module.merge_workers(10**9, 2, linked=True) == 1
        assert workers_module.merge_workers(10**9, 4, linked=True) == 4  # more than two: not measured against
        assert workers_module.merge_workers(10**9, 2, linked=False) == 2  # the chunk engine: no kernels
        assert workers_module.merge_workers(10**9, 2, linked=True, min_tokens_per_worker=10**8) == 2  # asked for
        monkeypatch.setattr(workers_module, "KERNELS_MERGE_ALONE", False)
        assert workers_module.merge_workers(10**9, 2, linked=True) == 2
    with jit.using("off"):
        monkeypatch.setattr(workers_module, "KERNELS_MERGE_ALONE", True)
        assert workers_module.merge_workers(10**9, 2, linked=True) == 2  # numpy's engine
        assert workers_module.merge_workers(10**7, 2, linked=True) == 1  # under MIN_TOKENS_PER_WORKER
    for name in ("tokens", "starts", "lengths", "counts"):
        assert np.array_equal(getattr(encoded, name), getattr(expected, name)), name
    assert os.listdir(shm) == []  # no worker made a block


def test_workers_that_encode_a_table_too_small_to_merge_stop_and_it_merges_here(shm):
    from parbpe.merge.engines import LinkedEngine

    table, stage1 = _byte_table_and_stage1(0)
    encoded, sliced, workers = prepare.encode_for_merging(table, stage1.merges, stage1.batch_sizes, 456, workers=2,
                                                              min_bytes_per_worker=1)
    assert workers == 2 and sliced is None  # under MIN_TOKENS_PER_WORKER: the table stays here
    vocab = [bytes([b]) for b in range(256)]
    for a, b in stage1.merges:
        vocab.append(vocab[a] + vocab[b])
    assert isinstance(learn_merges(encoded, vocab, 20).engine, LinkedEngine)
    assert os.listdir(shm) == []


def test_a_worker_killed_while_encoding_is_a_one_line_error_and_leaves_no_block(shm, monkeypatch):
    from parbpe.run.faults import KILL_HOOK
    from parbpe.run.pool import WorkerDied

    monkeypatch.setenv(KILL_HOOK, "encode:1")  # the first command: encode
    table, stage1 = _byte_table_and_stage1(1)
    with pytest.raises(WorkerDied, match=r"^merge worker \d \(chunks \d+-\d+, pid \d+\) died \(signal 9: probably out "
                       r"of memory; try --workers 1"):
        prepare.encode_for_merging(table, stage1.merges, stage1.batch_sizes, 456, workers=2,
                                       min_bytes_per_worker=1)
    assert os.listdir(shm) == []


def test_compacting_a_slice_at_a_time_gives_every_chunk_its_tokens(monkeypatch):
    import numpy as np

    from parbpe.merge.engines import LinkedEngine

    counts, n = CORPORA["runs"]
    items = sorted(counts.items())
    for slice_size in (1, 3, 1 << 20):
        monkeypatch.setattr(LinkedEngine, "SLICE", slice_size)
        table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
        engine = learn_merges(table, [bytes([b]) for b in range(256)], n).engine
        linked = [engine.chunk_tokens(c) for c in range(table.n_chunks)]
        engine.compact()
        assert [table.chunk_tokens(c) for c in range(table.n_chunks)] == linked
        assert np.array_equal(table.lengths, [len(t) for t in linked])


def test_the_table_is_in_ram_once_and_no_block_name_outlives_the_start(shm):
    counts, n = CORPORA["wide"]
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
    engine = SlicedEngine(table, 2)
    try:
        assert os.listdir(shm) == []  # every worker mapped the block: its name is gone already
        assert engine.table is table and not table.tokens.flags.owndata  # the table's arrays are the block's
    finally:
        engine.close()


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """Spawned merge workers do not import the caller's script again: one without an
    `if __name__ == "__main__":` guard is not run again in every worker."""
    import subprocess
    import sys

    script = tmp_path / "train_here.py"
    script.write_text(
        "from parbpe.merge.coordinator import learn_merges\n"
        "from parbpe.merge.table import build_table\n"
        "print('the script ran', flush=True)\n"
        "table = build_table([b'hello world', b'yellow', b'low'] * 50, list(range(1, 151)), 300)\n"
        "result = learn_merges(table, [bytes([b]) for b in range(256)], 20, workers=2, min_tokens_per_worker=1)\n"
        "print(result.workers, len(result.merges) > 10)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["the script ran", "2 True"]

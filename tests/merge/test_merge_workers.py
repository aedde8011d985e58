"""The merge engine over worker processes gives the single-process merges, and fails cleanly."""

from __future__ import annotations

import os
import random
import signal

import pytest
from corpora import random_corpus
from reference import reference_train

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

"""Replaying a merge checkpoint leaves the engine and pair counts as the run had them: the merges go on identically."""

from __future__ import annotations

import random

import pytest
from corpora import random_corpus

from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table

MODES = {"batchbpe": {}, "exact": {"batching": "exact"}, "serial": {"max_batch_size": 1},
         "nonoverlap": {"nonoverlap": True}, "chunk": {"engine": "chunk"}}
CORPORA = {
    "runs": ({b"a" * 1000: 3, b"a" * 7: 5, b"ba" * 50: 2, b"xyxyxy": 40, b"aab": 9}, 30),
    "wide": (random_corpus(random.Random(7), bytes(range(33, 127)), 3000, 10), 300),
}


def _learn(counts: dict[bytes, int], n: int, workers: int = 1, **kwargs):
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
    result = learn_merges(table, [bytes([b]) for b in range(256)], n, workers=workers, min_tokens_per_worker=1,
                          **kwargs)
    return result, [result.engine.chunk_tokens(c) for c in range(table.n_chunks)]


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_replayed_rounds_continue_as_the_run(corpus, mode):
    counts, n = CORPORA[corpus]
    whole, tokens = _learn(counts, n, **MODES[mode])
    rounds = len(whole.batch_sizes)
    for k in sorted({0, 1, rounds // 3, rounds - 1, rounds}):
        done = sum(whole.batch_sizes[:k])
        for workers in (1, 2) if k == rounds // 3 else (1,):  # merge workers replay as one process does
            resumed, resumed_tokens = _learn(counts, n, workers, replay=(whole.merges[:done], whole.batch_sizes[:k]),
                                             **MODES[mode])
            assert resumed.merges == whole.merges and resumed.batch_sizes == whole.batch_sizes
            assert resumed_tokens == tokens and resumed.stopped_early == whole.stopped_early


def test_checkpoints_are_whole_rounds():
    counts, n = CORPORA["wide"]
    seen = []
    whole, _ = _learn(counts, n, on_round=lambda merges, sizes, final: seen.append((len(merges), list(sizes), final)))
    assert [final for *_, final in seen] == [False] * len(whole.batch_sizes) + [True]
    assert all(m == sum(sizes) for m, sizes, _ in seen)
    assert seen[-1][:2] == (len(whole.merges), whole.batch_sizes)


def test_a_damaged_checkpoint_is_refused():
    counts, n = CORPORA["runs"]
    whole, _ = _learn(counts, n)
    with pytest.raises(ValueError, match="damaged"):
        _learn(counts, n, replay=(whole.merges[:5], [2, 2]))

"""The pair index: folding sorted blocks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parbpe.merge import PairIndex, _IndexBlock, _merge_sorted


@pytest.mark.parametrize("seed", range(10))
def test_merge_sorted_equals_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    older_keys = np.sort(rng.integers(0, 50, rng.integers(0, 200)))
    newer_keys = np.sort(rng.integers(0, 50, rng.integers(0, 200)))
    older = _IndexBlock(older_keys, rng.integers(0, 10**6, len(older_keys)).astype(np.int32))
    newer = _IndexBlock(newer_keys, rng.integers(0, 10**6, len(newer_keys)).astype(np.int32))
    merged = _merge_sorted(older, newer)
    keys = np.concatenate([older.keys, newer.keys])
    order = np.argsort(keys, kind="stable")
    assert merged.keys.tolist() == keys[order].tolist()
    assert merged.values.tolist() == np.concatenate([older.values, newer.values])[order].tolist()
    assert merged.values.dtype == np.int32


def test_lookup_finds_every_entry_through_folds():
    rng = random.Random(3)
    index = PairIndex(value_dtype=np.int32)
    added: set[tuple[int, int]] = set()
    for step in range(200):
        keys = np.array([rng.randrange(40) for _ in range(rng.randint(0, 25))], dtype=np.int64)
        values = np.arange(len(added), len(added) + len(keys), dtype=np.int64)
        added.update(zip(keys.tolist(), values.tolist()))
        index.add(keys, values)
        assert all((np.diff(b.keys) >= 0).all() and b.values.dtype == np.int32 for b in index.blocks)
        assert len(index.blocks) <= 1 + len(added).bit_length()  # folded as a binary counter
        query = np.array(sorted(rng.sample(range(40), 10)), dtype=np.int64)
        found, which = index.lookup(query)
        wanted = sorted(e for e in added if e[0] in set(query.tolist()))
        assert sorted(zip(query[which].tolist(), found.tolist())) == wanted, step

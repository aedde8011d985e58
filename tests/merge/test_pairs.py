"""Summing count changes by pair (pairs.aggregate) against a dict."""

from __future__ import annotations

import numpy as np
import pytest

from parbpe.merge.pairs import PACKED_SORT_MIN, aggregate, pack


def _reference(keys: np.ndarray, weights: np.ndarray) -> tuple[list[int], list[int]]:
    sums: dict[int, int] = {}
    for k, w in zip(keys.tolist(), weights.tolist()):
        sums[k] = sums.get(k, 0) + w
    kept = sorted(k for k, v in sums.items() if v)
    return kept, [sums[k] for k in kept]


@pytest.mark.parametrize("n", [1, PACKED_SORT_MIN - 1, PACKED_SORT_MIN, 20_000])
@pytest.mark.parametrize("top", [2**16, 2**17])  # tokens in 16 bits (one packed sort), and beyond them
def test_aggregate_is_a_dict_sum(n, top):
    rng = np.random.default_rng(n + top)
    tokens = np.concatenate([[0, top - 1], rng.integers(0, top, 60)])  # few distinct pairs: many repeats
    keys = pack(rng.choice(tokens, n), rng.choice(tokens, n))
    weights = rng.integers(-3, 4, n) * rng.choice([1, 2**40], n)  # zeros, cancelling sums, sums past 32 bits
    got_keys, got_sums = aggregate(keys, weights)
    assert (got_keys.tolist(), got_sums.tolist()) == _reference(keys, weights)
    assert got_keys.dtype == np.int64 and got_sums.dtype == np.int64

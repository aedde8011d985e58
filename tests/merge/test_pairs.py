"""Summing count changes by pair (pairs.aggregate) against a dict."""

from __future__ import annotations

import numpy as np
import pytest

from parbpe.merge.pairs import PACKED_SORT_MIN, aggregate, narrow_key, pack, sort_by_pair, wide_key


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


@pytest.mark.parametrize("n", [PACKED_SORT_MIN - 1, PACKED_SORT_MIN])
def test_aggregate_sums_int32_weights_in_int64(n):
    """The engines' weights are chunk counts in int32: their sums may pass 2**31."""
    rng = np.random.default_rng(n)
    keys = pack(rng.integers(0, 5, n), rng.integers(0, 5, n))
    weights = np.full(n, 2**31 - 1, dtype=np.int32) * rng.choice(np.array([-1, 1], dtype=np.int32), n)
    got_keys, got_sums = aggregate(keys, weights)
    assert (got_keys.tolist(), got_sums.tolist()) == _reference(keys, weights.astype(np.int64))
    assert got_sums.dtype == np.int64


def test_narrow_keys_keep_the_order_and_come_back():
    rng = np.random.default_rng(5)
    keys = pack(np.concatenate([[0, 2**16 - 1], rng.integers(0, 2**16, 5000)]),
                np.concatenate([[2**16 - 1, 0], rng.integers(0, 2**16, 5000)]))
    narrow = narrow_key(keys)
    assert narrow.dtype == np.uint64 and narrow.tolist() == [(k >> 32) << 16 | (k & 0xFFFF) for k in keys.tolist()]
    assert np.array_equal(np.argsort(narrow, kind="stable"), np.argsort(keys, kind="stable"))
    assert np.array_equal(wide_key(narrow), keys) and wide_key(narrow.astype(np.uint32)).dtype == np.int64


@pytest.mark.parametrize("n", [0, 1, 2, 5000, 300_000])
def test_sort_by_pair_is_nps_sort_where_the_low_halves_ascend(n):
    """Index entries (positions made in order) and count changes (their indexes): the radix passes
    sort them as np.sort does, tokens at both ends of 16 bits, lows up to 2**32 - 1."""
    rng = np.random.default_rng(n)
    first = np.concatenate([[2**16 - 1, 0], rng.integers(0, 2**16, n)])[:n].astype(np.uint64)
    second = np.concatenate([[0, 2**16 - 1], rng.choice(np.array([0, 1, 7, 2**16 - 1]), n)])[:n].astype(np.uint64)
    low = np.sort(rng.choice(np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint64), n))  # ascending, repeats
    entries = (first << np.uint64(48)) | (second << np.uint64(32)) | low
    got = sort_by_pair(entries)
    assert got.dtype == np.uint64 and np.array_equal(got, np.sort(entries))


@pytest.mark.parametrize("seed", range(20))
def test_taken_left_to_right_is_run_parity_at_the_positions(seed):
    """taken_left_to_right(positions) keeps what run_parity keeps of the mask of those positions: the
    1st, 3rd, ... of each run."""
    from parbpe.merge.pairs import run_parity, taken_left_to_right

    rng = np.random.default_rng(seed)
    mask = rng.random(int(rng.integers(0, 200))) < rng.random()
    positions = np.flatnonzero(mask)
    np.testing.assert_array_equal(positions[taken_left_to_right(positions)], np.flatnonzero(run_parity(mask)))

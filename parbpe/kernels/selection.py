"""Pair counts kept in age order (merge/selection.py::PairCounts): the pairs put in age order by a
counting sort, falling counts found by bisecting their larger token's entries, a round's new pairs
sorted by age (numpy's argsort and searchsorted are the twins).
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel

NOT_COUNTED, NEGATIVE = -1, -2  # what lowering counts returns for a change it cannot make (nothing changed)


@helper
def _age(key):
    """age_key of one pair key in a kernel: its bits above 32 (age >> 32) are 2 * larger id + side."""
    first, second = key >> 32, key & 0xFFFFFFFF
    return ((np.uint64(max(first, second)) << np.uint64(33)) | (np.uint64(first < second) << np.uint64(32))
            | np.uint64(min(first, second)))


@kernel(twin="parbpe.merge.selection:PairCounts.__init__")
def by_age(keys, counts, room):
    """(age keys, counts) of pairs given in ascending key order, in ascending age order: a stable
    counting sort by (larger id, side), into arrays of room items (room >= len(keys); the rest left
    unwritten). Within one, the smaller ids already ascend: pairs (high, x) lie side by side in key
    order, pairs (x, high) in the order of their x. numpy's argsort of the age keys, the twin, is
    several times slower on SuperBPE's millions of stage-2 pairs."""
    n = len(keys)
    width = 0
    for i in range(n):
        width = max(width, max(keys[i] >> 32, keys[i] & 0xFFFFFFFF) + 1)
    starts = np.zeros(2 * width + 1, dtype=np.int64)
    for i in range(n):
        starts[np.int64(_age(keys[i]) >> np.uint64(32)) + 1] += 1
    for b in range(1, len(starts)):
        starts[b] += starts[b - 1]
    ages = np.empty(room, dtype=np.uint64)
    ordered = np.empty(room, dtype=np.int64)
    for i in range(n):
        age = _age(keys[i])
        b = np.int64(age >> np.uint64(32))
        ages[starts[b]] = age
        ordered[starts[b]] = counts[i]
        starts[b] += 1
    return ages, ordered


@kernel(twin="parbpe.merge.selection:_lower_counts_numpy")
def lower_by_key(stored, counts, high_starts, keys, deltas):
    """PairCounts.update's falling pairs (deltas < 0), by kernel: each found by bisecting the entries
    of its larger token (high_starts), in any order; numpy sorts the ages and bisects the whole store.
    The number of counts that fell to zero, or NOT_COUNTED / NEGATIVE, changing nothing, when a
    pair is not stored or its count would go below zero."""
    at = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        at[i] = -1
        if deltas[i] >= 0:
            continue
        high = max(keys[i] >> 32, keys[i] & 0xFFFFFFFF)
        if high + 1 >= len(high_starts):
            return NOT_COUNTED
        age = _age(keys[i])
        lo, end = high_starts[high], high_starts[high + 1]
        hi = end
        while lo < hi:
            mid = (lo + hi) >> 1
            if stored[mid] < age:
                lo = mid + 1
            else:
                hi = mid
        if lo == end or stored[lo] != age:
            return NOT_COUNTED
        if counts[lo] + deltas[i] < 0:
            return NEGATIVE
        at[i] = lo
    emptied = 0
    for i in range(len(keys)):
        if at[i] >= 0:
            counts[at[i]] += deltas[i]
            emptied += counts[at[i]] == 0
    return emptied


@kernel(twin="parbpe.merge.selection:PairCounts.update")
def rising_by_age(keys, deltas):
    """(whether keys ascend; the ages and counts of the pairs with deltas > 0, in age order): the
    stable counting sort of by_age over the new pairs' larger tokens (a round's new ones) alone."""
    empty_ages, empty_counts = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    n_new, low_high, top_high = 0, np.int64(1) << 40, np.int64(-1)
    for i in range(len(keys)):
        if i > 0 and keys[i] <= keys[i - 1]:
            return False, empty_ages, empty_counts
        if deltas[i] > 0:
            high = max(keys[i] >> 32, keys[i] & 0xFFFFFFFF)
            low_high, top_high = min(low_high, high), max(top_high, high)
            n_new += 1
    if n_new == 0:
        return True, empty_ages, empty_counts
    starts = np.zeros(2 * (top_high - low_high + 1) + 1, dtype=np.int64)
    for i in range(len(keys)):
        if deltas[i] > 0:
            starts[np.int64(_age(keys[i]) >> np.uint64(32)) - 2 * low_high + 1] += 1
    for b in range(1, len(starts)):
        starts[b] += starts[b - 1]
    ages = np.empty(n_new, dtype=np.uint64)
    ordered = np.empty(n_new, dtype=np.int64)
    for i in range(len(keys)):
        if deltas[i] > 0:
            age = _age(keys[i])
            b = np.int64(age >> np.uint64(32)) - 2 * low_high
            ages[starts[b]] = age
            ordered[starts[b]] = deltas[i]
            starts[b] += 1
    return True, ages, ordered

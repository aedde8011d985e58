"""Keys (or pairs of words) added to an open-addressing table of counts: count/key_tables.py's KeyCounts
holds the table and calls it (count/short_keys.py's sums are the reference).

Its probe starts from a seeded hash of the key (or pair), not kernels/hashing.py's home slot: a
table filled from another table's items hashes otherwise, or the keys, coming out in the first
table's hash order, fill one run of slots that every probe crosses.
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel, prefetch

AHEAD = 16  # keys ahead whose slots add_keys asks for (prefetch)
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)


@helper
def _home(a, b, paired, mix, shift):
    """The first slot probed for key a (or pair (a, b))."""
    return np.int64((((a * mix) ^ b) * _MIX2 if paired else a * mix) >> shift)


@kernel(twin="parbpe.count.short_keys:sum_keys")
def add_keys(firsts, seconds, counts, mix, shift, first, second, weights, start, room):
    """Add keys first[start:] (or, where seconds is not empty, pairs (first[i], second[i])) to the
    table, each weights[i] times (or once where weights is empty), until `room` new ones have taken a
    slot. Returns (the index reached, the new ones)."""
    mask = len(firsts) - 1
    weighted = len(weights) > 0
    paired = len(seconds) > 0
    added = 0
    i = start
    n = len(first)
    while i < n and added < room:
        if i + AHEAD < n:  # the slots of a key further on, asked for now (a table far larger than the caches)
            ahead = _home(first[i + AHEAD], second[i + AHEAD] if paired else np.uint64(0), paired, mix, shift)
            prefetch(firsts, ahead)
            prefetch(counts, ahead)
            if paired:
                prefetch(seconds, ahead)
        a = first[i]
        b = second[i] if paired else np.uint64(0)
        at = _home(a, b, paired, mix, shift)
        slot = firsts[at]
        while slot != 0 and (slot != a or (paired and seconds[at] != b)):
            at = (at + 1) & mask
            slot = firsts[at]
        if slot == 0:
            firsts[at] = a
            if paired:
                seconds[at] = b
            added += 1
        counts[at] += weights[i] if weighted else 1
        i += 1
    return i, added

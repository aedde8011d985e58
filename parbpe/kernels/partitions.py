"""The run files' partition hash of each chunk, row by row (count/partitions.py's numpy hash is the
reference: the same ids).
"""

from __future__ import annotations

import numpy as np

from ..jit import kernel

BASE = np.uint64(1099511628211)  # the polynomial's base
MULT = np.uint64(0x9E3779B97F4A7C15)  # the length's multiplier and the mix's


@kernel(twin="parbpe.count.partitions:partition_ids")
def partition_hashes(data, offsets, n_partitions, out):
    """partition_ids's hash, row by row: the same wrapping polynomial sum and mix as count/partitions.py's
    numpy hash."""
    for r in range(len(offsets) - 1):
        lo = offsets[r]
        hi = offsets[r + 1]
        total = np.uint64(0)
        power = np.uint64(1)
        for i in range(lo, hi):
            total += np.uint64(data[i]) * power
            power *= BASE
        h = np.uint64(hi - lo) * MULT
        h ^= total
        h ^= h >> np.uint64(31)
        h *= MULT
        h ^= h >> np.uint64(29)
        out[r] = np.int64(h >> np.uint64(33)) % n_partitions

"""The pair index's kernels (merge/pair_index.py::PairIndex): two sorted blocks folded into one, and a
large sorted block searched for many needles at once (numpy's sort and searchsorted are the twins).
"""

from __future__ import annotations

import numpy as np

from ..jit import kernel, prefetch


@kernel(twin="parbpe.merge.pair_index:PairIndex._fold")
def merged_runs(older, newer):
    """Two sorted uint64 blocks as one (a fold): one pass, where numpy's stable sort of the two
    concatenated finds the runs, then merges them through a copy of one. Holds both blocks and the
    merged one, as the concatenation does."""
    out = np.empty(len(older) + len(newer), dtype=np.uint64)
    i = j = 0
    for k in range(len(out)):
        if j == len(newer) or (i < len(older) and older[i] <= newer[j]):
            out[k] = older[i]
            i += 1
        else:
            out[k] = newer[j]
            j += 1
    return out


@kernel(twin="parbpe.merge.pair_index:PairIndex.spans")
def searched(block, needles):
    """np.searchsorted(block, needles) (side left) for a sorted uint64 block far larger than the caches:
    the needles' binary searches advance together, a level at a time, so that the CPU can have the
    cache misses of several needles under way at once where numpy's searches wait for them one after another."""
    n = len(needles)
    lo = np.zeros(n, dtype=np.int64)
    hi = np.full(n, len(block), dtype=np.int64)
    for i in range(n):
        if lo[i] < hi[i]:
            prefetch(block, (lo[i] + hi[i]) >> 1)
    searching = True
    while searching:
        searching = False
        for i in range(n):
            if lo[i] < hi[i]:
                mid = (lo[i] + hi[i]) >> 1
                if block[mid] < needles[i]:
                    lo[i] = mid + 1
                else:
                    hi[i] = mid
                if lo[i] < hi[i]:
                    prefetch(block, (lo[i] + hi[i]) >> 1)
                    searching = True
    return lo

"""The home slot of Fibonacci hashing, shared by the kernels' open-addressing tables.

A key's home in a table of 2 ** bits slots is the top bits of key * FIBONACCI (wrapping uint64);
its probe goes on linearly from there. The pair sums of kernels/linked.py, the hot pairs and piece
slots of kernels/cold_pairs.py and the piece tables of kernels/encode.py start their probes here.
Not from here: kernels/key_tables.py's seeded hash (a table filled from another's items must hash
otherwise) and kernels/segment.py's tables (their int64 keys hashed in signed arithmetic, a
different program for the same slots: left as they are, compiled as before).
"""

from __future__ import annotations

import numpy as np

from ..jit import helper

FIBONACCI = 0x9E3779B97F4A7C15  # 2 ** 64 over the golden ratio, odd


@helper
def home(key, bits):
    """The home slot of a 64-bit key in a table of 2 ** bits slots (bits from 1 to 64)."""
    return np.int64((np.uint64(key) * np.uint64(FIBONACCI)) >> np.uint64(64 - bits))

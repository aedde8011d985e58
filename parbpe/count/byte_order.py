"""Strings in the order of their UTF-8 bytes, sorted with numpy 8 bytes at a time.

pyarrow's sort_indices compares the strings themselves, which was most of the reduce stage with
SuperBPE's superword chunks (millions of strings, most of them long). Here the first
8 bytes of every string, read as a big-endian number (zero-padded past its end), are argsorted; the
strings still tied, which share those bytes and are at least 8 bytes long, are sorted again by
their next 8 within each tied group, and so on until no group is left. Without a zero byte inside
a string, the padding never ties two strings of different lengths, so the order is exactly the
bytes' (a string before every longer one it begins); strings holding a zero byte go to pyarrow.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import jit
from ..kernels.byte_order import radix_sort
from .pieces import string_buffers

_WORD = 8
_BITS = 8 * _WORD  # a word's bits
_FEW = 1000  # tied strings left to Python's sort (a numpy pass per 8 bytes costs more for so few)


def byte_order(strings: pa.Array) -> np.ndarray:
    """The indices that sort a string array (no nulls) by its UTF-8 bytes, stably: sort_indices' order.

    By the numba kernel (radix_order) where this process has numba loaded (or --jit on) and no other
    process is compiling it (a first run's, which leaves the kernel to later runs), else with numpy,
    the reference (the kernel sorts SuperBPE's superword chunks in well under half numpy's time)."""
    offsets, data = string_buffers(strings)
    if jit.warm() and not radix_sort.elsewhere:
        return radix_order(offsets, data)
    if len(data) and not data.all():  # a zero byte: the padding could tie strings of different lengths
        return pc.sort_indices(strings.cast(pa.large_binary())).to_numpy()
    lengths = np.diff(offsets)
    padded = np.concatenate([data, np.zeros(2 * _WORD, np.uint8)])
    words = np.ndarray(shape=(len(padded) - _WORD + 1,), dtype=">u8", buffer=padded, strides=(1,))

    def word(rows: np.ndarray | None, level: int) -> np.ndarray:
        """Bytes [8 * level, 8 * level + 8) of the strings `rows` (None: all), big-endian, zeros past
        their ends. Made in place, a few arrays of one word a row at once: at a tight budget the
        reduce's sort is its stage's peak."""
        shift = (lengths if rows is None else lengths[rows]) - _WORD * level
        np.clip(shift, 0, _WORD, out=shift)
        shift *= -8
        shift += _BITS  # the bits of the word past the string's end, 0 to 64 (numpy shifts 64 to zero)
        at = (offsets[:-1] if rows is None else offsets[rows]) + _WORD * level
        value = words[at].view(np.uint64)  # the big-endian bytes, made native in place
        del at
        value.byteswap(inplace=True)
        value >>= shift.view(np.uint64)
        value <<= shift.view(np.uint64)
        return value

    first = word(None, 0)
    order = np.argsort(first, kind="stable")
    active = np.arange(len(order))  # positions in `order` whose strings are still tied with a neighbour
    keys = first[order]
    groups = np.zeros(len(order), np.int64)
    level = 0
    while len(active) > 1:
        if len(active) <= _FEW:  # a few long strings sharing long prefixes: sorted whole, in Python
            _sort_groups(order, active, groups, offsets, data)
            break
        # Neighbours in one group with the same word, both at least as long as the bytes compared so far.
        full = lengths[order[active]] >= _WORD * (level + 1)
        tie = (groups[1:] == groups[:-1]) & (keys[1:] == keys[:-1]) & full[1:] & full[:-1]
        if not tie.any():
            break
        member = np.zeros(len(active), bool)
        member[1:] |= tie
        member[:-1] |= tie
        starts = member & ~np.concatenate([[False], tie])  # the first of each new group
        active = active[member]
        groups = np.cumsum(starts[member])
        level += 1
        rows = order[active]
        keys = word(rows, level)
        within = np.lexsort((keys, groups))  # stable: equal strings keep their order
        order[active] = rows[within]
        keys = keys[within]
    return order


def _sort_groups(order: np.ndarray, active: np.ndarray, groups: np.ndarray, offsets: np.ndarray,
                 data: np.ndarray) -> None:
    """Sort the rows at positions `active` of order by their bytes within each group, stably (in place)."""
    bounds = np.flatnonzero(np.diff(groups)) + 1
    for part in np.split(np.arange(len(active)), bounds):
        at = active[part]
        rows = order[at].tolist()
        order[at] = sorted(rows, key=lambda r: data[offsets[r]:offsets[r + 1]].tobytes())


def radix_order(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """byte_order's indices of the strings data[offsets[i]:offsets[i + 1]] (any bytes), by a kernel."""
    n = len(offsets) - 1
    order = np.arange(n, dtype=np.int64)
    if n > 1:
        radix_sort(offsets.astype(np.int64, copy=False), data, order, np.empty(n, np.int64),
                    np.empty(n, np.uint64), np.empty(n, np.uint64), np.empty(n, np.uint8), np.empty(n, np.uint8))
    return order

"""Strings in the order of their UTF-8 bytes, sorted with numpy 8 bytes at a time.

pyarrow's sort_indices compares the strings themselves, which was most of the reduce stage with
SuperBPE's superword chunks (2.3 M of them on realmix: 2.7-3.7 s, BENCHMARKS 25). Here the first
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
from ..jit import helper, kernel
from .pieces import string_buffers

_WORD = 8
_BITS = 8 * _WORD  # a word's bits
_FEW = 1000  # tied strings left to Python's sort (a numpy pass per 8 bytes costs more for so few)


def byte_order(strings: pa.Array) -> np.ndarray:
    """The indices that sort a string array (no nulls) by its UTF-8 bytes, stably: sort_indices' order.

    By the numba kernel (radix_order) where this process has numba loaded (or --jit on), else with
    numpy, the reference: SuperBPE's 2.3 M superword chunks of realmix (113 MB) took 1.38 s with
    numpy, 0.56 s with the kernel (BENCHMARKS 35)."""
    offsets, data = string_buffers(strings)
    if jit.warm():
        return radix_order(offsets, data)
    if len(data) and not data.all():  # a zero byte: the padding could tie strings of different lengths
        return pc.sort_indices(strings.cast(pa.large_binary())).to_numpy()
    lengths = np.diff(offsets)
    padded = np.concatenate([data, np.zeros(2 * _WORD, np.uint8)])
    words = np.ndarray(shape=(len(padded) - _WORD + 1,), dtype=">u8", buffer=padded, strides=(1,))

    def word(rows: np.ndarray | None, level: int) -> np.ndarray:
        """Bytes [8 * level, 8 * level + 8) of the strings `rows` (None: all), big-endian, zeros past
        their ends. Made in place, a few arrays of one word a row at once: at a tight budget the
        reduce's sort is its stage's peak (the 1 GB corpus at 400 MB, BENCHMARKS 34)."""
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


# Segments of at most this many strings are sorted by insertion (a counting pass costs more for so few).
_INSERTION = 16


def radix_order(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """byte_order's indices of the strings data[offsets[i]:offsets[i + 1]] (any bytes), by a kernel."""
    n = len(offsets) - 1
    order = np.arange(n, dtype=np.int64)
    if n > 1:
        _radix_sort(offsets.astype(np.int64, copy=False), data, order, np.empty(n, np.int64),
                    np.empty(n, np.int16))
    return order


@kernel
def _radix_sort(offsets, data, order, scratch, byte):
    """Sort order (row numbers) by the rows' bytes, stably: a most-significant-byte radix sort. A
    segment of rows equal in their first `depth` bytes is spread by byte `depth` (0 for a row that
    ended, which sorts first, then each byte + 1) with a counting sort; each part of two or more rows
    that did not end is a segment one byte deeper (on a stack); segments of _INSERTION rows or fewer
    are insertion-sorted from their depth. Rows that ended together are equal: kept in their order."""
    stack = np.empty((64, 3), np.int64)  # (first row, end, depth) of the segments still to sort
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, len(order), 0
    top = 1
    counts = np.empty(257, np.int64)
    while top:
        top -= 1
        lo, hi, depth = stack[top, 0], stack[top, 1], stack[top, 2]
        if hi - lo <= _INSERTION:
            _insertion_sort(offsets, data, order, lo, hi, depth)
            continue
        counts[:] = 0
        for i in range(lo, hi):
            row = order[i]
            at = offsets[row] + depth
            b = np.int16(data[at]) + 1 if at < offsets[row + 1] else np.int16(0)
            byte[i] = b
            counts[b] += 1
        start = lo
        for b in range(257):  # counts become each byte's first place
            c = counts[b]
            counts[b] = start
            start += c
        for i in range(lo, hi):
            b = byte[i]
            scratch[counts[b]] = order[i]
            counts[b] += 1
        order[lo:hi] = scratch[lo:hi]
        first = counts[0]  # (counts[b] is now the end of byte b's part)
        for b in range(1, 257):
            end = counts[b]
            if end - first > 1:
                if top == len(stack):
                    grown = np.empty((2 * len(stack), 3), np.int64)
                    grown[:top] = stack[:top]
                    stack = grown
                stack[top, 0], stack[top, 1], stack[top, 2] = first, end, depth + 1
                top += 1
            first = end


@helper
def _insertion_sort(offsets, data, order, lo, hi, depth):
    """order[lo:hi] sorted by the rows' bytes from `depth` on (the bytes before are equal), stably."""
    for i in range(lo + 1, hi):
        row = order[i]
        j = i - 1
        while j >= lo and _after(offsets, data, order[j], row, depth):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = row


@helper
def _after(offsets, data, a, b, depth):
    """Whether row a's bytes sort strictly after row b's (both equal before depth)."""
    i, end_a = offsets[a] + depth, offsets[a + 1]
    j, end_b = offsets[b] + depth, offsets[b + 1]
    while i < end_a and j < end_b:
        if data[i] != data[j]:
            return data[i] > data[j]
        i += 1
        j += 1
    return i < end_a  # a continues where b ended

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

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .pieces import string_buffers

_WORD = 8
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_FEW = 1000  # tied strings left to Python's sort (a numpy pass per 8 bytes costs more for so few)
_TWO_HALVES = 500_000  # strings from which byte_order sorts two halves in two threads


def byte_order(strings: pa.Array, threads: int = 1) -> np.ndarray:
    """The indices that sort a string array (no nulls) by its UTF-8 bytes, stably: sort_indices' order.

    With threads=2 and from _TWO_HALVES strings on, in two threads (numpy's sorts and gathers let go
    of the interpreter): the strings whose first word is below the words' median, and the others, each sorted on its own
    (no copy: the rows of a half index the same buffers). The first word's order is the bytes', so the
    first half all comes first. sort_by_chunk of realmix's 2.3 M superword chunks 1.56-2.00 s against
    2.68-3.09 s, of its 1.0 M GPT-4 chunks 0.43-0.51 s against 0.62-0.74 s; but the two threads' heaps
    held 66 MB more at the reduce of the 1 GB corpus under a 400 MB budget (BENCHMARKS 33), so the
    caller asks for them where the budget has room."""
    offsets, data = string_buffers(strings)
    if len(data) and not data.all():  # a zero byte: the padding could tie strings of different lengths
        return pc.sort_indices(strings.cast(pa.large_binary())).to_numpy()
    word = _words(offsets, data)
    rows = np.arange(len(strings))
    first = word(rows, 0)
    if threads < 2 or len(strings) < _TWO_HALVES:
        return _sorted_rows(rows, first, word, offsets, data)
    median = np.partition(first, len(first) // 2)[len(first) // 2]
    halves = [np.flatnonzero(first < median), np.flatnonzero(first >= median)]
    with ThreadPoolExecutor(2, thread_name_prefix="parbpe-byte-order") as pool:
        return np.concatenate(list(pool.map(lambda half: _sorted_rows(half, first[half], word, offsets, data),
                                            halves)))


def _words(offsets: np.ndarray, data: np.ndarray):
    """word(rows, level): bytes [8 * level, 8 * level + 8) of the strings `rows`, big-endian, zeros past their ends."""
    lengths = np.diff(offsets)
    padded = np.concatenate([data, np.zeros(2 * _WORD, np.uint8)])
    words = np.ndarray(shape=(len(padded) - _WORD + 1,), dtype=">u8", buffer=padded, strides=(1,))

    def word(rows: np.ndarray, level: int) -> np.ndarray:
        keep = np.clip(lengths[rows] - _WORD * level, 0, _WORD).astype(np.uint64)
        mask = np.where(keep == 0, np.uint64(0), _ALL << (np.uint64(8) * (np.uint64(_WORD) - keep)))
        return words[offsets[rows] + _WORD * level].astype(np.uint64) & mask

    return word


def _sorted_rows(rows: np.ndarray, first: np.ndarray, word, offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The rows (ascending) sorted by their strings' bytes, stably; first: their first words (word(rows, 0))."""
    lengths = np.diff(offsets)
    by_first = np.argsort(first, kind="stable")
    order, keys = rows[by_first], first[by_first]
    active = np.arange(len(order))  # positions in `order` whose strings are still tied with a neighbour
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
        tied = order[active]
        keys = word(tied, level)
        within = np.lexsort((keys, groups))  # stable: equal strings keep their order
        order[active] = tied[within]
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

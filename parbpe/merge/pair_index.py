"""The pair index: pair key -> where it occurs (chunk ids or token positions), append-only.

All occurrences of a pair are created in the round that creates its newer token, and are only
destroyed after. So the index is a short list of sorted blocks, one added per round and folded
log-structured; entries that went stale cost a look, never a wrong result.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from .. import jit
from ..kernels.pair_index import merged_runs, searched
from .pairs import LOW32, gather, narrow_key


@dataclass
class _IndexBlock:
    keys: np.ndarray  # int64, sorted
    values: np.ndarray  # chunk ids or token positions

    def __len__(self) -> int:
        return len(self.keys)


def _merge_sorted(older: _IndexBlock, newer: _IndexBlock) -> _IndexBlock:
    """One sorted block of two, placing each entry directly (no sort, no permutation array)."""
    total = len(older) + len(newer)
    at = np.searchsorted(older.keys, newer.keys, side="right") + np.arange(len(newer))
    from_newer = np.zeros(total, dtype=bool)
    from_newer[at] = True
    keys = np.empty(total, dtype=older.keys.dtype)
    values = np.empty(total, dtype=older.values.dtype)
    keys[at], values[at] = newer.keys, newer.values
    keys[~from_newer], values[~from_newer] = older.keys, older.values
    return _IndexBlock(keys, values)


_PAST_VALUES = np.uint64(1 << 31)  # a packed entry's value is below this
LOOKUP_ENTRIES = 1 << 20  # entries chunks_with reads at a time
SORTED_SHARE = 16  # chunks_with sorts the entries of its keys where they are under 1/16 of the chunks


LISTS_SLICE = 1 << 20  # entries lists_of reads at a time
_LOW_WORD = 0 if sys.byteorder == "little" else 1  # where a packed entry's value lies among its two uint32


@dataclass
class PairLists:
    """A packed index's first block as lists: each distinct pair's narrow key once (uint32, sorted),
    where its values start in `values` (int64, one more than keys) and the values (uint32). 4 bytes an
    entry where a packed block takes 8: the chunk engine's first block is most of its index."""

    keys: np.ndarray
    starts: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def spans(self, narrow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, end) in values of each narrow key's entries (empty for a key it does not hold)."""
        at = np.searchsorted(self.keys, narrow)
        held = at < len(self.keys)
        held[held] = self.keys[at[held]] == narrow[held]
        lo, hi = np.zeros(len(narrow), dtype=np.int64), np.zeros(len(narrow), dtype=np.int64)
        lo[held], hi[held] = self.starts[at[held]], self.starts[at[held] + 1]
        return lo, hi


def lists_of(packed: np.ndarray) -> PairLists:
    """The PairLists of sorted packed entries, their duplicates dropped, made in packed's own memory a
    slice at a time (its upper half given back at the end): never more than its 8 bytes an entry.
    packed is consumed: resized in place, so it must own its memory and nothing may view it."""
    n = len(packed)
    words = packed.view(np.uint32)
    keys, firsts, kept, last = [], [], 0, None
    for lo in range(0, n, LISTS_SLICE):
        part = packed[lo:lo + LISTS_SLICE]
        fresh = np.empty(len(part), dtype=bool)
        fresh[1:] = part[1:] != part[:-1]
        fresh[0] = last is None or part[0] != last
        narrow = (part[fresh] >> np.uint64(32)).astype(np.uint32)
        new_key = np.empty(len(narrow), dtype=bool)
        new_key[1:] = narrow[1:] != narrow[:-1]
        new_key[:1] = last is None or narrow[:1] != int(last >> np.uint64(32))
        keys.append(narrow[new_key])
        firsts.append(np.flatnonzero(new_key) + kept)
        last = part[-1]
        # The slice's values, copied out, then written below where it starts (kept <= lo): every entry
        # they overwrite was read by this slice or an earlier one.
        values = words[2 * lo + _LOW_WORD:2 * (lo + len(part)):2][fresh]
        words[kept:kept + len(values)] = values
        kept += len(values)
        del part, fresh, narrow, values
    del words
    packed.resize((kept + 1) // 2, refcheck=False)  # (realloc: the upper half goes back)
    return PairLists(keys=np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint32),
                     starts=np.concatenate(firsts + [np.array([kept])]).astype(np.int64),
                     values=packed.view(np.uint32)[:kept])


def packed_entries(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A packed index's entries of (key, value) pairs, unsorted: (first << 16 | second) << 32 | value."""
    entries = narrow_key(keys) << np.uint64(32)
    entries |= np.asarray(values).astype(np.uint64)
    return entries


@dataclass
class PairIndex:
    """pair key -> where it occurs (chunk ids or positions), as a short list of sorted blocks:
    one block per round, and a block is folded into the one before it once it is as large (as in
    a binary counter), so an entry is re-sorted O(log n) times and few blocks are ever searched.
    The first block (the table's pairs before any merge, the largest) is never folded: a fold
    briefly holds its blocks twice, and that one would double the index's memory for nothing.

    While token ids fit in 16 bits and values in 31 (packed=True), an entry is one uint64,
    (first << 16 | second) << 32 | value, and a block is one sorted array: a fold is a stable sort
    of two sorted runs, which numpy merges faster than placing entries one array at a time.
    Otherwise a block is an _IndexBlock of int64 keys and value_dtype values. A packed index may
    hold its first blocks as PairLists instead (add_lists: the chunk engine's, half the memory), which
    are never folded. Stale entries stay:
    dropping them at every fold was tried and cost more time than the memory it saved was worth.
    """

    blocks: list = field(default_factory=list)
    value_dtype: type = np.int64
    packed: bool = False
    use_kernels: bool = False  # packed blocks folded by a kernel (merged_runs), large ones searched by one (searched)

    def add(self, keys: np.ndarray, values: np.ndarray, presorted: bool = False) -> None:
        """Add (key, value) entries of pairs new to the index; fold small blocks together."""
        if len(keys):
            # Lookups never rely on the order of values within a key, nor on their being distinct.
            if self.packed:
                entries = packed_entries(keys, values)
                self.add_packed(entries if presorted else np.sort(entries))
                return
            if not presorted:
                order = np.argsort(keys)
                keys, values = keys[order], values[order]
            self.blocks.append(_IndexBlock(keys, values.astype(self.value_dtype, copy=False)))
        self._fold()

    def add_lists(self, packed: np.ndarray) -> None:
        """Add sorted packed entries as a PairLists block (lists_of: packed is consumed); such blocks come
        before any other and are never folded."""
        assert self.packed and all(isinstance(b, PairLists) for b in self.blocks), "lists come first"
        self.blocks.append(lists_of(packed))

    def add_packed(self, entries: np.ndarray) -> None:
        """Add a sorted block of packed uint64 entries (packed indexes only)."""
        if len(entries):
            self.blocks.append(entries)
        self._fold()

    def _fold(self) -> None:
        while (len(self.blocks) >= 3 and len(self.blocks[-2]) <= len(self.blocks[-1])
               and not isinstance(self.blocks[-2], PairLists)):
            newer, older = self.blocks.pop(), self.blocks.pop()
            if self.packed and self.use_kernels:
                self.blocks.append(merged_runs(older, newer))
            elif self.packed:
                merged = np.concatenate([older, newer])
                del older, newer
                merged.sort(kind="stable")  # in place: a fold holds its entries twice, not three times
                self.blocks.append(merged)
            else:
                self.blocks.append(_merge_sorted(older, newer))

    @property
    def entries(self) -> int:
        """Entries held, stale ones included."""
        return sum(len(block) for block in self.blocks)

    def spans(self, keys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Where the given pair keys' entries lie in each block: (first, end) index arrays, a pair per block."""
        # One search a block for both ends: the first entry of each key, and the first past it (an
        # entry's value is below 2**31, a key below 2**63). In small blocks its cost is the calls, in
        # blocks of millions each search's cache misses.
        n = len(keys)
        if self.packed:
            low = narrow_key(keys) << np.uint64(32)
            needles = np.concatenate([low, low | _PAST_VALUES])
            ends = [np.concatenate(block.spans((low >> np.uint64(32)).astype(np.uint32)))
                    if isinstance(block, PairLists) else
                    searched(block, needles) if self.use_kernels and len(block) >= jit.SEARCH_MIN
                    else np.searchsorted(block, needles) for block in self.blocks]
        else:
            keys = np.asarray(keys, dtype=np.int64)
            needles = np.concatenate([keys, keys + 1])
            ends = [np.searchsorted(block.keys, needles) for block in self.blocks]
        return [(found[:n], found[n:]) for found in ends]

    def entries_of(self, keys: np.ndarray, spans: list | None = None) -> np.ndarray:
        """How many entries (stale ones included) each of the given pair keys has (spans: theirs, if known)."""
        sizes = np.zeros(len(keys), dtype=np.int64)
        for lo, hi in self.spans(keys) if spans is None else spans:
            sizes += hi - lo
        return sizes

    def lookup(self, keys: np.ndarray, spans: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """All entries of the given keys: (values, index into keys of the key each belongs to).
        spans: the keys' spans (self.spans), if the caller has them and the index has not changed since."""
        values, which = [], []
        for block, (lo, hi) in zip(self.blocks, self.spans(keys) if spans is None else spans):
            sizes = hi - lo
            if sizes.any():
                idx, seg = gather(block, lo, sizes)
                values.append(_values(block, idx, self.packed).astype(np.int64, copy=False))
                which.append(seg)
        if not values:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        return np.concatenate(values), np.concatenate(which)

    def chunks_with(self, keys: np.ndarray, n_chunks: int) -> np.ndarray:
        """Sorted unique ids of the chunks that (may) hold any of the given pair keys. Few entries are
        sorted; more are marked in a mask of the chunks, read about LOOKUP_ENTRIES at a time (a batch's
        first rounds hold most of the index): a key's span that large as it lies, smaller ones gathered
        together up to that many."""
        spans = self.spans(keys)
        if sum(int((hi - lo).sum()) for lo, hi in spans) * SORTED_SHARE < n_chunks:  # few: sorted, not a mask
            values, _ = self.lookup(keys, spans)
            return np.unique(values)
        mask = np.zeros(n_chunks, dtype=bool)
        for block, (lo, hi) in zip(self.blocks, spans):
            sizes = hi - lo
            held = np.flatnonzero(sizes)
            ends = np.cumsum(sizes[held])
            start = 0
            while start < len(held):
                done = int(ends[start - 1]) if start else 0
                stop = max(int(np.searchsorted(ends, done + LOOKUP_ENTRIES, "right")), start + 1)
                part = held[start:stop]
                if len(part) == 1:
                    values = _values(block, slice(int(lo[part[0]]), int(hi[part[0]])), self.packed)
                else:
                    idx, _ = gather(block, lo[part], sizes[part])
                    values = _values(block, idx, self.packed)
                mask[values.astype(np.int64, copy=False)] = True
                start = stop
        return np.flatnonzero(mask)


def _values(block, where, packed: bool) -> np.ndarray:
    """The values of a block's entries at where (an index array or a slice)."""
    if isinstance(block, PairLists):
        return block.values[where]
    return block[where] & LOW32 if packed else block.values[where]

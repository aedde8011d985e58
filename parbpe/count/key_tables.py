"""Counts of short strings' keys in open-addressing hash tables (kernels/key_tables.py): the
kernels' twin of short_keys.py's sorts.

short_keys counts a batch's keys by sorting them, and sums the batches by merging sorted runs at the
end. A table held from batch to batch adds each key where it lies (several times faster than the
sort), and its filled slots are the distinct keys, summed, with nothing to merge at the end.

A key is never zero (short_keys: a string of 1 to 8 bytes without a zero byte), nor is a pair's first
word, so zero marks an empty slot. Slots are probed linearly from a multiplicative hash of the key;
the table doubles when it passes MAX_LOAD. The distinct keys come out in slot order: counts add up,
and the reduce sorts chunks by their bytes, so no order is promised.
"""

from __future__ import annotations

import numpy as np

from ..kernels.key_tables import add_keys

MAX_LOAD = 0.6  # filled share of the slots that doubles the table (linear probing slows past ~0.7)
FIRST_SLOTS = 1 << 14
# Each table's hash by its `seed`: keys come out of one table in the order of its hash, and added in
# that order to a table hashing alike they fill one run of slots that every probe crosses (a
# counter's chunks, keyed from its pieces' table, took five times as long).
_MIXES = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xD6E8FEB86659FD93))


class KeyCounts:
    """Distinct keys (width 1) or pairs of words (width 2) and the sum of their counts, in a hash
    table that grows as it fills. nbytes is what the table holds, empty slots included. seed picks
    the hash (0 or 1): a table filled from another's items hashes otherwise (see _MIXES)."""

    def __init__(self, width: int = 1, slots: int = FIRST_SLOTS, seed: int = 0) -> None:
        if width not in (1, 2) or slots & (slots - 1) or seed not in (0, 1):
            raise ValueError("KeyCounts: width 1 or 2, a power of two of slots, seed 0 or 1")
        self.width = width
        self._mix = _MIXES[seed]
        self._first_slots = slots
        # (the slots are made at the first add: an empty table holds nothing)
        self._words = [np.zeros(0, np.uint64) for _ in range(width)]
        self._counts = np.zeros(0, np.int64)
        self._used = 0

    def __len__(self) -> int:
        return self._used

    @property
    def nbytes(self) -> int:
        return len(self._counts) * 8 * (self.width + 1)

    def add(self, words: tuple[np.ndarray, ...], weights: np.ndarray | None = None) -> None:
        """Add each key (words: (keys,)) or pair (words: (first, second)), once or weights[i] times."""
        weights = np.zeros(0, np.int64) if weights is None else np.ascontiguousarray(weights, np.int64)
        n = len(words[0])
        done = 0
        while done < n:
            room = int(MAX_LOAD * len(self._counts)) - self._used
            if room <= 0:
                self._grow()
                continue
            shift = np.uint64(64 - (len(self._counts).bit_length() - 1))
            seconds, second = (self._words[1], words[1]) if self.width == 2 else (self._words[0][:0], words[0][:0])
            done, added = add_keys(self._words[0], seconds, self._counts, self._mix, shift, words[0], second, weights,
                                   done, room)
            self._used += int(added)

    def _grow(self) -> None:
        """Twice the slots, every key added again with its count."""
        filled = np.flatnonzero(self._words[0])
        old = [w[filled] for w in self._words], self._counts[filled]
        slots = max(2 * len(self._counts), self._first_slots)
        self._words = [np.zeros(slots, np.uint64) for _ in range(self.width)]
        self._counts = np.zeros(slots, np.int64)
        self._used = 0
        self.add(tuple(old[0]), old[1])

    def items(self) -> tuple[np.ndarray, ...]:
        """The distinct keys (or first and second words) and their counts, in slot order."""
        filled = np.flatnonzero(self._words[0])
        return (*(w[filled] for w in self._words), self._counts[filled])

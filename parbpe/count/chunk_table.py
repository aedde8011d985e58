"""Counting chunks with numba kernels: the built-in patterns split (jit_lexer.py) and counted in one hash table.

With the JIT on, a worker counts the chunks of whole documents straight away, without the piece
shortcut of pieces.py: a kernel decodes the UTF-8 text of a window of documents, another finds the
chunk starts, and a third adds each chunk to an open-addressing hash table (its bytes are kept once,
in an arena, in the order first seen; the table holds each distinct chunk's hash, first 8 bytes,
place, length and count). Most chunks are frequent ones whose entries stay in the cache, so a
chunk costs a few tens of nanoseconds. When the table or the arena is full, the kernel stops and
Python doubles it. The counts come out as a counts table (chunk, count) whose strings are the
arena itself. The result equals the numpy path's (PieceCounter): tests/count/test_jit_count.py.
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pyarrow as pa

from .. import jit
from ..jit import kernel
from . import jit_lexer
from .pieces import SCHEMA, counter_table, string_array, string_buffers

_WINDOW = 1 << 20  # bytes of documents decoded and split at a time (keeps the per-character arrays in cache)
_FIRST_ENTRIES = 1 << 16  # slots: twice as many
_FIRST_ARENA = 1 << 20
_MIX = 0x9E3779B97F4A7C15
# What numba and the kernels add to a process's RSS (import 108 MB, LLVM and the kernels 69 MB:
# 83 -> 260 MB, 2026-11-25); a worker forked after them starts at about 107 MB.
JIT_RSS = 180 * 10**6
_BLOCK = 32  # chunks hashed and looked up ahead together
_FRONT = 1 << 14  # slots of the front table (512 kB: stays in the L2 cache)


_LENGTH_BITS = 24
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1  # longer chunks (16 MB) are counted apart, in Python
_TAIL = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], np.uint64)  # the low n bytes


def words_of(data: np.ndarray) -> np.ndarray:
    """The 8 bytes from each position of data (which ends with 8 bytes of padding) as one uint64,
    little-endian: a view (unaligned, stride 1), so a kernel reads a word in one load."""
    return np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))


_HIGH = 0xFFFFFFFF00000000


@jit_lexer.helper
def _hash(words, start, length, key, tail):
    """A 64-bit hash of the chunk at start (its first 8 bytes are key)."""
    h = (key ^ np.uint64(length)) * np.uint64(_MIX)
    for w in range(start + 8, start + length, 8):
        h = ((h ^ (h >> np.uint64(29))) ^ (words[w] & tail[min(start + length - w, 8)])) * np.uint64(_MIX)
    return h ^ (h >> np.uint64(32))


@jit_lexer.helper
def _count_short(short, front, key, length, h):
    """Count a chunk of up to 8 bytes (key, length): in its front slot if it is there, else in the
    short table, where it then takes the front slot (whose counts go to their own record); returns
    1 if the chunk is new to the short table, else 0."""
    near = 4 * np.int64((h >> np.uint64(40)) & np.uint64(len(front) // 4 - 1))
    if front[near] == key and np.int64(front[near + 1] & np.uint64(15)) == length:
        front[near + 2] += np.uint64(1)
        return 0
    mask = np.uint64(len(short) // 2 - 1)
    slot = h & mask
    new = 0
    while True:
        meta = short[2 * slot + 1]
        if meta == 0:
            short[2 * slot] = key
            short[2 * slot + 1] = np.uint64(length)
            new = 1
            break
        if short[2 * slot] == key and np.int64(meta & np.uint64(15)) == length:
            break
        slot = (slot + np.uint64(1)) & mask
    if front[near + 2]:
        short[2 * np.int64(front[near + 1] >> np.uint64(4)) + 1] += front[near + 2] << np.uint64(4)
    front[near] = key
    front[near + 1] = (slot << np.uint64(4)) | np.uint64(length)
    front[near + 2] = 1
    return new


@jit_lexer.helper
def _count_long(words, start, length, key, h, slots, entries, arena, held, used, tail):
    """Count a chunk of more than 8 bytes in the long table; returns 1 if it is new (then its bytes
    went to the arena at `used` and its entry is number `held`), else 0."""
    mask = np.uint64(len(slots) - 1)
    tag = h & np.uint64(_HIGH)
    slot = h & mask
    while True:
        found = slots[slot]
        if found == 0:
            slots[slot] = tag | np.uint64(held + 1)
            at = 4 * held
            entries[at] = h
            entries[at + 1] = key
            entries[at + 2] = (np.uint64(used) << np.uint64(_LENGTH_BITS)) | np.uint64(length)
            entries[at + 3] = 1
            for w in range(0, length, 8):
                arena[used + w] = words[start + w]  # (arena: words_of the arena bytes)
            return 1
        if found & np.uint64(_HIGH) == tag:
            at = 4 * (np.int64(found & np.uint64(0xFFFFFFFF)) - 1)
            if entries[at + 1] == key and np.int64(entries[at + 2] & np.uint64(_LENGTH_MASK)) == length:
                base = np.int64(entries[at + 2] >> np.uint64(_LENGTH_BITS)) - start
                same = True
                for w in range(start + 8, start + length, 8):
                    if (arena[base + w] ^ words[w]) & tail[min(start + length - w, 8)]:
                        same = False
                        break
                if same:
                    entries[at + 3] += np.uint64(1)
                    return 0
        slot = (slot + np.uint64(1)) & mask


@kernel
def count_chunks(words, bounds, first, short, front, slots, entries, arena, state, tail, ahead):
    """Add the chunks between bounds (from chunk `first`; words: words_of the text) to the tables;
    returns the first chunk not added (len(bounds) - 1 when all are): its table is full (at half its
    slots, or the arena) and must grow, or the chunk is too long for it.

    Chunks of up to 8 bytes: the short table, 2 words a slot (first 8 bytes; count << 4 | length, 0:
    empty), in front of which a small table (front, 4 words a slot: first 8 bytes, short slot << 4 |
    length, count not yet in the short slot) counts the most recent ones in the L2 cache. Longer
    chunks: slots (the high 32 bits of an entry's hash, and its number + 1; 0: empty) and entries,
    in the order first seen, 4 words each (hash, first 8 bytes, arena place << 24 | length, count);
    their bytes lie end to end in the arena (words_of it). state: entries, arena bytes used, short
    chunks held; ahead: room for a block's hashes (_look_ahead)."""
    held = state[0]
    used = state[1]
    short_held = state[2]
    c = first
    while c < len(bounds) - 1:
        block_end = min(c + len(ahead) // 2, len(bounds) - 1)
        _look_ahead(words, bounds, c, block_end, short, front, slots, tail, ahead)
        while c < block_end:
            start = bounds[c]
            length = bounds[c + 1] - start
            key = words[start] & tail[min(length, 8)]
            h = ahead[2 * (c % (len(ahead) // 2))]
            if length <= 8:
                if 4 * short_held >= len(short):
                    break
                short_held += _count_short(short, front, key, length, h)
            elif 2 * held >= len(slots) or used + length > len(arena) or length >= _LENGTH_MASK:
                break
            elif _count_long(words, start, length, key, h, slots, entries, arena, held, used, tail):
                held += 1
                used += length
            c += 1
        if c < block_end:
            break
    state[0] = held
    state[1] = used
    state[2] = short_held
    return c


@jit_lexer.helper
def _look_ahead(words, bounds, first, end, short, front, slots, tail, ahead):
    """Hash the chunks first..end-1 (into ahead[2 * (c % block)], block: len(ahead) // 2) and load the
    table slot each will look at (into the word after): the loads are independent, so the processor
    waits for the cache misses of a block together rather than one after the other."""
    short_mask = np.uint64(len(short) // 2 - 1)
    long_mask = np.uint64(len(slots) - 1)
    for c in range(first, end):
        start = bounds[c]
        length = bounds[c + 1] - start
        key = words[start] & tail[min(length, 8)]
        h = _hash(words, start, length, key, tail)
        at = 2 * (c % (len(ahead) // 2))
        ahead[at] = h
        if length <= 8:
            near = 4 * np.int64((h >> np.uint64(40)) & np.uint64(len(front) // 4 - 1))
            if front[near] != key:
                ahead[at + 1] = short[2 * (h & short_mask)]
        else:
            ahead[at + 1] = slots[h & long_mask]


@kernel
def flush_front(front, short):
    """Add the counts the front table holds to their short slots' (and empty it)."""
    for near in range(0, len(front), 4):
        if front[near + 2]:
            short[2 * np.int64(front[near + 1] >> np.uint64(4)) + 1] += front[near + 2] << np.uint64(4)
        front[near] = 0
        front[near + 1] = 0
        front[near + 2] = 0


@kernel
def place_short(short, old, tail):
    """Put the chunks of the short table old into the empty short table, by their hashes (it grew)."""
    mask = np.uint64(len(short) // 2 - 1)
    for k in range(0, len(old), 2):
        if old[k + 1] != 0:
            length = np.int64(old[k + 1] & np.uint64(15))
            h = (old[k] ^ np.uint64(length)) * np.uint64(_MIX)
            slot = (h ^ (h >> np.uint64(32))) & mask
            while short[2 * slot + 1] != 0:
                slot = (slot + np.uint64(1)) & mask
            short[2 * slot] = old[k]
            short[2 * slot + 1] = old[k + 1]


@kernel
def place_entries(slots, entries, held):
    """Put entries 0..held-1 into the empty slots by their hashes (the table grew)."""
    mask = np.uint64(len(slots) - 1)
    for entry in range(held):
        h = entries[4 * entry]
        slot = h & mask
        while slots[slot] != 0:
            slot = (slot + np.uint64(1)) & mask
        slots[slot] = (h & np.uint64(_HIGH)) | np.uint64(entry + 1)


def prepare(pattern: str) -> None:
    """When the JIT counts pattern: build the character tables and load (or compile) the kernels in
    this process, so that workers forked from it find them ready."""
    counter = jit_counter(pattern)
    if counter is not None:
        counter.add(pa.array(["It's 12345 x\n\n  é's", "a"], pa.string()))
        counter.chunk_counts()


def jit_would_count(pattern: str) -> bool:
    """Whether the JIT would count pattern in this process (said without importing numba)."""
    mode = jit.mode()
    if mode == "off" or jit_lexer.kind_of(pattern) is None:
        return False
    return mode == "on" or importlib.util.find_spec("numba") is not None


def jit_counter(pattern: str) -> JitChunkCounter | None:
    """The JIT's chunk counter for pattern, when the JIT is on and the pattern a built-in one, else None."""
    if not jit.enabled() or jit_lexer.kind_of(pattern) is None:
        return None
    return JitChunkCounter(pattern)


class JitChunkCounter:
    """Counts of the chunks of many texts (as pieces.PieceCounter, whose place it takes with the JIT on)."""

    def __init__(self, pattern: str) -> None:
        self.kind, self.group = jit_lexer.kind_of(pattern)
        jit_lexer.jit_helpers()
        self._tables = jit_lexer.char_tables()
        self._empty()

    def _empty(self) -> None:
        self._short = np.zeros(4 * _FIRST_ENTRIES, np.uint64)
        self._front = np.zeros(4 * _FRONT, np.uint64)
        self._slots = np.zeros(2 * _FIRST_ENTRIES, np.uint64)
        self._entries = np.zeros(4 * _FIRST_ENTRIES, np.uint64)
        self._arena = np.zeros(_FIRST_ARENA + 8, np.uint8)
        self._state = np.zeros(3, np.int64)
        self._ahead = np.zeros(2 * _BLOCK, np.uint64)
        self._long: Counter[bytes] = Counter()  # chunks of 16 MB or more (as good as never)

    def add(self, texts: pa.Array) -> None:
        """Count the chunks of texts (a string array of documents)."""
        offsets, data = string_buffers(string_array(texts))
        begin = 0
        while begin < len(offsets) - 1:
            end = int(np.searchsorted(offsets, offsets[begin] + _WINDOW, side="right")) - 1
            end = max(end, begin + 1)
            self._add_window(data[offsets[begin]:offsets[end]], offsets[begin:end + 1] - offsets[begin])
            begin = end

    def _add_window(self, data: np.ndarray, docs: np.ndarray) -> None:
        self.count(data, jit_lexer.chunk_bounds(data, docs, self.kind, self.group, self._tables))

    def count(self, data: np.ndarray, bounds: np.ndarray) -> None:
        """Count the chunks data[bounds[i]:bounds[i + 1]] (bounds int32, from 0 to len(data))."""
        padded = np.zeros(len(data) + 8, np.uint8)
        padded[:len(data)] = data
        words = words_of(padded)
        done = 0
        while done < len(bounds) - 1:
            done = count_chunks(words, bounds, done, self._short, self._front, self._slots, self._entries,
                                words_of(self._arena), self._state, _TAIL, self._ahead)
            if done < len(bounds) - 1:
                length = int(bounds[done + 1] - bounds[done])
                if length >= _LENGTH_MASK:
                    self._long[data[bounds[done]:bounds[done + 1]].tobytes()] += 1
                    done += 1
                else:
                    self._grow(length)

    def _grow(self, length: int) -> None:
        """Double what is full: a table (at half its slots), or the arena (for `length` more bytes)."""
        held, used, short_held = (int(v) for v in self._state)
        if 4 * short_held >= len(self._short):
            flush_front(self._front, self._short)  # (it names short slots)
            old, self._short = self._short, np.zeros(2 * len(self._short), np.uint64)
            place_short(self._short, old, _TAIL)
        if 2 * held >= len(self._slots):
            entries = np.zeros(2 * len(self._entries), np.uint64)
            entries[:4 * held] = self._entries[:4 * held]
            self._entries = entries
            self._slots = np.zeros(2 * len(self._slots), np.uint64)
            place_entries(self._slots, entries, held)
        if used + length + 8 > len(self._arena):
            arena = np.zeros(max(2 * len(self._arena), used + length + 8), np.uint8)
            arena[:used] = self._arena[:used]
            self._arena = arena

    def compact(self) -> None:
        """Nothing to do: each distinct chunk is held once already."""

    @property
    def nbytes(self) -> int:
        """The memory the tables take (0 when they hold nothing: the counter has nothing to write)."""
        if not self:
            return 0
        arrays = (self._short, self._front, self._slots, self._entries, self._arena)
        return sum(a.nbytes for a in arrays) + sum(map(len, self._long))

    def __bool__(self) -> bool:
        return bool(self._state.any() or self._long)

    def chunk_counts(self) -> pa.Table:
        """The chunk counts of everything added (and the counter is emptied)."""
        flush_front(self._front, self._short)
        held, used, _ = (int(v) for v in self._state)
        entries = self._entries[:4 * held].reshape(held, 4)
        offsets = np.append(entries[:, 2] >> np.uint64(_LENGTH_BITS), np.uint64(used)).astype(np.int32)
        chunks = pa.StringArray.from_buffers(held, pa.py_buffer(offsets), pa.py_buffer(self._arena[:used].copy()))
        tables = [short_table(self._short), pa.table([chunks, pa.array(entries[:, 3].astype(np.int64))], schema=SCHEMA)]
        if self._long:
            tables.append(counter_table(Counter({k.decode(): v for k, v in self._long.items()})))
        self._empty()
        return pa.concat_tables(tables)


def short_table(short: np.ndarray) -> pa.Table:
    """The chunks of a short table (2 words a slot: first 8 bytes; count << 4 | length) as a counts table."""
    meta = short[1::2]
    held = np.flatnonzero(meta)
    lengths = (meta[held] & np.uint64(15)).astype(np.int64)
    rows = np.ascontiguousarray(short[0::2][held]).view(np.uint8).reshape(len(held), 8)
    data = rows[np.arange(8) < lengths[:, None]]  # row by row, the chunk's bytes (zeros among them too)
    offsets = np.zeros(len(held) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chunks = pa.StringArray.from_buffers(len(held), pa.py_buffer(offsets), pa.py_buffer(data))
    return pa.table([chunks, pa.array((meta[held] >> np.uint64(4)).astype(np.int64))], schema=SCHEMA)

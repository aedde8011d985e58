"""The cold-pair cut's kernels: every pair summed by its first token, then the table cut at its cold
pairs and equal pieces made one row (merge/cold_pairs.py calls them; its numpy twins are the reference).
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel, prefetch
from .hashing import home

LIGHT = 0xFFFF  # counts below this go with their pair in one uint32 (the first pass's entries)
EMPTY = 0xFFFFFFFF  # an empty slot of the set of hot pairs
_FNV_BASIS, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
_AHEAD = 16  # longer pieces found before the first of them is placed (cut_pieces: their slots asked for)


@kernel(twin="parbpe.merge.cold_pairs:_pair_sums_numpy")
def bucket_pairs(tokens, starts, counts, width, light):
    """The pairs of the chunks starts[k]..starts[k + 1] (counts[k] times each), counting-sorted by first
    token: (firsts, entries, heavy, heavy seconds, heavy counts). An entry is a pair's second token and
    its chunk's count in one uint32 (first token a's at firsts[a]..firsts[a + 1]); chunks counted
    `light` times or more have entries of their own (heavy)."""
    firsts = np.zeros(width + 1, np.int64)
    heavy = np.zeros(width + 1, np.int64)
    for c in range(len(counts)):
        row = heavy if counts[c] >= light else firsts
        for p in range(starts[c], starts[c + 1] - 1):
            row[tokens[p] + 1] += 1
    for a in range(width):
        firsts[a + 1] += firsts[a]
        heavy[a + 1] += heavy[a]
    at, heavy_at = firsts[:-1].copy(), heavy[:-1].copy()
    entries = np.empty(firsts[width], np.uint32)
    heavy_seconds = np.empty(heavy[width], np.int64)
    heavy_counts = np.empty(heavy[width], np.int64)
    for c in range(len(counts)):
        w = counts[c]
        for p in range(starts[c], starts[c + 1] - 1):
            a = tokens[p]
            if w >= light:
                heavy_seconds[heavy_at[a]] = tokens[p + 1]
                heavy_counts[heavy_at[a]] = w
                heavy_at[a] += 1
            else:
                entries[at[a]] = (np.uint32(tokens[p + 1]) << np.uint32(16)) | np.uint32(w)
                at[a] += 1
    return firsts, entries, heavy, heavy_seconds, heavy_counts


@helper
def _add_bucket(a, firsts, entries, heavy, heavy_seconds, heavy_counts, dense, seen, touched, k):
    """First token a's pairs of one bucket_pairs added to dense (counts) and seen (occurrences); the second
    tokens seen for the first time go to touched[k:]; returns the new k."""
    for i in range(firsts[a], firsts[a + 1]):
        b = np.int64(entries[i] >> np.uint32(16))
        if seen[b] == 0:
            touched[k] = b
            k += 1
        seen[b] += 1
        dense[b] += np.int64(entries[i] & np.uint32(0xFFFF))
    for i in range(heavy[a], heavy[a + 1]):
        b = heavy_seconds[i]
        if seen[b] == 0:
            touched[k] = b
            k += 1
        seen[b] += 1
        dense[b] += heavy_counts[i]
    return k


@kernel(twin="parbpe.merge.cold_pairs:_pair_sums_numpy")
def sum_buckets(f0, e0, h0, hs0, hc0, f1, e1, h1, hs1, hc1, width, part, parts):
    """pair_sums of two bucket_pairs' pairs whose first token is part modulo parts: each first token's pairs
    summed in a dense row of width counts."""
    dense = np.zeros(width, np.int64)
    seen = np.zeros(width, np.int64)
    touched = np.empty(width, np.int64)
    keys = np.empty(1 << 16, np.int64)
    sums = np.empty(1 << 16, np.int64)
    occurrences = np.empty(1 << 16, np.int64)
    n = 0
    for a in range(part, width, parts):
        k = _add_bucket(a, f0, e0, h0, hs0, hc0, dense, seen, touched, 0)
        k = _add_bucket(a, f1, e1, h1, hs1, hc1, dense, seen, touched, k)
        if n + k > len(keys):
            size = max(2 * len(keys), n + k)
            keys, sums, occurrences = _longer(keys, n, size), _longer(sums, n, size), _longer(occurrences, n, size)
        for j in range(k):
            b = touched[j]
            keys[n], sums[n], occurrences[n] = (np.int64(a) << 16) | b, dense[b], seen[b]
            n += 1
            dense[b] = 0
            seen[b] = 0
    return keys[:n].copy(), sums[:n].copy(), occurrences[:n].copy()


@helper
def _longer(array, used, size):
    """array's first `used` items in a new array of size items."""
    grown = np.empty(size, array.dtype)
    for i in range(used):  # (a loop, not a slice copy: numba compiles its checks' messages, a second)
        grown[i] = array[i]
    return grown


@kernel(twin="parbpe.merge.cold_pairs:_cut_numpy")
def hot_set(keys, empty):
    """An open-addressing set of the pair keys (uint32 slots, `empty` where none; at most a quarter
    full) and its bits: a lookup is one probe or two in a table the caches hold."""
    bits = 4
    while (1 << bits) < 4 * len(keys):
        bits += 1
    table = np.full(1 << bits, np.uint32(empty), np.uint32)
    mask = (1 << bits) - 1
    for key in keys:
        i = home(key, bits)
        while table[i] != np.uint32(empty):
            i = (i + 1) & mask
        table[i] = np.uint32(key)
    return table, bits


@helper
def _hot_slot(table, bits, a, b):
    """The slot of pair (a, b) in hot_set's table, or -1 if it is not hot."""
    key = (np.uint32(a) << np.uint32(16)) | np.uint32(b)
    mask = (1 << bits) - 1
    i = home(key, bits)
    while True:
        held = table[i]
        if held == key:
            return i
        if held == np.uint32(EMPTY):
            return -1
        i = (i + 1) & mask


@helper
def _piece_key(tokens, begin, size):
    """A piece's hash key: its tokens themselves (16 bits each) up to four, else their FNV-1a hash."""
    if size <= 4:
        key = np.uint64(0)
        for q in range(size):
            key |= np.uint64(tokens[begin + q]) << np.uint64(16 * q)
        return key
    key = np.uint64(_FNV_BASIS)
    for q in range(begin, begin + size):
        key = (key ^ np.uint64(tokens[q])) * np.uint64(_FNV_PRIME)
    return key


@helper
def _piece_home(key, size, bits):
    """The home slot of a piece of `size` tokens with hash key `key`."""
    return home(key ^ np.uint64(size), bits)


@helper
def _regrown(slots, bits):
    """The pieces' slots (key, row + 1, size, count; zeros where empty) moved into a table of 2 ** bits."""
    grown = np.zeros(((1 << bits), 4), np.int64)
    mask = (1 << bits) - 1
    for j in range(len(slots)):
        if slots[j, 1] > 0:
            i = _piece_home(np.uint64(slots[j, 0]), slots[j, 2], bits)
            while grown[i, 1] > 0:
                i = (i + 1) & mask
            grown[i, 0], grown[i, 1], grown[i, 2], grown[i, 3] = slots[j, 0], slots[j, 1], slots[j, 2], slots[j, 3]
    return grown


@helper
def _place(tokens, begin, size, count, key, slots, bits, held, piece_at, n_held, n_long):
    """The piece tokens[begin:begin + size] (its key) counted `count` times more in its slot, or given a
    new row (its tokens kept in held); the table doubled once half full. Returns what it changes."""
    mask = (1 << bits) - 1
    i = _piece_home(key, size, bits)
    while True:
        row = slots[i, 1] - 1  # (0: an empty slot)
        if row < 0:
            break
        if slots[i, 0] == np.int64(key) and slots[i, 2] == size:
            same = True
            if size > 4:  # (a hash, not the tokens themselves)
                at = piece_at[row]
                for q in range(size):
                    if held[at + q] != tokens[begin + q]:
                        same = False
                        break
            if same:
                slots[i, 3] += count
                return slots, bits, held, piece_at, n_held, n_long
        i = (i + 1) & mask
    if n_long == len(piece_at):
        piece_at = _longer(piece_at, n_long, 2 * n_long)
    if n_held + size > len(held):
        held = _longer(held, n_held, max(2 * len(held), n_held + size))
    piece_at[n_long] = n_held
    for q in range(size):
        held[n_held + q] = tokens[begin + q]
    slots[i, 0], slots[i, 1], slots[i, 2], slots[i, 3] = np.int64(key), n_long + 1, size, count
    n_held += size
    n_long += 1
    if 2 * n_long > (1 << bits):
        bits += 1
        slots = _regrown(slots, bits)
    return slots, bits, held, piece_at, n_held, n_long


@kernel(twin="parbpe.merge.cold_pairs:_cut_numpy")
def cut_pieces(tokens, starts, counts, hot, hot_bits, slots):
    """cut_table of the chunks starts[k]..starts[k + 1] (counts[k] times each): each walked once, cut
    where _hot_slot says its pair is cold. A piece of two tokens adds its count to its hot pair's slot
    (the caches hold that row); a longer one is looked up in `slots` (zeros: empty; a power of two of
    them, grown when half full), whose slot holds its key, row + 1, size and count, _AHEAD pieces
    after it was found (a lookup is a cache miss, and the misses of pieces in
    flight overlap). Returns (the count of each hot pair's slot, the longer pieces' tokens, starts and
    counts, as first placed)."""
    doubles = np.zeros(len(hot), np.int64)
    bits = 0
    while (1 << bits) < len(slots):
        bits += 1
    piece_at = np.empty(1 << 12, np.int64)
    held = np.empty(1 << 16, tokens.dtype)
    n_held, n_long = 0, 0
    ring_begin = np.empty(_AHEAD, np.int64)  # the longer pieces waiting for their slots
    ring_size = np.empty(_AHEAD, np.int64)
    ring_count = np.empty(_AHEAD, np.int64)
    ring_key = np.empty(_AHEAD, np.uint64)
    waiting = 0  # pieces found; pieces placed: waiting - _AHEAD (or all at the end)
    for c in range(len(counts)):
        w = counts[c]
        begin, end = starts[c], starts[c + 1]
        first_slot = -1
        for p in range(begin, end):
            if p + 1 < end:
                slot = _hot_slot(hot, hot_bits, tokens[p], tokens[p + 1])
                if slot >= 0:
                    if p == begin:
                        first_slot = slot
                    continue
            size = p + 1 - begin
            if size == 2:
                doubles[first_slot] += w
            elif size > 2:  # (a piece of one token holds no pair: nothing is ever merged there)
                key = _piece_key(tokens, begin, size)
                k = waiting % _AHEAD
                if waiting >= _AHEAD:  # the piece found _AHEAD ago takes its slot, asked for by now
                    slots, bits, held, piece_at, n_held, n_long = _place(
                        tokens, ring_begin[k], ring_size[k], ring_count[k], ring_key[k],
                        slots, bits, held, piece_at, n_held, n_long)
                ring_begin[k], ring_size[k], ring_count[k], ring_key[k] = begin, size, w, key
                prefetch(slots, _piece_home(key, size, bits))
                waiting += 1
            begin = p + 1
    for j in range(max(waiting - _AHEAD, 0), waiting):
        k = j % _AHEAD
        slots, bits, held, piece_at, n_held, n_long = _place(tokens, ring_begin[k], ring_size[k], ring_count[k],
                                                             ring_key[k], slots, bits, held, piece_at, n_held, n_long)
    long_counts = np.zeros(n_long, np.int64)
    long_starts = np.empty(n_long + 1, np.int64)
    for j in range(len(slots)):
        if slots[j, 1] > 0:
            long_counts[slots[j, 1] - 1] = slots[j, 3]
    for i in range(n_long):  # (a loop: see _longer)
        long_starts[i] = piece_at[i]
    long_starts[n_long] = n_held
    return doubles, held[:n_held].copy(), long_starts, long_counts

"""An encoded table cut where its pairs are too rare to be merged, before its rounds: the same merges
from a fraction of the table.

SuperBPE's stage 2 merges its superword chunks encoded with stage 1's merges: nearly the whole
corpus (realmix: 30.7 M tokens in 2.3 M chunks, 95% of them seen once) for a few thousand merges.
Most of its pairs are never merged: a pair whose count is below T at the start never reaches T (a
merge only lowers the counts of the pairs around it), and neither does a pair that later forms
across one of its occurrences: its tokens' outer ends are that pair's two tokens (a token's first
and last starting tokens are fixed by its merges), so it occurs only where that pair did, at most as
often. So the table is cut at every occurrence of a pair counted fewer than T times, and equal
pieces are one row (their counts summed): every pair counted T times or more keeps its count, and
every pair made later keeps its count unless it crosses a cut, where it counts fewer than T.

A round of BatchBPE ranks the top `width` pairs only (coordinator.py). While the width-th pair
ranked on the cut table counts T or more, no pair the cut removed could rank above it, so the round
picks what it picks on the whole table: learn_merges(guard=T) checks it every round and raises
ColdPairReached otherwise, with the merges made so far and the count of that round's width-th pair;
the caller cuts the table again below that count (Cut.lower) and replays them there, or merges the
whole table when no cut is left (pipeline/merge.py).

T is the n-th largest pair count at the start (n the merges to make) over CUT_DIVISOR. On realmix's
stage 2 the width-th pair of every round counted at least 0.67-0.79 of that (209 of 312 for its 6,553
merges; 998 of 1,326, 401 of 574, 153 of 193, 118 of 153 for 1,000, 3,000, 12,000, 20,000 merges):
T = 156 there, and the cut table holds 3.5 M tokens in 0.8 M rows (30.7 M in 2.3 M whole).

The cut runs with the kernels (a pass that sums every pair by its first token, then one that cuts
and hashes the pieces); the numpy twins of both are the reference the tests compare them with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import jit
from ..jit import helper, kernel, prefetch
from ..run.threads import in_two
from .table import ChunkTable

CUT_DIVISOR = 2  # T: the n-th largest pair count at the start, divided by this
# No cut where the pairs counted T times or more hold more than this share of the table's pairs:
# the cut would save less than its two passes cost.
MAX_HOT_SHARE = 0.5
_LIGHT = 0xFFFF  # counts below this go with their pair in one uint32 (the first pass's entries)
_EMPTY = 0xFFFFFFFF  # an empty slot of the set of hot pairs
_MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing's multiplier
_FNV_BASIS, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
_AHEAD = 16  # longer pieces found before the first of them is placed (_cut_pieces: their slots asked for)


@dataclass
class Cut:
    """A table cut at its cold pairs: merge it with learn_merges(guard=threshold); lower() cuts the same
    table again below a count a round reached (ColdPairReached.count)."""

    table: ChunkTable
    threshold: int
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray]  # pair_sums of the whole table
    threads: int = 1

    def lower(self, whole: ChunkTable, count: int) -> Cut | None:
        """The whole table (the one cut) cut at count // CUT_DIVISOR, where a round's width-th pair
        counted `count` (its guard was above): None where that is no cut worth making (_cut)."""
        self.table = None  # (let go of before the next is made)
        return _cut(whole, self.pairs, count // CUT_DIVISOR, self.threads)

    def stats(self) -> dict[str, int]:
        """What stats.json reports of a cut: its threshold and its table's size."""
        return {"threshold": self.threshold, "table_tokens": len(self.table.tokens),
                "table_chunks": len(self.table.counts)}


def cut_cold_pairs(table: ChunkTable, n_merges: int, threads: int = 1) -> Cut | None:
    """The table cut at every pair counted fewer than T times (module docstring), or None where no cut
    is worth it: no kernels for this table, tokens of 16 bits or more, a table already merged (its
    chunks not packed), fewer pairs than merges, or _cut's reasons. threads=2: both passes in two
    threads."""
    tokens = table.tokens
    if (tokens.dtype != np.uint16 or len(tokens) == 0 or not jit.merge_kernels(len(tokens))
            or not np.array_equal(table.lengths, np.diff(table.starts))):
        return None
    if int(tokens.max()) + 1 > _LIGHT:  # (a pair of token 65535 with itself would be _hot_set's empty slot)
        return None
    pairs = pair_sums(table, threads=threads)
    sums = pairs[1]
    if len(sums) <= n_merges or n_merges < 1:
        return None
    nth = int(np.partition(sums, len(sums) - n_merges)[len(sums) - n_merges])
    return _cut(table, pairs, nth // CUT_DIVISOR, threads)


def _cut(table: ChunkTable, pairs: tuple[np.ndarray, np.ndarray, np.ndarray], threshold: int, threads: int
         ) -> Cut | None:
    """The table cut below threshold, given its pair_sums; None for a threshold below 2 (no pair is
    counted fewer than once) or where the pairs kept hold more than MAX_HOT_SHARE of the table."""
    keys, sums, occurrences = pairs
    if threshold < 2:
        return None
    hot = sums >= threshold
    if int(occurrences[hot].sum()) > MAX_HOT_SHARE * int(occurrences.sum()):
        return None
    return Cut(cut_table(table, keys[hot], threads=threads), threshold, pairs, threads)


def pair_sums(table: ChunkTable, use_jit: bool | None = None, threads: int = 1
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of adjacent tokens in a chunk (tokens below 2 ** 16): (keys a << 16 | b, counts:
    occurrences times their chunks' counts, occurrences), in no particular order. use_jit: the kernels
    (default: as use_kernels decides; threads=2: each half of the chunks bucketed in a thread, then
    the pairs of even and odd first tokens summed each in a thread) or numpy's twin (keys ascending)."""
    if not (jit.merge_kernels(len(table.tokens)) if use_jit is None else use_jit):
        return _pair_sums_numpy(table)
    width = int(table.tokens.max(initial=0)) + 1
    halves = _halves(table, threads)
    buckets = _in_threads([lambda lo=lo, hi=hi: _bucket(table.tokens, table.starts[lo:hi + 1], table.counts[lo:hi],
                                                         width, _LIGHT) for lo, hi in halves])
    if len(buckets) == 1:
        buckets.append(_bucket(table.tokens, table.starts[:1], table.counts[:0], width, _LIGHT))  # (none)
    parts = len(halves)
    sums = _in_threads([lambda k=k: _sum_buckets(*buckets[0], *buckets[1], width, k, parts) for k in range(parts)])
    return tuple(np.concatenate(column) for column in zip(*sums))


def _halves(table: ChunkTable, threads: int) -> list[tuple[int, int]]:
    """The chunk ranges (lo, hi) of the table's two halves by tokens (threads=2), or its one."""
    n = len(table.counts)
    cut = int(np.searchsorted(table.starts, table.starts[-1] // 2)) if threads > 1 else 0
    return [(0, cut), (cut, n)] if 0 < cut < n else [(0, n)]


def _in_threads(calls: list) -> list:
    """Each call's result, the first two in two threads (run/threads.py in_two)."""
    if len(calls) == 1:
        return [calls[0]()]
    return list(in_two(calls[0], calls[1]))


def _pair_sums_numpy(table: ChunkTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pair_sums' numpy twin: the pairs' keys sorted and summed."""
    tokens = table.tokens.astype(np.int64)
    inside = np.ones(max(len(tokens) - 1, 0), dtype=bool)
    inside[table.starts[1:-1] - 1] = False  # a chunk's last token pairs with nothing
    keys = ((tokens[:-1] << 16) | tokens[1:])[inside]
    weights = np.repeat(table.counts, np.diff(table.starts))[:-1][inside]
    distinct, which = np.unique(keys, return_inverse=True)
    sums = np.bincount(which, weights=weights, minlength=len(distinct)).astype(np.int64)
    occurrences = np.bincount(which, minlength=len(distinct)).astype(np.int64)
    return distinct, sums, occurrences


@kernel(twin="parbpe.merge.cold_pairs:_pair_sums_numpy")
def _bucket(tokens, starts, counts, width, light):
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
    """First token a's pairs of one _bucket added to dense (counts) and seen (occurrences); the second
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
def _sum_buckets(f0, e0, h0, hs0, hc0, f1, e1, h1, hs1, hc1, width, part, parts):
    """pair_sums of two _buckets' pairs whose first token is part modulo parts: each first token's pairs
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


def cut_table(table: ChunkTable, hot_keys: np.ndarray, use_jit: bool | None = None, threads: int = 1) -> ChunkTable:
    """The table's chunks cut between every two adjacent tokens whose pair (a << 16 | b) is not in
    hot_keys, equal pieces one row with their counts summed, pieces of one token left out (no pair:
    nothing is ever merged there); rows in no particular order (the merges never depend on it).
    use_jit: the kernel (default: as use_kernels decides; threads=2: each half of the chunks in a
    thread, a longer piece seen in both halves then a row in each) or numpy's twin."""
    if not (jit.merge_kernels(len(table.tokens)) if use_jit is None else use_jit):
        tokens, starts, counts = _cut_numpy(table, np.asarray(hot_keys, dtype=np.int64))
        return ChunkTable(tokens=tokens, starts=starts, lengths=np.diff(starts), counts=counts)
    hot_keys = np.asarray(hot_keys, dtype=np.int64)
    hot, bits = _hot_set(hot_keys, _EMPTY, _MIX)

    def half(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        # the pieces' slots: room for a piece a chunk, half full (regrowing moves every slot to a random
        # place); numpy's zeros, pages the kernel's first touch gets, not a fill of the whole table
        slots = np.zeros((1 << max(12, (hi - lo - 1).bit_length()), 4), np.int64)
        return _cut_pieces(table.tokens, table.starts[lo:hi + 1], table.counts[lo:hi], hot, bits, slots)

    parts = _in_threads([lambda lo=lo, hi=hi: half(lo, hi) for lo, hi in _halves(table, threads)])
    doubles = parts[0][0] if len(parts) == 1 else parts[0][0] + parts[1][0]
    held = np.flatnonzero(doubles)
    pair_tokens = np.empty((len(held), 2), dtype=table.tokens.dtype)  # the pieces of two tokens: hot pairs
    pair_tokens[:, 0], pair_tokens[:, 1] = hot[held] >> 16, hot[held] & 0xFFFF
    tokens = np.concatenate([pair_tokens.ravel(), *(p[1] for p in parts)])
    firsts = np.cumsum([2 * len(held), *(len(p[1]) for p in parts)])  # where each part's tokens begin
    starts = np.concatenate([np.arange(0, 2 * len(held), 2, dtype=np.int64),
                             *(p[2][:-1] + first for p, first in zip(parts, firsts)), [len(tokens)]])
    counts = np.concatenate([doubles[held], *(p[3] for p in parts)])
    return ChunkTable(tokens=tokens, starts=starts, lengths=np.diff(starts), counts=counts)


def _cut_numpy(table: ChunkTable, hot_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cut_table's numpy twin: the cuts marked from the pairs' keys, the pieces grouped by their tokens."""
    tokens, starts = table.tokens, table.starts
    n = len(tokens)
    begins = np.zeros(n, dtype=bool)
    begins[starts[:-1][starts[:-1] < n]] = True
    wide = tokens.astype(np.int64)
    begins[1:] |= ~np.isin((wide[:-1] << 16) | wide[1:], hot_keys)
    bounds = np.append(np.flatnonzero(begins), n)
    weights = np.repeat(table.counts, np.diff(starts))[bounds[:-1]]
    pieces: dict[bytes, int] = {}
    raw = tokens.astype(np.uint16).tobytes()
    for lo, hi, w in zip(bounds[:-1].tolist(), bounds[1:].tolist(), weights.tolist()):
        if hi - lo < 2:
            continue
        piece = raw[2 * lo:2 * hi]
        pieces[piece] = pieces.get(piece, 0) + w
    lengths = np.array([len(p) // 2 for p in pieces], dtype=np.int64)
    out_starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_starts[1:])
    out = np.frombuffer(b"".join(pieces), dtype=np.uint16).astype(tokens.dtype)
    return out, out_starts, np.array(list(pieces.values()), dtype=np.int64)


@kernel(twin="parbpe.merge.cold_pairs:_cut_numpy")
def _hot_set(keys, empty, mix):
    """An open-addressing set of the pair keys (uint32 slots, `empty` where none; at most a quarter
    full) and its bits: a lookup is one probe or two in a table the caches hold."""
    bits = 4
    while (1 << bits) < 4 * len(keys):
        bits += 1
    table = np.full(1 << bits, np.uint32(empty), np.uint32)
    mask = (1 << bits) - 1
    for key in keys:
        i = np.int64((np.uint64(key) * np.uint64(mix)) >> np.uint64(64 - bits))
        while table[i] != np.uint32(empty):
            i = (i + 1) & mask
        table[i] = np.uint32(key)
    return table, bits


@helper
def _hot_slot(table, bits, a, b):
    """The slot of pair (a, b) in _hot_set's table, or -1 if it is not hot."""
    key = (np.uint32(a) << np.uint32(16)) | np.uint32(b)
    mask = (1 << bits) - 1
    i = np.int64((np.uint64(key) * np.uint64(_MIX)) >> np.uint64(64 - bits))
    while True:
        held = table[i]
        if held == key:
            return i
        if held == np.uint32(_EMPTY):
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
def _home(key, size, bits):
    return np.int64(((key ^ np.uint64(size)) * np.uint64(_MIX)) >> np.uint64(64 - bits))


@helper
def _regrown(slots, bits):
    """The pieces' slots (key, row + 1, size, count; zeros where empty) moved into a table of 2 ** bits."""
    grown = np.zeros(((1 << bits), 4), np.int64)
    mask = (1 << bits) - 1
    for j in range(len(slots)):
        if slots[j, 1] > 0:
            i = _home(np.uint64(slots[j, 0]), slots[j, 2], bits)
            while grown[i, 1] > 0:
                i = (i + 1) & mask
            grown[i, 0], grown[i, 1], grown[i, 2], grown[i, 3] = slots[j, 0], slots[j, 1], slots[j, 2], slots[j, 3]
    return grown


@helper
def _place(tokens, begin, size, count, key, slots, bits, held, piece_at, n_held, n_long):
    """The piece tokens[begin:begin + size] (its key) counted `count` times more in its slot, or given a
    new row (its tokens kept in held); the table doubled once half full. Returns what it changes."""
    mask = (1 << bits) - 1
    i = _home(key, size, bits)
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
def _cut_pieces(tokens, starts, counts, hot, hot_bits, slots):
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
                prefetch(slots, _home(key, size, bits))
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

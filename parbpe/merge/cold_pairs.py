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
from ..kernels.cold_pairs import EMPTY, LIGHT, bucket_pairs, cut_pieces, hot_set, sum_buckets
from ..run.threads import one_or_two
from .table import ChunkTable

CUT_DIVISOR = 2  # T: the n-th largest pair count at the start, divided by this
# No cut where the pairs counted T times or more hold more than this share of the table's pairs:
# the cut would save less than its two passes cost.
MAX_HOT_SHARE = 0.5


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
    if int(tokens.max()) + 1 > LIGHT:  # (a pair of token 65535 with itself would be hot_set's empty slot)
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
    (default: as jit.merge_kernels decides; threads=2: each half of the chunks bucketed in a thread, then
    the pairs of even and odd first tokens summed each in a thread) or numpy's twin (keys ascending)."""
    if not (jit.merge_kernels(len(table.tokens)) if use_jit is None else use_jit):
        return _pair_sums_numpy(table)
    width = int(table.tokens.max(initial=0)) + 1
    halves = _halves(table, threads)
    buckets = one_or_two([lambda lo=lo, hi=hi: bucket_pairs(table.tokens, table.starts[lo:hi + 1],
                                                            table.counts[lo:hi], width, LIGHT)
                          for lo, hi in halves])
    if len(buckets) == 1:
        buckets.append(bucket_pairs(table.tokens, table.starts[:1], table.counts[:0], width, LIGHT))  # (none)
    parts = len(halves)
    sums = one_or_two([lambda k=k: sum_buckets(*buckets[0], *buckets[1], width, k, parts) for k in range(parts)])
    return tuple(np.concatenate(column) for column in zip(*sums))


def _halves(table: ChunkTable, threads: int) -> list[tuple[int, int]]:
    """The chunk ranges (lo, hi) of the table's two halves by tokens (threads=2), or its one."""
    n = len(table.counts)
    cut = int(np.searchsorted(table.starts, table.starts[-1] // 2)) if threads > 1 else 0
    return [(0, cut), (cut, n)] if 0 < cut < n else [(0, n)]


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


def cut_table(table: ChunkTable, hot_keys: np.ndarray, use_jit: bool | None = None, threads: int = 1) -> ChunkTable:
    """The table's chunks cut between every two adjacent tokens whose pair (a << 16 | b) is not in
    hot_keys, equal pieces one row with their counts summed, pieces of one token left out (no pair:
    nothing is ever merged there); rows in no particular order (the merges never depend on it).
    use_jit: the kernel (default: as jit.merge_kernels decides; threads=2: each half of the chunks in a
    thread, a longer piece seen in both halves then a row in each) or numpy's twin."""
    if not (jit.merge_kernels(len(table.tokens)) if use_jit is None else use_jit):
        tokens, starts, counts = _cut_numpy(table, np.asarray(hot_keys, dtype=np.int64))
        return ChunkTable(tokens=tokens, starts=starts, lengths=np.diff(starts), counts=counts)
    hot_keys = np.asarray(hot_keys, dtype=np.int64)
    hot, bits = hot_set(hot_keys, EMPTY)

    def half(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        # the pieces' slots: room for a piece a chunk, half full (regrowing moves every slot to a random
        # place); numpy's zeros, pages the kernel's first touch gets, not a fill of the whole table
        slots = np.zeros((1 << max(12, (hi - lo - 1).bit_length()), 4), np.int64)
        return cut_pieces(table.tokens, table.starts[lo:hi + 1], table.counts[lo:hi], hot, bits, slots)

    parts = one_or_two([lambda lo=lo, hi=hi: half(lo, hi) for lo, hi in _halves(table, threads)])
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

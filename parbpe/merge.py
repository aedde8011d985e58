"""The merge stage: engines that apply batches of merges in place, and the coordinator loop.

An engine owns a chunk table (or, with workers, a slice of one), applies each batch and returns the
change in pair counts; `learn_merges` ranks pairs, picks safe batches and sums the changes.

- LinkedEngine (overlap counting, the default): token positions are linked within their chunk, an
  index maps each pair to the positions where it occurs, and a round costs in proportion to the
  occurrences of its pairs.
- ChunkEngine (both countings, used for nonoverlap): an index maps each pair to the chunks that
  hold it, and a round recounts those chunks whole.

Both indexes rely on one fact: all occurrences of a pair are created in the round that creates
its newer token, and are only destroyed after. So an index is append-only (a block per round,
merged log-structured); entries that went stale cost a look, never a wrong result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .batch import PairQueue, descending_key, safe_batch, search_width
from .pairs import aggregate, aggregate_sorted, gather, pack, pair_keys_and_weights, run_parity
from .table import ChunkTable

# A merge worker's slice must hold this many table tokens. On 2 cores, two merge workers against one
# process (bench/merge_phase.py, 2026-11-22): FineWeb-Edu counts, 1.8M tokens, 0.9x the speed;
# realmix, 11.8M, 1.1x; a generated 1 GB corpus, 13.2M, 1.03x at 1.7x the peak memory (forked
# workers each hold an engine and pages of the coordinator). Tables of the corpora we measured
# (up to 10 GB: Heaps' law keeps them small) merge in one process.
MIN_TOKENS_PER_WORKER = 32_000_000


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


_LOW32 = np.uint64(0xFFFFFFFF)


def narrow_key(keys: np.ndarray) -> np.ndarray:
    """uint64 first << 16 | second of int64 pair keys whose token ids fit in 16 bits (same order)."""
    keys = np.asarray(keys, dtype=np.int64)
    return ((keys >> 32) << 16 | (keys & 0xFFFF)).astype(np.uint64)


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
    Otherwise a block is an _IndexBlock of int64 keys and value_dtype values. Stale entries stay:
    dropping them at every fold was tried and cost more time (realmix: +4 s of 14) than the
    memory it saved.
    """

    blocks: list = field(default_factory=list)
    value_dtype: type = np.int64
    packed: bool = False

    def add(self, keys: np.ndarray, values: np.ndarray, presorted: bool = False) -> None:
        """Add (key, value) entries of pairs new to the index; fold small blocks together."""
        if len(keys):
            # Lookups never rely on the order of values within a key, nor on their being distinct.
            if self.packed:
                entries = narrow_key(keys) << np.uint64(32) | np.asarray(values).astype(np.uint64)
                self.add_packed(entries if presorted else np.sort(entries))
                return
            if not presorted:
                order = np.argsort(keys)
                keys, values = keys[order], values[order]
            self.blocks.append(_IndexBlock(keys, values.astype(self.value_dtype, copy=False)))
        self._fold()

    def add_packed(self, entries: np.ndarray) -> None:
        """Add a sorted block of packed uint64 entries (packed indexes only)."""
        if len(entries):
            self.blocks.append(entries)
        self._fold()

    def _fold(self) -> None:
        while len(self.blocks) >= 3 and len(self.blocks[-2]) <= len(self.blocks[-1]):
            newer, older = self.blocks.pop(), self.blocks.pop()
            if self.packed:
                self.blocks.append(np.sort(np.concatenate([older, newer]), kind="stable"))
            else:
                self.blocks.append(_merge_sorted(older, newer))

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All entries of the given keys: (values, index into keys of the key each belongs to)."""
        values, which = [], []
        if self.packed:
            low = narrow_key(keys) << np.uint64(32)
            high = low | _LOW32  # every value of the key (the last key, 0xFFFFFFFF, cannot overflow)
        for block in self.blocks:
            if self.packed:
                lo, hi = np.searchsorted(block, low), np.searchsorted(block, high, side="right")
            else:
                lo = np.searchsorted(block.keys, keys, side="left")
                hi = np.searchsorted(block.keys, keys, side="right")
            sizes = hi - lo
            if sizes.any():
                idx, seg = gather(block, lo, sizes)
                values.append((block[idx] & _LOW32).astype(np.int64) if self.packed else block.values[idx])
                which.append(seg)
        if not values:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        return np.concatenate(values), np.concatenate(which)

    def chunks_with(self, keys: np.ndarray, n_chunks: int) -> np.ndarray:
        """Sorted unique ids of the chunks that (may) hold any of the given pair keys."""
        chunk_ids, _ = self.lookup(keys)
        mask = np.zeros(n_chunks, dtype=bool)
        mask[chunk_ids] = True
        return np.flatnonzero(mask)


class ChunkEngine:
    """Applies merge batches by recounting the chunks they touch (exact for both pair counts).

    Used for nonoverlap counting, where a merge can change the parity of a run of one token
    further along the chunk; LinkedEngine is faster for overlap counting.
    """

    def __init__(self, table: ChunkTable, nonoverlap: bool = False) -> None:
        self.table = table
        self.nonoverlap = nonoverlap
        small = table.n_chunks < 2**31
        self.index = PairIndex(value_dtype=np.int32 if small else np.int64,
                               packed=small and table.tokens.dtype == np.uint16)

    def chunk_tokens(self, c: int) -> list[int]:
        """Current tokens of chunk c (for tests and debugging)."""
        return self.table.chunk_tokens(c)

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Count every pair of the table once and build the index; returns (sorted keys, counts)."""
        t = self.table
        idx, seg = gather(t.tokens, t.starts[:-1], t.lengths)
        keys, weights, pos = pair_keys_and_weights(t.tokens[idx], seg, t.counts, self.nonoverlap)
        self.index.add(keys, seg[pos])
        return aggregate(keys, weights)

    def apply(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a safe batch of merges (first[k], second[k]) -> new_ids[k] to every chunk.

        A safe batch has no token that is the second of one pair and the first of another (except
        a pair (x, x) on its own), so its occurrences never overlap but in runs of x, which merge
        left to right. Returns the change in pair counts: (sorted keys, non-zero deltas).
        """
        t = self.table
        batch_keys = pack(first, second)
        order = np.argsort(batch_keys)
        batch_keys, new_ids = batch_keys[order], np.asarray(new_ids, dtype=np.int64)[order]

        chunk_ids = self.index.chunks_with(batch_keys, t.n_chunks)
        if len(chunk_ids) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts, lengths = t.starts[chunk_ids], t.lengths[chunk_ids]
        idx, seg = gather(t.tokens, starts, lengths)
        old = t.tokens[idx]
        counts = t.counts[chunk_ids]

        before_keys, before_w, pos = pair_keys_and_weights(old, seg, counts, self.nonoverlap)
        where = np.searchsorted(batch_keys, before_keys)
        where[where == len(batch_keys)] = 0
        match = np.zeros(len(old), dtype=bool)
        match[pos] = batch_keys[where] == before_keys
        hits = np.flatnonzero(run_parity(match))
        hit_pair = where[np.searchsorted(pos, hits)]

        new = old.copy()
        new[hits] = new_ids[hit_pair].astype(old.dtype)
        keep = np.ones(len(old), dtype=bool)
        keep[hits + 1] = False
        new, new_seg = new[keep], seg[keep]
        new_lengths = np.bincount(new_seg, minlength=len(chunk_ids)).astype(np.int64)
        dest, _ = gather(t.tokens, starts, new_lengths)
        t.tokens[dest] = new
        t.lengths[chunk_ids] = new_lengths

        after_keys, after_w, after_pos = pair_keys_and_weights(new, new_seg, counts, self.nonoverlap)
        # Every pair that holds a token of this batch is new: index it under its chunks.
        lowest_new = int(new_ids.min())
        fresh = (new[after_pos] >= lowest_new) | (new[after_pos + 1] >= lowest_new)
        self.index.add(after_keys[fresh], chunk_ids[new_seg[after_pos[fresh]]])
        if not self.nonoverlap:
            # Only pairs that touch a merge site change; the rest cancel out, so leave them out.
            # (With nonoverlap, a merge can shift the parity of a run further away: recount all.)
            near = np.zeros(len(old) + 1, dtype=bool)
            near[hits] = True
            near[hits + 1] = True
            near[np.maximum(hits - 1, 0)] = True
            changed = near[pos]
            before_keys, before_w = before_keys[changed], before_w[changed]
            after_keys, after_w = after_keys[fresh], after_w[fresh]
        return aggregate(np.concatenate([before_keys, after_keys]), np.concatenate([-before_w, after_w]))


class LinkedEngine:
    """Applies merge batches at the positions where their pairs occur (overlap counting).

    Each token position links to the next and previous live position of its chunk; a merge
    rewrites the first position and unlinks the second, so nothing is ever moved. The index maps
    pairs to positions, and a round costs in proportion to the occurrences of its pairs, not to
    the length of the chunks that hold them.
    """

    REMOVED = -2  # next[p] of a position merged away; -1 marks the last position of a chunk

    def __init__(self, table: ChunkTable) -> None:
        self.table = table
        t = table
        n_tokens = len(t.tokens)
        link_dtype = np.int32 if n_tokens < 2**31 - 1 else np.int64
        positions = np.arange(n_tokens, dtype=link_dtype)
        self.next = positions + 1
        self.prev = positions - 1
        if len(t.counts):
            self.next[t.starts[1:] - 1] = -1
            self.prev[t.starts[:-1]] = -1
        # Each position carries its chunk's count (int32 while counts fit; sums are made in int64).
        weight_dtype = np.int32 if len(t.counts) == 0 or int(t.counts.max()) < 2**31 else np.int64
        self.weight = np.repeat(t.counts.astype(weight_dtype), t.lengths)
        self.index = PairIndex(value_dtype=link_dtype, packed=link_dtype == np.int32 and t.tokens.dtype == np.uint16)
        self._marked = np.zeros(n_tokens, dtype=bool)  # scratch, all False between rounds

    def _pairs_at(self, positions: np.ndarray) -> np.ndarray:
        return pack(self.table.tokens[positions], self.table.tokens[self.next[positions]])

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Count every pair of the table once and build the index; returns (sorted keys, counts)."""
        starts = np.flatnonzero(self.next >= 0)
        if not self.index.packed:
            keys = self._pairs_at(starts)
            order = np.argsort(keys)  # one sort serves both the index and the counts
            keys, starts = keys[order], starts[order]
            self.index.add(keys, starts, presorted=True)
            return aggregate_sorted(keys, self.weight[starts])
        # The table's largest moment: sort the index's packed entries (narrow key, position) in
        # place, instead of keys, positions, a permutation and sorted copies of both.
        tokens = self.table.tokens
        packed = tokens[starts].astype(np.uint64) << np.uint64(48)
        packed |= tokens[self.next[starts]].astype(np.uint64) << np.uint64(32)
        packed |= starts.astype(np.uint64)
        del starts
        packed.sort()
        self.index.add_packed(packed)
        weights = self.weight[(packed & np.uint64(0xFFFFFFFF)).astype(self.next.dtype)]
        narrow, counts = aggregate_sorted((packed >> np.uint64(32)).astype(np.uint32), weights)
        narrow = narrow.astype(np.int64)
        return pack(narrow >> 16, narrow & 0xFFFF), counts

    def chunk_tokens(self, c: int) -> list[int]:
        """Current tokens of chunk c, following the links (for tests and debugging)."""
        out, p = [], int(self.table.starts[c])
        while p >= 0:
            out.append(int(self.table.tokens[p]))
            p = int(self.next[p])
        return out

    def apply(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a safe batch of merges (first[k], second[k]) -> new_ids[k]; see ChunkEngine.apply."""
        hits, which = self.find_hits(first, second)
        return self.apply_hits(hits, which, new_ids)

    def find_hits(self, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where a safe batch merges: (positions of the first token, index of the merge in the batch)."""
        tokens, nxt, prv = self.table.tokens, self.next, self.prev
        batch_keys = pack(first, second)

        # Candidate positions from the index; keep those that still hold their pair.
        cand, which = self.index.lookup(batch_keys)
        after = nxt[cand].astype(np.int64)
        live = after >= 0
        cand, which, after = cand[live], which[live], after[live]
        holds = pack(tokens[cand], tokens[after]) == batch_keys[which]
        cand, which = cand[holds], which[holds]
        # In a run x x x ... of a pair (x, x), occurrences follow each other through the links:
        # merge the 1st, 3rd, ... of each run, as a left-to-right merge does. Other pairs of a
        # safe batch never overlap, so all their occurrences merge.
        is_self = first[which] == second[which]
        if is_self.any():
            selfs, self_which = cand[is_self], which[is_self]
            order = np.argsort(selfs)
            selfs, self_which = selfs[order], self_which[order]
            follows = np.zeros(len(selfs), dtype=bool)
            follows[1:] = (prv[selfs[1:]] == selfs[:-1]) & (self_which[1:] == self_which[:-1])
            run_start = np.maximum.accumulate(np.where(follows, 0, np.arange(len(selfs))))
            take = ((np.arange(len(selfs)) - run_start) & 1) == 0
            cand = np.concatenate([cand[~is_self], selfs[take]])
            which = np.concatenate([which[~is_self], self_which[take]])
        return cand, which

    def exact_round(self, first: np.ndarray, second: np.ndarray, counts: np.ndarray, first_id: int,
                    rank_key: Callable[[int], tuple]) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
        """Exact batching: merge the longest prefix serial BPE would (see prefix_stop); (its length, changes)."""
        hits, which = self.find_hits(first, second)
        n = prefix_stop(*boundary_events(self, first, second, first_id, hits, which), first, second, counts, rank_key)
        keep = which < n
        return n, self.apply_hits(hits[keep], which[keep], np.arange(first_id, first_id + n, dtype=np.int64))

    def compact(self) -> None:
        """Write each chunk's current tokens to the front of its region and set lengths (at the end)."""
        t = self.table
        live = self.next != self.REMOVED
        chunk_of = np.repeat(np.arange(t.n_chunks), np.diff(t.starts))[live]
        lengths = np.bincount(chunk_of, minlength=t.n_chunks).astype(np.int64)
        dest, _ = gather(t.tokens, t.starts[:-1], lengths)
        t.tokens[dest] = t.tokens[live]
        t.lengths[:] = lengths

    def apply_hits(self, hits: np.ndarray, which: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Merge at the positions find_hits gave; returns the change in pair counts."""
        tokens, nxt, prv = self.table.tokens, self.next, self.prev
        new_ids = np.asarray(new_ids, dtype=np.int64)
        if len(hits) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        partners = nxt[hits].astype(np.int64)
        beyond = nxt[partners].astype(np.int64)
        marked = self._marked

        # Pairs before the merge that involve a merged position: left of, at, and right of it.
        # A left neighbour can be another hit's partner (a b a b): count that pair once.
        lefts = prv[hits].astype(np.int64)
        marked[partners] = True
        lone_lefts = lefts[(lefts >= 0) & ~marked[np.maximum(lefts, 0)]]
        marked[partners] = False
        before_pos = np.concatenate([lone_lefts, hits, partners[beyond >= 0]])
        before_keys, before_w = self._pairs_at(before_pos), self.weight[before_pos]

        tokens[hits] = new_ids[which].astype(tokens.dtype)
        nxt[hits] = beyond
        linked = beyond >= 0
        prv[beyond[linked]] = hits[linked]
        nxt[partners] = self.REMOVED

        # Pairs after the merge that involve a new token: they are all new, index them.
        # A left neighbour can be another hit (ab ab): its pair is already the hit's right pair.
        lefts = prv[hits].astype(np.int64)
        marked[hits] = True
        lone_lefts = lefts[(lefts >= 0) & ~marked[np.maximum(lefts, 0)]]
        marked[hits] = False
        after_pos = np.concatenate([lone_lefts, hits[linked]])
        after_keys, after_w = self._pairs_at(after_pos), self.weight[after_pos]
        self.index.add(after_keys, after_pos)
        return aggregate(np.concatenate([before_keys, after_keys]), np.concatenate([-before_w, after_w]))


def boundary_events(engine: LinkedEngine, first: np.ndarray, second: np.ndarray, first_id: int,
                    hits: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs a batch creates, as events (pair key, member, count change), without applying it.

    Each boundary between a merge site and its neighbour holds one pair after every prefix of the
    batch: a pair with one new token from the step after the first of the two merges, a pair of
    two new tokens from the step after the second. An event (key, k, d) says that from member k
    on, counting the merges before k, the pair's count changes by d.
    """
    n = len(first)
    empty = np.zeros(0, dtype=np.int64)
    if n <= 1 or len(hits) == 0:
        return empty, empty, empty
    tokens, nxt, prv = engine.table.tokens, engine.next, engine.prev
    never = n  # "member" of a position no merge of the batch touches
    order = np.argsort(hits)
    sorted_hits, sorted_which = hits[order], which[order]
    partners = nxt[hits].astype(np.int64)
    sorted_partners = np.sort(partners)

    def member_starting_at(pos: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(sorted_hits, pos), len(sorted_hits) - 1)
        return np.where(sorted_hits[at] == pos, sorted_which[at], never)

    # Right boundary of every hit: (this merge, whatever follows its partner).
    right = nxt[partners].astype(np.int64)
    has_right = right >= 0
    r_pos = right[has_right]
    r_mu, r_tu = which[has_right], second[which[has_right]]
    r_mv, r_tv = member_starting_at(r_pos), tokens[r_pos].astype(np.int64)
    r_w = engine.weight[hits[has_right]]
    # Left boundary of a hit whose left neighbour no merge touches (else it is a right boundary).
    left = prv[hits].astype(np.int64)
    at = np.minimum(np.searchsorted(sorted_partners, left), len(sorted_partners) - 1)
    lone = (left >= 0) & (sorted_partners[at] != left)
    l_pos = left[lone]
    l_mu, l_tu = np.full(len(l_pos), never), tokens[l_pos].astype(np.int64)
    l_mv, l_tv = which[lone], first[which[lone]]
    l_w = engine.weight[hits[lone]]

    mu, tu = np.concatenate([r_mu, l_mu]), np.concatenate([r_tu, l_tu])
    mv, tv = np.concatenate([r_mv, l_mv]), np.concatenate([r_tv, l_tv])
    w = np.concatenate([r_w, l_w]).astype(np.int64)
    a, c = np.minimum(mu, mv), np.maximum(mu, mv)
    new_u, new_v = first_id + mu, first_id + mv
    # After merge a: one side is new (both, when one merge makes both sides, as in runs of x x).
    one_new = np.where(mu == mv, pack(new_u, new_v), np.where(mu < mv, pack(new_u, tv), pack(tu, new_v)))
    both = (c < never) & (c != a)
    keys = np.concatenate([one_new, one_new[both], pack(new_u[both], new_v[both])])
    steps = np.concatenate([a + 1, c[both] + 1, c[both] + 1])  # the pair holds from member `step` on
    deltas = np.concatenate([w, -w[both], w[both]])
    keep = steps < n
    return keys[keep], steps[keep], deltas[keep]


def prefix_stop(keys: np.ndarray, steps: np.ndarray, deltas: np.ndarray, first: np.ndarray, second: np.ndarray,
                counts: np.ndarray, rank_key: Callable[[int], tuple]) -> int:
    """How many of a conflict-free ranked prefix serial BPE would merge in this order.

    Member k is merged next by serial BPE if no pair created by members 0..k-1, counted as it
    stands after just those merges (boundary_events, from every slice of the table), outranks it:
    pairs that existed before the batch only lose occurrences, and conflict-free members never
    touch each other's occurrences. rank_key(pair key) orders pairs of equal count by the tie
    rule (smaller is ranked first), new tokens of the round included.
    """
    n = len(first)
    if len(keys) == 0:
        return n
    order = np.lexsort((steps, keys))
    keys, steps, deltas = keys[order], steps[order], deltas[order]
    values = np.cumsum(deltas)
    group_start = np.r_[True, keys[1:] != keys[:-1]]
    base = np.maximum.accumulate(np.where(group_start, np.arange(len(keys)), 0))
    values = values - np.r_[0, values][base]  # running count of each pair from its first step on
    ends = np.r_[np.where(keys[1:] == keys[:-1], steps[1:], n), n]  # until the pair's next change
    # A created pair outranks member k if its count is higher, or equal and it wins the tie rule.
    # Counts fall with rank: [tie_from, below_from) are the members of equal count.
    neg_counts = -np.asarray(counts, dtype=np.int64)
    tie_from = np.maximum(np.searchsorted(neg_counts, -values, side="left"), steps)
    below_from = np.maximum(np.searchsorted(neg_counts, -values, side="right"), steps)
    live = values > 0
    sure = below_from[live & (below_from < ends)]
    best = int(sure.min()) if len(sure) else n
    ties = np.flatnonzero(live & (tie_from < np.minimum(below_from, ends)) & (tie_from < best))
    for r in ties[np.argsort(tie_from[ties], kind="stable")].tolist():
        if tie_from[r] >= best:
            break
        mine = rank_key(int(keys[r]))
        for k in range(int(tie_from[r]), min(int(below_from[r]), int(ends[r]), best)):
            if mine < rank_key((int(first[k]) << 32) | int(second[k])):
                best = k
                break
    return best


def _round_rank_key(queue: PairQueue, vocab: list[bytes], first: np.ndarray, second: np.ndarray, first_id: int):
    """The tie-rule key of a pair whose tokens may be made in this round (id first_id + k for member k)."""

    def token_key(t: int) -> bytes:
        if t < first_id:
            return queue.tie_key(t)
        k = t - first_id
        return descending_key(vocab[int(first[k])] + vocab[int(second[k])])

    def rank_key(pair: int) -> tuple:
        a, b = pair >> 32, pair & 0xFFFFFFFF
        return (token_key(a), -a, token_key(b), -b)

    return rank_key


@dataclass
class MergeResult:
    merges: list[tuple[int, int]]  # in rank order; merge k makes token first_id + k
    batch_sizes: list[int]
    stopped_early: bool  # no pair was left before the vocabulary was full
    engine: ChunkEngine | LinkedEngine | ChunkTable  # final tokens of every chunk (chunk_tokens)
    seconds: dict[str, float] = field(default_factory=dict)  # counting, selection, applying, updating, communication


def learn_merges(
    table: ChunkTable,
    vocab: list[bytes],
    n_merges: int,
    *,
    max_batch_size: int = 0,
    cap_divisor: int = 2,
    nonoverlap: bool = False,
    engine: str = "auto",
    batching: str = "batchbpe",
    workers: int = 1,
    start_method: str | None = None,
    min_tokens_per_worker: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MergeResult:
    """Run merge rounds on the table until n_merges merges are made or no pair is left.

    `vocab` holds the bytes of every token that exists before merging (the 256 bytes, then the
    stop-list tokens); it is extended in place with the new tokens. Each round ranks the top pairs,
    keeps BatchBPE's safe batch of them, applies it to the table and updates the pair counts.
    engine: "linked" (overlap counting only), "chunk", or "auto" (linked where it applies).
    batching: "batchbpe" (skip conflicting pairs, BatchBPE's rule) or "exact" (the longest ranked
    prefix that serial BPE would merge in the same order: the same merges as max_batch_size=1).
    Exact batching needs the linked engine; with nonoverlap counting it runs serially.
    workers > 1 spreads the engine over processes, one per slice of the table (merge_workers.py),
    each given at least min_tokens_per_worker tokens (fewer workers, or none, on smaller tables);
    the merges are the same for any number of workers.
    """
    if engine not in ("auto", "linked", "chunk"):
        raise ValueError(f"engine must be 'auto', 'linked' or 'chunk', got {engine!r}")
    if engine == "linked" and nonoverlap:
        raise ValueError("the linked engine counts overlapping pairs only; use engine='chunk'")
    if batching not in ("batchbpe", "exact"):
        raise ValueError(f"batching must be 'batchbpe' or 'exact', got {batching!r}")
    use_chunk = nonoverlap or engine == "chunk"
    exact = batching == "exact" and not use_chunk
    if batching == "exact" and use_chunk:
        max_batch_size = 1  # serial BPE is exact by definition
    clock = time.perf_counter()
    per_worker = MIN_TOKENS_PER_WORKER if min_tokens_per_worker is None else min_tokens_per_worker
    workers = min(workers, len(table.tokens) // max(per_worker, 1))
    if workers <= 1 or table.n_chunks < 2 * workers:
        runner = ChunkEngine(table, nonoverlap=nonoverlap) if use_chunk else LinkedEngine(table)
        return _merge_rounds(runner, vocab, n_merges, max_batch_size, cap_divisor, exact, progress, clock)
    from .merge_workers import SlicedEngine

    sliced = SlicedEngine(table, workers, use_chunk=use_chunk, nonoverlap=nonoverlap, start_method=start_method)
    try:
        result = _merge_rounds(sliced, vocab, n_merges, max_batch_size, cap_divisor, exact, progress, clock)
        result.engine = sliced.finish()  # the compacted table: chunk_tokens(c) as with one engine
        return result
    finally:
        sliced.close()


def _merge_rounds(runner, vocab: list[bytes], n_merges: int, max_batch_size: int, cap_divisor: int,
                  exact: bool, progress, clock: float) -> MergeResult:
    """The rounds of learn_merges on a ready engine."""
    queue = PairQueue(*runner.initial_pair_counts(), vocab)
    seconds = {"counting": time.perf_counter() - clock, "selection": 0.0, "applying": 0.0, "updating": 0.0}
    merges: list[tuple[int, int]] = []
    batch_sizes: list[int] = []
    while len(merges) < n_merges:
        clock = time.perf_counter()
        width = search_width(n_merges - len(merges), len(vocab), cap_divisor, max_batch_size)
        ranked, counts = queue.ranked(width)
        if len(ranked) == 0:
            break
        safe = safe_batch(ranked)
        first_id = len(vocab)
        seconds["selection"] += time.perf_counter() - clock
        clock = time.perf_counter()
        if exact:
            n = len(safe) if safe.all() else int(np.argmin(safe))  # stop at the first conflict
            first, second = ranked[:n] >> 32, ranked[:n] & 0xFFFFFFFF
            n, changes = runner.exact_round(first, second, counts[:n], first_id,
                                            _round_rank_key(queue, vocab, first, second, first_id))
            accepted = ranked[:n]
        else:
            accepted = ranked[safe]
        first, second = accepted >> 32, accepted & 0xFFFFFFFF
        for a, b in zip(first.tolist(), second.tolist()):
            vocab.append(vocab[a] + vocab[b])
            queue.add_token(vocab[-1], a, b)
            merges.append((a, b))
        batch_sizes.append(len(accepted))
        if not exact:
            changes = runner.apply(first, second, np.arange(first_id, first_id + len(accepted), dtype=np.int64))
        seconds["applying"] += time.perf_counter() - clock  # exact: finding the prefix counts here
        clock = time.perf_counter()
        queue.update(*changes)
        seconds["updating"] += time.perf_counter() - clock
        if progress is not None:
            progress(len(merges), n_merges)
    # With merge workers, the messages' time is inside "applying": report it apart.
    seconds["communication"] = getattr(runner, "communication", 0.0)
    seconds["applying"] -= seconds["communication"]
    return MergeResult(merges=merges, batch_sizes=batch_sizes, stopped_early=len(merges) < n_merges,
                       engine=runner, seconds={k: round(v, 3) for k, v in seconds.items()})

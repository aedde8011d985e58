"""Merge engines: apply a batch of merges to a chunk table in place and return the change in pair counts.

- LinkedEngine (overlap counting, the default): token positions are linked within their chunk, an
  index maps each pair to the positions where it occurs, and a round costs in proportion to the
  occurrences of its pairs.
- ChunkEngine (both countings, used for nonoverlap): an index maps each pair to the chunks that
  hold it, and a round recounts those chunks whole.

Both offer initial_pair_counts(), apply(first, second, new_ids) and chunk_tokens(c); the
coordinator (coordinator.py) drives them, directly or through merge workers (workers.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import jit
from ..kernels.linked import (
    by_position,
    count_live_pairs,
    fill_records,
    new_pair_entries,
    sorted_live_pairs,
    split_point,
    sum_sorted_pairs,
)
from ..kernels.pair_index import merged_runs, searched
from ..run.memory import trim_heap
from ..run.threads import Beside, one_or_two
from . import linked
from .exact import boundary_events, prefix_stop
from .pair_index import PairIndex, packed_entries
from .pairs import (
    add_sorted,
    aggregate,
    aggregate_sorted,
    gather,
    pack,
    pair_keys_and_weights,
    runs_taken_left_to_right,
    taken_left_to_right,
    sort_by_pair,
    wide_key,
)
from .table import ChunkTable


class ChunkEngine:
    """Applies merge batches by recounting the chunks they touch (exact for both pair counts).

    Used for nonoverlap counting, where a merge can change the parity of a run of one token
    further along the chunk, and under a budget that holds the table but not LinkedEngine (faster,
    in about twice the memory). It holds no links: the table, an index of (pair, chunk) entries
    (most of them as lists, 4 bytes each) and, at a time, the temporaries of GROUP_TOKENS tokens of
    whole chunks (the first count, a rebuild of the index and a round's chunks go a group at a time).
    """

    GROUP_TOKENS = 1 << 18  # tokens of whole chunks gathered at a time (fit.py: CHUNK_GROUP_TOKENS, and their cost)
    STALE_FACTOR = 1.5  # index entries per pair position that trigger a rebuild (larger: fewer rebuilds, more memory)
    MIN_REBUILD = 1 << 16  # ... but never for an index smaller than this many entries

    def __init__(self, table: ChunkTable, nonoverlap: bool = False, threads: int = 1) -> None:
        self.table = table
        self.nonoverlap = nonoverlap
        self.threads = threads  # 2: a round's groups applied two at a time (their temporaries held at once)
        small = table.n_chunks < 2**31
        self.index = PairIndex(value_dtype=np.int32 if small else np.int64,
                               packed=small and table.tokens.dtype == np.uint16)
        self.positions = 0  # the table's pair positions (_index_pairs counts them, each hit takes one)

    def chunk_tokens(self, c: int) -> list[int]:
        """Current tokens of chunk c (for tests and debugging)."""
        return self.table.chunk_tokens(c)

    def _groups(self, chunk_ids: np.ndarray) -> list[np.ndarray]:
        """chunk_ids cut into runs of whole chunks of about GROUP_TOKENS tokens (one chunk at least)."""
        ends = np.cumsum(self.table.lengths[chunk_ids])
        groups, start = [], 0
        while start < len(chunk_ids):
            done = int(ends[start - 1]) if start else 0
            stop = max(int(np.searchsorted(ends, done + self.GROUP_TOKENS, "right")), start + 1)
            groups.append(chunk_ids[start:stop])
            start = stop
        return groups

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Count every pair of the table once and build the index; returns (sorted keys, counts)."""
        return self._index_pairs(count=True)

    def _index_pairs(self, count: bool) -> tuple[np.ndarray, np.ndarray]:
        """Build the index from the table as it is (its entries: every pair position's (pair, chunk));
        with count, also the pair counts: (sorted keys, counts). A packed index's entries are made in
        one array, sorted in place and made lists in its memory (PairIndex.add_lists: 4 bytes an
        entry after, 8 while it is built). The heap the rounds freed goes back to the system first:
        in a run's merge stage (not in a process that only merges) the rebuilds then peak lower."""
        t = self.table
        self.index = PairIndex(value_dtype=self.index.value_dtype, packed=self.index.packed)
        trim_heap()
        self.positions = int(t.lengths.sum()) - t.n_chunks  # pair positions (no chunk is empty): one fewer a hit
        keys = counts = np.zeros(0, dtype=np.int64)
        groups = self._groups(np.arange(t.n_chunks, dtype=np.int64))
        if not self.index.packed:
            for chunk_ids in groups:
                idx, seg = gather(t.tokens, t.starts[chunk_ids], t.lengths[chunk_ids])
                group_keys, weights, pos = pair_keys_and_weights(t.tokens[idx], seg, t.counts[chunk_ids],
                                                                 self.nonoverlap)
                del idx
                self.index.add(group_keys, chunk_ids[seg[pos]])
                if count:
                    keys, counts = add_sorted(keys, counts, *aggregate(group_keys, weights))
            return keys, counts
        packed, filled = np.empty(int(np.maximum(t.lengths - 1, 0).sum()), dtype=np.uint64), 0
        for chunk_ids in groups:
            firsts, seconds, holders = self._pairs_of(chunk_ids)
            if count:
                keys, counts = add_sorted(keys, counts, *self._counted(chunk_ids, firsts, seconds, holders))
            entries = packed[filled:filled + len(firsts)]
            entries[:] = firsts
            entries <<= np.uint64(16)
            entries |= seconds
            entries <<= np.uint64(32)
            entries |= holders.astype(np.uint64)
            filled += len(firsts)
            del entries, firsts, seconds, holders
        if filled < len(packed):
            packed.resize(filled, refcheck=False)
        packed.sort()
        self.index.add_lists(packed)  # (consumed: the lists live in its memory)
        return keys, counts

    def _pairs_of(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every pair of a run of consecutive chunks (chunk_ids: a range), read where they lie: (first
        tokens, second tokens, the chunk of each). A chunk's tokens start at its start, their
        lengths' worth; the rest of its room (merged away) up to the next chunk's start is skipped."""
        t = self.table
        c0, c1 = int(chunk_ids[0]), int(chunk_ids[-1])
        low, high = int(t.starts[c0]), int(t.starts[c1] + t.lengths[c1])
        starts = t.starts[c0:c1 + 1] - low
        marks = np.zeros(high - low + 1, dtype=np.int8)  # +1 where a chunk's pairs start, -1 past its last
        marks[starts] += 1
        marks[starts + t.lengths[c0:c1 + 1] - 1] -= 1  # (distinct; a chunk of one token: +1 - 1, no pair)
        pos = np.flatnonzero(np.cumsum(marks[:-1], dtype=np.int8).view(bool))  # (0 or 1: a bool's bytes)
        del marks
        opened = np.zeros(high - low, dtype=np.int32)
        opened[starts] = 1
        holders = np.cumsum(opened, dtype=np.int32)[pos]
        holders += c0 - 1
        tokens = t.tokens[low:high]
        return tokens[pos], tokens[pos + 1], holders

    def _counted(self, chunk_ids: np.ndarray, firsts: np.ndarray, seconds: np.ndarray, holders: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(sorted keys, counts) of a group's pairs (_pairs_of), as the first count counts them."""
        if not self.nonoverlap:
            return aggregate(pack(firsts, seconds), self.table.counts[holders])
        t = self.table  # (a run of one token counts every other pair: read as pair_keys_and_weights does)
        idx, seg = gather(t.tokens, t.starts[chunk_ids], t.lengths[chunk_ids])
        group_keys, weights, _ = pair_keys_and_weights(t.tokens[idx], seg, t.counts[chunk_ids], True)
        return aggregate(group_keys, weights)

    def apply(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a safe batch of merges (first[k], second[k]) -> new_ids[k] to every chunk.

        A safe batch has no token that is the second of one pair and the first of another (except
        a pair (x, x) on its own), so its occurrences never overlap but in runs of x, which merge
        left to right. Returns the change in pair counts: (sorted keys, non-zero deltas).
        """
        batch_keys = pack(first, second)
        order = np.argsort(batch_keys)
        batch_keys, new_ids = batch_keys[order], np.asarray(new_ids, dtype=np.int64)[order]
        chunk_ids = self.index.chunks_with(batch_keys, self.table.n_chunks)
        keys = deltas = np.zeros(0, dtype=np.int64)
        added: list = []  # every pair that holds a token of this batch is new: indexed under its chunks
        # The tokens that start one of the batch's pairs: every token of the table is older than the batch's
        starts_batch = np.zeros(int(new_ids.min()), dtype=bool)
        starts_batch[batch_keys >> 32] = True
        groups = self._groups(chunk_ids)
        step = 2 if self.threads > 1 else 1  # (groups hold other chunks: two threads never write one place)
        for at in range(0, len(groups), step):
            calls = [lambda group=group: self._apply_to(group, batch_keys, new_ids, starts_batch)
                     for group in groups[at:at + step]]
            for group_keys, group_deltas, fresh_keys, fresh_chunks, hits in one_or_two(calls):
                self.positions -= hits
                keys, deltas = add_sorted(keys, deltas, group_keys, group_deltas)
                added.append(packed_entries(fresh_keys, fresh_chunks) if self.index.packed
                             else (fresh_keys, fresh_chunks))
        if self.index.packed and added:
            entries = np.concatenate(added)
            del added[:]
            entries.sort()
            self.index.add_packed(entries)
            del entries  # (the index holds it, or a fold's copy: a rebuild next must not find it alive here)
        elif added:
            self.index.add(np.concatenate([k for k, _ in added]), np.concatenate([c for _, c in added]))
        if self.index.entries > max(self.STALE_FACTOR * self.positions, self.MIN_REBUILD):
            self._index_pairs(count=False)  # stale entries (pairs merged away) outgrew the live ones
        nonzero = deltas != 0
        return keys[nonzero], deltas[nonzero]

    def _apply_to(self, chunk_ids: np.ndarray, batch_keys: np.ndarray, new_ids: np.ndarray, starts_batch: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """The batch applied to these chunks: (sorted keys, deltas) of their pair counts, the new pairs
        with the chunks that hold them (for the index), and the merges made. With overlap counting only the pairs at
        and beside a merge change, and only those are read; with nonoverlap every pair of the chunks
        is recounted (a merge can shift the parity of a run further along)."""
        t = self.table
        starts, lengths = t.starts[chunk_ids], t.lengths[chunk_ids]
        idx, seg = gather(t.tokens, starts, lengths)
        old = t.tokens[idx]
        del idx
        counts = t.counts[chunk_ids]
        valid = seg[:-1] == seg[1:]

        # The batch's pairs among them: only pairs whose first token starts one of the batch's are searched.
        cand = np.flatnonzero(starts_batch[old[:-1]] & valid)
        cand_keys = pack(old[cand], old[cand + 1])
        where = np.searchsorted(batch_keys, cand_keys)
        where[where == len(batch_keys)] = 0
        found = batch_keys[where] == cand_keys
        matched, where = cand[found], where[found]
        del cand, cand_keys, found
        take = taken_left_to_right(matched)
        hits, hit_pair = matched[take], where[take]

        new = old.copy()
        new[hits] = new_ids[hit_pair].astype(old.dtype)
        keep = np.ones(len(old), dtype=bool)
        keep[hits + 1] = False
        new, new_seg = new[keep], seg[keep]
        new_lengths = np.bincount(new_seg, minlength=len(chunk_ids)).astype(np.int64)
        dest, _ = gather(t.tokens, starts, new_lengths)
        t.tokens[dest] = new
        t.lengths[chunk_ids] = new_lengths
        del dest, keep

        lowest_new = int(new_ids.min())
        if self.nonoverlap:
            before_keys, before_w, _ = pair_keys_and_weights(old, seg, counts, True)
            after_keys, after_w, after_pos = pair_keys_and_weights(new, new_seg, counts, True)
            fresh = (new[after_pos] >= lowest_new) | (new[after_pos + 1] >= lowest_new)
            fresh_keys, fresh_chunks = after_keys[fresh], chunk_ids[new_seg[after_pos[fresh]]]
        else:
            near = np.zeros(len(old) + 1, dtype=bool)  # the pairs at, before and after each merge
            near[hits] = True
            near[hits + 1] = True
            near[np.maximum(hits - 1, 0)] = True
            at = np.flatnonzero(near[:len(valid)] & valid)
            before_keys, before_w = pack(old[at], old[at + 1]), counts[seg[at]]
            made = new >= lowest_new  # every pair that holds a token of this batch is new
            at = np.flatnonzero((made[:-1] | made[1:]) & (new_seg[:-1] == new_seg[1:]))
            after_keys, after_w = pack(new[at], new[at + 1]), counts[new_seg[at]]
            fresh_keys, fresh_chunks = after_keys, chunk_ids[new_seg[at]]
        keys, deltas = aggregate(np.concatenate([before_keys, after_keys]), np.concatenate([-before_w, after_w]))
        return keys, deltas, fresh_keys, fresh_chunks, len(hits)


def preload_linked_kernels(n_tokens: int, token_dtype: np.dtype) -> None:
    """Start loading, in a background thread, the kernels a LinkedEngine of n_tokens will call (if it
    will: see jit.merge_kernels), while the caller builds its table. They are loaded for the
    dtypes of a table of token_dtype, by merging a tiny one: numba loads a kernel once per dtypes."""
    if jit.merge_kernels(n_tokens):
        jit.preload(f"linked-{np.dtype(token_dtype).name}", lambda: _warm_linked(np.dtype(token_dtype)))


def _warm_linked(token_dtype: np.dtype) -> None:
    """Every kernel of the linked engine called once on a table of three chunks (rebuild included)."""
    data = np.frombuffer(b"aaaabab" + b"abc" + b"ba", dtype=np.uint8)
    starts = np.array([0, 7, 10, 12], dtype=np.int64)
    table = ChunkTable(data.astype(token_dtype), starts, np.diff(starts), np.array([3, 2, 1], dtype=np.int64))
    engine = LinkedEngine(table, use_kernels=True)
    engine.initial_pair_counts()
    engine.apply(np.array([97, 98]), np.array([97, 99]), np.array([256, 257]))
    engine.apply_hits(*engine.find_hits(np.array([98]), np.array([97])), np.array([258]))  # exact batching's steps
    split_point(engine.records, np.array([0, 1 << 20], dtype=np.int64), 20)  # (two threads' rounds)
    by_position(np.array([2, 1], dtype=np.int64), 20, 4)  # (a round of many candidates)
    merged_runs(np.array([1, 3], dtype=np.uint64), np.array([2], dtype=np.uint64))  # (a fold of packed blocks)
    if engine.index.packed:  # (the spans in a large packed block)
        searched(engine.index.blocks[0], engine.index.blocks[0][:2])
    engine.index.blocks.clear()
    engine._index_live_pairs(count=False)
    if engine.index.packed:  # (the first count of a wide table; a table of 2**16 ids or more has no packed index)
        sum_sorted_pairs(engine.records, engine.index.blocks[0])
        # (a large table's, in two threads)
        width = int(engine.table.tokens.max()) + 1
        packed = linked.sorted_live_pairs_in_two(engine.records, engine.live_pairs, width)
        linked.sum_sorted_pairs_in_two(engine.records, packed)


class LinkedEngine:
    """Applies merge batches at the positions where their pairs occur (overlap counting).

    Each token position links to the next and previous live position of its chunk; a merge
    rewrites the first position and unlinks the second, so nothing is ever moved. The index maps
    pairs to positions, and a round costs in proportion to the occurrences of its pairs, not to
    the length of the chunks that hold them.
    """

    REMOVED = -2  # next[p] of a position merged away; -1 marks the last position of a chunk
    STALE_FACTOR = 1.5  # index entries per live pair that trigger a rebuild of the index
    # ... with the kernels: the peak RSS is the first count's either way, and rebuilding at 3 costs a
    # fraction of rebuilding at 1.5 (higher factors cost more in lookups and memory than they save)
    JIT_STALE_FACTOR = 3.0
    MIN_REBUILD = 1 << 16  # ... but never for an index smaller than this many entries
    SLICE = 1 << 20  # positions handled at a time when the index is built
    GROUP_ENTRIES = 1 << 18  # index entries a group of a wide batch looks up at once (see apply) ...
    GROUP_SHARE = 32  # ... or this share of the live pairs, if more
    COUNTING_SORT_WIDTH = 1024  # with the JIT, a table's first pairs are counting-sorted below this many ids

    def __init__(self, table: ChunkTable, use_kernels: bool | None = None, threads: int = 1,
                 roomy: bool = False) -> None:
        self.table = table
        # numpy's index sorted by radix passes (pairs.sort_by_pair: two arrays of the index's size
        # beside it) where the budget has room, else in place
        self.roomy = roomy
        t = table
        n_tokens = len(t.tokens)
        # find and apply the hits with the kernels (None: as use_kernels decides for this size)
        self.jit = jit.merge_kernels(n_tokens) if use_kernels is None else use_kernels
        # 2: large rounds' kernels in two threads (linked.TWO_THREADS_MIN), when nothing else
        # runs beside this engine (the coordinator's own, not a merge worker's)
        self.threads = threads if self.jit else 1
        link_dtype = np.int32 if n_tokens < 2**31 - 1 else np.int64
        # Each position carries its chunk's count (int32 while counts fit; sums are made in int64).
        weight_dtype = np.int32 if len(t.counts) == 0 or int(t.counts.max()) < 2**31 else np.int64
        if self.jit:
            # One record a position, (next, prev, weight, token): the kernels' layout (kernels/linked.py).
            link_dtype = np.promote_types(link_dtype, weight_dtype).type
            self.records = np.empty((n_tokens, 4), dtype=link_dtype)
            two = self.threads > 1 and n_tokens >= linked.TWO_THREADS_MIN
            fill = linked.fill_records_in_two if two else fill_records
            fill(self.records, t.tokens, t.starts, t.counts)
            self.next, self.prev, self.weight = self.records[:, 0], self.records[:, 1], self.records[:, 2]
        else:
            self.records = None
            positions = np.arange(n_tokens, dtype=link_dtype)
            self.next, self.prev = positions + 1, positions - 1
            del positions
            if len(t.counts):
                self.next[t.starts[1:] - 1] = -1
                self.prev[t.starts[:-1]] = -1
            self.weight = np.repeat(t.counts.astype(weight_dtype), t.lengths)
        self._index = PairIndex(value_dtype=link_dtype, packed=link_dtype == np.int32 and t.tokens.dtype == np.uint16,
                                use_kernels=self.jit)
        self._pending: Beside | None = None  # a round's index work, done beside the next steps
        self._marked = None if self.jit else np.zeros(n_tokens, dtype=bool)  # numpy's scratch, all False between rounds
        self.live_pairs = 0  # adjacent live positions: what a fresh index would hold

    @property
    def index(self) -> PairIndex:
        """The pair index, once the last round's additions to it are made."""
        self.settle()
        return self._index

    def settle(self) -> None:
        """Wait for the last round's index work (a thread with threads=2; its error is raised here)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.wait()

    def _pairs_at(self, positions: np.ndarray) -> np.ndarray:
        return pack(self.table.tokens[positions], self.table.tokens[self.next[positions]])

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Count every pair of the table once and build the index; returns (sorted keys, counts)."""
        return self._index_live_pairs(count=True)

    def _index_live_pairs(self, count: bool) -> tuple[np.ndarray, np.ndarray]:
        """Index every pair at a live position as one block (and, if count, return the pair counts)."""
        self.live_pairs = int(np.count_nonzero(self.next >= 0))
        if not self._index.packed:
            starts = np.flatnonzero(self.next >= 0)
            keys = self._pairs_at(starts)
            order = np.argsort(keys)  # one sort serves both the index and the counts
            keys, starts = keys[order], starts[order]
            self._index.add(keys, starts, presorted=True)
            return aggregate_sorted(keys, self.weight[starts]) if count else (keys[:0], keys[:0])
        width = int(self.table.tokens.max(initial=0)) + 1
        if self.jit and count and width <= self.COUNTING_SORT_WIDTH:
            packed, keys, counts = count_live_pairs(self.records, self.live_pairs, width)
            self._index.add_packed(packed)
            return keys, counts
        # The table's largest moment: the index's packed entries (narrow key, position); then the
        # narrow keys and weights of the counts, a slice at a time. At most one uint64, a uint32 and a
        # weight per pair at once (roomy: the entries' radix sort holds a copy and an int64 order).
        packed = self._packed_entries(width)
        self._index.add_packed(packed)
        if not count:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if self.jit:
            sums = linked.sum_sorted_pairs_in_two if self._sorts_in_two() else sum_sorted_pairs
            return sums(self.records, packed)
        # Each slice of the sorted entries sums its own pairs; a pair cut by a slice boundary is
        # summed once more over the (far fewer) per-slice sums, which are still sorted.
        slice_keys, slice_counts = [], []
        for lo in range(0, len(packed), self.SLICE):
            part = packed[lo:lo + self.SLICE]
            weights = self.weight[(part & np.uint64(0xFFFFFFFF)).astype(self.next.dtype)]
            keys, sums = aggregate_sorted((part >> np.uint64(32)).astype(np.uint32), weights)
            slice_keys.append(keys)
            slice_counts.append(sums)
        if not slice_keys:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        narrow, counts = aggregate_sorted(np.concatenate(slice_keys), np.concatenate(slice_counts))
        return wide_key(narrow), counts

    def _packed_entries(self, width: int) -> np.ndarray:
        """The packed index entries of every live pair (tokens below width), sorted; made a slice of
        positions at a time into one array and sorted in place (or by a kernel's counting sorts, in two
        threads from linked.SORT_IN_TWO_MIN positions where the engine has two)."""
        if self.jit:
            sort = linked.sorted_live_pairs_in_two if self._sorts_in_two() else sorted_live_pairs
            return sort(self.records, self.live_pairs, width)
        tokens, nxt = self.table.tokens, self.next
        live = nxt >= 0
        packed = np.empty(self.live_pairs, dtype=np.uint64)
        at = 0
        for lo in range(0, len(live), self.SLICE):
            starts = np.flatnonzero(live[lo:lo + self.SLICE]) + lo
            out = packed[at:at + len(starts)]
            out[:] = tokens[starts]
            out <<= np.uint64(48)
            second = tokens[nxt[starts]].astype(np.uint64)
            second <<= np.uint64(32)
            out |= second
            out |= starts.astype(np.uint64)
            at += len(starts)
        del live
        if self.roomy:
            return sort_by_pair(packed)
        packed.sort()
        return packed

    def _sorts_in_two(self) -> bool:
        """Whether the kernels sort and sum every live pair in two threads (linked.SORT_IN_TWO_MIN)."""
        return self.threads > 1 and len(self.records) >= linked.SORT_IN_TWO_MIN

    def _index_new_pairs(self, keys: np.ndarray, positions: np.ndarray) -> None:
        """Index the pairs a round made (at positions), and rebuild the index if it went stale."""
        entries = new_pair_entries(keys, positions) if self.jit and self._index.packed else None
        if entries is not None:
            self._index.add_packed(entries)
        else:
            self._index.add(keys, positions)
        self._rebuild_index_if_stale()

    def _rebuild_index_if_stale(self) -> None:
        """Rebuild the index from the live positions once it holds STALE_FACTOR times as many
        entries as there are live pairs: entries of merged-away pairs only cost memory (a lookup
        skips them), and a rebuild makes the index the size of what is left of the table."""
        factor = self.JIT_STALE_FACTOR if self.jit else self.STALE_FACTOR
        if self._index.entries > factor * max(self.live_pairs, self.MIN_REBUILD):
            self._index.blocks.clear()
            self._index_live_pairs(count=False)

    def chunk_tokens(self, c: int) -> list[int]:
        """Current tokens of chunk c, following the links (for tests and debugging)."""
        out, p = [], int(self.table.starts[c])
        while p >= 0:
            out.append(int(self.table.tokens[p]))
            p = int(self.next[p])
        return out

    def apply(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a safe batch of merges (first[k], second[k]) -> new_ids[k]; see ChunkEngine.apply.

        A wide batch is applied a group of merges at a time, each group at most GROUP_ENTRIES
        index entries (but one merge): the first rounds of BatchBPE touch a large share of the
        table, and their temporaries (several int64 per occurrence) would outgrow the engine. Any
        part of a safe batch is a safe batch, and its occurrences are disjoint from the others',
        so applying the groups in turn ends in the same table; the count changes add up (a pair
        made by one group and consumed by the next sums to zero and is left out)."""
        new_ids = np.asarray(new_ids, dtype=np.int64)
        self.settle()
        batch_keys = pack(first, second)
        spans = self._index.spans(batch_keys)  # searched once: a batch applied whole looks its entries up there
        sizes = self._index.entries_of(batch_keys, spans)
        limit = max(self.GROUP_ENTRIES, self.live_pairs // self.GROUP_SHARE)
        if int(sizes.sum()) <= limit:
            return self._merge_at(first, second, new_ids, spans)
        keys, deltas, lo = [], [], 0
        ends = np.cumsum(sizes)
        while lo < len(first):
            hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + limit, side="right")))
            part_keys, part_deltas = self._merge_at(first[lo:hi], second[lo:hi], new_ids[lo:hi], sweep_part=limit)
            keys.append(part_keys)
            deltas.append(part_deltas)
            lo = hi
        return aggregate(np.concatenate(keys), np.concatenate(deltas))

    def _merge_at(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray, spans: list | None = None,
                  sweep_part: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A safe batch's hits found and merged (spans: its spans in the index, if known); the count changes.
        With the kernels in one sweep (linked.find_and_apply), else find_hits, then apply_hits.
        sweep_part: with the kernels, candidates past this many are swept a slice at a time (_sweep_in_parts)."""
        if not self.jit:
            return self.apply_hits(*self.find_hits(first, second, spans), new_ids)
        self.settle()
        cand, which = self._index.lookup(pack(first, second), spans)
        first, second = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
        if sweep_part is not None and len(cand) > sweep_part:
            found = linked.candidates_in_order(self.records, cand, which, len(first))
            del cand, which
            return self._sweep_in_parts(found, first, second, new_ids, sweep_part)
        return self._kernels_done(*linked.find_and_apply(
            self.records, self.table.tokens, cand, which, first, second, new_ids, self.REMOVED, self.threads))

    def _sweep_in_parts(self, found: np.ndarray, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray,
                        part: int) -> tuple[np.ndarray, np.ndarray]:
        """One merge's candidates (found, in table order: a pair at more positions than a group holds)
        swept `part` at a time, each slice's count changes summed before the next, so the sweep's
        temporaries (several int64 a candidate) stay those of a group. Slices in table order merge
        what one sweep does: each candidate is checked as the sweep reaches it. A pair counted at a
        slice's end and again at the next's start (a b a b cut between its hits) sums to zero and is
        left out, as between groups (apply)."""
        keys, deltas = [], []
        for lo in range(0, len(found), part):
            part_keys, part_deltas, made, positions, n_hits = linked.sweep(
                self.records, self.table.tokens, found[lo:lo + part], first, second, new_ids, self.REMOVED,
                self.threads, check=True)
            self.live_pairs -= n_hits
            self._index_new_pairs(part_keys[made:], positions)
            part_keys, part_deltas = linked.sum_by_key(part_keys, part_deltas)
            keys.append(part_keys)
            deltas.append(part_deltas)
        return aggregate(np.concatenate(keys), np.concatenate(deltas))

    def find_hits(self, first: np.ndarray, second: np.ndarray, spans: list | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Where a safe batch merges: (positions of the first token, index of the merge in the batch).
        spans: the batch's spans in the index (PairIndex.spans), if the caller has them."""
        self.settle()
        tokens, nxt, prv = self.table.tokens, self.next, self.prev
        batch_keys = pack(first, second)

        # Candidate positions from the index; keep those that still hold their pair.
        cand, which = self._index.lookup(batch_keys, spans)
        if self.jit:
            return linked.find_hits(self.records, cand, which, np.asarray(first, dtype=np.int64),
                                            np.asarray(second, dtype=np.int64), self.threads)
        after = nxt[cand].astype(np.int64)
        live = after >= 0
        cand, which, after = cand[live], which[live], after[live]
        holds = pack(tokens[cand], tokens[after]) == batch_keys[which]
        cand, which = cand[holds], which[holds]
        # In a run x x x ... of a pair (x, x), occurrences follow each other through the links:
        # merge the 1st, 3rd, ... of each run, as a left-to-right merge does. Other pairs of a
        # safe batch never overlap, so all their occurrences merge.
        return runs_taken_left_to_right(cand, which, first[which] == second[which], prv)

    def exact_round(self, first: np.ndarray, second: np.ndarray, counts: np.ndarray, first_id: int,
                    rank_key: Callable[[int], tuple]) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
        """Exact batching: merge the longest prefix serial BPE would (see prefix_stop); (its length, changes)."""
        hits, which = self.find_hits(first, second)
        n = prefix_stop(*boundary_events(self, first, second, first_id, hits, which), first, second, counts, rank_key)
        keep = which < n
        return n, self.apply_hits(hits[keep], which[keep], np.arange(first_id, first_id + n, dtype=np.int64))

    def compact(self) -> None:
        """Write each chunk's current tokens to the front of its region and set lengths (at the end).

        A run of chunks of about SLICE positions at a time: a chunk's tokens only move within its
        own region, and the temporaries (several int64 per position) stay small next to the engine."""
        self.settle()
        t = self.table
        cuts = np.unique(np.searchsorted(t.starts, np.arange(0, int(t.starts[-1]), self.SLICE), side="right") - 1)
        for c0, c1 in zip(cuts.tolist(), [*cuts[1:].tolist(), t.n_chunks]):
            a, b = int(t.starts[c0]), int(t.starts[c1])
            live = self.next[a:b] != self.REMOVED
            chunk_of = np.repeat(np.arange(c1 - c0), np.diff(t.starts[c0:c1 + 1]))[live]
            lengths = np.bincount(chunk_of, minlength=c1 - c0).astype(np.int64)
            dest, _ = gather(t.tokens, t.starts[c0:c1], lengths)
            t.tokens[dest] = t.tokens[a:b][live]
            t.lengths[c0:c1] = lengths

    def _kernels_done(self, keys: np.ndarray, deltas: np.ndarray, made: int, positions: np.ndarray, n_hits: int
                      ) -> tuple[np.ndarray, np.ndarray]:
        """After the kernels merged n_hits: index the new pairs (keys from made on, at positions) and
        sum the count changes."""
        self.live_pairs -= n_hits
        if self.threads > 1 and len(positions) >= linked.TWO_THREADS_MIN:
            # The new pairs go to the index beside the sums and the coordinator's update; the next
            # lookup waits for them (settle).
            self._pending = Beside(self._index_new_pairs, keys[made:], positions)
        else:
            self._index_new_pairs(keys[made:], positions)
        return linked.sum_by_key(keys, deltas)

    def apply_hits(self, hits: np.ndarray, which: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Merge at the positions find_hits gave; returns the change in pair counts."""
        tokens, nxt, prv = self.table.tokens, self.next, self.prev
        new_ids = np.asarray(new_ids, dtype=np.int64)
        if len(hits) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if self.jit:
            found = hits.astype(np.int64) << linked.member_bits(self.records)
            found |= which
            none = np.zeros(0, dtype=np.int64)  # (unchecked: no pairs to check against)
            return self._kernels_done(*linked.sweep(self.records, tokens, found, none, none, new_ids,
                                                            self.REMOVED, self.threads, check=False))
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
        followed = beyond >= 0
        prv[beyond[followed]] = hits[followed]
        nxt[partners] = self.REMOVED

        # Pairs after the merge that involve a new token: they are all new, index them.
        # A left neighbour can be another hit (ab ab): its pair is already the hit's right pair.
        lefts = prv[hits].astype(np.int64)
        marked[hits] = True
        lone_lefts = lefts[(lefts >= 0) & ~marked[np.maximum(lefts, 0)]]
        marked[hits] = False
        after_pos = np.concatenate([lone_lefts, hits[followed]])
        after_keys, after_w = self._pairs_at(after_pos), self.weight[after_pos]
        self._index.add(after_keys, after_pos)
        self.live_pairs -= len(hits)  # each merge joins two tokens: one pair fewer in its chunk
        self._rebuild_index_if_stale()
        return aggregate(np.concatenate([before_keys, after_keys]), np.concatenate([-before_w, after_w]))

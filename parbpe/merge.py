"""The merge engine: applies batches of merges to a chunk table in place and reports pair-count changes.

Work per round is proportional to the chunks that hold a merged pair, not to the whole table: an
index maps every pair to the chunks it occurs in. A pair's occurrences are all created in the round
that creates its newer token, and only destroyed after, so the index is append-only: one block of
(pair, chunk) entries per round, merged log-structured so lookups search few blocks. Entries may
go stale (the pair left that chunk, or was merged away); they cost a look, never a wrong result.

The engine is what a merge worker runs on its slice of the table (see DESIGN.md, merge stage).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .batch import PairQueue, safe_batch, search_width
from .pairs import aggregate, gather, pack, pair_keys_and_weights, run_parity
from .table import ChunkTable


@dataclass
class _IndexBlock:
    keys: np.ndarray  # int64, sorted
    chunks: np.ndarray  # int64, chunk ids, sorted within each key

    def __len__(self) -> int:
        return len(self.keys)


@dataclass
class PairIndex:
    """pair key -> chunk ids, as a short list of sorted blocks (a log-structured merge of rounds)."""

    blocks: list[_IndexBlock] = field(default_factory=list)

    def add(self, keys: np.ndarray, chunks: np.ndarray) -> None:
        """Add (key, chunk) entries of pairs new to the index; fold small blocks together."""
        if len(keys):
            order = np.lexsort((chunks, keys))
            keys, chunks = keys[order], chunks[order]
            keep = np.ones(len(keys), dtype=bool)
            keep[1:] = (keys[1:] != keys[:-1]) | (chunks[1:] != chunks[:-1])
            self.blocks.append(_IndexBlock(keys[keep], chunks[keep]))
        while len(self.blocks) >= 2 and len(self.blocks[-2]) <= 2 * len(self.blocks[-1]):
            newer = self.blocks.pop()
            older = self.blocks.pop()
            merged_keys = np.concatenate([older.keys, newer.keys])
            merged_chunks = np.concatenate([older.chunks, newer.chunks])
            # Keys of different blocks are distinct, so a stable sort by key keeps chunks sorted.
            order = np.argsort(merged_keys, kind="stable")
            self.blocks.append(_IndexBlock(merged_keys[order], merged_chunks[order]))

    def chunks_with(self, keys: np.ndarray, n_chunks: int) -> np.ndarray:
        """Sorted unique ids of the chunks that (may) hold any of the given pair keys."""
        found = []
        for block in self.blocks:
            lo = np.searchsorted(block.keys, keys, side="left")
            hi = np.searchsorted(block.keys, keys, side="right")
            sizes = hi - lo
            if sizes.any():
                idx, _ = gather(block.chunks, lo, sizes)
                found.append(block.chunks[idx])
        if not found:
            return np.zeros(0, dtype=np.int64)
        mask = np.zeros(n_chunks, dtype=bool)
        for chunk_ids in found:
            mask[chunk_ids] = True
        return np.flatnonzero(mask)


class MergeEngine:
    """Owns a chunk table (or a worker's slice of one) and applies merge batches to it."""

    def __init__(self, table: ChunkTable, nonoverlap: bool = False) -> None:
        self.table = table
        self.nonoverlap = nonoverlap
        self.index = PairIndex()

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


@dataclass
class MergeResult:
    merges: list[tuple[int, int]]  # in rank order; merge k makes token first_id + k
    batch_sizes: list[int]
    stopped_early: bool  # no pair was left before the vocabulary was full


def learn_merges(
    table: ChunkTable,
    vocab: list[bytes],
    n_merges: int,
    *,
    max_batch_size: int = 0,
    cap_divisor: int = 2,
    nonoverlap: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> MergeResult:
    """Run merge rounds on the table until n_merges merges are made or no pair is left.

    `vocab` holds the bytes of every token that exists before merging (the 256 bytes, then the
    stop-list tokens); it is extended in place with the new tokens. Each round ranks the top pairs,
    keeps BatchBPE's safe batch of them, applies it to the table and updates the pair counts.
    """
    engine = MergeEngine(table, nonoverlap=nonoverlap)
    queue = PairQueue(*engine.initial_pair_counts(), vocab)
    merges: list[tuple[int, int]] = []
    batch_sizes: list[int] = []
    while len(merges) < n_merges:
        width = search_width(n_merges - len(merges), len(vocab), cap_divisor, max_batch_size)
        ranked, _ = queue.ranked(width)
        if len(ranked) == 0:
            break
        accepted = ranked[safe_batch(ranked)]
        first, second = accepted >> 32, accepted & 0xFFFFFFFF
        first_id = len(vocab)
        for a, b in zip(first.tolist(), second.tolist()):
            vocab.append(vocab[a] + vocab[b])
            queue.add_token(vocab[-1])
            merges.append((a, b))
        batch_sizes.append(len(accepted))
        new_ids = np.arange(first_id, first_id + len(accepted), dtype=np.int64)
        queue.update(*engine.apply(first, second, new_ids))
        if progress is not None:
            progress(len(merges), n_merges)
    return MergeResult(merges=merges, batch_sizes=batch_sizes, stopped_early=len(merges) < n_merges)

"""The run-length engine: chunks kept as runs of one token, for tables that runs shrink (hostile text).

A chunk of 50 MB of one letter is 50M table tokens: the linked engine's links, weights and index
alone take about 23 bytes a token, and its first merge of (a, a) touches every position. Kept as
runs (token, length), the same chunk is one run, and a round costs in proportion to the runs of the
chunks it touches. A run of L tokens x holds L - 1 overlapping pairs (x, x) (L // 2 counted
without overlap); merging (x, x) leaves L // 2 of xx, then L % 2 of x, as a left-to-right merge
does. Neighbouring runs hold one pair each. Runs are kept maximal (no two neighbours of one token),
so a chunk's runs are unique and the counts follow from them.

RunEngine offers the interface of ChunkEngine (engines.py): an index maps each pair to the chunks
that hold it, and a round recounts those chunks whole, here from their runs. The runs live in one
append-only log: a round writes the new runs of the chunks it touched at the end, and the log is
compacted once more than half of it is dead. learn_merges (coordinator.py) picks it when runs
shrink the table at least RUNS_FACTOR times (prefers_runs).
"""

from __future__ import annotations

import numpy as np

from .pair_index import PairIndex
from .pairs import aggregate, gather, pack
from .table import ChunkTable

RUNS_FACTOR = 4  # the run engine is used when the table has at most 1/RUNS_FACTOR as many runs as tokens
MIN_RUN_TOKENS = 1 << 16  # ... and at least this many tokens
SLICE = 1 << 22  # table tokens looked at a time when runs are found (bounded temporaries)


def run_starts(table: ChunkTable) -> np.ndarray:
    """Positions in table.tokens where a run of one token starts (a chunk's start starts one), found
    a slice of SLICE tokens at a time. The table must be as built: each chunk fills its slots."""
    t = table
    if not np.array_equal(t.lengths, np.diff(t.starts)):
        raise ValueError("runs are found in a table as built (each chunk filling its slots), not one being merged")
    n = int(t.starts[-1])
    chunk_start = np.zeros(n + 1, dtype=bool)
    chunk_start[t.starts] = True
    parts = []
    for lo in range(0, n, SLICE):
        hi = min(lo + SLICE, n)
        change = chunk_start[lo:hi].copy()
        if lo == 0:
            change[1:] |= t.tokens[1:hi] != t.tokens[:hi - 1]
        else:
            change |= t.tokens[lo:hi] != t.tokens[lo - 1:hi - 1]
        parts.append(np.flatnonzero(change) + lo)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def prefers_runs(table: ChunkTable) -> bool:
    """Whether runs shrink this table at least RUNS_FACTOR times (then RunEngine costs far less)."""
    tokens = int(table.starts[-1]) if len(table.starts) else 0
    if tokens < MIN_RUN_TOKENS or not np.array_equal(table.lengths, np.diff(table.starts)):
        return False
    # A token equal to the one before it (chunk boundaries ignored: the count is at most one too
    # many a chunk) is all that can keep it from starting a run: too few of them, and there are too
    # many runs, known in one comparison, far cheaper than run_starts on ordinary text.
    data = table.tokens[:tokens]
    repeats = sum(int(np.count_nonzero(data[lo + 1:hi + 1] == data[lo:hi]))
                  for lo, hi in ((lo, min(lo + SLICE, tokens - 1)) for lo in range(0, tokens - 1, SLICE)))
    if RUNS_FACTOR * (tokens - repeats) > tokens:
        return False
    return RUNS_FACTOR * len(run_starts(table)) <= tokens


def runs_per_chunk(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Runs of one byte in each chunk (chunk k is data[offsets[k]:offsets[k + 1]]; an empty chunk has
    none), a slice of SLICE bytes at a time: what run_starts finds in their table, before it exists."""
    # A chunk's runs are its bytes but those equal to the byte before them in the chunk: few in most
    # text, so they are the ones found and placed (placing every change was an order of magnitude slower).
    runs = np.diff(offsets).astype(np.int64)
    n = int(offsets[-1]) if len(offsets) else 0
    for lo in range(1, n, SLICE):
        hi = min(lo + SLICE, n)
        same = np.flatnonzero(data[lo:hi] == data[lo - 1:hi - 1]) + lo
        chunk = np.searchsorted(offsets, same, side="right") - 1
        inside = offsets[chunk] != same  # a chunk's first byte starts a run, whatever came before it
        runs -= np.bincount(chunk[inside], minlength=len(runs))
    return runs


def _runs_of(tokens: np.ndarray, seg: np.ndarray, reps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal runs of a ragged array of (token, repeat) slots: (tokens, lengths, segments)."""
    if len(tokens) == 0:
        return tokens, reps, seg
    start = np.ones(len(tokens), dtype=bool)
    start[1:] = (tokens[1:] != tokens[:-1]) | (seg[1:] != seg[:-1])
    at = np.flatnonzero(start)
    return tokens[at], np.add.reduceat(reps, at), seg[at]


def run_pairs(tokens: np.ndarray, reps: np.ndarray, seg: np.ndarray, seg_counts: np.ndarray,
              nonoverlap: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of ragged maximal runs: (keys, weights, segment of each). A run of L tokens x holds
    (x, x) L - 1 times (L // 2 with nonoverlap), and each two neighbouring runs one pair."""
    inside = np.flatnonzero(reps >= 2)
    times = reps[inside] // 2 if nonoverlap else reps[inside] - 1
    between = np.flatnonzero(seg[:-1] == seg[1:]) if len(seg) > 1 else np.zeros(0, dtype=np.int64)
    keys = np.concatenate([pack(tokens[inside], tokens[inside]), pack(tokens[between], tokens[between + 1])])
    weights = np.concatenate([seg_counts[seg[inside]] * times, seg_counts[seg[between]]])
    return keys, weights, np.concatenate([seg[inside], seg[between]])


class RunEngine:
    """Applies merge batches to chunks kept as runs of one token (exact for both pair counts)."""

    def __init__(self, table: ChunkTable, nonoverlap: bool = False) -> None:
        self.table = table
        self.nonoverlap = nonoverlap
        t = table
        small = t.n_chunks < 2**31
        self.index = PairIndex(value_dtype=np.int32 if small else np.int64,
                               packed=small and t.tokens.dtype == np.uint16)
        self.counts = t.counts
        rep_dtype = np.int32 if len(t.lengths) == 0 or int(t.lengths.max()) < 2**31 else np.int64
        at = run_starts(t)
        self.tok = t.tokens[at].astype(np.int32)
        self.rep = np.diff(np.append(at, t.starts[-1])).astype(rep_dtype)
        seg = np.searchsorted(t.starts, at, side="right") - 1
        del at
        self.run_len = np.bincount(seg, minlength=t.n_chunks).astype(np.int64)  # runs of each chunk
        del seg
        self.run_start = np.cumsum(self.run_len) - self.run_len
        self.used = len(self.tok)  # the log's end; runs past it are free
        self.dead = 0  # runs in the log that no chunk points to any more

    @property
    def runs(self) -> int:
        """Live runs of the table."""
        return self.used - self.dead

    def chunk_tokens(self, c: int) -> list[int]:
        """Current tokens of chunk c (for tests and debugging)."""
        lo = int(self.run_start[c])
        hi = lo + int(self.run_len[c])
        return np.repeat(self.tok[lo:hi], self.rep[lo:hi]).tolist()

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Count every pair of the table once and index it by chunk; returns (sorted keys, counts)."""
        seg = np.repeat(np.arange(self.table.n_chunks, dtype=np.int64), self.run_len)
        keys, weights, segs = run_pairs(self.tok[:self.used], self.rep[:self.used], seg, self.counts, self.nonoverlap)
        self.index.add(keys, segs)
        return aggregate(keys, weights)

    def apply(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a safe batch of merges (first[k], second[k]) -> new_ids[k]; see ChunkEngine.apply.

        In a safe batch a token that is the first of a pair is the second of none, and a pair
        (x, x) shares its token with no other pair. So a run either merges with itself (x, x),
        or gives its last token to a merge with the next run and/or its first token to one with
        the previous run (never both: its token would be first and second). Each run becomes at
        most two runs, which are then joined with equal neighbours to stay maximal.
        """
        batch_keys = pack(first, second)
        order = np.argsort(batch_keys)
        batch_keys, new_ids = batch_keys[order], np.asarray(new_ids, dtype=np.int64)[order]
        chunk_ids = self.index.chunks_with(batch_keys, self.table.n_chunks)
        if len(chunk_ids) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        idx, seg = gather(self.tok, self.run_start[chunk_ids], self.run_len[chunk_ids])
        tok, rep = self.tok[idx].astype(np.int64), self.rep[idx].astype(np.int64)
        del idx
        counts = self.counts[chunk_ids]
        before_keys, before_w, _ = run_pairs(tok, rep, seg, counts, self.nonoverlap)

        def merged(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            at = np.minimum(np.searchsorted(batch_keys, keys), len(batch_keys) - 1)
            return batch_keys[at] == keys, new_ids[at]

        is_self, self_new = merged(pack(tok, tok))
        gives_last = np.zeros(len(tok), dtype=bool)
        last_new = np.zeros(len(tok), dtype=np.int64)
        if len(tok) > 1:
            hit, made = merged(pack(tok[:-1], tok[1:]))
            hit &= seg[:-1] == seg[1:]
            gives_last[:-1], last_new[:-1] = hit, made
        gives_first = np.zeros(len(tok), dtype=bool)
        gives_first[1:] = gives_last[:-1]
        # Slot A: what stays of the run (or its merged pairs); slot B: the merged token after it
        # (or, for (x, x), the odd x left at the end).
        slot_tok = np.empty((len(tok), 2), dtype=np.int64)
        slot_rep = np.empty((len(tok), 2), dtype=np.int64)
        slot_tok[:, 0] = np.where(is_self, self_new, tok)
        slot_rep[:, 0] = np.where(is_self, rep // 2, rep - gives_last - gives_first)
        slot_tok[:, 1] = np.where(is_self, tok, last_new)
        slot_rep[:, 1] = np.where(is_self, rep % 2, gives_last)
        del tok, rep, is_self, self_new, gives_last, gives_first, last_new
        slot_tok, slot_rep = slot_tok.ravel(), slot_rep.ravel()
        slot_seg = np.repeat(seg, 2)
        kept = slot_rep > 0
        tok, rep, new_seg = _runs_of(slot_tok[kept], slot_seg[kept], slot_rep[kept])
        del slot_tok, slot_rep, slot_seg, kept

        after_keys, after_w, after_seg = run_pairs(tok, rep, new_seg, counts, self.nonoverlap)
        lowest_new = int(new_ids.min())
        fresh = (after_keys >> 32 >= lowest_new) | (after_keys & 0xFFFFFFFF >= lowest_new)
        self.index.add(after_keys[fresh], chunk_ids[after_seg[fresh]])
        self._store(chunk_ids, tok, rep, np.bincount(new_seg, minlength=len(chunk_ids)).astype(np.int64))
        return aggregate(np.concatenate([before_keys, after_keys]), np.concatenate([-before_w, after_w]))

    def _store(self, chunk_ids: np.ndarray, tok: np.ndarray, rep: np.ndarray, lengths: np.ndarray) -> None:
        """Write the chunks' new runs at the end of the log (compacting or growing it first if needed)."""
        self.dead += int(self.run_len[chunk_ids].sum())
        self.run_len[chunk_ids] = 0  # their old runs are dead: a compaction leaves them out
        if self.dead > self.used // 2:
            self._compact()
        if self.used + len(tok) > len(self.tok):
            size = max(2 * len(self.tok), self.used + len(tok))
            self.tok = np.resize(self.tok, size)
            self.rep = np.resize(self.rep, size)
        starts = self.used + np.cumsum(lengths) - lengths
        self.tok[self.used:self.used + len(tok)] = tok
        self.rep[self.used:self.used + len(tok)] = rep
        self.run_start[chunk_ids] = starts
        self.run_len[chunk_ids] = lengths
        self.used += len(tok)

    def _compact(self) -> None:
        """Move every chunk's live runs to the front of the log, in chunk order."""
        idx, _ = gather(self.tok, self.run_start, self.run_len)
        self.tok[:len(idx)] = self.tok[idx]
        self.rep[:len(idx)] = self.rep[idx]
        self.run_start = np.cumsum(self.run_len) - self.run_len
        self.used, self.dead = len(idx), 0

"""PathPiece scores: what each token saves the corpus, measured on its fewest-token segmentation.

Each chunk is segmented into the fewest tokens (`segment.shortest_tokens`: ties go to the longest last
token). An occurrence of token t on bytes [i, j) of a chunk costs, if that one edge i -> j of the
chunk's path graph could not be used, the fewest tokens of a path that avoids it minus the chunk's
count. A path avoids the edge exactly when it stops at a boundary k strictly inside (f[k] + b[k]) or
jumps over [i, j) with another vocabulary window [s, e), s <= i, e >= j (f[s] + 1 + b[e]); f and b are
the forward and backward path lengths. A token's score is the count-weighted sum over its occurrences:
the tokens the corpus would lose least without them are dropped first (PathPieceL).

Chunks go in padded batches as in `tokenizer/segment.py`: every array is (chunks x columns x token
lengths) at most, and the loops run over columns and token lengths, vectorized across chunks.
KernelScorer computes the same with the kernels of kernels/pathpiece.py, over the flat chunk table.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..kernels.pathpiece import score_kernel, window_kernel
from ..tokenizer.segment import VocabIndex, _matrix, forward_lengths, shortest_backtrack
from ..tokenizer.tables import Trie

_INF = np.iinfo(np.int32).max // 2  # no path (segment.forward_lengths uses the same bound)
IRREPLACEABLE = np.iinfo(np.int64).max
"""Increase (and score) of an occurrence that no other path can replace: only a single byte with no
longer window over it. Such a token sorts last; callers never drop single bytes anyway."""
DEFAULT_CELLS = 1 << 21  # padded cells (chunks x width x longest token) of a batch: 16 MB an int64 array


def backward_lengths(win: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """b[c, i]: the fewest tokens covering bytes i.. of chunk c to its end (the mirror of
    `forward_lengths`; no path past a chunk's end). Column loop, vectorized over chunks."""
    n, width, max_len = win.shape
    dist = np.full((n, width + 1), _INF, dtype=np.int64)
    dist[np.arange(n), lengths] = 0
    for start in range(width - 1, -1, -1):
        best = dist[:, start]
        for length in range(1, min(max_len, width - start) + 1):
            ok = win[:, start, length - 1] >= 0
            best = np.where(ok, np.minimum(best, dist[:, start + length] + 1), best)
        dist[:, start] = best
    return dist


def chunk_batches(lengths: np.ndarray, max_len: int, cells: int = DEFAULT_CELLS) -> list[np.ndarray]:
    """Indices of the non-empty chunks in batches by length, each batch's padded matrix
    (chunks x longest chunk x max_len) at most `cells` (a chunk too long for it goes alone)."""
    order = np.argsort(lengths, kind="stable")
    order = order[lengths[order] > 0]
    per_chunk = max(max_len, 1)
    batches = []
    start = 0
    while start < len(order):
        guess = min(start + max(cells // (int(lengths[order[start]]) * per_chunk), 1), len(order))
        width = int(lengths[order[guess - 1]])  # sorted: no chunk up to the guess is longer
        batch = order[start : start + max(cells // (width * per_chunk), 1)]
        batches.append(batch)
        start += len(batch)
    return batches


def _best_inside(f: np.ndarray, b: np.ndarray, c: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per occurrence [i, j) of chunk c: the fewest tokens of a path stopping strictly inside it."""
    through = f + b
    width = f.shape[1] - 1
    best = np.full(len(c), _INF, dtype=np.int64)
    for step in range(1, int((j - i).max(initial=1))):
        k = i + step
        inside = k < j
        best = np.where(inside, np.minimum(best, through[c, np.minimum(k, width)]), best)
    return best


def _best_over(
    win: np.ndarray, f: np.ndarray, b: np.ndarray, c: np.ndarray, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """Per occurrence [i, j) of chunk c: the fewest tokens of a path that jumps over it with another
    vocabulary window [s, e), s <= i, e >= j."""
    n, width, max_len = win.shape
    after = np.concatenate([b, np.full((n, max_len), _INF, dtype=np.int64)], axis=1)
    via = np.full((n, width, max_len + 1), _INF, dtype=np.int64)  # [c, s, l - 1]: through window [s, s + l)
    for length in range(1, max_len + 1):
        through = f[:, :width] + 1 + after[:, length : length + width]
        via[:, :, length - 1] = np.where(win[:, :, length - 1] >= 0, through, _INF)
    at_least = np.minimum.accumulate(via[:, :, ::-1], axis=2)[:, :, ::-1]  # [c, s, m - 1]: windows of length >= m
    best = np.full(len(c), _INF, dtype=np.int64)
    for back in range(max_len):  # s = i - back; the window must reach j, and differ from [i, j) when back = 0
        s = i - back
        shortest_needed = j - s + (back == 0)
        column = np.minimum(shortest_needed - 1, max_len)  # column max_len is all _INF: no such window
        value = at_least[c, np.maximum(s, 0), column]
        best = np.where(s >= 0, np.minimum(best, value), best)
    return best


def occurrence_increases(index: VocabIndex, chunks: Sequence[bytes]) -> tuple[np.ndarray, ...]:
    """(chunk, token, start, end, increase), one entry per token of each chunk's fewest-token
    segmentation: increase is how many more tokens the chunk needs if that one occurrence (the edge
    start -> end) cannot be used, IRREPLACEABLE when no path avoids it. All chunks are one batch."""
    if not chunks or not any(chunks):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty, empty
    rows, lengths = _matrix(chunks)
    win = index.window_ids(rows, lengths)
    f = forward_lengths(win, lengths)
    owner, token, start = shortest_backtrack(win, f, lengths)
    end = start + index.token_lengths[token]
    b = backward_lengths(win, lengths)
    best = np.minimum(_best_inside(f, b, owner, start, end), _best_over(win, f, b, owner, start, end))
    increase = np.where(best >= _INF, IRREPLACEABLE, best - f[owner, lengths[owner]])
    return owner, token, start, end, increase


def token_scores(
    index: VocabIndex,
    chunks: Sequence[bytes],
    counts: Sequence[int] | np.ndarray,
    n_tokens: int,
    cells: int = DEFAULT_CELLS,
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, usage), int64 per token id: score = the count-weighted sum of the increases of the
    token's occurrences (IRREPLACEABLE if any occurrence has no alternative), usage = the
    count-weighted number of its occurrences in the fewest-token segmentations."""
    counts = np.asarray(counts, dtype=np.int64)
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    scores = np.zeros(n_tokens, dtype=np.int64)
    usage = np.zeros(n_tokens, dtype=np.int64)
    irreplaceable = np.zeros(n_tokens, dtype=bool)
    for batch in chunk_batches(lengths, index.max_len, cells):
        owner, token, _, _, increase = occurrence_increases(index, [chunks[k] for k in batch.tolist()])
        weight = counts[batch[owner]]
        lost = increase == IRREPLACEABLE
        irreplaceable[token[lost]] = True
        np.add.at(scores, token, np.where(lost, 0, increase * weight))
        np.add.at(usage, token, weight)
    scores[irreplaceable] = IRREPLACEABLE
    return scores, usage


def drop_schedule(current: int, target: int, share: float = 0.1) -> int:
    """How many tokens an iteration drops: `share` of the current multi-byte tokens (rounded down, at
    least 1), but never so many that the vocabulary falls below `target`; 0 once it is there. Scores
    change as tokens go, so small steps follow them more closely and large ones take fewer iterations."""
    if not 0 < share <= 1:
        raise ValueError(f"share={share} must be in (0, 1]: the part of the multi-byte tokens dropped per iteration")
    step = max(int(share * (current - 256)), 1)
    return max(min(step, current - target), 0)


def prune_step(
    tokens: Sequence[bytes],
    scores: np.ndarray,
    usage: np.ndarray,
    n_drop: int,
    keep: frozenset[int] = frozenset(),
) -> list[int]:
    """The ids of the n_drop tokens to drop: lowest score first; ties go to lower usage, then the
    longer token, then the smaller bytes (one total order, so the result never depends on ids).
    Single bytes and ids in keep are never dropped."""
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    candidates = np.flatnonzero(lengths > 1)
    if keep:
        candidates = candidates[~np.isin(candidates, np.fromiter(keep, dtype=np.int64, count=len(keep)))]
    if 0 < n_drop < len(candidates):  # only those scoring at most the n_drop-th lowest score can be among them
        threshold = np.partition(scores[candidates], n_drop - 1)[n_drop - 1]
        candidates = candidates[scores[candidates] <= threshold]
    score_of, usage_of = scores.tolist(), usage.tolist()
    ranked = sorted(candidates.tolist(), key=lambda k: (score_of[k], usage_of[k], -len(tokens[k]), tokens[k]))
    return ranked[:n_drop]


ROOM = 4  # windows a byte the first arrays have room for (realmix, 262,144 tokens: 2.7; more: they grow)


class KernelScorer:
    """score.token_scores of one chunk table by the kernels: scores(tokens) per iteration. The windows
    of the first vocabulary scored are kept; a later one made of its tokens is scored from them, any
    other has its windows found again. The table: data[offsets[c]:offsets[c + 1]] seen counts[c] times."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> None:
        offsets = np.asarray(offsets, dtype=np.int64)
        lo = int(offsets[0]) if len(offsets) else 0
        self.offsets = offsets - lo
        self.data = np.ascontiguousarray(data[lo:lo + int(self.offsets[-1])] if len(offsets) else data[:0],
                                         dtype=np.uint8)
        self.counts = np.ascontiguousarray(counts, dtype=np.int64)
        self.longest = int(np.diff(self.offsets).max(initial=0))
        self._ids: dict[bytes, int] = {}  # the tokens whose windows are kept, by their id there
        self._windows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # n_win, win_len, win_id

    def scores(self, tokens: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(scores, usage), int64 per token id, as score.token_scores(VocabIndex(tokens), chunks,
        counts, len(tokens)). tokens: checked by the caller (segment.check_vocabulary)."""
        n = len(tokens)
        scores = np.zeros(n, dtype=np.int64)
        usage = np.zeros(n, dtype=np.int64)
        lost = np.zeros(n, dtype=np.uint8)
        if not len(self.data):
            return scores, usage
        current = self._current(tokens)
        n_win, win_len, win_id = self._windows
        score_kernel(self.offsets, self.counts, n_win, win_len, win_id, current, max(map(len, tokens)), scores,
                     usage, lost, self.longest)
        scores[lost.view(bool)] = IRREPLACEABLE
        return scores, usage

    def _current(self, tokens: Sequence[bytes]) -> np.ndarray:
        """The map from the kept windows' token ids to the ids in tokens (-1: not there); the windows
        found for tokens first where some token of theirs has none kept."""
        ids = self._ids
        if self._windows is None or not all(t in ids for t in tokens):
            self._find_windows(tokens)
            return np.arange(len(tokens), dtype=np.int64)
        current = np.full(len(ids), -1, dtype=np.int64)
        current[np.fromiter((ids[t] for t in tokens), dtype=np.int64, count=len(tokens))] = np.arange(len(tokens))
        return current

    def _find_windows(self, tokens: Sequence[bytes]) -> None:
        """Room for ROOM windows a byte: zeroed pages that are never written take no memory."""
        self._windows = None
        trie = Trie.of(tokens, np.arange(len(tokens), dtype=np.int64))
        n_win = np.zeros(len(self.data), dtype=np.uint8)
        win_len = np.zeros(ROOM * len(self.data) + 16 * self.longest, dtype=np.uint8)
        win_id = np.zeros(len(win_len), dtype=np.int32)
        c, filled = 0, 0
        while True:
            c, filled = window_kernel(self.data, self.offsets, c, trie.first, trie.second, trie.edges.slots,
                                      trie.edges.bits, trie.token, n_win, win_len, win_id, filled)
            if c == len(self.offsets) - 1:
                break
            win_len = np.concatenate([win_len, np.zeros(len(win_len), dtype=np.uint8)])  # twice the room
            win_id = np.concatenate([win_id, np.zeros(len(win_id), dtype=np.int32)])
        self._windows = n_win, win_len[:filled], win_id[:filled]
        self._ids = {t: k for k, t in enumerate(tokens)}

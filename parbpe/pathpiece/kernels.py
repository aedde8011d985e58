"""numba kernel of PathPiece's scoring pass over a flat chunk table (bytes, offsets, counts).

It computes what score.token_scores computes (the test of twins compares them), a chunk at a time
with scratch arrays the size of the longest chunk: the vocabulary's windows from every start are
found by walking the trie of tokenizer/kernels.py (its dense first two levels and hashed deeper
edges, the lookup shared with segmentation); then the forward and backward path lengths, the
fewest-token path (ties: the longest last token, as segment.py's backtrack), and for each of its
occurrences [i, j) the fewest tokens of a path that stops strictly inside it or jumps over it with
another window [s, e), s <= i, e >= j. Plain loops only: the kernel compiles in about a second.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..jit import kernel
from ..tokenizer.kernels import Trie, _slot_of
from .score import IRREPLACEABLE

_INF = np.iinfo(np.int32).max // 2  # no path (score.py and segment.py use the same bound)


@kernel(twin="parbpe.pathpiece.score:token_scores")
def score_kernel(data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, first: np.ndarray,
                 second: np.ndarray, edges: np.ndarray, bits: int, node_token: np.ndarray, max_len: int,
                 scores: np.ndarray, usage: np.ndarray, lost: np.ndarray, longest: int) -> None:
    """Adds to scores[t] the count-weighted increases of token t's occurrences in the fewest-token
    segmentations of the chunks, to usage[t] their count-weighted number, and sets lost[t] = 1 where
    an occurrence has no alternative path (its increase is not added). max_len: the longest token."""
    mask = (1 << bits) - 1
    n_win = np.empty(longest + 1, dtype=np.int64)  # windows starting at s: n_win[s], ends and ids below
    win_end = np.empty(longest * max_len + 1, dtype=np.int64)  # [s * max_len + k]: ends ascending
    win_id = np.empty(longest * max_len + 1, dtype=np.int64)
    f = np.empty(longest + 1, dtype=np.int64)  # fewest tokens to reach each end
    b = np.empty(longest + 1, dtype=np.int64)  # fewest tokens from each start to the chunk's end
    last = np.empty(longest + 1, dtype=np.int64)  # the start of the last token of the path to each end
    last_id = np.empty(longest + 1, dtype=np.int64)
    for c in range(len(offsets) - 1):
        a = offsets[c]
        n = offsets[c + 1] - a
        if n == 0:
            continue
        w = counts[c]
        f[0] = 0
        for e in range(1, n + 1):
            f[e] = _INF
        for s in range(n):  # the windows from s, found by walking the trie; forward lengths as they come
            k = 0
            node = first[data[a + s]]
            e = s + 1  # node spells data[a + s:a + e]
            while True:
                t = node_token[node]
                if t >= 0:
                    win_end[s * max_len + k] = e
                    win_id[s * max_len + k] = t
                    k += 1
                    if f[s] + 1 < f[e]:  # the first start reaching e with the fewest: the longest last token
                        f[e] = f[s] + 1
                        last[e] = s
                        last_id[e] = t
                if e == n or e - s == max_len:
                    break
                if e == s + 1:
                    node = second[data[a + s] * 256 + data[a + e]]
                else:
                    key = node * 256 + data[a + e]
                    slot = _slot_of(edges, key, bits, mask)
                    node = edges[slot, 1] if edges[slot, 0] == key else -1
                if node < 0:
                    break
                e += 1
            n_win[s] = k
        b[n] = 0
        for s in range(n - 1, -1, -1):
            best = _INF
            for k in range(n_win[s]):
                through = b[win_end[s * max_len + k]] + 1
                if through < best:
                    best = through
            b[s] = best
        j = n
        while j > 0:  # the path's occurrences [i, j), last first
            i = last[j]
            t = last_id[j]
            best = _INF
            for k in range(i + 1, j):  # a path stopping inside
                through = f[k] + b[k]
                if through < best:
                    best = through
            low = i - max_len + 1 if i >= max_len - 1 else 0
            for s in range(low, i + 1):  # a path over it with another window [s, e), e >= j
                for k in range(n_win[s]):
                    e = win_end[s * max_len + k]
                    if e >= j and (s < i or e > j):
                        through = f[s] + 1 + b[e]
                        if through < best:
                            best = through
            usage[t] += w
            if best >= _INF:
                lost[t] = 1
            else:
                scores[t] += (best - f[n]) * w
            j = i


def kernel_scores(tokens: Sequence[bytes], data: np.ndarray, offsets: np.ndarray, counts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """score.token_scores(VocabIndex(tokens), chunks, counts, len(tokens)) of the chunks data[offsets[c]:
    offsets[c + 1]] by the kernel: (scores, usage), int64 per token id. tokens: checked by the caller
    (segment.check_vocabulary: every single byte among them, none repeated, none over 16 bytes)."""
    n = len(tokens)
    scores = np.zeros(n, dtype=np.int64)
    usage = np.zeros(n, dtype=np.int64)
    lost = np.zeros(n, dtype=np.uint8)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    lo = int(offsets[0]) if len(offsets) else 0
    if len(offsets) < 2 or int(offsets[-1]) == lo:
        return scores, usage
    data = np.ascontiguousarray(data[lo:int(offsets[-1])], dtype=np.uint8)
    offsets = offsets - lo if lo else offsets
    trie = Trie.of(tokens, np.arange(n, dtype=np.int64))
    max_len = max(map(len, tokens))
    score_kernel(data, offsets, np.ascontiguousarray(counts, dtype=np.int64), trie.first, trie.second,
                 trie.edges.slots, trie.edges.bits, trie.token, max_len, scores, usage, lost,
                 int(np.diff(offsets).max()))
    scores[lost.view(bool)] = IRREPLACEABLE
    return scores, usage

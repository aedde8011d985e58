"""PathPiece's scoring pass over a flat chunk table (bytes, offsets, counts): pathpiece/score.py's
KernelScorer calls them; score.token_scores, the numpy reference, computes the same.

The vocabulary's windows (every token occurrence at every byte position) are found once by walking
the trie of tokenizer/tables.py (its dense first two levels and hashed deeper edges: kernels/segment.py's
lookup) from every position: `window_kernel`. PathPieceL only drops tokens, so a later iteration's
windows are those of the first whose token is still there: `score_kernel` reads them through a map
from the first vocabulary's ids to the current ones, with no lookup. Then per chunk, with scratch
arrays the size of the longest chunk: the forward and backward path lengths, the fewest-token path
(ties: the longest last token, as segment.py's backtrack), and for each of its occurrences [i, j)
the fewest tokens of a path that stops strictly inside it or jumps over it with another window
[s, e), s <= i, e >= j. Plain loops only (no sorts, slice copies or fancy indexing), which keeps
numba's compile of a first run short.
"""

from __future__ import annotations

import numpy as np

from ..jit import kernel
from .segment import next_node

_INF = np.iinfo(np.int32).max // 2  # no path (score.py and segment.py use the same bound)


@kernel(twin="parbpe.pathpiece.score:token_scores")
def window_kernel(data: np.ndarray, offsets: np.ndarray, c0: int, first: np.ndarray, second: np.ndarray,
                  edges: np.ndarray, bits: int, node_token: np.ndarray, n_win: np.ndarray, win_len: np.ndarray,
                  win_id: np.ndarray, filled: int) -> tuple[int, int]:
    """From chunk c0 on, the windows at every byte position p: n_win[p] of them, their lengths and token
    ids appended to win_len and win_id from index `filled`, shortest first. Stops before a chunk whose
    windows might not fit the arrays; returns (the next chunk, the windows filled)."""
    mask = (1 << bits) - 1
    room = len(win_len)
    c = c0
    while c < len(offsets) - 1:
        a = offsets[c]
        n = offsets[c + 1] - a
        if filled + n * 16 > room:  # at most 16 windows a position
            break
        for s in range(n):
            k = 0
            node = first[data[a + s]]
            e = s + 1  # node spells data[a + s:a + e]
            while True:
                t = node_token[node]
                if t >= 0:
                    win_len[filled] = e - s
                    win_id[filled] = t
                    filled += 1
                    k += 1
                if e == n:
                    break
                node = next_node(node, data, a, s, e, second, edges, bits, mask)
                if node < 0:
                    break
                e += 1
            n_win[a + s] = k
        c += 1
    return c, filled


@kernel(twin="parbpe.pathpiece.score:token_scores")
def score_kernel(offsets: np.ndarray, counts: np.ndarray, n_win: np.ndarray, win_len: np.ndarray,
                 win_id: np.ndarray, current: np.ndarray, max_len: int, scores: np.ndarray, usage: np.ndarray,
                 lost: np.ndarray, longest: int) -> None:
    """Adds to scores[t] the count-weighted increases of token t's occurrences in the fewest-token
    segmentations of the chunks, to usage[t] their count-weighted number, and sets lost[t] = 1 where
    an occurrence has no alternative path (its increase is not added). The windows are window_kernel's,
    their ids mapped by current (-1: the token is gone); max_len: the longest token."""
    here = np.empty(longest + 1, dtype=np.int64)  # windows starting at s: here[s], ends and ids below
    ends = np.empty(longest * max_len + 1, dtype=np.int64)  # [s * max_len + k]: ends ascending
    ids = np.empty(longest * max_len + 1, dtype=np.int64)
    f = np.empty(longest + 1, dtype=np.int64)  # fewest tokens to reach each end
    b = np.empty(longest + 1, dtype=np.int64)  # fewest tokens from each start to the chunk's end
    last = np.empty(longest + 1, dtype=np.int64)  # the start of the last token of the path to each end
    last_id = np.empty(longest + 1, dtype=np.int64)
    q = 0  # the next window in the table
    for c in range(len(offsets) - 1):
        a = offsets[c]
        n = offsets[c + 1] - a
        w = counts[c]
        f[0] = 0
        for e in range(1, n + 1):
            f[e] = _INF
        for s in range(n):  # the windows of the tokens left, from s; forward lengths as they come
            k = 0
            for _ in range(n_win[a + s]):
                t = current[win_id[q]]
                e = s + win_len[q]
                q += 1
                if t < 0:
                    continue
                ends[s * max_len + k] = e
                ids[s * max_len + k] = t
                k += 1
                if f[s] + 1 < f[e]:  # the first start reaching e with the fewest: the longest last token
                    f[e] = f[s] + 1
                    last[e] = s
                    last_id[e] = t
            here[s] = k
        b[n] = 0
        for s in range(n - 1, -1, -1):
            best = _INF
            for k in range(here[s]):
                through = b[ends[s * max_len + k]] + 1
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
            for s in range(low, i + 1):  # a path over it with another window [s, e), e >= j: longest first
                for k in range(here[s] - 1, -1, -1):
                    e = ends[s * max_len + k]
                    if e < j:
                        break
                    if s < i or e > j:
                        through = f[s] + 1 + b[e]
                        if through < best:
                            best = through
            usage[t] += w
            if best >= _INF:
                lost[t] = 1
            else:
                scores[t] += (best - f[n]) * w
            j = i

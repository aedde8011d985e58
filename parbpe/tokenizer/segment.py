"""Segmentation of byte chunks by a vocabulary alone: greedy longest prefix and shortest path (PathPiece).

Both work on many chunks at once: the chunks are laid out as rows of a padded byte matrix and every
(position, length) window is looked up in the vocabulary with one sorted search per token length, so
the per-position loop runs over columns (at most the longest chunk), vectorized across chunks with numpy.
Shortest keeps the forward path lengths (fewest tokens to reach each position), which vocabulary
construction by PathPiece needs; among segmentations of equal count it takes the longest last token,
then recursively the longest last token of the rest (a deterministic rule, checked by tests).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_TOKEN_BYTES = 16
_INF = np.iinfo(np.int32).max // 2


class VocabIndex:
    """Byte-string vocabulary indexed for window lookups: per token length a sorted void array and its ids."""

    def __init__(self, tokens: Sequence[bytes], max_len: int = MAX_TOKEN_BYTES) -> None:
        distinct = set(tokens)
        if len(distinct) != len(tokens):
            raise ValueError("vocabulary has repeated tokens; give each byte string once")
        missing = [b for b in range(256) if bytes([b]) not in distinct]
        if missing:
            raise ValueError(f"vocabulary lacks single bytes {missing[:8]}...; every byte 0..255 must be a token")
        long = [t for t in tokens if len(t) > max_len or not t]
        if long:
            raise ValueError(f"token {long[0]!r} is empty or longer than {max_len} bytes; drop it or raise the limit")
        self.max_len = max(len(t) for t in tokens)
        self.tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        by_length: dict[int, list[int]] = {}
        for i, t in enumerate(tokens):
            by_length.setdefault(len(t), []).append(i)
        for length in sorted(by_length):  # in increasing length: window_ids stops at the batch's width
            ids = np.array(by_length[length], dtype=np.int64)
            keys = _keys(np.frombuffer(b"".join(tokens[i] for i in ids), dtype=np.uint8).reshape(-1, length))
            order = np.argsort(keys, kind="stable")
            self.tables[length] = (keys[order], ids[order])

    def window_ids(self, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """ids[c, i, l-1]: the token of rows[c, i:i+l] if it is in the vocabulary and inside the chunk, else -1
        (l up to the vocabulary's longest token or the batch's longest chunk, whichever is shorter)."""
        n, width = rows.shape
        longest = min(self.max_len, width)  # no window is longer than the longest chunk of the batch
        out = np.full((n, width, longest), -1, dtype=np.int64)
        padded = np.concatenate([rows, np.zeros((n, longest), dtype=np.uint8)], axis=1)
        starts = np.arange(width)
        for length, (keys, ids) in self.tables.items():
            if length > longest:
                break
            inside = starts[None, :] + length <= lengths[:, None]  # only windows inside their chunk are looked up
            c, i = np.nonzero(inside)
            if not len(c):
                continue
            flat = _keys(np.lib.stride_tricks.sliding_window_view(padded, length, axis=1)[c, i])
            pos = np.minimum(np.searchsorted(keys, flat), len(keys) - 1)
            hit = keys[pos] == flat
            out[c[hit], i[hit], length - 1] = ids[pos[hit]]
        return out


def _keys(windows: np.ndarray) -> np.ndarray:
    """Sortable keys of byte windows (rows of equal length): big-endian uint64 up to 8 bytes (fast to
    search), else void values of the bytes."""
    length = windows.shape[1]
    if length <= 8:
        key = np.zeros(len(windows), dtype=np.uint64)
        for k in range(length):
            key = (key << np.uint64(8)) | windows[:, k].astype(np.uint64)
        return key
    return np.ascontiguousarray(windows).reshape(-1).view(f"V{length}")


def _matrix(chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Chunks as rows of a zero-padded uint8 matrix and their lengths."""
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    width = int(lengths.max()) if len(chunks) else 0
    rows = np.zeros((len(chunks), width), dtype=np.uint8)
    flat = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    within = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    rows[np.repeat(np.arange(len(chunks)), lengths), within] = flat
    return rows, lengths


def forward_lengths(win: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """dist[c, i]: the fewest tokens covering the first i bytes of chunk c (column loop, vectorized over chunks)."""
    n, width, max_len = win.shape
    dist = np.full((n, width + 1), _INF, dtype=np.int64)
    dist[:, 0] = 0
    for end in range(1, width + 1):
        best = dist[:, end]
        for length in range(1, min(max_len, end) + 1):
            ok = win[:, end - length, length - 1] >= 0
            best = np.where(ok, np.minimum(best, dist[:, end - length] + 1), best)
        dist[:, end] = best
    return dist


def shortest(index: VocabIndex, chunks: Sequence[bytes]) -> list[list[int]]:
    """The fewest-token segmentation of each chunk; ties go to the longest last token, recursively."""
    return _as_lists(len(chunks), *shortest_tokens(index, chunks))


def greedy(index: VocabIndex, chunks: Sequence[bytes]) -> list[list[int]]:
    """Left to right, the longest vocabulary token that prefixes the rest of each chunk (WordPiece's rule)."""
    return _as_lists(len(chunks), *greedy_tokens(index, chunks))


def _as_lists(n: int, owner: np.ndarray, tokens: np.ndarray, place: np.ndarray) -> list[list[int]]:
    """Per chunk, its tokens in order, from (chunk, token, position) triples."""
    out: list[list[int]] = [[] for _ in range(n)]
    order = np.lexsort((place, owner))
    for c, t in zip(owner[order].tolist(), tokens[order].tolist()):
        out[c].append(t)
    return out


def shortest_tokens(index: VocabIndex, chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """shortest() as arrays (chunk, token, start byte), one entry a token: the backtrack from each
    chunk's end runs for all chunks at once, one token a step."""
    if not chunks:
        return _EMPTY
    rows, lengths = _matrix(chunks)
    win = index.window_ids(rows, lengths)
    dist = forward_lengths(win, lengths)
    active = np.flatnonzero(lengths > 0)
    end = lengths[active].copy()
    parts = []
    while len(active):
        chosen = np.zeros(len(active), dtype=np.int64)
        need = dist[active, end] - 1
        for length in range(min(win.shape[2], int(end.max())), 0, -1):  # the longest that keeps the count
            start = end - length
            ok = (chosen == 0) & (start >= 0)
            s = np.maximum(start, 0)
            ok &= (win[active, s, length - 1] >= 0) & (dist[active, s] == need)
            chosen[ok] = length
        start = end - chosen
        parts.append((active, win[active, start, chosen - 1], start))
        end = start
        keep = end > 0
        active, end = active[keep], end[keep]
    return tuple(np.concatenate(x) for x in zip(*parts)) if parts else _EMPTY  # type: ignore[return-value]


def greedy_tokens(index: VocabIndex, chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """greedy() as arrays (chunk, token, start byte): every chunk steps forward at once, a token a step."""
    if not chunks:
        return _EMPTY
    rows, lengths = _matrix(chunks)
    win = index.window_ids(rows, lengths)
    has = win >= 0
    longest = win.shape[2] - np.argmax(has[:, :, ::-1], axis=2)
    active = np.flatnonzero(lengths > 0)
    pos = np.zeros(len(active), dtype=np.int64)
    parts = []
    while len(active):
        length = longest[active, pos]
        parts.append((active, win[active, pos, length - 1], pos))
        pos = pos + length
        keep = pos < lengths[active]
        active, pos = active[keep], pos[keep]
    return tuple(np.concatenate(x) for x in zip(*parts)) if parts else _EMPTY  # type: ignore[return-value]


_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def parse_hex_vocab(text: str, max_len: int = MAX_TOKEN_BYTES) -> list[bytes]:
    """Tokens from a file of hex-encoded tokens one a line (PathPiece's format); blank lines are skipped."""
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            tokens.append(bytes.fromhex(line))
        except ValueError:
            raise ValueError(f"line {number}: {line[:40]!r} is not hex bytes (two hex digits a byte)") from None
    VocabIndex(tokens, max_len)
    return tokens

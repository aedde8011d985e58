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
    """Byte-string vocabulary indexed for window lookups as a trie by levels: per length l, the sorted
    keys of every l-byte prefix of a token and the token id of each (-1: a prefix only). A window is
    looked up at length l only where its (l-1)-byte prefix was found, so the lookups thin out quickly
    with the length instead of costing every position times every length."""

    def __init__(self, tokens: Sequence[bytes], max_len: int = MAX_TOKEN_BYTES) -> None:
        check_vocabulary(tokens, max_len)
        self.max_len = max(len(t) for t in tokens)
        self.token_lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))  # by id
        rows, lengths = _matrix(tokens)
        self.levels: list[tuple[np.ndarray, np.ndarray]] = []  # [l - 1]: (sorted prefix keys, token id or -1)
        for length in range(1, self.max_len + 1):
            has = np.flatnonzero(lengths >= length)  # the tokens that have an l-byte prefix
            keys = _keys(rows[has, :length])
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            ids = np.where(lengths[has] == length, has, -1)[order].astype(np.int32)  # the prefix is a token
            starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))  # one entry per prefix
            self.levels.append((keys[starts], np.maximum.reduceat(ids, starts)))  # (tokens are distinct)

    def window_ids(self, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """ids[c, i, l-1]: the token of rows[c, i:i+l] if it is in the vocabulary and inside the chunk, else -1
        (l up to the vocabulary's longest token or the batch's longest chunk, whichever is shorter)."""
        n, width = rows.shape
        longest = min(self.max_len, width)  # no window is longer than the longest chunk of the batch
        out = np.full((n * width, longest), -1, dtype=np.int32)  # row c * width + i: position i of chunk c
        c, i = np.nonzero(np.arange(width)[None, :] < lengths[:, None])  # every position: its 1-byte window
        flat = rows.reshape(-1)
        at = c * width + i  # the window's first byte in flat (and its row of out)
        end = lengths[c] + c * width  # one past its chunk's last byte
        head = np.zeros(len(c), dtype=np.uint64)  # the window's first 8 bytes, big-endian
        tail = np.zeros(len(c), dtype=np.uint64)  # bytes 9.. (up to 16), big-endian, left-aligned in order
        for length in range(1, longest + 1):
            if length > 1:
                inside = at + length <= end
                at, end, head, tail = at[inside], end[inside], head[inside], tail[inside]
            if not len(at):
                break
            byte = flat[at + length - 1].astype(np.uint64)
            if length <= 8:
                head = (head << np.uint64(8)) | byte
                key = head
            elif length <= 16:
                tail = tail | (byte << np.uint64(8 * (16 - length)))
                key = _pair_keys(head, tail, length)
            else:  # few windows are alive this deep: their bytes gathered
                key = _keys(flat[at[:, None] + np.arange(length)])
            keys, ids = self.levels[length - 1]
            pos = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
            found = keys[pos] == key
            at, end, pos, head, tail = at[found], end[found], pos[found], head[found], tail[found]
            out[at, length - 1] = ids[pos]
        out = out.reshape(n, width, longest)
        return out


def check_vocabulary(tokens: Sequence[bytes], max_len: int = MAX_TOKEN_BYTES) -> None:
    """A ValueError saying what to change where tokens are no vocabulary to segment with: a repeated
    token, a single byte missing, a token empty or over max_len bytes."""
    distinct = set(tokens)
    if len(distinct) != len(tokens):
        raise ValueError("vocabulary has repeated tokens; give each byte string once")
    missing = [b for b in range(256) if bytes([b]) not in distinct]
    if missing:
        raise ValueError(f"vocabulary lacks single bytes {missing[:8]}...; every byte 0..255 must be a token")
    long = [t for t in tokens if len(t) > max_len or not t]
    if long:
        raise ValueError(f"token {long[0]!r} is empty or longer than {max_len} bytes; drop it or raise the limit")


def _pair_keys(head: np.ndarray, tail: np.ndarray, length: int) -> np.ndarray:
    """Sortable keys of windows of 9-16 bytes from their first 8 bytes and the rest (left-aligned):
    void values of `length` big-endian bytes, as _keys makes them for the vocabulary."""
    both = np.empty((len(head), 2), dtype=">u8")
    both[:, 0], both[:, 1] = head, tail
    return np.ascontiguousarray(both.view(np.uint8)[:, :length]).reshape(-1).view(f"V{length}")


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
    present = window_lengths(win)
    for end in range(1, width + 1):
        best = dist[:, end]
        for length in present[present <= end].tolist():
            ok = win[:, end - length, length - 1] >= 0
            best = np.where(ok, np.minimum(best, dist[:, end - length] + 1), best)
        dist[:, end] = best
    return dist


def window_lengths(win: np.ndarray) -> np.ndarray:
    """The token lengths some window of the batch has (a BPE vocabulary's long tokens are rare: the
    passes over positions skip the lengths no window has)."""
    return np.flatnonzero((win >= 0).any(axis=(0, 1))) + 1


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
    return shortest_backtrack(win, forward_lengths(win, lengths), lengths)


def shortest_backtrack(win: np.ndarray, dist: np.ndarray, lengths: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """shortest_tokens from a batch's window ids and forward lengths (PathPiece's scoring has them)."""
    active = np.flatnonzero(lengths > 0)
    end = lengths[active].copy()
    parts = []
    present = window_lengths(win)[::-1]
    while len(active):
        chosen = np.zeros(len(active), dtype=np.int64)
        need = dist[active, end] - 1
        for length in present[present <= int(end.max())].tolist():  # the longest that keeps the count
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
    if not any(chunks):  # (no byte at all: no window to search)
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

"""The piece cuts of cuts.py and the keys of short_keys.py in one kernel pass over the bytes (kernels/pieces.py).

numpy's path cuts a batch of documents into pieces (cuts.cut_bounds, a dozen array passes), then
reads each piece's key (a strided gather), checks which pieces fit a key or a pair of keys and
gathers the long ones: close to half of a counting process's CPU time. The kernel walks the bytes
once, cutting where cut_bounds cuts (the same byte rule, the same document starts), then walks the
pieces, reading each one's words at its start: pieces of 1 to 8 bytes without a zero byte become
keys, of 9 to 16 pairs of words, and the others (longer, or holding a zero byte) are copied out as
strings. A second kernel keys the chunks the lexer splits the distinct pieces into, each with its
piece's count (PieceKeyer.chunks). numpy's cut_bounds and keys_of stay the reference:
tests/count/test_piece_keyer.py compares them on every kind of text, document and window.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from ..kernels.pieces import MAY_END_WHITESPACE, NOT_WHITESPACE_BIT, cut_and_key, key_chunks, spell_keys
from .cuts import CUT_CODES, WIDE_WHITESPACE

_WINDOW = 1 << 18  # bytes cut at a time (the cuts' places: 2 MB)
_SEGMENT = 4 << 20  # bytes keyed at a time (their copy, keys and words: about 12 MB of buffers on text)


def _kernel_codes() -> np.ndarray:
    """cuts.CUT_CODES for the kernel: the last byte of a multi-byte character before a space cuts
    as an ASCII character would (NOT_WHITESPACE_BIT) unless it may end a whitespace character
    (MAY_END_WHITESPACE: then its bytes are looked at), so the byte rule decides nearly every byte."""
    codes = np.frombuffer(CUT_CODES, np.uint8).copy()
    ends = {value & 0xFF for size in (2, 3) for value in WIDE_WHITESPACE[size]}
    for byte in range(0x80, 0x100):
        codes[byte] |= MAY_END_WHITESPACE if byte in ends else NOT_WHITESPACE_BIT
    return codes


_CODES = _kernel_codes()
_WIDE2 = np.array(sorted(WIDE_WHITESPACE[2]), np.int64)
_WIDE3 = np.array(sorted(WIDE_WHITESPACE[3]), np.int64)


def spell(keys: np.ndarray, second: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The strings of keys (or of pairs of words, with their second words) as (offsets from 0, UTF-8
    bytes): short_keys.strings_of's strings, without the pyarrow array (a counter's distinct pieces
    go straight to the lexer, sparing the split the array's construction)."""
    width = 8 if second is None else 16
    offsets = np.zeros(len(keys) + 1, np.int64)
    data = np.empty(width * len(keys), np.uint8)
    used = spell_keys(keys, second if second is not None else keys[:0], data, offsets)
    return offsets, data[:used]


class PieceKeyer:
    """The kernel's buffers, kept from batch to batch and grown (doubled) when a call might fill one:
    fresh buffers for every batch cost more in page faults than the kernel's work on small batches. A
    batch is keyed SEGMENT bytes at a time, so the buffers stay a few MB whatever the batch."""

    def __init__(self, window: int = _WINDOW, segment: int = _SEGMENT) -> None:
        self.window, self.segment = window, max(segment, window)
        self.ends = np.empty(0, np.int64)
        self.keys, self.first, self.second = (np.empty(0, np.uint64) for _ in range(3))
        self.long_ends = np.zeros(1, np.int32)  # (offsets of a pyarrow string array: [0] is 0)
        self.long_bytes = np.empty(0, np.uint8)
        self.padded = np.empty(0, np.uint8)
        self.key_counts, self.pair_counts, self.long_counts = (np.empty(0, np.int64) for _ in range(3))
        self.written = np.zeros(5, np.int64)

    def pieces(self, offsets: np.ndarray, data: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                              pa.Array]]:
        """The pieces of the documents data[offsets[i]:offsets[i + 1]] as the kernel keys them, a
        segment at a time: (keys of the short pieces, first and second words of the 9-16 byte ones,
        the long ones as a string array). The arrays are this keyer's buffers, good until the next
        segment (the string array is the caller's). Together, the pieces of cut_bounds (tests compare)."""
        n = len(data)
        self._fit("ends", 0, min(self.window, n) + 1)
        offsets = np.ascontiguousarray(offsets, np.int64)
        self.written[:] = 0
        self.long_ends[0] = 0
        start = 0
        for first_byte in range(0, n, self.segment):
            self.written[:4] = 0
            last_byte = min(first_byte + self.segment, n)
            words, base = self._words(data, max(first_byte - 16, 0), last_byte)
            for begin in range(first_byte, last_byte, self.window):
                end = min(begin + self.window, last_byte)
                self._make_room(end - begin + 1, end - start)
                start = cut_and_key(data, words, base, offsets, start, begin, end, _CODES, _WIDE2, _WIDE3, self.ends,
                                    self.keys, self.first, self.second, self.long_bytes, self.long_ends[1:],
                                    self.written)
            n_keys, n_pairs, n_long, n_long_bytes, _ = (int(x) for x in self.written)
            long = pa.StringArray.from_buffers(n_long, pa.py_buffer(self.long_ends[:n_long + 1].copy()),
                                               pa.py_buffer(self.long_bytes[:n_long_bytes].copy()))
            yield self.keys[:n_keys], self.first[:n_pairs], self.second[:n_pairs], long

    def chunks(self, data: np.ndarray, offsets: np.ndarray, bounds: np.ndarray, counts: np.ndarray) -> tuple:
        """The chunks data[bounds[i]:bounds[i + 1]] of the pieces data[offsets[p]:offsets[p + 1]], keyed
        and weighted by their pieces' counts: (keys, first words, second words, long ones as a string
        array, (counts of the keys, of the pairs, of the long ones)); numpy arrays good until the next call."""
        n_chunks = len(bounds) - 1
        words, _ = self._words(data, 0, len(data))
        for name in ("keys", "first", "second", "key_counts", "pair_counts", "long_counts"):
            self._fit(name, 0, n_chunks)
        self._fit("long_ends", 0, n_chunks + 1)
        self.long_ends[0] = 0
        self._fit("long_bytes", 0, len(data))
        key_chunks(data, words, bounds, _readonly(offsets), _readonly(counts),
                   self.keys, self.key_counts, self.first, self.second, self.pair_counts, self.long_bytes,
                   self.long_ends[1:], self.long_counts, self.written)
        n_keys, n_pairs, n_long, n_long_bytes = (int(x) for x in self.written[:4])
        long = pa.StringArray.from_buffers(n_long, pa.py_buffer(self.long_ends[:n_long + 1].copy()),
                                           pa.py_buffer(self.long_bytes[:n_long_bytes].copy()))
        return (self.keys[:n_keys], self.first[:n_pairs], self.second[:n_pairs], long,
                (self.key_counts[:n_keys], self.pair_counts[:n_pairs], self.long_counts[:n_long].copy()))

    def _words(self, data: np.ndarray, base: int, end: int) -> tuple[np.ndarray, int]:
        """data[base:end] as uint64 words (an aligned copy with room for the reads past its end), and base."""
        size = (end - base + 39) // 8 * 8
        self._fit("padded", 0, size)
        self.padded[:end - base] = data[base:end]
        self.padded[end - base:size] = 0
        return self.padded[:size].view(np.uint64), base

    def _make_room(self, pieces: int, long_bytes: int) -> None:
        n_keys, n_pairs, n_long, n_long_bytes, _ = (int(x) for x in self.written)
        for name, used in (("keys", n_keys), ("first", n_pairs), ("second", n_pairs), ("long_ends", n_long + 1)):
            self._fit(name, used, used + pieces)
        self._fit("long_bytes", n_long_bytes, n_long_bytes + long_bytes)

    def _fit(self, name: str, used: int, needed: int) -> None:
        array = getattr(self, name)
        if needed > len(array):
            grown = np.empty(max(needed, 2 * len(array)), array.dtype)
            grown[:used] = array[:used]
            setattr(self, name, grown)


def keyed_pieces(offsets: np.ndarray, data: np.ndarray, window: int = _WINDOW) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, list[pa.Array]]:
    """All the pieces of a batch at once (PieceKeyer.pieces joined): for tests and a one-off call."""
    parts = list(zip(*((k.copy(), f.copy(), s.copy(), long) for k, f, s, long in
                       PieceKeyer(window, window).pieces(offsets, data))))
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint64), []
    return np.concatenate(parts[0]), np.concatenate(parts[1]), np.concatenate(parts[2]), list(parts[3])


def _readonly(values: np.ndarray) -> np.ndarray:
    """values as a read-only, contiguous int64 view (a copy only where they are not so): the kernel
    then has one signature to compile, whether the caller's array was writable or not."""
    view = np.ascontiguousarray(values, np.int64).view()
    view.flags.writeable = False
    return view

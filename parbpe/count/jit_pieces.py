"""The piece cuts of cuts.py and the keys of short_keys.py in one numba pass over the bytes.

numpy's path cuts a batch of documents into pieces (cuts.cut_bounds, a dozen array passes), then
reads each piece's key (a strided gather), checks which pieces fit a key or a pair of keys and
gathers the long ones: close to half of a counting process's CPU time. The kernel walks the bytes
once, cutting where cut_bounds cuts (the same byte rule, the same document starts), then walks the
pieces, reading each one's words at its start: pieces of 1 to 8 bytes without a zero byte become
keys, of 9 to 16 pairs of words, and the others (longer, or holding a zero byte) are copied out as
strings. A second kernel keys the chunks the lexer splits the distinct pieces into, each with its
piece's count (PieceKeyer.chunks). numpy's cut_bounds and keys_of stay the reference:
tests/count/test_jit_pieces.py compares them on every kind of text, document and window.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from ..jit import helper, kernel
from .cuts import CUT_CODES, WIDE_WHITESPACE

SPACE_BIT, SYMBOL_BIT = 1, 2  # (cuts._cut_codes)
NOT_WHITESPACE_BIT = 4  # (the byte rule cuts before a space after a byte with it)
MAY_END_WHITESPACE = 128  # a byte that ends a multi-byte whitespace character in some sequence
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
_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)
_FULL = np.uint64(0xFFFFFFFFFFFFFFFF)


@helper
def _wide_whitespace_ends(data, p, wide2, wide3):
    """Whether the multi-byte character ending just before p is whitespace (cuts._ends_in_whitespace)."""
    last2 = (np.int64(data[max(p - 2, 0)]) << 8) | np.int64(data[p - 1])
    for value in wide2:
        if last2 == value:
            return True
    last3 = (np.int64(data[max(p - 3, 0)]) << 16) | last2
    for value in wide3:
        if last3 == value:
            return True
    return False


@helper
def _word_at(words, at):
    """The 8 bytes from byte `at` of words' bytes, little-endian (two aligned reads)."""
    i = at >> 3
    shift = np.uint64(8 * (at & 7))
    return (words[i] >> shift) | ((words[i + 1] << (np.uint64(63) - shift)) << np.uint64(1))


@helper
def _low_bytes(count):
    """A mask of the low `count` (1 to 8) bytes of a word."""
    return _FULL >> np.uint64(64 - 8 * count)


@helper
def _has_zero_byte(word):
    return ((word - _ONES) & ~word & _HIGHS) != 0


@kernel(twin="parbpe.count.cuts:cut_bounds")
def cut_and_key(data, words, base, offsets, start, begin, end, codes, wide2, wide3, ends, keys, first, second,
                long_bytes, long_ends, written):
    """The pieces that end in data[begin:end] (the documents data[offsets[d]:offsets[d + 1]]; the
    piece at hand started at `start`, and data's end ends the last), keyed and appended to the
    outputs: short pieces to keys, 9-16 byte ones to first and second, the others' bytes to
    long_bytes and their ends there to long_ends. words: data[base:end] and zeros after, as uint64
    (base at most 16 bytes before the first piece of 16 bytes or fewer).
    written: how many keys, pairs, long pieces and long bytes the outputs hold, and the document
    at hand (read and updated: the caller makes room for this call). Returns where the piece at hand
    starts after the call.

    First pass, over the bytes: each cut's place is written to ends at every byte and kept by
    counting it (no branch to mispredict at each piece's end). Second pass, over the pieces: each
    one's words are read at its start (two aligned reads and shifts) and go to the output of its
    kind, again written always and kept by a count."""
    n = len(data)
    n_keys, n_pairs, n_long, n_long_bytes, doc = written[0], written[1], written[2], written[3], written[4]
    last_doc = len(offsets) - 2
    next_doc = offsets[doc + 1] if doc < last_doc else n
    found = 0
    before = codes[data[begin - 1]] if begin > 0 else np.uint8(0)
    for q in range(begin, end):
        code = codes[data[q]]
        cut = (code & (before >> 2) & (SPACE_BIT | SYMBOL_BIT)) != 0
        if q == next_doc:
            cut = q > 0
            while q == next_doc and doc < last_doc:  # (empty documents share their start)
                doc += 1
                next_doc = offsets[doc + 1] if doc < last_doc else n
        elif (before & MAY_END_WHITESPACE) and (code & SPACE_BIT):
            cut = not _wide_whitespace_ends(data, q, wide2, wide3)
        ends[found] = q
        found += cut
        before = code
    if end == n and n > start:
        ends[found] = n
        found += 1
    for k in range(found):
        length = ends[k] - start
        long = length > 16
        if not long:  # (few are long: a branch; their bytes may lie before words' start)
            head = min(length, 8)
            tail = min(max(length - 8, 1), 8)
            word = _word_at(words, start - base) & _low_bytes(head)
            word2 = _word_at(words, start - base + 8) & _low_bytes(tail)
            long = (_has_zero_byte(word | ~_low_bytes(head))
                    or (length > 8 and _has_zero_byte(word2 | ~_low_bytes(tail))))
            keys[n_keys] = word
            n_keys += length <= 8 and not long
            first[n_pairs] = word
            second[n_pairs] = word2
            n_pairs += length > 8 and not long
        if long:
            for j in range(length):  # (a loop, not a slice copy: numba compiles its checks' messages, a second)
                long_bytes[n_long_bytes + j] = data[start + j]
            n_long_bytes += length
            long_ends[n_long] = n_long_bytes
            n_long += 1
        start = ends[k]
    written[0], written[1], written[2], written[3], written[4] = n_keys, n_pairs, n_long, n_long_bytes, doc
    return start


@kernel(twin="parbpe.count.pieces:StringCounts.add")
def key_chunks(data, words, bounds, offsets, counts, keys, key_counts, first, second, pair_counts, long_bytes,
               long_ends, long_counts, written):
    """Key the chunks data[bounds[i]:bounds[i + 1]] of the pieces data[offsets[p]:offsets[p + 1]] (both
    ascending, from 0 to len(data)), each weighted by its piece's count: short chunks to keys and
    key_counts, 9-16 byte ones to first, second and pair_counts, the others' bytes to long_bytes, their
    ends there to long_ends and their counts to long_counts (outputs as long as the chunks; long_bytes
    as data). words: data and zeros after, as uint64. written[0:4]: the keys, pairs, long chunks and
    long bytes written. (Its loop repeats cut_and_key's second one on purpose: with the two sharing
    one inlined helper, numba compiled cut_and_key into code over twice as slow.)"""
    n_keys, n_pairs, n_long, n_long_bytes = 0, 0, 0, 0
    piece = 0
    for i in range(len(bounds) - 1):
        start, end = bounds[i], bounds[i + 1]
        while offsets[piece + 1] <= start:
            piece += 1
        count = counts[piece]
        length = end - start
        long = length > 16
        if not long:
            head = min(length, 8)
            tail = min(max(length - 8, 1), 8)
            word = _word_at(words, start) & _low_bytes(head)
            word2 = _word_at(words, start + 8) & _low_bytes(tail)
            long = (_has_zero_byte(word | ~_low_bytes(head))
                    or (length > 8 and _has_zero_byte(word2 | ~_low_bytes(tail))))
            keys[n_keys] = word
            key_counts[n_keys] = count
            n_keys += length <= 8 and not long
            first[n_pairs] = word
            second[n_pairs] = word2
            pair_counts[n_pairs] = count
            n_pairs += length > 8 and not long
        if long:
            for j in range(length):  # (a loop: see cut_and_key)
                long_bytes[n_long_bytes + j] = data[start + j]
            n_long_bytes += length
            long_ends[n_long] = n_long_bytes
            long_counts[n_long] = count
            n_long += 1
    written[0], written[1], written[2], written[3] = n_keys, n_pairs, n_long, n_long_bytes


def spell(keys: np.ndarray, second: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The strings of keys (or of pairs of words, with their second words) as (offsets from 0, UTF-8
    bytes): short_keys.strings_of's strings, without the pyarrow array (a counter's distinct pieces
    go straight to the lexer, sparing the split the array's construction)."""
    width = 8 if second is None else 16
    offsets = np.zeros(len(keys) + 1, np.int64)
    data = np.empty(width * len(keys), np.uint8)
    used = _spell(keys, second if second is not None else keys[:0], data, offsets)
    return offsets, data[:used]


@kernel(twin="parbpe.count.short_keys:strings_of")
def _spell(keys, second, data, offsets):
    """Write the non-zero bytes of each key (then of its second word, if second is not empty) into
    data, little-endian, and where each string ends into offsets[1:]; returns the bytes written."""
    at = 0
    for i in range(len(keys)):
        at = _spell_word(keys[i], data, at)
        if len(second):
            at = _spell_word(second[i], data, at)
        offsets[i + 1] = at
    return at


@helper
def _spell_word(word, data, at):
    """Write a word's bytes up to its first zero byte, low byte first, to data[at:]; returns where they end."""
    for k in range(8):
        byte = (word >> np.uint64(8 * k)) & np.uint64(0xFF)
        if byte == 0:
            break
        data[at] = byte
        at += 1
    return at


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

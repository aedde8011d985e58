"""Pieces cut and keyed in one pass over the bytes, chunks keyed with their pieces' counts, keys spelled.

The cut is cuts.py's byte rule (count/cuts.py::cut_bounds, the reference), the keys short_keys.py's:
pieces of 1 to 8 bytes without a zero byte become keys, of 9 to 16 pairs of words, the others are
copied out as strings. count/piece_keyer.py holds the buffers and calls these kernels.
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel

SPACE_BIT, SYMBOL_BIT = 1, 2  # (count/cuts.py's cut codes)
NOT_WHITESPACE_BIT = 4  # (the byte rule cuts before a space after a byte with it)
MAY_END_WHITESPACE = 128  # a byte that ends a multi-byte whitespace character in some sequence
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


@kernel(twin="parbpe.count.short_keys:strings_of")
def spell_keys(keys, second, data, offsets):
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

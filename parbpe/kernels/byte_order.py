"""The reduce's sort: strings by their bytes, a most-significant-byte radix sort (count/byte_order.py
calls it; its numpy path is the reference).
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel, prefetch

_AHEAD = 8  # rows ahead whose bytes the word loads ask for (prefetch); their offsets twice as far
# Segments of at most this many strings are sorted by insertion (a counting pass costs more for so few).
_INSERTION = 16


@kernel(twin="parbpe.count.byte_order:byte_order")
def radix_sort(offsets, data, order, scratch, words, word_scratch, left, left_scratch):
    """Sort order (row numbers) by the rows' bytes, stably: a most-significant-byte radix sort. A
    segment of rows equal in their first `depth` bytes is spread by byte `depth` (0 for a row that
    ended, which sorts first, then each byte + 1) with a counting sort; each part of two or more rows
    that did not end is a segment one byte deeper (on a stack); segments of _INSERTION rows or fewer
    are insertion-sorted from their depth. Rows that ended together are equal: kept in their order.

    Each row's bytes are read 8 at a time: where a segment's depth starts a word, each row's next 8
    bytes (words, big-endian) and how many of them it has (left, 9: more) are read once and travel
    with the row through the word's 8 levels; a segment whose rows share their next bytes skips them
    at once. The insertion sorts, which end most rows (2.0 M of SuperBPE's 2.3 M superword chunks, 13
    levels deep on average), compare words, not bytes read from anywhere in data."""
    stack = np.empty((64, 3), np.int64)  # (first row, end, depth) of the segments still to sort
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, len(order), 0
    top = 1
    counts = np.zeros(257, np.int64)  # (zero between segments: a segment clears the bytes it used)
    while top:
        top -= 1
        lo, hi, depth = stack[top, 0], stack[top, 1], stack[top, 2]
        k = depth & 7
        if k == 0:
            _load_words(offsets, data, order, words, left, lo, hi, depth)
        if hi - lo <= _INSERTION:
            _insertion_sort(offsets, data, order, words, left, lo, hi, depth)
            continue
        if k == 0:
            shared = _shared_bytes(words, left, lo, hi)
            if shared:  # every row has these bytes, the same: no level to spread
                stack[top, 0], stack[top, 1], stack[top, 2] = lo, hi, depth + shared
                top += 1
                continue
        shift = np.uint64(56 - 8 * k)
        least, most = 256, 0  # the bytes the segment holds lie between: its loops over bytes go no further
        for i in range(lo, hi):
            b = _byte_of(words[i], left[i], k, shift)
            counts[b] += 1
            least, most = min(least, b), max(most, b)
        if least == most and least > 0:  # one byte, held by every row: the next level, as they are
            counts[least] = 0
            stack[top, 0], stack[top, 1], stack[top, 2] = lo, hi, depth + 1
            top += 1
            continue
        start = lo
        for b in range(least, most + 1):  # counts become each byte's first place
            c = counts[b]
            counts[b] = start
            start += c
        for i in range(lo, hi):
            b = _byte_of(words[i], left[i], k, shift)
            at = counts[b]
            scratch[at], word_scratch[at], left_scratch[at] = order[i], words[i], left[i]
            counts[b] += 1
        for i in range(lo, hi):  # (loops, not slice copies: numba compiles a slice copy's checks and their
            order[i], words[i], left[i] = scratch[i], word_scratch[i], left_scratch[i]  # messages, a second)
        first = lo  # (counts[b] is now the end of byte b's part)
        if least == 0:  # rows that ended: equal, in their order
            first, counts[0] = counts[0], 0
        for b in range(max(least, 1), most + 1):
            end = counts[b]
            counts[b] = 0
            if end - first > 1:
                if top == len(stack):
                    grown = np.empty((2 * len(stack), 3), np.int64)
                    for j in range(top):
                        grown[j, 0], grown[j, 1], grown[j, 2] = stack[j, 0], stack[j, 1], stack[j, 2]
                    stack = grown
                stack[top, 0], stack[top, 1], stack[top, 2] = first, end, depth + 1
                top += 1
            first = end


@helper
def _load_words(offsets, data, order, words, left, lo, hi, depth):
    """For the rows at lo:hi, their bytes depth to depth + 8 as a big-endian word (zeros past the
    row's end) and how many of them they have (9: more than 8)."""
    for i in range(lo, hi):
        if i + 2 * _AHEAD < hi:
            prefetch(offsets, order[i + 2 * _AHEAD])
        if i + _AHEAD < hi:
            prefetch(data, offsets[order[i + _AHEAD]] + depth)
        row = order[i]
        at = offsets[row] + depth
        size = offsets[row + 1] - at
        n = min(size, 8)
        word = np.uint64(0)
        for j in range(n):
            word = (word << np.uint64(8)) | np.uint64(data[at + j])
        if n < 8:
            word <<= np.uint64(8 * (8 - n))
        words[i] = word
        left[i] = np.uint8(min(size, 9))


@helper
def _shared_bytes(words, left, lo, hi):
    """How many bytes from the word's start every row at lo:hi has, all the same (0 to 8)."""
    differ = np.uint64(0)
    fewest = 9
    for i in range(lo, hi):
        differ |= words[i] ^ words[lo]
        fewest = min(fewest, np.int64(left[i]))
    same = 8
    while same > 0 and (differ >> np.uint64(64 - 8 * same)) != 0:
        same -= 1
    return min(same, fewest)


@helper
def _byte_of(word, left, k, shift):
    """A row's radix byte at position k of its word: 0 past its end, else the byte + 1."""
    if k < left:
        return np.int64((word >> shift) & np.uint64(0xFF)) + 1
    return 0


@helper
def _insertion_sort(offsets, data, order, words, left, lo, hi, depth):
    """order[lo:hi] sorted by the rows' bytes from `depth` on (the bytes before are equal), stably,
    their words and counts of bytes (radix_sort) moving with them."""
    k = depth & 7
    for i in range(lo + 1, hi):
        row, word, size = order[i], words[i], left[i]
        j = i - 1
        while j >= lo and _after_word(offsets, data, order[j], words[j], left[j], row, word, size, depth, k):
            order[j + 1], words[j + 1], left[j + 1] = order[j], words[j], left[j]
            j -= 1
        order[j + 1], words[j + 1], left[j + 1] = row, word, size


@helper
def _after_word(offsets, data, a, word_a, left_a, b, word_b, left_b, depth, k):
    """Whether row a's bytes sort strictly after row b's (both equal before depth, byte k of their
    words): by the rest of their words, then by the bytes they have in it (a zero byte and a row's end
    read the same there), then, where both go on past the word, by their bytes from the next one."""
    rest_a = word_a << np.uint64(8 * k)
    rest_b = word_b << np.uint64(8 * k)
    if rest_a != rest_b:
        return rest_a > rest_b
    if left_a == 9 and left_b == 9:
        return _after(offsets, data, a, b, depth - k + 8)
    return left_a > left_b


@helper
def _after(offsets, data, a, b, depth):
    """Whether row a's bytes sort strictly after row b's (both equal before depth)."""
    i, end_a = offsets[a] + depth, offsets[a + 1]
    j, end_b = offsets[b] + depth, offsets[b + 1]
    while i < end_a and j < end_b:
        if data[i] != data[j]:
            return data[i] > data[j]
        i += 1
        j += 1
    return i < end_a  # a continues where b ended

"""Chunks of bytes encoded with known merges, a distinct piece once (merge/encode.py::encode_byte_table
calls it; its numpy path, encode_table through the pieces, is the reference).

One pass cuts the chunks into pieces where no token of the merges holds two bytes side by side,
looks each piece up in a table of the pieces seen (kernels/hashing.py's home slot, then linear
probes) and encodes the new ones: a heap of the merges' ranks over a linked list of the piece's
tokens.
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel, prefetch
from .hashing import home
from .heaps import pop, push

_MIX_SECOND = 0xC2B2AE3D27D4EB4F  # a long piece's second word, multiplied by this, joins its first
_AHEAD = 8  # pieces ahead whose slots encode_chunks asks for (prefetch)
_CACHED_BYTES = 16  # pieces of at most this many bytes are looked up (two words of key); longer ones encoded each time


@helper
def _short_key(word0, size):
    """The hash key of a piece of up to 8 bytes (its word) and its length: where lookups and regrowing start."""
    return word0 ^ np.uint64(size)


@helper
def _long_key(word0, word1):
    """The hash key of a piece of 9 to 16 bytes, from its two words."""
    return word0 ^ (word1 * np.uint64(_MIX_SECOND))


@helper
def _encode_span(data, begin, size, pair_keys, pair_ranks, bits, tok, nxt, prv, rank_at, heap, todo, out, at):
    """Encode data[begin:begin + size] into out[at:], returning how many tokens: while a pair of the
    merges is present, the occurrence of lowest rank, then leftmost, becomes token 256 + rank. A
    min-heap of (rank, position): a pair a merge makes holds its new token, so it ranks after the
    merge, and a piece costs O(n log n) in its length. pair_keys/pair_ranks: an open-addressing
    table of 2 ** bits slots (key -1: empty) of the merges' pairs; the rest are the caller's scratch."""
    mask = (1 << bits) - 1
    for j in range(size):
        tok[j], nxt[j], prv[j], todo[j] = data[begin + j], j + 1, j - 1, j
    nxt[size - 1] = -1
    n_todo, top = size, 0
    while True:
        for t in range(n_todo):  # look up the new pairs; push those that merge
            j = todo[t]
            if j < 0:
                continue
            rank_at[j] = -1
            if nxt[j] < 0:
                continue
            key = (tok[j] << 32) | tok[nxt[j]]
            s = home(key, bits)
            while pair_keys[s] != -1 and pair_keys[s] != key:
                s = (s + 1) & mask
            if pair_keys[s] == key:
                rank = pair_ranks[s]
                rank_at[j] = rank
                top = push(heap, top, (rank << 32) | j)
        j = -1
        while top and j < 0:  # pop until an entry still holds its pair
            item, top = pop(heap, top)
            if rank_at[item & 0xFFFFFFFF] == item >> 32:
                j = item & 0xFFFFFFFF
        if j < 0:
            break
        q = nxt[j]  # merge j and q into j
        tok[j], nxt[j], rank_at[q] = 256 + rank_at[j], nxt[q], -1
        if nxt[j] >= 0:
            prv[nxt[j]] = j
        todo[0], todo[1], n_todo = prv[j], j, 2
    j, kept = 0, 0
    while j >= 0:
        out[at + kept] = tok[j]
        kept, j = kept + 1, nxt[j]
    return kept


@kernel(twin="parbpe.merge.encode:encode_table")
def encode_chunks(data, starts, inside, merge_keys, out, batch, short_bits, long_bits):
    """Every chunk data[starts[c]:starts[c + 1]] (bytes, the chunks side by side) encoded with the
    merges (merge_keys[r]: the pair of rank r, token 256 + r) into out, chunk after chunk: (tokens
    written, tokens per chunk).

    A chunk is cut into pieces between bytes x, y where inside[x << 8 | y] is False (no token holds
    them side by side), and the pieces' tokens are the chunk's. A piece of at most _CACHED_BYTES is
    looked up in a table of the pieces met so far, which holds its tokens; a new one is encoded
    (_encode_span) and added (_remember). Text repeats its words, so most pieces are found: one pass
    over the bytes, one lookup a piece. The lookups are the cost (memory latency): the pieces are cut
    `batch` at a time (_cut) and then looked up in a loop of their own, whose reads do not wait for
    one another, and a slot is small and read in one place: for a piece of up to 8 bytes, its word
    and one word of its length, token count and tokens (two of up to 24 bits; else where they are
    kept); for 9 to 16 bytes, its two words, the same word, and where its tokens are kept if not in
    that word. The tables start with 2 ** short_bits and 2 ** long_bits slots and double at two
    thirds full. (The lookup is written out here: a first split into helpers, the lookup and the
    tokens' copy taking the tables, the batch in one 2-D array and the scratch in a tuple, was clearly
    slower.)"""
    pair_keys, pair_ranks, bits = _pair_table(merge_keys)
    short = np.zeros((1 << short_bits, 2), dtype=np.uint64)  # word, length | count << 4 | tokens (0: empty)
    long = np.zeros((1 << long_bits, 4), dtype=np.uint64)  # words 0 and 1, the same, where kept (count > 2)
    kept = np.empty(1 << 16, dtype=np.uint32)  # the tokens of pieces that do not fit their slot
    # short_bits, long_bits, pieces in each table, tokens kept, and whether tokens fit the slot's 24 bits
    state = np.array([short_bits, long_bits, 0, 0, 0, 256 + len(merge_keys) <= (1 << 24)], dtype=np.int64)
    longest = 64  # _encode_span's scratch, grown to the longest piece
    tok, nxt, prv, rank_at, heap, todo = _span_scratch(longest)
    # a batch of pieces: start, size, chunk, and the words of those of up to _CACHED_BYTES
    piece_at, piece_size, piece_chunk = np.empty(batch, np.int64), np.empty(batch, np.int64), np.empty(batch, np.int64)
    piece_word0, piece_word1 = np.empty(batch, np.uint64), np.empty(batch, np.uint64)
    n_chunks = len(starts) - 1
    lengths = np.zeros(n_chunks, dtype=np.int64)
    at, c, p = 0, 0, starts[0]
    while c < n_chunks:
        n, c, p = _cut(data, starts, inside, c, p, piece_at, piece_size, piece_chunk, piece_word0, piece_word1)
        for i in range(n):  # their tokens
            if i + _AHEAD < n:  # the slot of a piece further on, asked for now (the tables outgrow the caches)
                ahead = piece_size[i + _AHEAD]
                if 1 < ahead <= 8:
                    prefetch(short, home(_short_key(piece_word0[i + _AHEAD], ahead), state[0]))
                elif 8 < ahead <= _CACHED_BYTES:
                    prefetch(long, home(_long_key(piece_word0[i + _AHEAD], piece_word1[i + _AHEAD]), state[1]))
            begin, size, chunk = piece_at[i], piece_size[i], piece_chunk[i]
            word0, word1 = piece_word0[i], piece_word1[i]
            meta = np.uint64(0)  # the slot's word of length, count and tokens (0: not there, or too long)
            s = 0
            if size == 1:
                out[at] = data[begin]
                lengths[chunk] += 1
                at += 1
                continue
            if size <= 8:
                s = home(_short_key(word0, size), state[0])
                while short[s, 1] != 0 and not (short[s, 0] == word0 and (short[s, 1] & np.uint64(15)) == size):
                    s = (s + 1) & ((1 << state[0]) - 1)
                meta = short[s, 1]
            elif size <= _CACHED_BYTES:
                s = home(_long_key(word0, word1), state[1])
                while long[s, 2] != 0 and not (long[s, 0] == word0 and long[s, 1] == word1
                                               and (long[s, 2] & np.uint64(15)) == size - 8):
                    s = (s + 1) & ((1 << state[1]) - 1)
                meta = long[s, 2]
            if meta != 0:  # met before: its tokens, in the slot or kept apart (then how many, and where)
                made = np.int64((meta >> np.uint64(4)) & np.uint64(15))
                if made == 0:
                    made = np.int64((meta >> np.uint64(8)) & np.uint64(0xFFFF))
                    where = np.int64(long[s, 3] if size > 8 else meta >> np.uint64(24))
                    for k in range(made):
                        out[at + k] = kept[where + k]
                else:
                    out[at] = (meta >> np.uint64(8)) & np.uint64(0xFFFFFF)
                    if made == 2:
                        out[at + 1] = meta >> np.uint64(32)
                lengths[chunk] += made
                at += made
                continue
            if size > longest:
                longest = 2 * size
                tok, nxt, prv, rank_at, heap, todo = _span_scratch(longest)
            made = _encode_span(data, begin, size, pair_keys, pair_ranks, bits, tok, nxt, prv, rank_at, heap, todo,
                                out, at)
            lengths[chunk] += made
            at += made
            if size <= _CACHED_BYTES:
                short, long, kept = _remember(short, long, kept, state, s, size, word0, word1, out[at - made:at])
    return at, lengths


@helper
def _pair_table(merge_keys):
    """The merges' pairs in an open-addressing table (key -1: empty) of 2 ** bits slots: (keys, ranks, bits)."""
    bits = 4
    while (1 << bits) < 2 * len(merge_keys) + 2:
        bits += 1
    pair_keys = np.full(1 << bits, -1, dtype=np.int64)
    pair_ranks = np.empty(1 << bits, dtype=np.int64)
    for r in range(len(merge_keys)):
        s = home(merge_keys[r], bits)
        while pair_keys[s] != -1:
            s = (s + 1) & ((1 << bits) - 1)
        pair_keys[s], pair_ranks[s] = merge_keys[r], r
    return pair_keys, pair_ranks, bits


@helper
def _span_scratch(longest):
    """_encode_span's scratch for pieces of up to `longest` bytes: tok, nxt, prv, rank_at, heap, todo."""
    return (np.empty(longest, np.int64), np.empty(longest, np.int64), np.empty(longest, np.int64),
            np.empty(longest, np.int64), np.empty(3 * longest, np.int64), np.empty(longest, np.int64))


@helper
def _cut(data, starts, inside, c, p, piece_at, piece_size, piece_chunk, piece_word0, piece_word1):
    """Cut the next pieces, from byte p of chunk c on, into the piece_ arrays (start, size, chunk, and
    for a piece of up to _CACHED_BYTES its first and second 8 bytes, little-endian); (how many, c, p after)."""
    n = 0
    while n < len(piece_at) and c < len(starts) - 1:
        end = starts[c + 1]
        if p >= end:
            c += 1
            continue
        q = p + 1
        while q < end and inside[(np.int64(data[q - 1]) << 8) | np.int64(data[q])]:
            q += 1
        size = q - p
        word0 = np.uint64(0)
        word1 = np.uint64(0)
        if size <= _CACHED_BYTES:
            for k in range(min(size, 8)):
                word0 |= np.uint64(data[p + k]) << np.uint64(8 * k)
            for k in range(8, size):
                word1 |= np.uint64(data[p + k]) << np.uint64(8 * (k - 8))
        piece_at[n], piece_size[n], piece_chunk[n], piece_word0[n], piece_word1[n] = p, size, c, word0, word1
        n += 1
        p = q
    return n, c, p


@helper
def _remember(short, long, kept, state, s, size, word0, word1, tokens):
    """Put a new piece in slot s of its table (encode_chunks), with its tokens (in the slot's word, or
    kept apart in kept, grown if it must be), and regrow the table at two thirds full: (short, long,
    kept) as they are now; state (bits, pieces, tokens kept) is updated in place."""
    made = len(tokens)
    held = 0
    if made <= 2 and state[5]:  # the tokens in the slot's word
        meta = np.uint64(made << 4) | (np.uint64(tokens[0]) << np.uint64(8))
        if made == 2:
            meta |= np.uint64(tokens[1]) << np.uint64(32)
    else:  # kept: the count in 16 bits, where in 40 (short slot) or the fourth word (long)
        used = state[4]
        if used + made > len(kept):
            grown = np.empty(2 * len(kept) + made, dtype=kept.dtype)
            for i in range(used):  # (a loop, not a slice copy: numba compiles its checks' messages)
                grown[i] = kept[i]
            kept = grown
        for k in range(made):
            kept[used + k] = tokens[k]
        meta = np.uint64(made << 8) | (np.uint64(used) << np.uint64(24))
        held = used
        state[4] = used + made
    if size <= 8:
        short[s, 0], short[s, 1] = word0, meta | np.uint64(size)
        state[2] += 1
        if 3 * state[2] > 2 * (1 << state[0]):  # two thirds full: twice the slots, every piece again
            state[0] += 1
            short = _regrow(short, state[0], True)
    else:
        long[s, 0], long[s, 1], long[s, 2], long[s, 3] = word0, word1, meta | np.uint64(size - 8), held
        state[3] += 1
        if 3 * state[3] > 2 * (1 << state[1]):
            state[1] += 1
            long = _regrow(long, state[1], False)
    return short, long, kept


@helper
def _regrow(old, bits, short):
    """A piece table (encode_chunks) of 2 ** bits slots holding old's pieces."""
    table = np.zeros((1 << bits, old.shape[1]), dtype=np.uint64)
    mask = (1 << bits) - 1
    flag = 1 if short else 2
    for o in range(len(old)):
        if old[o, flag] == 0:
            continue
        if short:
            s = home(_short_key(old[o, 0], old[o, 1] & np.uint64(15)), bits)
        else:
            s = home(_long_key(old[o, 0], old[o, 1]), bits)
        while table[s, flag] != 0:
            s = (s + 1) & mask
        for w in range(old.shape[1]):
            table[s, w] = old[o, w]
    return table

"""Segmentation of a table of chunks (flat bytes, offsets, counts) by merges, greedy or shortest:
tokenizer/tables.py builds the tables these read and calls them.

They give exactly what the numpy and Python paths give (tests compare them): `merges_kernel` is
Tokenizer._merge_long (a heap of (rank, position) over a linked list: the lowest rank first, its
occurrences left to right); greedy and shortest (`segment_kernel`) are tokenizer/segment.py's rules,
the tokens at a start found by walking a trie of the vocabulary from it (shortest walks from every
start and keeps, for every end, the first start reaching it with the fewest tokens, which is the
longest last token; the backtrack follows them; greedy jumps from token to token, or reads the same
walks when both run). A chunk at a time, with scratch arrays the size of the longest chunk
(`longest`): no padded batches. The kernels add every token's chunk count to totals and, when `out`
is not empty, write the tokens of chunk c to out[offsets[c]:] (a chunk has at most as many tokens as
bytes) and their number to n_out[c].

Lookups: the trie's first two levels and the pairs of two bytes are dense arrays; the rest are
open-addressing hash tables of int64 keys (-1: empty slot), trie edges keyed node * 256 + byte and
merge pairs a * 2^32 + b, probed by `slot_of` from the top bits of key * a Fibonacci constant: the
slot of kernels/hashing.py's home, computed in int64 arithmetic. Left as it is (another program for
the same slots), so that the segmentation and scoring kernels compile as they did.
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel
from .heaps import pop, push

_MIX = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: multiplicative hashing


@kernel(twin="parbpe.tokenizer.model:Tokenizer.segment_arrays")
def fill_hash(keys: np.ndarray, bits: int) -> np.ndarray:
    """An open-addressing table of 2^bits slots holding keys (>= 0): per slot its key (-1: empty) and
    the index in keys of that key (a repeated key keeps its last index)."""
    mask = (1 << bits) - 1
    slots = np.full((1 << bits, 2), -1, dtype=np.int64)
    for k in range(len(keys)):
        slot = slot_of(slots, keys[k], bits, mask)
        slots[slot, 0] = keys[k]
        slots[slot, 1] = k
    return slots


@helper
def next_node(node, data, a, s, e, second, edges, bits, mask):
    """The trie node a walk from byte a + s reaches at byte a + e from `node` (the second byte's from
    the two-byte table `second`, later ones through the hashed edges), -1 where no token goes on."""
    if e == s + 1:
        return second[data[a + s] * 256 + data[a + e]]
    key = node * 256 + data[a + e]
    slot = slot_of(edges, key, bits, mask)
    return edges[slot, 1] if edges[slot, 0] == key else -1


@helper
def slot_of(slots, key, bits, mask):
    """The slot holding key in an open-addressing table, or the empty slot where it would go."""
    slot = ((key * _MIX) >> (64 - bits)) & mask
    while slots[slot, 0] != key and slots[slot, 0] != -1:
        slot = (slot + 1) & mask
    return slot


@kernel(twin="parbpe.tokenizer.model:Tokenizer.segment_arrays")
def segment_kernel(data: np.ndarray, offsets: np.ndarray, weights: np.ndarray, first: np.ndarray,
                   second: np.ndarray, edges: np.ndarray, bits: int, node_token: np.ndarray,
                   greedy_totals: np.ndarray, shortest_totals: np.ndarray, out: np.ndarray,
                   n_out: np.ndarray, longest: int) -> None:
    """Chunks segmented greedily (longest token prefixing the rest) and/or into the fewest tokens (ties:
    the longest last token, recursively): a method runs when its totals are not empty (`out`: one
    method only). The trie is walked from every start (shortest) or from each greedy token's start."""
    mask = (1 << bits) - 1
    greedy = len(greedy_totals) > 0
    shortest = len(shortest_totals) > 0
    emit = len(out) > 0
    reach = np.empty(longest + 1, dtype=np.int64)  # the end of the longest token from each start
    reach_id = np.empty(longest + 1, dtype=np.int64)
    dist = np.empty(longest + 1, dtype=np.int64)  # shortest: fewest tokens to reach each end
    last = np.empty(longest + 1, dtype=np.int64)  # shortest: the start of the last token to each end
    last_id = np.empty(longest + 1, dtype=np.int64)
    found = np.empty(longest, dtype=np.int64)  # the tokens of a chunk, last first (shortest)
    for c in range(len(offsets) - 1):
        a = offsets[c]
        n = offsets[c + 1] - a
        w = weights[c]
        if shortest:
            dist[0] = 0
            for e in range(1, n + 1):
                dist[e] = n + 1
        s = 0
        while s < n:
            node = first[data[a + s]]
            e = s + 1  # node spells data[a + s:a + e]
            while True:
                t = node_token[node]
                if t >= 0:
                    reach[s], reach_id[s] = e, t
                    if shortest and dist[s] + 1 < dist[e]:
                        dist[e] = dist[s] + 1
                        last[e] = s
                        last_id[e] = t
                if e == n:
                    break
                node = next_node(node, data, a, s, e, second, edges, bits, mask)
                if node < 0:
                    break
                e += 1
            s = s + 1 if shortest else reach[s]
        k = 0
        s = 0
        while greedy and s < n:
            greedy_totals[reach_id[s]] += w
            if emit:
                out[a + k] = reach_id[s]
            k += 1
            s = reach[s]
        if shortest:
            e = n
            k = 0
            while e > 0:
                found[k] = last_id[e]
                k += 1
                e = last[e]
            for j in range(k):
                shortest_totals[found[k - 1 - j]] += w
                if emit:
                    out[a + j] = found[k - 1 - j]
        if emit:
            n_out[c] = k


@kernel(twin="parbpe.tokenizer.model:Tokenizer._merge_long")
def merges_kernel(data: np.ndarray, offsets: np.ndarray, weights: np.ndarray, byte_ids: np.ndarray,
                  byte_pairs: np.ndarray, pairs: np.ndarray, bits: int, merges: np.ndarray,
                  totals: np.ndarray, out: np.ndarray, n_out: np.ndarray, longest: int) -> None:
    """Chunks encoded by merges in rank order: a min-heap of rank * 2^32 + position (the lowest rank
    first, its positions left to right) over a linked list of the chunk's tokens. An entry whose pair
    changed since it was pushed is skipped; a merge's new pairs (at its position and the one before)
    hold its new token, so they rank later. merges[r] = (a, b, new)."""
    mask = (1 << bits) - 1
    emit = len(out) > 0
    tokens = np.empty(longest + 1, dtype=np.int64)
    nxt = np.empty(longest + 1, dtype=np.int64)
    prv = np.empty(longest + 1, dtype=np.int64)
    pending = np.empty(longest + 1, dtype=np.int64)  # positions whose pair (with the next token) is new
    heap = np.empty(3 * longest + 1, dtype=np.int64)
    for c in range(len(offsets) - 1):
        a = offsets[c]
        n = offsets[c + 1] - a
        for i in range(n):
            tokens[i] = byte_ids[data[a + i]]
            nxt[i] = i + 1
            prv[i] = i - 1
            pending[i] = i
        n_pending = n - 1
        bytes_only = True  # the first pairs are of bytes: looked up in byte_pairs
        size = 0
        while n_pending > 0:
            for q in range(n_pending):  # push the new pairs that are merges
                left = pending[q]
                if left < 0 or nxt[left] >= n:
                    continue
                if bytes_only:
                    rank = byte_pairs[data[a + left] * 256 + data[a + left + 1]]
                else:
                    key = (tokens[left] << 32) | tokens[nxt[left]]
                    slot = slot_of(pairs, key, bits, mask)
                    rank = pairs[slot, 1] if pairs[slot, 0] == key else -1
                if rank < 0:
                    continue
                size = push(heap, size, (rank << 32) | left)
            n_pending = 0
            bytes_only = False
            while size > 0 and not n_pending:  # pop until an entry still holds its pair: merge it
                entry, size = pop(heap, size)
                rank = entry >> 32
                i = entry & 0xFFFFFFFF
                j = nxt[i]
                if j >= n or tokens[i] != merges[rank, 0] or tokens[j] != merges[rank, 1]:
                    continue
                tokens[i] = merges[rank, 2]
                tokens[j] = -1
                nxt[i] = nxt[j]
                if nxt[j] < n:
                    prv[nxt[j]] = i
                pending[0] = i
                pending[1] = prv[i]
                n_pending = 2
        k = 0
        i = 0
        while i < n:
            totals[tokens[i]] += weights[c]
            if emit:
                out[a + k] = tokens[i]
            k += 1
            i = nxt[i]
        if emit:
            n_out[c] = k

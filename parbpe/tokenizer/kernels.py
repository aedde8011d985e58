"""numba kernels for segmenting a table of chunks (flat bytes, offsets, counts) by merges, greedy or shortest.

They give exactly what the numpy and Python paths give (tests compare them): `merges` is
Tokenizer._merge_long (a heap of (rank, position) over a linked list: the lowest rank first, its
occurrences left to right), `greedy` and `shortest` are segment.py's rules walked over a trie of the
vocabulary from every position (shortest: the forward pass keeps, for every end, the first start
reaching it with the fewest tokens, which is the longest last token; the backtrack follows them).
A chunk at a time, with scratch arrays the size of the longest chunk: no padded batches. Each kernel
adds every token's chunk count to `totals` and, when `out` is not empty, writes the tokens of chunk c
to out[offsets[c]:] (a chunk has at most as many tokens as bytes) and their number to `n_out[c]`.

Lookups are open-addressing hash tables of int64 keys (-1: empty slot): trie edges keyed
node * 256 + byte, merge pairs keyed a * 2^32 + b; the slot is the top bits of key * a Fibonacci
constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..jit import kernel

_MIX = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: multiplicative hashing


@kernel
def fill_hash(keys: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """An open-addressing table of 2^bits slots holding keys (>= 0): (slot keys, -1 if empty; the index
    in keys of each slot's key). A repeated key keeps its last index."""
    mask = (1 << bits) - 1
    slot_keys = np.full(1 << bits, -1, dtype=np.int64)
    where = np.full(1 << bits, -1, dtype=np.int64)
    for k in range(len(keys)):
        key = keys[k]
        slot = ((key * _MIX) >> (64 - bits)) & mask
        while slot_keys[slot] != -1 and slot_keys[slot] != key:
            slot = (slot + 1) & mask
        slot_keys[slot] = key
        where[slot] = k
    return slot_keys, where


@dataclass
class HashTable:
    """Keys (>= 0) in an open-addressing table with a value per slot (filled by fill_hash)."""

    keys: np.ndarray
    values: np.ndarray
    bits: int

    @classmethod
    def of(cls, keys: np.ndarray, values: np.ndarray) -> HashTable:
        """The table of keys -> values, at most half full (a repeated key keeps its last value)."""
        bits = max(int(2 * len(keys)).bit_length(), 4)
        slot_keys, where = fill_hash(np.ascontiguousarray(keys, dtype=np.int64), bits)
        return cls(slot_keys, np.where(where >= 0, values[np.maximum(where, 0)], -1).astype(np.int64), bits)


@dataclass
class Trie:
    """A vocabulary as a trie: edges (node * 256 + byte -> child) in a hash table; token[node] is the
    id of the token spelled by the path to node (-1: a prefix only); node 0 is the root."""

    edges: HashTable
    token: np.ndarray

    @classmethod
    def of(cls, tokens: Sequence[bytes], ids: np.ndarray) -> Trie:
        """The trie of tokens, token k having id ids[k]."""
        node_of = {b"": 0}
        edge_keys, children = [], []
        for t in tokens:
            for length in range(1, len(t) + 1):
                prefix = t[:length]
                if prefix not in node_of:
                    edge_keys.append(node_of[t[:length - 1]] * 256 + t[length - 1])
                    children.append(len(node_of))
                    node_of[prefix] = len(node_of)
        token = np.full(len(node_of), -1, dtype=np.int64)
        token[[node_of[t] for t in tokens]] = ids
        return cls(HashTable.of(np.array(edge_keys, dtype=np.int64), np.array(children, dtype=np.int64)), token)


@dataclass
class MergeTable:
    """A tokenizer's merges for the merges kernel: byte_ids[b] the token of byte b; merges[r] = (a, b,
    new); pairs a * 2^32 + b -> rank (a pair merged twice keeps its last rank, as Tokenizer._ranks)."""

    byte_ids: np.ndarray
    merges: np.ndarray
    pairs: HashTable

    @classmethod
    def of(cls, byte_ids: Sequence[int], merges: Sequence[tuple[int, int, int]]) -> MergeTable:
        m = np.array(merges, dtype=np.int64).reshape(-1, 3)
        keys = (m[:, 0] << 32) | m[:, 1]
        return cls(np.array(byte_ids, dtype=np.int64), m, HashTable.of(keys, np.arange(len(m), dtype=np.int64)))


@kernel
def segment_kernel(data: np.ndarray, offsets: np.ndarray, weights: np.ndarray, edge_keys: np.ndarray,
                   edge_values: np.ndarray, bits: int, node_token: np.ndarray, shortest: bool,
                   totals: np.ndarray, out: np.ndarray, n_out: np.ndarray) -> None:
    """Chunks segmented greedily (longest token prefixing the rest) or into the fewest tokens (ties:
    the longest last token, recursively), the tokens found by walking the trie from each start."""
    mask = (1 << bits) - 1
    emit = len(out) > 0
    longest = 0
    for c in range(len(offsets) - 1):
        longest = max(longest, offsets[c + 1] - offsets[c])
    dist = np.empty(longest + 1, dtype=np.int64)  # shortest: fewest tokens to reach each end
    last = np.empty(longest + 1, dtype=np.int64)  # shortest: the start of the last token to each end
    last_id = np.empty(longest + 1, dtype=np.int64)
    found = np.empty(longest, dtype=np.int64)  # the tokens of a chunk, last first (shortest)
    for c in range(len(offsets) - 1):
        a = offsets[c]
        n = offsets[c + 1] - a
        w = weights[c]
        k = 0
        s = 0
        if shortest:
            dist[0] = 0
            for e in range(1, n + 1):
                dist[e] = n + 1
        while s < n:
            best = 0
            best_id = -1
            node = 0
            e = s
            while e < n:
                key = node * 256 + data[a + e]
                slot = ((key * _MIX) >> (64 - bits)) & mask
                while edge_keys[slot] != key and edge_keys[slot] != -1:
                    slot = (slot + 1) & mask
                if edge_keys[slot] == -1:
                    break
                node = edge_values[slot]
                e += 1
                t = node_token[node]
                if t >= 0:
                    best, best_id = e, t
                    if shortest and dist[s] + 1 < dist[e]:
                        dist[e] = dist[s] + 1
                        last[e] = s
                        last_id[e] = t
            if shortest:
                s += 1
            else:
                totals[best_id] += w
                if emit:
                    out[a + k] = best_id
                k += 1
                s = best
        if shortest:
            e = n
            while e > 0:
                found[k] = last_id[e]
                k += 1
                e = last[e]
            for j in range(k):
                totals[found[k - 1 - j]] += w
                if emit:
                    out[a + j] = found[k - 1 - j]
        if emit:
            n_out[c] = k


@kernel
def merges_kernel(data: np.ndarray, offsets: np.ndarray, weights: np.ndarray, byte_ids: np.ndarray,
                  pair_keys: np.ndarray, pair_ranks: np.ndarray, bits: int, merges: np.ndarray,
                  totals: np.ndarray, out: np.ndarray, n_out: np.ndarray) -> None:
    """Chunks encoded by merges in rank order: a min-heap of rank * 2^32 + position (the lowest rank
    first, its positions left to right) over a linked list of the chunk's tokens. An entry whose pair
    changed since it was pushed is skipped; a merge's new pairs (at its position and the one before)
    hold its new token, so they rank later. merges[r] = (a, b, new)."""
    mask = (1 << bits) - 1
    emit = len(out) > 0
    longest = 0
    for c in range(len(offsets) - 1):
        longest = max(longest, offsets[c + 1] - offsets[c])
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
        n_pending = n
        size = 0
        while n_pending:
            for q in range(n_pending):  # push the new pairs that are merges
                left = pending[q]
                if left < 0 or nxt[left] >= n:
                    continue
                key = (tokens[left] << 32) | tokens[nxt[left]]
                slot = ((key * _MIX) >> (64 - bits)) & mask
                while pair_keys[slot] != key and pair_keys[slot] != -1:
                    slot = (slot + 1) & mask
                if pair_keys[slot] == -1:
                    continue
                entry = (pair_ranks[slot] << 32) | left
                p = size
                size += 1
                while p > 0 and heap[(p - 1) >> 1] > entry:
                    heap[p] = heap[(p - 1) >> 1]
                    p = (p - 1) >> 1
                heap[p] = entry
            n_pending = 0
            while size > 0 and not n_pending:  # pop until an entry still holds its pair: merge it
                entry = heap[0]
                size -= 1
                moved = heap[size]
                p = 0
                child = 1
                while child < size:
                    if child + 1 < size and heap[child + 1] < heap[child]:
                        child += 1
                    if heap[child] >= moved:
                        break
                    heap[p] = heap[child]
                    p = child
                    child = 2 * p + 1
                heap[p] = moved
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


@dataclass
class KernelTables:
    """What the kernels need of a tokenizer: the trie of its vocabulary (greedy, shortest) and its merges."""

    trie: Trie
    merges: MergeTable | None
    size: int  # one more than the largest token id


def token_totals(tables: KernelTables, method: str, data: np.ndarray, offsets: np.ndarray, weights: np.ndarray,
                 size: int) -> np.ndarray:
    """Occurrences (int64, index = token id, `size` ids) of each token when chunk k (data[offsets[k]:
    offsets[k + 1]]) seen weights[k] times is segmented by method."""
    totals = np.zeros(size, dtype=np.int64)
    _run(tables, method, data, offsets, np.asarray(weights, dtype=np.int64), totals, _NONE, _NONE)
    return totals


def chunk_tokens(tables: KernelTables, method: str, data: np.ndarray, offsets: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(chunk index, token id) of every token of the chunks by method, in order."""
    n = len(offsets) - 1
    lo, hi = int(offsets[0]), int(offsets[-1])
    base = offsets - lo
    out = np.empty(max(hi - lo, 1), dtype=np.int64)
    n_out = np.zeros(n, dtype=np.int64)
    _run(tables, method, data[lo:hi], base, np.zeros(n, dtype=np.int64), np.zeros(tables.size, dtype=np.int64),
         out, n_out)
    within = np.arange(int(n_out.sum())) - np.repeat(np.cumsum(n_out) - n_out, n_out)
    return np.repeat(np.arange(n), n_out), out[np.repeat(base[:-1], n_out) + within]


def load(tables: KernelTables, methods: Sequence[str]) -> None:
    """Compile (or load from the disk cache) the kernels of methods in this process, on one chunk:
    workers forked after this share them instead of loading them each."""
    for method in methods:
        token_totals(tables, method, np.zeros(1, dtype=np.uint8), np.array([0, 1]), np.ones(1), tables.size)


_NONE = np.zeros(0, dtype=np.int64)


def _run(tables: KernelTables, method: str, data: np.ndarray, offsets: np.ndarray, weights: np.ndarray,
         totals: np.ndarray, out: np.ndarray, n_out: np.ndarray) -> None:
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if method == "merges":
        if tables.merges is None:
            raise ValueError("this tokenizer is a vocabulary without merges: segment it with greedy or shortest")
        m = tables.merges
        merges_kernel(data, offsets, weights, m.byte_ids, m.pairs.keys, m.pairs.values, m.pairs.bits, m.merges,
                      totals, out, n_out)
    else:
        t = tables.trie
        segment_kernel(data, offsets, weights, t.edges.keys, t.edges.values, t.edges.bits, t.token,
                       method == "shortest", totals, out, n_out)

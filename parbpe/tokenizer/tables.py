"""The tables the segmentation kernels read (kernels/segment.py) and the calls that segment a table of
chunks (flat bytes, offsets, counts) with them: a trie of the vocabulary (greedy, shortest) and the
merges (merges), each with its first levels dense and the rest in open-addressing hash tables.
The numpy and Python paths (segment.py, Tokenizer) are the reference; tests compare them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..kernels.segment import fill_hash, merges_kernel, segment_kernel
from .segment import _matrix


@dataclass
class HashTable:
    """Keys (>= 0) and their values in an open-addressing table: slots[s] = (key or -1, value), a key
    and its value side by side (one cache line a probe)."""

    slots: np.ndarray
    bits: int

    @classmethod
    def of(cls, keys: np.ndarray, values: np.ndarray) -> HashTable:
        """The table of keys -> values, at most half full (a repeated key keeps its last value)."""
        bits = max(int(2 * len(keys)).bit_length(), 4)
        slots = fill_hash(np.ascontiguousarray(keys, dtype=np.int64), bits)
        filled = slots[:, 0] >= 0
        slots[filled, 1] = np.asarray(values, dtype=np.int64)[slots[filled, 1]]
        return cls(slots, bits)


@dataclass
class Trie:
    """A vocabulary as a trie: node 0 is the root, token[node] the id of the token spelled by the path
    to node (-1: a prefix only). The first two levels are dense (first[b], second[b * 256 + c]: the node
    of a 1- and 2-byte prefix, -1 for none), deeper edges (node * 256 + byte -> child) are hashed."""

    first: np.ndarray
    second: np.ndarray
    edges: HashTable
    token: np.ndarray

    @classmethod
    def of(cls, tokens: Sequence[bytes], ids: np.ndarray) -> Trie:
        """The trie of tokens (every single byte among them), token k having id ids[k]; built a level
        (prefix length) at a time: the nodes of a level are the distinct (parent, byte) keys."""
        rows, lengths = _matrix(tokens)
        node = np.zeros(len(tokens), dtype=np.int64)  # each token's node at the current level
        levels = []  # per level: the distinct (parent * 256 + byte) keys; nodes numbered in this order
        count = 1
        for length in range(1, int(lengths.max()) + 1):
            alive = np.flatnonzero(lengths >= length)
            keys, inverse = np.unique(node[alive] * 256 + rows[alive, length - 1], return_inverse=True)
            node[alive] = count + inverse.reshape(-1)
            levels.append((keys, count + np.arange(len(keys), dtype=np.int64)))
            count += len(keys)
        token = np.full(count, -1, dtype=np.int64)
        token[node] = ids
        first = np.full(256, -1, dtype=np.int64)
        first[levels[0][0]] = levels[0][1]
        second = np.full(256 * 256, -1, dtype=np.int64)
        if len(levels) > 1:  # a 2-byte prefix's key is (its first byte's node) * 256 + its second byte
            keys, children = levels[1]
            second[levels[0][0][keys // 256 - 1] * 256 + keys % 256] = children  # level 1's nodes: 1, 2, ...
        deep = levels[2:] or [(np.zeros(0, dtype=np.int64),) * 2]
        edges = HashTable.of(np.concatenate([k for k, _ in deep]), np.concatenate([c for _, c in deep]))
        return cls(first, second, edges, token)


@dataclass
class MergeTable:
    """A tokenizer's merges for the merges kernel: byte_ids[b] the token of byte b; merges[r] = (a, b,
    new); pairs a * 2^32 + b -> rank (a pair merged twice keeps its last rank, as Tokenizer._ranks);
    byte_pairs[x * 256 + y]: the rank of the pair of bytes x, y (-1: none), the first lookups dense."""

    byte_ids: np.ndarray
    merges: np.ndarray
    pairs: HashTable
    byte_pairs: np.ndarray

    @classmethod
    def of(cls, byte_ids: Sequence[int], merges: Sequence[tuple[int, int, int]]) -> MergeTable:
        m = np.array(merges, dtype=np.int64).reshape(-1, 3)
        ranks = np.arange(len(m), dtype=np.int64)
        byte_of = np.full(int(max(m.max(initial=0), max(byte_ids))) + 1, -1, dtype=np.int64)
        byte_of[list(byte_ids)] = np.arange(256)
        x, y = byte_of[m[:, 0]], byte_of[m[:, 1]]
        both = (x >= 0) & (y >= 0)
        byte_pairs = np.full(256 * 256, -1, dtype=np.int64)
        np.maximum.at(byte_pairs, x[both] * 256 + y[both], ranks[both])
        return cls(np.array(byte_ids, dtype=np.int64), m, HashTable.of((m[:, 0] << 32) | m[:, 1], ranks), byte_pairs)


@dataclass
class KernelTables:
    """What the kernels need of a tokenizer: the trie of its vocabulary (greedy, shortest) and its merges."""

    trie: Trie
    merges: MergeTable | None
    size: int  # one more than the largest token id


def token_totals(tables: KernelTables, methods: Sequence[str], data: np.ndarray, offsets: np.ndarray,
                 weights: np.ndarray) -> dict[str, np.ndarray]:
    """Per method, the occurrences (int64, index = token id) of each token when chunk k (data[offsets[k]:
    offsets[k + 1]]) seen weights[k] times is segmented by it; greedy and shortest in one pass."""
    totals = {m: np.zeros(tables.size, dtype=np.int64) for m in methods}
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.int64)
    if "merges" in totals:
        _merges(tables, data, offsets, weights, totals["merges"], _NONE, _NONE)
    if "greedy" in totals or "shortest" in totals:
        t = tables.trie
        segment_kernel(data, offsets, weights, t.first, t.second, t.edges.slots, t.edges.bits, t.token,
                       totals.get("greedy", _NONE), totals.get("shortest", _NONE), _NONE, _NONE, _longest(offsets))
    return totals


def chunk_tokens(tables: KernelTables, method: str, data: np.ndarray, offsets: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(chunk index, token id) of every token of the chunks by method, in order."""
    n = len(offsets) - 1
    lo, hi = int(offsets[0]), int(offsets[-1])
    data, offsets = data[lo:hi], np.ascontiguousarray(offsets - lo, dtype=np.int64)
    out = np.empty(max(hi - lo, 1), dtype=np.int64)
    n_out = np.zeros(n, dtype=np.int64)
    weights, totals = np.zeros(n, dtype=np.int64), np.zeros(tables.size, dtype=np.int64)
    if method == "merges":
        _merges(tables, data, offsets, weights, totals, out, n_out)
    else:
        t = tables.trie
        segment_kernel(data, offsets, weights, t.first, t.second, t.edges.slots, t.edges.bits, t.token,
                       totals if method == "greedy" else _NONE, totals if method == "shortest" else _NONE, out,
                       n_out, _longest(offsets))
    within = np.arange(int(n_out.sum())) - np.repeat(np.cumsum(n_out) - n_out, n_out)
    return np.repeat(np.arange(n), n_out), out[np.repeat(offsets[:-1], n_out) + within]


def load(tables: KernelTables, methods: Sequence[str]) -> None:
    """Compile (or load from the disk cache) the kernels of methods in this process, on one chunk:
    workers forked after this share them instead of loading them each."""
    token_totals(tables, methods, np.zeros(1, dtype=np.uint8), np.array([0, 1]), np.ones(1))


_NONE = np.zeros(0, dtype=np.int64)


def _merges(tables: KernelTables, data: np.ndarray, offsets: np.ndarray, weights: np.ndarray, totals: np.ndarray,
            out: np.ndarray, n_out: np.ndarray) -> None:
    if tables.merges is None:
        raise ValueError("this tokenizer is a vocabulary without merges: segment it with greedy or shortest")
    m = tables.merges
    merges_kernel(data, offsets, weights, m.byte_ids, m.byte_pairs, m.pairs.slots, m.pairs.bits, m.merges, totals,
                  out, n_out, _longest(offsets))


def _longest(offsets: np.ndarray) -> int:
    """The longest chunk's bytes: the kernels' scratch arrays are this long."""
    return int(np.diff(offsets).max(initial=0))

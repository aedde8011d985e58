"""Short strings as uint64 keys: exact counting with numpy sorts instead of hashing.

A string of 1 to 8 bytes, none of them zero, is its bytes read as one little-endian uint64 (zeros
pad it; with no zero byte inside, the padding is unambiguous). Equal keys are equal strings, so
counting the distinct short strings of a batch is a sort and one pass over runs (numpy's SIMD
sort of uint64 is several times faster than hashing the strings with pyarrow), and adding up the
counts of many batches is an argsort and one reduceat. Most pieces of text are this short
(realmix: 80% of the pieces).

Strings of 9 to 16 bytes (realmix: 92% of the rest) are pairs of such words. Pairs are counted by
sorting a 64-bit hash of each pair (numpy's SIMD sort again, no argsort) and finding each pair's
hash among the distinct ones; a pair is then checked against the pair kept for its hash, so two
pairs that share a hash are caught, and that batch is counted exactly by a sort of the pairs
themselves (slower, and as good as never needed: 64-bit hashes of a few million pairs).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

MAX_BYTES = 8
_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(MAX_BYTES + 1)], dtype=np.uint64)


def fits(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, max_bytes: int = MAX_BYTES) -> np.ndarray:
    """Which strings data[starts[i]:starts[i] + lengths[i]] can be keys (max_bytes 8) or pairs of keys
    (16): 1 to max_bytes bytes, no zero byte."""
    ok = (lengths >= 1) & (lengths <= max_bytes)
    zeros = np.flatnonzero(data == 0)
    if len(zeros):  # rare: mark the strings that hold a zero byte
        holder = np.searchsorted(starts, zeros, side="right") - 1
        inside = (holder >= 0) & (zeros < starts[np.maximum(holder, 0)] + lengths[np.maximum(holder, 0)])
        ok[holder[inside]] = False
    return ok


def keys_of(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """8 bytes read at each start, masked to the string's length (its key if it fits; see fits).

    Starts are ascending: only the last few strings can end within 8 bytes of the end, and those
    read from a padded copy of the tail."""
    n = len(starts)
    keys = np.empty(n, np.uint64)
    near_end = int(np.searchsorted(starts, len(data) - MAX_BYTES, side="right"))
    if near_end:
        words = np.ndarray(shape=(len(data) - MAX_BYTES + 1,), dtype="<u8", buffer=data, strides=(1,))  # unaligned
        keys[:near_end] = words[starts[:near_end]]
    if near_end < n:
        tail_from = max(len(data) - MAX_BYTES, 0)
        tail = np.concatenate([data[tail_from:], np.zeros(MAX_BYTES, np.uint8)])
        words = np.ndarray(shape=(len(tail) - MAX_BYTES + 1,), dtype="<u8", buffer=tail, strides=(1,))
        keys[near_end:] = words[starts[near_end:] - tail_from]
    keys &= _MASKS[np.minimum(lengths, MAX_BYTES)]
    return keys


def count_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys (ascending) and how often each occurs."""
    keys = np.sort(keys)
    if len(keys) == 0:
        return keys, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[starts], np.diff(np.append(starts, len(keys)))


def sum_keys(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys (ascending) and the sum of their counts (int64).

    The distinct keys from a sort of the keys alone, each key's place among them by a binary
    search, and the sums by bincount: numpy's argsort of uint64 is several times slower."""
    distinct = _distinct_sorted(np.sort(keys))
    return distinct, sum_by(np.searchsorted(distinct, keys), counts, len(distinct))


def _distinct_sorted(ordered: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array."""
    if len(ordered) == 0:
        return ordered
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])]


def sum_by(index: np.ndarray, counts: np.ndarray | None, n: int) -> np.ndarray:
    """Sums of counts by index (0 <= index < n), exactly, as int64 (counts None: each counts once).
    bincount's float64 sums are exact while the total stays below 2**53, else np.add.at adds."""
    if counts is None:
        return np.bincount(index, minlength=n).astype(np.int64, copy=False)
    counts = np.asarray(counts, np.int64)
    if len(counts) == 0 or int(counts.sum(dtype=np.float64)) < _FLOAT_EXACT:
        return np.bincount(index, weights=counts.astype(np.float64), minlength=n).astype(np.int64)
    sums = np.zeros(n, np.int64)
    np.add.at(sums, index, counts)
    return sums


_FLOAT_EXACT = 2**52  # with room: the float64 sum that checks the bound may round
_MIX = np.uint64(0x9E3779B97F4A7C15)
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)
SLICE_BITS = 18  # pairs counted by one sort: their index fits the low bits of the hash
_LOW = np.uint64((1 << SLICE_BITS) - 1)


def pair_hash(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each pair of words (any fixed mix will do: pairs are checked after)."""
    h = (first * _MIX) ^ second
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]  # first words, second words, counts (int64)


def sum_pairs(first: np.ndarray, second: np.ndarray, counts: np.ndarray | None = None) -> Pairs:
    """Distinct pairs (first[i], second[i]) and the sum of their counts (each pair once if counts is
    None), in the order of their hashes. Slices of 2**SLICE_BITS pairs are counted by one sort
    each: the hash's low bits replaced by the pair's index, so that the sorted values give the
    order too (argsort is several times slower); then the slices are merged (merge_pairs)."""
    step = 1 << SLICE_BITS
    runs = [_sum_slice(first[i:i + step], second[i:i + step], None if counts is None else counts[i:i + step])
            for i in range(0, len(first), step)]
    return runs[0] if len(runs) == 1 else merge_pairs(runs)


def _sum_slice(first: np.ndarray, second: np.ndarray, counts: np.ndarray | None) -> Pairs:
    n = len(first)
    if n == 0:
        return first, second, np.zeros(0, np.int64)
    packed = np.sort((pair_hash(first, second) & ~_LOW) | np.arange(n, dtype=np.uint64))
    order = (packed & _LOW).astype(np.intp)
    high = packed & ~_LOW
    first, second = first[order], second[order]
    same_hash = high[1:] == high[:-1]
    same = same_hash & (first[1:] == first[:-1]) & (second[1:] == second[:-1])
    if (same != same_hash).any():  # two pairs share the hash's high bits: their rows may interleave
        return _sum_exactly([(first, second, np.ones(n, np.int64) if counts is None else counts[order])])
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    sums = (np.diff(np.append(starts, n)) if counts is None
            else np.add.reduceat(np.asarray(counts, np.int64)[order], starts))
    return first[starts], second[starts], sums


def merge_pairs(runs: list[Pairs]) -> Pairs:
    """Runs of distinct pairs (each in hash order, as sum_pairs gives them) summed into one.

    Each run finds its pairs' places among all distinct hashes by a binary search of its own
    hashes, which come in order (fast: numpy's search starts from the last place found)."""
    runs = [run for run in runs if len(run[0])]
    if len(runs) <= 1:
        return runs[0] if runs else (np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
    hashes = [pair_hash(first, second) for first, second, _ in runs]
    distinct = _distinct_sorted(np.sort(np.concatenate(hashes)))
    kept_first = np.empty(len(distinct), np.uint64)
    kept_second = np.empty(len(distinct), np.uint64)
    sums = np.zeros(len(distinct), np.int64)
    places = [np.searchsorted(distinct, h) for h in hashes]
    for (first, second, counts), at in zip(runs, places):
        kept_first[at], kept_second[at] = first, second
        sums[at] += counts  # a run holds each hash once
    for (first, second, _), at in zip(runs, places):
        if (kept_first[at] != first).any() or (kept_second[at] != second).any():  # two pairs share a hash
            return _sum_exactly(runs)
    return kept_first, kept_second, sums


def _sum_exactly(runs: list[Pairs]) -> Pairs:
    """sum_pairs without hashes (a sort of the pairs themselves, slower): for pairs that share one."""
    first, second, counts = (np.concatenate(part) for part in zip(*runs))
    order = np.lexsort((second, first))
    first, second = first[order], second[order]
    new = np.concatenate([[True], (first[1:] != first[:-1]) | (second[1:] != second[:-1])])
    return first[new], second[new], np.add.reduceat(np.asarray(counts, np.int64)[order], np.flatnonzero(new))


def merge_keys(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Runs of distinct keys in ascending order with their counts, summed into one (as merge_pairs)."""
    runs = [run for run in runs if len(run[0])]
    if len(runs) <= 1:
        return runs[0] if runs else (np.zeros(0, np.uint64), np.zeros(0, np.int64))
    distinct = _distinct_sorted(np.sort(np.concatenate([keys for keys, _ in runs])))
    sums = np.zeros(len(distinct), np.int64)
    for keys, counts in runs:
        sums[np.searchsorted(distinct, keys)] += counts
    return distinct, sums


def strings_of(keys: np.ndarray, second: np.ndarray | None = None) -> pa.Array:
    """The strings of keys (or of pairs of keys, with their second words), as a pyarrow string array."""
    words = keys if second is None else np.stack([keys, second], axis=1)
    rows = np.ascontiguousarray(words, dtype="<u8").view(np.uint8).reshape(len(keys), 8 if second is None else 16)
    present = rows != 0
    offsets = np.zeros(len(keys) + 1, np.int32)
    np.cumsum(present.sum(axis=1), out=offsets[1:])
    data = rows[present]  # row by row, the non-zero bytes: the string (no zero byte inside)
    return pa.StringArray.from_buffers(len(keys), pa.py_buffer(offsets), pa.py_buffer(data))

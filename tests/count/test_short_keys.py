"""Short strings as uint64 keys, and StringCounts, against Counters of Python bytes."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from parbpe.count import short_keys
from parbpe.count.pieces import StringCounts


def _random_strings(rng: random.Random, n: int) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """Strings of 0 to 12 bytes end to end (zero bytes and 0xFF included): (data, bounds, strings)."""
    alphabet = [0, 1, 0x41, 0x61, 0x62, 0x20, 0x80, 0xC3, 0xFF]
    strings = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(n)]
    bounds = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
    return np.frombuffer(b"".join(strings), np.uint8), bounds, strings


@pytest.mark.parametrize("seed", range(6))
def test_keys_are_exact_for_the_strings_that_fit(seed):
    rng = random.Random(seed)
    data, bounds, strings = _random_strings(rng, 3000)
    starts, lengths = bounds[:-1], np.diff(bounds)
    fits = short_keys.fits(data, starts, lengths)
    assert fits.tolist() == [1 <= len(s) <= 8 and 0 not in s for s in strings]
    keys = short_keys.keys_of(data, starts, lengths)[fits]
    back = [v.as_buffer().to_pybytes() for v in short_keys.strings_of(keys)]
    assert back == [s for s, f in zip(strings, fits) if f]
    # equal keys exactly for equal strings
    by_key: dict[int, bytes] = {}
    for key, s in zip(keys.tolist(), back):
        assert by_key.setdefault(key, s) == s
    assert len(set(keys.tolist())) == len(set(back))


def test_keys_near_the_end_of_the_data():
    """The last strings end within 8 bytes of the end: read from a padded tail, not past the buffer."""
    for text in [b"a", b"ab", b"abcdefgh", b"abcdefghi", b"xy z", b"12345678" * 3]:
        data = np.frombuffer(text, np.uint8)
        starts = np.arange(len(text), dtype=np.int64)
        lengths = len(text) - starts
        keys = short_keys.keys_of(data, starts, lengths)
        fits = short_keys.fits(data, starts, lengths)
        assert [v.as_buffer().to_pybytes() for v in short_keys.strings_of(keys[fits])] == \
            [text[s:] for s in starts.tolist() if len(text) - s <= 8]


@pytest.mark.parametrize("seed", range(4))
def test_count_and_sum_keys_equal_counters(seed):
    rng = np.random.default_rng(seed)
    keys = rng.integers(1, 50, 5000).astype(np.uint64) * np.uint64(0x0101010101)
    uniq, counts = short_keys.count_keys(keys)
    assert dict(zip(uniq.tolist(), counts.tolist())) == Counter(keys.tolist())
    assert (np.diff(uniq.astype(np.float64)) > 0).all()
    weights = rng.integers(1, 10**12, 5000)
    uniq, sums = short_keys.sum_keys(keys, weights)
    expected: Counter[int] = Counter()
    for k, w in zip(keys.tolist(), weights.tolist()):
        expected[k] += w
    assert dict(zip(uniq.tolist(), sums.tolist())) == expected
    assert short_keys.count_keys(keys[:0])[0].size == 0 and short_keys.sum_keys(keys[:0], weights[:0])[1].size == 0


def _as_counter(table: pa.Table) -> Counter[bytes]:
    chunks = [v.as_buffer().to_pybytes() for v in table.column("chunk").combine_chunks()]
    assert len(set(chunks)) == len(chunks), "a string is held twice"
    return Counter(dict(zip(chunks, table.column("count").to_pylist())))


def _string_counts(hashed: bool) -> StringCounts:
    """StringCounts as numpy sums them, or with the JIT's hash tables (key_tables.py)."""
    if hashed:
        pytest.importorskip("numba")
    return StringCounts(hashed=hashed)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("hashed", [False, True])
def test_string_counts_sum_batches_exactly(weighted, hashed):
    rng = random.Random(7)
    counts = _string_counts(hashed)
    expected: Counter[bytes] = Counter()
    for batch in range(6):
        data, bounds, strings = _random_strings(rng, 800)
        # UTF-8 is not required of keys, but tables hold strings: keep the bytes valid UTF-8 here
        strings = [s.decode("utf-8", "replace").encode() for s in strings]
        bounds = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
        data = np.frombuffer(b"".join(strings), np.uint8)
        weights = np.array([rng.randint(1, 9) for _ in strings], np.int64) if weighted else None
        nonempty = np.diff(bounds) > 0  # pieces and chunks are never empty
        bounds = np.concatenate([bounds[:-1][nonempty], bounds[-1:]])
        kept = [s for s in strings if s]
        counts.add(data, bounds, weights[nonempty] if weighted else None)
        for i, s in enumerate(kept):
            expected[s] += int(weights[nonempty][i]) if weighted else 1
        if batch == 3:
            counts.sum()
            assert counts.rows == len(set(expected))
    assert _as_counter(counts.table()) == expected


def _pairs_counter(first, second, counts) -> Counter:
    return Counter(dict(zip(zip(first.tolist(), second.tolist()), counts.tolist())))


def _weak_hash(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """A hash most pairs share (the top bits of a small value), to drive the exact fallback."""
    return (second % np.uint64(3)) << np.uint64(62)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("slice_bits", [18, 4])
@pytest.mark.parametrize("weak", [False, True])
def test_sum_and_merge_pairs_equal_counters(weighted, slice_bits, weak, monkeypatch):
    monkeypatch.setattr(short_keys, "SLICE_BITS", slice_bits)
    monkeypatch.setattr(short_keys, "_LOW", np.uint64((1 << slice_bits) - 1))
    if weak:
        monkeypatch.setattr(short_keys, "pair_hash", _weak_hash)
    rng = np.random.default_rng(slice_bits + weighted)
    runs, expected = [], Counter()
    for _ in range(4):
        first = rng.integers(1, 6, 700).astype(np.uint64) << np.uint64(56)
        second = rng.integers(1, 40, 700).astype(np.uint64)
        weights = rng.integers(1, 10**12, 700) if weighted else None
        run = short_keys.sum_pairs(first, second, weights)
        assert len(set(zip(run[0].tolist(), run[1].tolist()))) == len(run[0])  # distinct
        expected_run: Counter = Counter()
        for key, w in zip(zip(first.tolist(), second.tolist()), weights.tolist() if weighted else [1] * 700):
            expected_run[key] += w
        assert _pairs_counter(*run) == expected_run
        runs.append(run)
        expected += expected_run
    merged = short_keys.merge_pairs(runs)
    assert len(set(zip(merged[0].tolist(), merged[1].tolist()))) == len(merged[0])
    assert _pairs_counter(*merged) == expected
    empty = np.zeros(0, np.uint64)
    assert short_keys.sum_pairs(empty, empty)[2].size == 0 and short_keys.merge_pairs([])[0].size == 0


def test_merge_keys_equals_counter():
    rng = np.random.default_rng(3)
    runs, expected = [], Counter()
    for _ in range(5):
        keys, counts = short_keys.count_keys(rng.integers(1, 300, 2000).astype(np.uint64))
        runs.append((keys, counts))
        expected += Counter(dict(zip(keys.tolist(), counts.tolist())))
    keys, sums = short_keys.merge_keys(runs)
    assert (np.diff(keys.astype(np.float64)) > 0).all()
    assert dict(zip(keys.tolist(), sums.tolist())) == expected


@pytest.mark.parametrize("weak", [False, True])
@pytest.mark.parametrize("hashed", [False, True])
def test_string_counts_of_every_length_with_any_hash(weak, hashed, monkeypatch):
    """Strings of 1 to 24 bytes (short keys, pairs, pyarrow's), summed over batches, and read back
    whole (table) and in batches (buffers)."""
    if weak:
        monkeypatch.setattr(short_keys, "pair_hash", _weak_hash)
    rng = random.Random(5)
    counts, expected = _string_counts(hashed), Counter()
    words = [bytes(rng.choice(b"ab\xc3\xa9 ") for _ in range(rng.randint(1, 24))) for _ in range(60)]
    words = [w.decode("utf-8", "replace").encode() for w in words]
    for batch in range(5):
        strings = [rng.choice(words) for _ in range(500)]
        bounds = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
        weights = np.array([rng.randint(1, 5) for _ in strings], np.int64) if batch % 2 else None
        counts.add(np.frombuffer(b"".join(strings), np.uint8), bounds, weights)
        for i, s in enumerate(strings):
            expected[s] += int(weights[i]) if weights is not None else 1
    assert _as_counter(counts.table()) == expected
    pytest.importorskip("numba")  # (buffers spells the keys with a kernel)
    read: Counter[bytes] = Counter()
    for offsets, data, sums in counts.buffers(7):
        for i in range(len(offsets) - 1):
            read[data[offsets[i]:offsets[i + 1]].tobytes()] += int(sums[i])
    assert read == expected

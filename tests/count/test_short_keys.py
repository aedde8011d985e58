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


@pytest.mark.parametrize("weighted", [False, True])
def test_string_counts_sum_batches_exactly(weighted):
    rng = random.Random(7)
    counts = StringCounts()
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

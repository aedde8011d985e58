"""key_tables.KeyCounts (numba hash tables of keys and pairs) against Counters, through every growth."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("numba")

from parbpe.count.key_tables import KeyCounts  # noqa: E402  (after the skip: its kernels compile with numba)


def _as_counter(*columns: np.ndarray) -> Counter:
    *words, counts = columns
    keys = list(zip(*(w.tolist() for w in words)))
    assert len(set(keys)) == len(keys), "a key is held twice"
    return Counter(dict(zip(keys, counts.tolist())))


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_key_counts_equal_a_counter_through_every_growth(width, weighted, seed):
    rng = np.random.default_rng(width * 10 + weighted + 3 * seed)
    table, expected = KeyCounts(width, slots=2, seed=seed), Counter()
    for batch in range(6):
        n = int(rng.integers(0, 3000))
        # Few distinct values (many repeats) and words that share their low or high bits (one slot's neighbours).
        first = (rng.integers(1, 50, n).astype(np.uint64) << np.uint64(int(rng.choice([0, 40, 56]))))
        words = (first,) if width == 1 else (first, rng.integers(0, 7, n).astype(np.uint64))
        weights = rng.integers(1, 10**12, n) if weighted else None
        table.add(words, weights)
        for i, key in enumerate(zip(*(w.tolist() for w in words))):
            expected[key] += int(weights[i]) if weighted else 1
        assert len(table) == len(expected)
    assert _as_counter(*table.items()) == expected
    assert table.nbytes >= len(expected) * 8 * (width + 1)


def test_a_table_filled_from_anothers_items_in_their_order():
    """Keys taken out of one table (in its hash order) and added to another: the same counts with
    either seed (seed 1 only keeps it fast)."""
    rng = np.random.default_rng(4)
    source = KeyCounts(1)
    source.add((rng.integers(1, 2**63, 50_000).astype(np.uint64),))
    keys, counts = source.items()
    for seed in (0, 1):
        copy = KeyCounts(1, seed=seed)
        copy.add((keys,), counts)
        assert _as_counter(*copy.items()) == _as_counter(keys, counts)


def test_an_empty_table_holds_nothing_and_bad_shapes_are_refused():
    table = KeyCounts(2)
    assert len(table) == 0 and table.nbytes == 0
    assert [len(column) for column in table.items()] == [0, 0, 0]
    table.add((np.zeros(0, np.uint64), np.zeros(0, np.uint64)))
    assert table.nbytes == 0
    for bad in ({"width": 3}, {"slots": 3}, {"seed": 2}):
        with pytest.raises(ValueError):
            KeyCounts(**bad)

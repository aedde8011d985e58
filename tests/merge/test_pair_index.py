"""The pair index: folding sorted blocks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parbpe import jit
from parbpe.merge.engines import LinkedEngine
from parbpe.merge.pair_index import PairIndex, _IndexBlock, _merge_sorted, narrow_key, packed_entries
from parbpe.merge.pairs import pack
from parbpe.merge.table import build_table


@pytest.mark.parametrize("seed", range(10))
def test_merge_sorted_equals_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    older_keys = np.sort(rng.integers(0, 50, rng.integers(0, 200)))
    newer_keys = np.sort(rng.integers(0, 50, rng.integers(0, 200)))
    older = _IndexBlock(older_keys, rng.integers(0, 10**6, len(older_keys)).astype(np.int32))
    newer = _IndexBlock(newer_keys, rng.integers(0, 10**6, len(newer_keys)).astype(np.int32))
    merged = _merge_sorted(older, newer)
    keys = np.concatenate([older.keys, newer.keys])
    order = np.argsort(keys, kind="stable")
    assert merged.keys.tolist() == keys[order].tolist()
    assert merged.values.tolist() == np.concatenate([older.values, newer.values])[order].tolist()
    assert merged.values.dtype == np.int32


@pytest.mark.parametrize("packed, use_kernels", [(False, False), (True, False), (True, True)])
def test_lookup_finds_every_entry_through_folds(packed, use_kernels):
    """Entries added in rounds are all found after the folds (by numpy's sort, or the kernel's merge)."""
    if use_kernels:
        pytest.importorskip("numba")
    rng = random.Random(3)
    index = PairIndex(value_dtype=np.int32, packed=packed, use_kernels=use_kernels)
    big = [(a << 32) | b for a in (0, 1, 255, 65535) for b in (0, 7, 65534, 65535)]  # keys as pack() makes them
    added: set[tuple[int, int]] = set()
    first = None
    for step in range(200):
        keys = np.array([rng.choice(big) for _ in range(rng.randint(0, 25))], dtype=np.int64)
        values = np.arange(len(added), len(added) + len(keys), dtype=np.int64) + (2**31 - 10**4)  # near the top
        added.update(zip(keys.tolist(), values.tolist()))
        index.add(keys, values)
        if packed:
            assert all(b.dtype == np.uint64 and (np.diff(b) > 0).all() for b in index.blocks)
        else:
            assert all((np.diff(b.keys) >= 0).all() and b.values.dtype == np.int32 for b in index.blocks)
        first = first if first is not None else (index.blocks[0] if index.blocks else None)
        assert first is None or index.blocks[0] is first  # never folded
        assert len(index.blocks) <= 2 + len(added).bit_length()  # the first block, then a binary counter
        query = np.array(rng.sample(big, 6), dtype=np.int64)  # in any order
        found, which = index.lookup(query)
        wanted = sorted(e for e in added if e[0] in set(query.tolist()))
        assert sorted(zip(query[which].tolist(), found.tolist())) == wanted, step


def test_packed_entries_keep_the_key_order():
    """narrow_key orders pairs as their int64 keys do, so packed blocks sort by pair first."""
    rng = np.random.default_rng(4)
    keys = pack(rng.integers(0, 2**16, 5000), rng.integers(0, 2**16, 5000))
    assert np.array_equal(np.argsort(narrow_key(keys), kind="stable"), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("vocab_size", [1000, 70000])  # narrow (uint16 tokens) and wide keys
def test_pair_counts_are_exact_past_int32(vocab_size):
    """Weights are stored as int32 while each count fits; their sums must not wrap."""
    count = 2**31 - 1
    table = build_table([b"abc", b"abd", b"xab"], [count, count, count], vocab_size)
    engine = LinkedEngine(table)
    assert engine.weight.dtype == np.int32
    keys, counts = engine.initial_pair_counts()
    got = dict(zip(keys.tolist(), counts.tolist()))
    assert got[int(pack(ord("a"), ord("b")))] == 3 * count
    assert got[int(pack(ord("b"), ord("c")))] == count
    keys, deltas = engine.apply(np.array([ord("a")]), np.array([ord("b")]), np.array([256]))
    changes = dict(zip(keys.tolist(), deltas.tolist()))
    assert changes[int(pack(ord("a"), ord("b")))] == -3 * count
    assert changes[int(pack(256, ord("c")))] == count
    huge = build_table([b"abc"], [2**40], vocab_size)
    assert LinkedEngine(huge).weight.dtype == np.int64
    assert dict(zip(*map(np.ndarray.tolist, LinkedEngine(huge).initial_pair_counts())))[int(pack(97, 98))] == 2**40


@pytest.mark.parametrize("sizes", [(0, 0), (0, 5), (5, 0), (1, 1), (1000, 3), (3, 1000), (5000, 5000)])
def test_the_fold_kernel_merges_as_numpy_sorts(sizes):
    """merged_runs: two sorted uint64 blocks merged is their concatenation sorted (equal entries too)."""
    pytest.importorskip("numba")
    from parbpe.kernels.pair_index import merged_runs

    rng = np.random.default_rng(sum(sizes))
    older, newer = (np.sort(rng.integers(0, 2**64 - 1, n, dtype=np.uint64) >> np.uint64(rng.integers(0, 60)))
                    for n in sizes)
    np.testing.assert_array_equal(merged_runs(older, newer), np.sort(np.concatenate([older, newer])))


@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000, 70_000])
def test_the_search_kernel_finds_what_numpy_does(size):
    """searched: np.searchsorted's left insertion points, for needles below, between, on (runs of
    equal entries) and past the block's entries, in any order."""
    pytest.importorskip("numba")
    from parbpe.kernels.pair_index import searched

    rng = np.random.default_rng(size)
    block = np.sort(rng.integers(0, 40 if size < 100 else 2**63, size, dtype=np.int64).astype(np.uint64))
    needles = np.concatenate([block[rng.integers(0, size, 50)] if size else block,
                              rng.integers(0, 2**63, 50, dtype=np.int64).astype(np.uint64),
                              np.array([0, 1, 39, 40, 2**64 - 1], dtype=np.uint64)])
    rng.shuffle(needles)
    np.testing.assert_array_equal(searched(block, needles), np.searchsorted(block, needles))
    assert len(searched(block, needles[:0])) == 0


def test_spans_of_a_large_block_by_kernel_are_numpys():
    """A packed block past jit.SEARCH_MIN entries is searched by the kernel: the same spans, the same lookups."""
    pytest.importorskip("numba")
    from parbpe.merge import pair_index

    rng = np.random.default_rng(5)
    n = jit.SEARCH_MIN + 1000
    keys = pack(rng.integers(0, 300, n), rng.integers(0, 300, n))
    values = rng.permutation(n).astype(np.int32)
    wanted = np.unique(np.concatenate([keys[:40], pack(np.array([299, 0, 5]), np.array([299, 0, 301]))]))
    found = []
    for use_kernels in (False, True):
        index = PairIndex(value_dtype=np.int32, packed=True, use_kernels=use_kernels)
        index.add(keys, values)
        index.add(keys[:10], values[:10] + n)  # a small block beside it: numpy's search there
        found.append((index.spans(wanted), index.lookup(wanted)))
    (numpy_spans, numpy_lookup), (kernel_spans, kernel_lookup) = found
    for (lo_a, hi_a), (lo_b, hi_b) in zip(numpy_spans, kernel_spans):
        np.testing.assert_array_equal(lo_a, lo_b)
        np.testing.assert_array_equal(hi_a, hi_b)
    np.testing.assert_array_equal(numpy_lookup[0], kernel_lookup[0])
    assert (numpy_spans[0][1] - numpy_spans[0][0]).sum() > 40  # the big block held the wanted keys


@pytest.mark.parametrize("size", [0, 1, 2, 7, 8, 9, 500])
def test_lists_are_the_packed_entries_once_each(size, monkeypatch):
    """lists_of: sorted packed entries as lists (keys once, where their values start, the values),
    each entry once, made a slice at a time in the entries' own memory; here slices of 4 entries, so
    duplicates and a key's values lie across slices."""
    from parbpe.merge import pair_index

    monkeypatch.setattr(pair_index, "LISTS_SLICE", 4)
    rng = np.random.default_rng(size)
    keys = rng.integers(0, 6, size).astype(np.uint64) << np.uint64(48) | rng.integers(0, 3, size).astype(np.uint64) << np.uint64(32)
    packed = np.sort(keys | rng.integers(0, 2**31, size).astype(np.uint64) % np.uint64(5 + size // 4))
    wanted = np.unique(packed)
    lists = pair_index.lists_of(packed.copy())
    narrow = (wanted >> np.uint64(32)).astype(np.uint32)
    distinct, first = np.unique(narrow, return_index=True)
    np.testing.assert_array_equal(lists.keys, distinct)
    np.testing.assert_array_equal(lists.starts, np.append(first, len(wanted)))
    np.testing.assert_array_equal(lists.values, (wanted & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    assert lists.values.dtype == np.uint32 and len(lists) == len(wanted)


@pytest.mark.parametrize("seed", range(6))
def test_an_index_whose_first_block_is_lists_finds_what_a_packed_one_does(seed):
    """PairIndex.add_lists: the same spans' sizes (less duplicates), lookups and chunks_with as the
    same entries in a packed block, with blocks added after it (a round's new pairs), folded or not."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 40, (3000, 2))
    keys = pack(tokens[:, 0], tokens[:, 1])
    chunks = rng.integers(0, 700, 3000)
    later = [(pack(rng.integers(0, 40, n), rng.integers(0, 45, n)), rng.integers(0, 700, n))
             for n in rng.integers(0, 60, 8)]
    with_lists, packed = (PairIndex(value_dtype=np.int32, packed=True) for _ in range(2))
    entries = np.unique(packed_entries(keys, chunks))
    with_lists.add_lists(entries.copy())
    packed.add_packed(entries)
    for index in (with_lists, packed):
        for k, c in later:
            index.add(k, c)
    query = np.unique(pack(rng.integers(0, 46, 30), rng.integers(0, 46, 30)))
    for a, b in zip(with_lists.spans(query), packed.spans(query)):
        np.testing.assert_array_equal(a[1] - a[0], b[1] - b[0])
    found = [sorted(zip(*(x.tolist() for x in index.lookup(query)))) for index in (with_lists, packed)]
    assert found[0] == found[1] and found[0]
    np.testing.assert_array_equal(with_lists.chunks_with(query, 700), packed.chunks_with(query, 700))
    assert with_lists.entries == packed.entries


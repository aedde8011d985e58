"""The linked engine's numba kernels (kernels/linked.py) give the numpy engine's merges, tables and counts."""

from __future__ import annotations

import random

import numpy as np
import pytest
from corpora import random_corpus
from reference import reference_train

from parbpe import jit
from parbpe.kernels import linked as linked_kernels
from parbpe.merge import coordinator, linked
from parbpe.merge import workers as merge_workers
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.engines import LinkedEngine
from parbpe.merge.pairs import aggregate
from parbpe.merge.selection import safe_batch
from parbpe.merge.superword import superword_allowed
from parbpe.merge.table import build_table

pytest.importorskip("numba")


def _table(counts: dict[bytes, int], n: int):
    items = sorted(counts.items())
    return build_table([c for c, _ in items], [k for _, k in items], 256 + n)


def _run(monkeypatch, mode: str, counts: dict[bytes, int], n: int, **kwargs):
    monkeypatch.setenv("PARBPE_JIT", mode)
    table = _table(counts, n)
    result = learn_merges(table, [bytes([b]) for b in range(256)], n, min_tokens_per_worker=1, **kwargs)
    if kwargs.get("workers", 1) == 1:
        assert isinstance(result.engine, LinkedEngine) and result.engine.jit == (mode == "on")
    return result.merges, result.batch_sizes, [result.engine.chunk_tokens(c) for c in range(table.n_chunks)]


def _corpora() -> dict[str, tuple[dict[bytes, int], int]]:
    rng = random.Random(26)
    return {
        "runs": ({b"a" * 1000: 3, b"a" * 7: 5, b"aaaa": 4, b"ba" * 50: 2, b"xyxyxy": 40, b"aab": 9, b"abab": 6}, 40),
        "small alphabet": (random_corpus(rng, b"ab", 400, 30), 60),
        "three letters": (random_corpus(rng, b"abc ", 1500, 40), 200),
        "wide": (random_corpus(rng, bytes(range(33, 127)), 3000, 12), 500),
    }


CORPORA = _corpora()
SETTINGS = {
    "batchbpe": {},
    "exact": {"batching": "exact"},
    "serial": {"max_batch_size": 1},
    "max token bytes": {"max_token_bytes": 3},
    "superbpe rule": {"allow": superword_allowed},
    "3 workers": {"workers": 3},
    "3 workers exact": {"workers": 3, "batching": "exact"},
    "engine groups": {"engine": "linked"},  # with LinkedEngine.GROUP_ENTRIES made small below
    "two threads": {},  # every round's kernels in two threads (TWO_THREADS_MIN made 1 below)
    "two threads exact": {"batching": "exact"},
    "two threads groups": {"engine": "linked"},
    "kernel sorts": {},  # the first count by sorted_live_pairs, the index rebuilt often, every hit radix-sorted (below)
    "index sorted in place": {"threads": 1},  # a tight budget: numpy's index by np.sort, rebuilt often (below)
}


# Merge workers (spawned interpreters, numba loaded in each: 4 s a case) on the corpus of runs and the wide one.
CASES = [(c, s) for c in sorted(CORPORA) for s in sorted(SETTINGS) if "workers" not in s or c in ("runs", "wide")]


@pytest.mark.parametrize("corpus, setting", CASES)
def test_kernels_give_the_numpy_merges(monkeypatch, corpus, setting):
    counts, n = CORPORA[corpus]
    if setting.endswith("groups"):
        monkeypatch.setattr(LinkedEngine, "GROUP_ENTRIES", 7)
    if setting in ("kernel sorts", "index sorted in place"):  # (numpy's index by radix passes in the first)
        monkeypatch.setattr(LinkedEngine, "MIN_REBUILD", 8)
    if setting == "kernel sorts":
        monkeypatch.setattr(LinkedEngine, "COUNTING_SORT_WIDTH", 0)
        monkeypatch.setattr(jit, "RADIX_MIN", 1)
    monkeypatch.setattr(coordinator, "THREADS", 2 if setting.startswith("two threads") else 1)
    monkeypatch.setattr(linked, "TWO_THREADS_MIN", 1)
    monkeypatch.setattr(linked, "SORT_IN_TWO_MIN", 1)  # (index rebuilds, with two threads)
    numpy_result = _run(monkeypatch, "off", counts, n, **SETTINGS[setting])
    assert _run(monkeypatch, "on", counts, n, **SETTINGS[setting]) == numpy_result
    if setting in ("exact", "serial") and corpus != "wide":  # the wide corpus: numpy's merges against the
        assert numpy_result[0] == reference_train(counts, n)  # reference in test_merge_exact (12 s here)


def test_kernels_match_the_reference_in_batches(monkeypatch):
    counts, n = CORPORA["three letters"]
    merges, _, _ = _run(monkeypatch, "on", counts, n)
    assert merges == reference_train(counts, n, batched=True)


def test_auto_mode_uses_the_kernels_on_large_tables_only(monkeypatch):
    counts, n = CORPORA["runs"]
    monkeypatch.setenv("PARBPE_JIT", "auto")
    assert not LinkedEngine(_table(counts, n)).jit
    monkeypatch.setattr(jit, "MERGE_MIN_TOKENS", 10)
    assert LinkedEngine(_table(counts, n)).jit


def _engines(monkeypatch, counts, n):
    engines = []
    for mode in ("off", "on"):
        monkeypatch.setenv("PARBPE_JIT", mode)
        engine = LinkedEngine(_table(counts, n))
        engines.append((engine, engine.initial_pair_counts()))
    return engines


def test_one_round_gives_the_same_hits_table_counts_and_index(monkeypatch):
    counts = {b"abab": 3, b"aaaaa": 2, b"xaby": 5, b"ab": 1, b"bbbb": 4, b"cabab": 7}
    (plain, plain_counts), (fast, fast_counts) = _engines(monkeypatch, counts, 3)
    for a, b in zip(plain_counts, fast_counts):
        np.testing.assert_array_equal(a, b)
    first, second = np.array([97, 98], dtype=np.int64), np.array([98, 98], dtype=np.int64)  # (a, b) and (b, b)
    plain_hits, plain_which = plain.find_hits(first, second)
    fast_hits, fast_which = fast.find_hits(first, second)
    assert np.all(np.diff(fast_hits) > 0)  # in table order
    assert sorted(zip(plain_hits.tolist(), plain_which.tolist())) == list(zip(fast_hits.tolist(), fast_which.tolist()))
    new_ids = np.array([256, 257], dtype=np.int64)
    plain_changes = plain.apply_hits(plain_hits, plain_which, new_ids)
    for a, b in zip(plain_changes, fast.apply_hits(fast_hits, fast_which, new_ids)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(plain.table.tokens, fast.table.tokens)
    np.testing.assert_array_equal(plain.next, fast.next)
    live = plain.next != LinkedEngine.REMOVED
    np.testing.assert_array_equal(plain.prev[live], fast.prev[live])
    np.testing.assert_array_equal(fast.records[:, 3], fast.table.tokens)
    new_pairs = np.array([256 << 32 | 256, 97 << 32 | 256, 256 << 32 | 257])
    assert [np.sort(x).tolist() for x in plain.index.lookup(new_pairs)] == \
        [np.sort(x).tolist() for x in fast.index.lookup(new_pairs)]


@pytest.mark.parametrize("width", [2, 300, 2**16])
def test_sorted_live_pairs_and_their_sums_are_numpys(width):
    """sorted_live_pairs: the packed entries of every live position (next >= 0: not a chunk's last,
    not merged away) sorted as numpy sorts them; sum_sorted_pairs: their pair counts as aggregate sums them."""
    rng = np.random.default_rng(width)
    n = 5000
    records = np.zeros((n, 4), dtype=np.int32)
    records[:, 0] = np.arange(1, n + 1)
    records[rng.random(n) < 0.1, 0] = -1  # a chunk ends
    records[rng.random(n) < 0.2, 0] = LinkedEngine.REMOVED
    records[-1, 0] = -1
    records[:, 2] = rng.integers(1, 1000, n)
    records[:, 3] = rng.integers(0, width, n)
    live = np.flatnonzero(records[:, 0] >= 0)
    first, second = records[live, 3].astype(np.uint64), records[records[live, 0], 3].astype(np.uint64)
    expected = np.sort(first << np.uint64(48) | second << np.uint64(32) | live.astype(np.uint64))
    packed = linked_kernels.sorted_live_pairs(records, len(live), width)
    np.testing.assert_array_equal(packed, expected)
    keys, sums = linked_kernels.sum_sorted_pairs(records, packed)
    want_keys, want_sums = aggregate(first.astype(np.int64) << 32 | second.astype(np.int64),
                                     records[live, 2].astype(np.int64))
    np.testing.assert_array_equal(keys, want_keys)
    np.testing.assert_array_equal(sums, want_sums)
    empty = linked_kernels.sorted_live_pairs(records[:0], 0, width)
    assert len(empty) == 0 and [len(a) for a in linked_kernels.sum_sorted_pairs(records, empty)] == [0, 0]


def _random_records(rng: np.random.Generator, n: int, width: int, ends: float = 0.1, removed: float = 0.2
                    ) -> np.ndarray:
    """Records of n positions (tokens below width): chunk ends (-1) and merged-away positions (REMOVED)
    at random, the last position a chunk's end."""
    records = np.zeros((n, 4), dtype=np.int32)
    records[:, 0] = np.arange(1, n + 1)
    records[rng.random(n) < ends, 0] = -1
    records[rng.random(n) < removed, 0] = LinkedEngine.REMOVED
    if n:
        records[-1, 0] = -1
    records[:, 2] = rng.integers(1, 1000, n)
    records[:, 3] = rng.integers(0, width, n)
    return records


TABLES_IN_TWO = {  # (positions, width, share of chunk ends, share merged away)
    "empty": (0, 3, 0.1, 0.2), "one position": (1, 3, 0.1, 0.2), "two positions": (2, 3, 0.0, 0.0),
    "three positions": (3, 3, 0.0, 0.0), "width 3": (5000, 3, 0.1, 0.2), "width 300": (5001, 300, 0.1, 0.2),
    "width 40,000": (300_000, 40_000, 0.1, 0.2), "width 2**16": (200_000, 2**16, 0.3, 0.3),
    "no live pair": (1000, 300, 0.5, 1.0), "most merged away": (20_000, 300, 0.05, 0.9),
}


@pytest.mark.parametrize("table", sorted(TABLES_IN_TWO))
def test_sorting_and_summing_in_two_threads_is_one_threads(table):
    """sorted_live_pairs_in_two and sum_sorted_pairs_in_two give sorted_live_pairs' entries and
    sum_sorted_pairs' counts element for element, on random tables of live, merged-away and last
    positions (an odd and an even number of live pairs each)."""
    n, width, ends, removed = TABLES_IN_TWO[table]
    rng = np.random.default_rng(n + width)
    records = _random_records(rng, n, width, ends, removed)
    for odd in (True, False):
        n_live = int(np.count_nonzero(records[:, 0] >= 0))
        if n_live % 2 != odd and n_live:  # one live pair fewer: a chunk ends at the first live position
            records[np.flatnonzero(records[:, 0] >= 0)[0], 0] = -1
            n_live -= 1
        packed = linked_kernels.sorted_live_pairs(records, n_live, width)
        np.testing.assert_array_equal(linked.sorted_live_pairs_in_two(records, n_live, width), packed)
        for one, two in zip(linked_kernels.sum_sorted_pairs(records, packed),
                            linked.sum_sorted_pairs_in_two(records, packed)):
            assert one.dtype == two.dtype
            np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("pairs", [1, 2, 3])
def test_one_pair_almost_everywhere_sorts_and_sums_in_two_threads_as_in_one(pairs):
    """A table that is one pair but for pairs - 1 others at one end (no pair boundary near the middle:
    the sums in one thread, or cut far from the middle) sorts and sums in two threads as in one."""
    n = 10_001
    records = np.zeros((n, 4), dtype=np.int32)
    records[:, 0] = np.arange(1, n + 1)
    records[1::2, 0] = -1  # chunks of two positions: pairs (7, 7), but (7, 7 + k) in the last k chunks
    records[-1, 0] = -1
    records[:, 2] = np.arange(n) % 97 + 1
    records[:, 3] = 7
    for k in range(1, pairs):
        records[n - 2 * k, 3] = 7 + k
    n_live = int(np.count_nonzero(records[:, 0] >= 0))
    packed = linked_kernels.sorted_live_pairs(records, n_live, 10)
    np.testing.assert_array_equal(linked.sorted_live_pairs_in_two(records, n_live, 10), packed)
    for one, two in zip(linked_kernels.sum_sorted_pairs(records, packed),
                        linked.sum_sorted_pairs_in_two(records, packed)):
        np.testing.assert_array_equal(one, two)
    assert linked._pair_boundary(packed) == n_live - pairs + 1  # the end of (7, 7): all of them for 1


@pytest.mark.parametrize("corpus", ["three letters", "wide"])
def test_the_first_count_and_rebuilds_in_two_threads_merge_as_in_one(monkeypatch, corpus):
    """learn_merges with threads=2, whose first count and every index rebuild sort and sum in two
    threads (SORT_IN_TWO_MIN 1, COUNTING_SORT_WIDTH 0, rebuilds made often), makes threads=1's merges."""
    counts, n = CORPORA[corpus]
    monkeypatch.setenv("PARBPE_JIT", "on")
    monkeypatch.setattr(LinkedEngine, "COUNTING_SORT_WIDTH", 0)
    monkeypatch.setattr(LinkedEngine, "MIN_REBUILD", 8)
    monkeypatch.setattr(LinkedEngine, "JIT_STALE_FACTOR", 1.2)
    monkeypatch.setattr(linked, "SORT_IN_TWO_MIN", 1)
    calls = {"sorted_live_pairs_in_two": 0, "sum_sorted_pairs_in_two": 0}
    for name in calls:
        def counted(*args, name=name, kernel=getattr(linked, name)):
            calls[name] += 1
            return kernel(*args)

        monkeypatch.setattr(linked, name, counted)
    one = learn_merges(_table(counts, n), [bytes([b]) for b in range(256)], n, threads=1)
    assert calls == {"sorted_live_pairs_in_two": 0, "sum_sorted_pairs_in_two": 0}
    two = learn_merges(_table(counts, n), [bytes([b]) for b in range(256)], n, threads=2)
    assert calls["sum_sorted_pairs_in_two"] == 1 and calls["sorted_live_pairs_in_two"] > 1  # the first count, rebuilds
    assert (two.merges, two.batch_sizes) == (one.merges, one.batch_sizes)
    assert [two.engine.chunk_tokens(c) for c in range(two.engine.table.n_chunks)] == \
        [one.engine.chunk_tokens(c) for c in range(one.engine.table.n_chunks)]


@pytest.mark.parametrize("n_positions", [1, 2047, 2048, 5000, 3 * 10**7])
def test_holding_candidates_sort_by_position_as_numpy_sorts_them(n_positions):
    """by_position: the LSD radix sort of find_hits' values (distinct positions, any members) is numpy's sort."""
    rng = np.random.default_rng(n_positions)
    member_bits = 63 - n_positions.bit_length()
    n = min(n_positions, 20_000)
    positions = rng.choice(n_positions, n, replace=False).astype(np.int64)
    found = positions << member_bits | rng.integers(0, min(1 << member_bits, 10**6), n)
    np.testing.assert_array_equal(linked_kernels.by_position(found.copy(), member_bits, n_positions.bit_length()),
                                  np.sort(found))
    assert len(linked_kernels.by_position(found[:0].copy(), member_bits, n_positions.bit_length())) == 0


@pytest.mark.parametrize("n", [0, 1, 2, 300, 50_000])
def test_new_pair_entries_sort_as_numpy_sorts_the_index_entries(n):
    """new_pair_entries: a round's new pairs at ascending positions, packed and radix-sorted, are the
    entries np.sort gives (ties of a pair by position; pairs alike in a whole digit, and pairs
    whose first tokens alone differ); positions that do not ascend give None (the caller sorts)."""
    rng = np.random.default_rng(n)
    positions = np.sort(rng.choice(3 * 10**7, n, replace=False)).astype(np.int64)
    for first_ids, second_ids in [((0, 65536), (0, 65536)), ((300, 302), (7, 9)), ((256, 65536), (40, 41))]:
        first, second = rng.integers(*first_ids, n), rng.integers(*second_ids, n)
        keys = first << 32 | second
        want = np.sort((first.astype(np.uint64) << np.uint64(48)) | (second.astype(np.uint64) << np.uint64(32))
                       | positions.astype(np.uint64))
        got = linked_kernels.new_pair_entries(keys, positions)
        assert got.dtype == np.uint64
        np.testing.assert_array_equal(got, want)
    if n >= 2:
        assert linked_kernels.new_pair_entries(keys, positions[::-1].copy()) is None
        assert linked_kernels.new_pair_entries(keys[:2], np.array([5, 5])) is None


@pytest.mark.parametrize("n_keys", [0, 1, 5, 3000, 100_000])
@pytest.mark.parametrize("tokens", ["16-bit", "wider"])
def test_sum_by_key_is_aggregate(n_keys, tokens):
    """The hash table's sums, sorted by the kernel's radix passes (token ids below 2**16: pairs alike
    in a whole digit, ids up to 0xFFFF) or by numpy (wider ids), are aggregate's."""
    from parbpe.merge.linked import sum_by_key

    rng = np.random.default_rng(n_keys)
    if tokens == "16-bit":
        first = rng.choice([0, 5, 2047, 2048, 65535], n_keys)
        keys = first << 32 | rng.integers(0, max(n_keys // 3, 1), n_keys) % 65536
    else:
        keys = rng.integers(0, max(n_keys // 3, 1), n_keys) * (1 << 31) + rng.integers(0, 3, n_keys)
    deltas = rng.integers(-3, 4, n_keys)
    for a, b in zip(sum_by_key(keys, deltas), aggregate(keys, deltas)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", range(8))
def test_a_sweep_in_two_threads_is_one_sweep_and_numpys_round(monkeypatch, seed):
    """find_and_apply in two threads (cut anywhere: TWO_THREADS_MIN 1) on every round of random
    tables (runs of one token, a b a b, chunk ends next to the cut; safe batches of several pairs,
    stale candidates from the index): the table, the count changes and the new pairs' positions of
    one thread's sweep, and the numpy engine's table and count changes."""
    monkeypatch.setattr(linked, "TWO_THREADS_MIN", 1)
    rng = random.Random(seed)
    counts = random_corpus(rng, rng.choice([b"ab", b"abc", b"aab "]), 300, 20)
    whole, two, plain = (LinkedEngine(_table(counts, 40), use_kernels=k) for k in (True, True, False))
    for engine in (whole, two, plain):
        engine.initial_pair_counts()
    new_id = 256
    while new_id < 296:
        keys, counts_now = aggregate(*_live_pairs(whole))
        if len(keys) == 0:
            break
        ranked = keys[np.argsort(-counts_now, kind="stable")][:rng.choice([1, 3, 8])]
        batch = ranked[safe_batch(ranked)]
        first, second = batch >> 32, batch & 0xFFFFFFFF
        new_ids = np.arange(new_id, new_id + len(batch), dtype=np.int64)
        new_id += len(batch)
        cand, which = whole.index.lookup(batch)
        a = linked.find_and_apply(whole.records, whole.table.tokens, cand, which, first, second, new_ids,
                                          whole.REMOVED, threads=1)
        b = linked.find_and_apply(two.records, two.table.tokens, cand, which, first, second, new_ids,
                                          two.REMOVED, threads=2)
        for engine, (keys_made, deltas, made, positions, n_hits) in ((whole, a), (two, b)):
            engine.live_pairs -= n_hits
            engine._index_new_pairs(keys_made[made:], positions)
        changes = plain.apply(first, second, new_ids)
        np.testing.assert_array_equal(whole.records, two.records)
        np.testing.assert_array_equal(whole.table.tokens, plain.table.tokens)
        assert a[2] == b[2] and a[4] == b[4] and a[3].tolist() == sorted(b[3].tolist())
        for x, y in zip(aggregate(a[0][:a[2]], a[1][:a[2]]) + aggregate(a[0][a[2]:], a[1][a[2]:]),
                        aggregate(b[0][:b[2]], b[1][:b[2]]) + aggregate(b[0][b[2]:], b[1][b[2]:])):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(aggregate(a[0], a[1]), changes):
            np.testing.assert_array_equal(x, y)


def _live_pairs(engine: LinkedEngine) -> tuple[np.ndarray, np.ndarray]:
    """Every live pair's key and weight, read from the records (one entry an occurrence)."""
    records = engine.records.astype(np.int64)
    live = np.flatnonzero(records[:, 0] >= 0)
    return records[live, 3] << 32 | records[records[live, 0], 3], records[live, 2]


def test_an_error_in_the_index_thread_is_raised_by_the_run(monkeypatch):
    """The index work a round leaves to a thread fails (memory): the run stops with that error."""
    from parbpe.merge.pair_index import PairIndex

    counts, n = CORPORA["three letters"]
    monkeypatch.setenv("PARBPE_JIT", "on")
    monkeypatch.setattr(coordinator, "THREADS", 2)
    monkeypatch.setattr(linked, "TWO_THREADS_MIN", 1)
    added = PairIndex.add_packed

    def add_packed(self, entries):
        if len(entries) and entries.max() >> np.uint64(48) >= 260:  # the pairs of the fifth new token on
            raise MemoryError("no room for the index")
        return added(self, entries)

    monkeypatch.setattr(PairIndex, "add_packed", add_packed)
    with pytest.raises(MemoryError, match="no room for the index"):
        learn_merges(_table(counts, n), [bytes([b]) for b in range(256)], n, max_batch_size=1)


@pytest.mark.parametrize("vocab_size", [1024, 70_000])
def test_preloading_loads_every_kernel_of_the_engine_in_a_thread(monkeypatch, vocab_size):
    """coordinator.preload_kernels leaves every linked kernel loaded (for its table's dtypes), and a
    run after it merges as one without it; nothing is loaded where the rounds would not use them."""
    from parbpe.merge.coordinator import preload_kernels

    kernels = [linked_kernels.fill_records, linked_kernels.sweep_part, linked_kernels.split_point,
               linked_kernels.holding, linked_kernels.runs_taken, linked_kernels.sums_by_key]
    if vocab_size <= 2**16:  # the packed index's (token ids below 2**16)
        kernels += [linked_kernels.count_live_pairs, linked_kernels.sorted_live_pairs,
                    linked_kernels.sum_sorted_pairs, linked_kernels.new_pair_entries, linked_kernels.count_seconds,
                    linked_kernels.counting_offsets, linked_kernels.scatter_by_second, linked_kernels.scatter_by_first,
                    linked_kernels.distinct_pairs, linked_kernels.sum_pairs_into]
    monkeypatch.setattr(jit, "_preloading", {})
    for k in kernels:
        monkeypatch.setattr(k, "_compiled", None)
    monkeypatch.setenv("PARBPE_JIT", "on")
    preload_kernels(100, vocab_size, workers=1, nonoverlap=True)  # the chunk engine: no kernels
    with monkeypatch.context() as patch:  # merge workers (where the kernels may have them): the kernels run there
        patch.setattr(merge_workers, "KERNELS_MERGE_ALONE", False)
        preload_kernels(10**8, vocab_size, workers=4)
    assert not jit._preloading
    monkeypatch.setenv("PARBPE_JIT", "auto")
    preload_kernels(jit.MERGE_MIN_TOKENS - 1, vocab_size)  # auto, too small a table
    assert not jit._preloading
    monkeypatch.setenv("PARBPE_JIT", "on")
    preload_kernels(100, vocab_size)
    jit.settle()
    assert len(jit._preloading) == 1 and all(k._compiled is not None for k in kernels)
    signatures = {k.__name__: len(k._compiled.signatures) for k in kernels}
    counts, n = _corpora()["small alphabet"]
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], vocab_size)
    merged = learn_merges(table, [bytes([b]) for b in range(256)], n)
    assert merged.merges == reference_train(counts, n, batched=True)
    # the run loaded no kernel for other dtypes than the preload did
    assert {k.__name__: len(k._compiled.signatures) for k in kernels} == signatures


@pytest.mark.parametrize("numba_loaded", [True, False])
def test_the_queue_lowers_counts_by_kernel_only_where_numba_is_loaded(monkeypatch, numba_loaded):
    """The pair counts' kernel runs where the table is large enough for the engine's kernels and numba is
    imported in this process already, whatever the engine: no run imports numba for the queue alone."""
    from parbpe.merge import selection

    made = []
    init = selection.PairCounts.__init__

    def record(self, keys, counts, use_kernels=False):
        made.append(use_kernels)
        init(self, keys, counts, use_kernels)

    monkeypatch.setattr(selection.PairCounts, "__init__", record)
    monkeypatch.setattr(jit, "loaded", lambda: numba_loaded)
    monkeypatch.setenv("PARBPE_JIT", "on")
    counts, n = CORPORA["three letters"]
    for engine in ("linked", "chunk"):
        learn_merges(_table(counts, n), [bytes([b]) for b in range(256)], n, engine=engine)
    assert made == [numba_loaded, numba_loaded]
    monkeypatch.setenv("PARBPE_JIT", "off")
    learn_merges(_table(counts, n), [bytes([b]) for b in range(256)], n)
    assert made[-1] is False


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_the_preloads_warm_up_runs_to_its_end(dtype):
    """_warm_linked (the preload thread's work, whose errors are dropped there) calls every kernel it
    names without an error, for a packed index (16-bit ids) and an unpacked one: a step that failed
    left the kernels after it to load in the rounds (uint32's first-count sums did, until 2026-11-26)."""
    from parbpe.merge.engines import _warm_linked

    _warm_linked(np.dtype(dtype))

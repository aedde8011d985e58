"""Pair ranking and safe-batch selection against obvious Python versions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parbpe.merge.pairs import pack
from parbpe.merge.selection import (
    Descending,
    PairCounts,
    PairQueue,
    age_key,
    pair_of_age,
    safe_batch,
    search_width,
)


def test_descending_reverses_byte_order():
    rng = random.Random(0)
    tokens = [bytes(rng.choice(b"\x00ab\xff") for _ in range(rng.randint(1, 4))) for _ in range(300)]
    tokens += [b"a", b"a\x00", b"a\x00\x00", b"\xff", b"\xff\xff"]
    assert sorted(tokens, key=Descending) == sorted(tokens, reverse=True)


def _reference_ranking(counts: dict[int, int], vocab: list[bytes]) -> list[int]:
    def key(k):
        a, b = k >> 32, k & 0xFFFFFFFF
        return (counts[k], vocab[a], a, vocab[b], b)

    return sorted(counts, key=key, reverse=True)


def _apply(deltas: dict[int, int], counts: dict[int, int], target) -> None:
    """Apply count changes to the reference dict (dropping zeros) and to target.update."""
    for k, d in deltas.items():
        counts[k] = counts.get(k, 0) + d
        if counts[k] == 0:
            del counts[k]
    upd = sorted(deltas)
    target.update(np.array(upd, dtype=np.int64), np.array([deltas[k] for k in upd], dtype=np.int64))


@pytest.mark.parametrize("n", [1, 3, 16, 17, 200, 5000])
def test_ranked_equals_sorted_reference(n):
    rng = random.Random(n)
    vocab = [bytes([b]) for b in range(256)] + [b"ab", b"ab", b"a"]  # duplicate bytes on purpose
    counts = {}
    for _ in range(3000):
        a, b = rng.randrange(len(vocab)), rng.randrange(len(vocab))
        counts[int(pack(a, b))] = rng.choice([1, 2, 3, 5, 8, 100, rng.randint(1, 10**6)])
    keys = np.array(sorted(counts), dtype=np.int64)
    queue = PairQueue(keys, np.array([counts[k] for k in keys.tolist()], dtype=np.int64), vocab)
    got_keys, got_counts = queue.ranked(n)
    expected = _reference_ranking(counts, vocab)[:n]
    assert got_keys.tolist() == expected
    assert got_counts.tolist() == [counts[k] for k in expected]


def test_ranking_follows_updates_and_new_tokens():
    rng = random.Random(5)
    vocab = [bytes([b]) for b in range(256)]
    counts = {int(pack(a, b)): rng.randint(1, 50) for a in range(97, 110) for b in range(97, 110)}
    keys = np.array(sorted(counts), dtype=np.int64)
    queue = PairQueue(keys, np.array([counts[k] for k in keys.tolist()], dtype=np.int64), list(vocab))
    for step in range(60):
        # lower some existing pairs (never below zero), add pairs with a new token
        lowered = rng.sample(sorted(counts), 10)
        new_token = len(vocab)
        vocab.append(vocab[rng.randrange(97, 110)] + vocab[rng.randrange(97, 110)])
        queue.add_token(vocab[-1])
        deltas = {k: -rng.randint(1, counts[k]) for k in lowered}
        for _ in range(5):
            other = rng.randrange(97, 110)
            k = int(pack(new_token, other)) if rng.random() < 0.5 else int(pack(other, new_token))
            deltas[k] = rng.randint(1, 60)
        _apply(deltas, counts, queue)
        n = rng.choice([1, 2, 16, 40, 300])
        assert queue.ranked(n)[0].tolist() == _reference_ranking(counts, vocab)[:n], step


def test_ranking_with_counts_too_large_for_one_sort_key():
    """Counts near 2**62 cannot share one int64 with the token places: the two-sort path ranks them."""
    rng = random.Random(3)
    vocab = [bytes([b]) for b in range(256)]
    big = 2**61
    counts = {int(pack(rng.randrange(256), rng.randrange(256))): big + rng.randint(0, 3) for _ in range(3000)}
    keys = np.array(sorted(counts), dtype=np.int64)
    queue = PairQueue(keys, np.array([counts[k] for k in keys.tolist()], dtype=np.int64), vocab)
    for n in (17, 500, len(counts)):
        assert queue.ranked(n)[0].tolist() == _reference_ranking(counts, vocab)[:n]


def test_age_key_round_trip_and_order():
    ids = [0, 1, 2, 255, 256, 65535, 65536, 2**31 - 2, 2**31 - 1]
    keys = np.array([int(pack(a, b)) for a in ids for b in ids], dtype=np.int64)
    ages = age_key(keys)
    assert pair_of_age(ages).tolist() == keys.tolist()
    assert len(set(ages.tolist())) == len(keys)
    # Every pair with a newer (larger) token sorts after every pair of older tokens only.
    for k, age in zip(keys.tolist(), ages.tolist()):
        newest = max(k >> 32, k & 0xFFFFFFFF)
        older = ages[np.maximum(keys >> 32, keys & 0xFFFFFFFF) < newest]
        assert (older < age).all()


def test_pair_counts_follow_a_dict_through_rounds():
    """Lowering, removing (with compaction of the zeros) and appending, checked against a dict."""
    rng = random.Random(8)
    counts = {int(pack(a, b)): rng.randint(1, 40) for a in range(300) for b in range(0, 300, 7)}
    keys = np.array(rng.sample(sorted(counts), len(counts)), dtype=np.int64)  # any order
    store = PairCounts(keys, np.array([counts[k] for k in keys.tolist()], dtype=np.int64))
    newest = 299
    for step in range(120):
        lowered = rng.sample(sorted(counts), min(len(counts), 150))
        deltas = {k: -rng.randint(1, counts[k]) if rng.random() < 0.5 else -counts[k] for k in lowered}
        for _ in range(rng.randint(0, 40)):  # pairs with this round's new token
            newest += 1
            other = rng.randrange(newest)
            deltas[int(pack(newest, other)) if rng.random() < 0.5 else int(pack(other, newest))] = rng.randint(1, 9)
        _apply(deltas, counts, store)
        assert store.live == len(counts), step
        ages, values = store.arrays()
        assert dict(zip(pair_of_age(ages[values > 0]).tolist(), values[values > 0].tolist())) == counts, step
        for k in rng.sample(sorted(counts), 5) + [int(pack(newest + 1, 0))]:
            assert store.count_of(k) == counts.get(k, 0)
    assert len(store.arrays()[0]) < 2 * store.live + 1024 + 200  # zeros were compacted away


def test_pair_counts_refuse_inconsistent_changes():
    store = PairCounts(np.array([int(pack(5, 6)), int(pack(6, 5))]), np.array([3, 4]))
    with pytest.raises(AssertionError, match="not counted"):
        store.update(np.array([int(pack(5, 5))]), np.array([-1]))
    with pytest.raises(AssertionError, match="gained"):
        store.update(np.array([int(pack(5, 6))]), np.array([2]))  # not a pair of a newer token


def test_update_refuses_a_count_going_negative():
    queue = PairQueue(np.array([int(pack(1, 2))]), np.array([3]), [bytes([b]) for b in range(256)])
    with pytest.raises(AssertionError):
        queue.update(np.array([int(pack(1, 2))]), np.array([-4]))


def _reference_safe_batch(keys: list[int]) -> list[bool]:
    seen_first, seen_second, out = set(), set(), []
    for k in keys:
        a, b = k >> 32, k & 0xFFFFFFFF
        out.append(not (a in seen_second or b in seen_first))
        seen_first.add(a)
        seen_second.add(b)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_safe_batch_equals_sequential_walk(seed):
    rng = random.Random(seed)
    keys = list(dict.fromkeys(int(pack(rng.randrange(12), rng.randrange(12))) for _ in range(rng.randint(1, 60))))
    assert safe_batch(np.array(keys, dtype=np.int64)).tolist() == _reference_safe_batch(keys)


def test_safe_batch_examples():
    k = lambda a, b: int(pack(a, b))  # noqa: E731
    # (1,2) then (2,3): 2 was seen second -> skipped; (4,1): 1 seen first -> skipped; (5,6) fine.
    assert safe_batch(np.array([k(1, 2), k(2, 3), k(4, 1), k(5, 6)])).tolist() == [True, False, False, True]
    # A skipped pair still marks its tokens: (7,8) skipped marks 7 as first, so (9,7) is skipped.
    assert safe_batch(np.array([k(1, 7), k(7, 8), k(9, 7)])).tolist() == [True, False, False]
    # (x, x) first, then anything with x is skipped.
    assert safe_batch(np.array([k(3, 3), k(3, 4), k(5, 3)])).tolist() == [True, False, False]


def test_search_width_caps():
    assert search_width(1000, 300, 2, 0) == 300  # vocabulary size caps
    assert search_width(100, 300, 2, 0) == 50  # remaining // cap_divisor caps
    assert search_width(100, 300, 2, 7) == 7  # max_batch_size caps
    assert search_width(1, 300, 2, 0) == 1  # at least one
    assert search_width(1000, 300, 2, 1) == 1  # serial


def test_ranking_with_long_tokens_and_extreme_bytes():
    """Tokens grow long; zero and 0xFF bytes and prefixes order correctly."""
    rng = random.Random(11)
    vocab = [bytes([b]) for b in range(256)]
    alphabet = [0, 1, 97, 98, 254, 255]
    counts = {int(pack(a, b)): rng.randint(1, 5) for a in alphabet for b in alphabet}
    keys = np.array(sorted(counts), dtype=np.int64)
    queue = PairQueue(keys, np.array([counts[k] for k in keys.tolist()], dtype=np.int64), list(vocab))
    tokens = list(alphabet)
    for step in range(80):
        new_token = len(vocab)
        a, b = rng.choice(tokens), rng.choice(tokens)
        vocab.append(vocab[a] + vocab[b])  # lengths keep growing
        queue.add_token(vocab[-1])
        assert queue.tie_key(new_token) == Descending(vocab[-1])
        deltas = {}
        for _ in range(6):
            other = rng.choice(tokens)
            k = int(pack(new_token, other)) if rng.random() < 0.5 else int(pack(other, new_token))
            if k not in counts and k not in deltas:
                deltas[k] = rng.randint(1, 5)  # few distinct counts: ties everywhere
        tokens.append(new_token)
        counts.update(deltas)
        upd = sorted(deltas)
        queue.update(np.array(upd, dtype=np.int64), np.array([deltas[k] for k in upd], dtype=np.int64))
        assert queue.ranked(len(counts))[0].tolist() == _reference_ranking(counts, vocab), step
    assert max(map(len, vocab)) > 20


@pytest.mark.parametrize("seed", range(5))
def test_byte_order_equals_python_sort(seed):
    """The numpy order by 8-byte prefixes equals sorting all bytes: long tokens sharing a prefix,
    tokens that are prefixes of others, zero bytes at the end and equal bytes under two ids."""
    rng = random.Random(seed)
    stems = [b"", b"abcdefgh", b"abcdefg\0", b"\xff" * 8]
    vocab = [bytes([b]) for b in range(256)]
    queue = PairQueue(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), list(vocab))
    for _ in range(1500):  # past the first growth of the prefix arrays
        token = rng.choice(stems) + bytes(rng.choice([0, 1, 97, 255]) for _ in range(rng.randrange(12)))
        vocab.append(token)
        queue.add_token(token)
    tokens = np.array(sorted(rng.sample(range(len(vocab)), 900)), dtype=np.int64)
    expected = sorted(tokens[::-1].tolist(), key=vocab.__getitem__, reverse=True)
    assert queue._byte_order(tokens).tolist() == expected


def test_progress_is_throttled_but_always_reports_the_end():
    """A slow or frequent progress callback is not called every round; the last call is the end."""
    from parbpe.merge import coordinator

    calls: list[tuple[int, int]] = []
    throttled = coordinator._Throttled(lambda done, total: calls.append((done, total)), interval=3600)
    for done in range(1, 101):
        throttled(done, 100)
    throttled.flush()
    assert calls == [(1, 100), (100, 100)]
    calls.clear()
    throttled = coordinator._Throttled(lambda done, total: calls.append((done, total)), interval=3600)
    for done in range(1, 51):
        throttled(done, 100)  # a run that stops early: flush sends the last round held back
    throttled.flush()
    assert calls == [(1, 100), (50, 100)]


@pytest.mark.parametrize("seed", range(3))
def test_pair_counts_lower_the_same_with_the_kernel(seed):
    """PairCounts with use_kernels: the same counts and live pairs after rounds of falling and new pairs."""
    pytest.importorskip("numba")
    rng = random.Random(seed)
    keys = np.array(sorted({int(pack(rng.randrange(256), rng.randrange(256))) for _ in range(2000)}), dtype=np.int64)
    counts = np.array([rng.randint(5, 50) for _ in keys], dtype=np.int64)
    stores = [PairCounts(keys, counts, use_kernels=k) for k in (False, True)]
    current = dict(zip(keys.tolist(), counts.tolist()))
    for new_token in range(256, 300, 2):
        live = sorted(k for k, c in current.items() if c)
        falling = rng.sample(live, min(300 if new_token % 3 else len(live) - 5, len(live)))  # some rounds: compaction
        changes = {k: -rng.randint(1, current[k]) if new_token % 3 else -current[k] for k in falling}
        for token in (new_token, new_token + 1):  # a round's two new tokens, on either side of their pairs
            changes.update({int(pack(token, rng.randrange(token + 1))): rng.randint(1, 9) for _ in range(30)})
            changes.update({int(pack(rng.randrange(token), token)): rng.randint(1, 9) for _ in range(30)})
        for k, d in changes.items():
            current[k] = current.get(k, 0) + d
        upd = np.array(sorted(changes), dtype=np.int64)
        for store in stores:
            store.update(upd, np.array([changes[k] for k in upd.tolist()], dtype=np.int64))
        plain, fast = (store.arrays() for store in stores)
        np.testing.assert_array_equal(plain[0], fast[0])
        np.testing.assert_array_equal(plain[1], fast[1])
        assert stores[0].live == stores[1].live == sum(1 for c in current.values() if c)
        assert all(stores[1].count_of(k) == c for k, c in list(current.items())[:50])


@pytest.mark.parametrize("use_kernels", [False, True])
def test_a_change_to_an_uncounted_pair_or_below_zero_is_refused_whole(use_kernels):
    if use_kernels:
        pytest.importorskip("numba")
    keys = np.array([int(pack(1, 2)), int(pack(3, 4)), int(pack(5, 6))])
    store = PairCounts(keys, np.array([3, 4, 5]), use_kernels=use_kernels)
    with pytest.raises(AssertionError, match="not counted"):
        store.update(np.array([keys[0], int(pack(7, 8))]), np.array([-1, -1]))
    with pytest.raises(AssertionError, match="went negative"):
        store.update(keys, np.array([-3, -5, -1]))
    assert store.arrays()[1].tolist() == [3, 4, 5] and store.live == 3  # nothing changed
    store.update(keys, np.array([-3, -1, -5]))
    assert sorted(store.arrays()[1].tolist()) == [0, 0, 3] and store.live == 1


@pytest.mark.parametrize("use_kernels", [False, True])
def test_the_store_takes_as_many_new_pairs_as_it_holds_in_place(use_kernels):
    """PairCounts keeps room for as many new pairs as it starts with (unwritten: no memory until
    used), so the first rounds' new pairs are appended without copying the store; past that room it
    grows and keeps every count."""
    if use_kernels:
        pytest.importorskip("numba")
    keys = np.array(sorted(int(pack(a, b)) for a in range(10, 20) for b in range(10, 20)), dtype=np.int64)
    store = PairCounts(keys, np.arange(1, len(keys) + 1, dtype=np.int64), use_kernels=use_kernels)
    held = store._ages
    new = np.array(sorted(int(pack(300, b)) for b in range(len(keys))), dtype=np.int64)
    store.update(new, np.full(len(new), 2, dtype=np.int64))
    assert store._ages is held and store.live == 2 * len(keys)
    more = np.array([int(pack(301, 5))], dtype=np.int64)
    store.update(more, np.array([7], dtype=np.int64))
    assert store._ages is not held and store.live == 2 * len(keys) + 1
    assert store.count_of(int(keys[3])) == 4 and store.count_of(int(new[-1])) == 2 and store.count_of(int(more[0])) == 7


def test_narrow_rounds_rebuild_a_growing_heap_as_it_runs_short():
    """Serial rounds pop the top pair and lower it (as its merge does): the heap, first HEAP_FIRST
    pairs, runs short and is rebuilt larger each time; every ranking is still the reference's."""
    rng = random.Random(11)
    vocab = [bytes([b]) for b in range(256)]
    counts = {int(pack(rng.randrange(256), rng.randrange(256))): rng.randint(1, 400) for _ in range(5000)}
    keys = np.array(sorted(counts), dtype=np.int64)
    queue = PairQueue(keys, np.array([counts[k] for k in keys.tolist()], dtype=np.int64), list(vocab))
    sizes = set()
    for step in range(400):
        n = rng.choice([1, 1, 2, 16])
        top, _ = queue.ranked(n)
        assert top.tolist() == _reference_ranking(counts, vocab)[:n], step
        sizes.add(queue._heap_size)
        _apply({int(k): -counts[int(k)] for k in top[:1]}, counts, queue)  # the top pair is merged away
    assert min(sizes) == 2 * PairQueue.HEAP_FIRST and 8 * PairQueue.HEAP_FIRST <= max(sizes) <= PairQueue.HEAP_MOST


@pytest.mark.parametrize("high", [3, 300, 70_000])
def test_pair_counts_in_age_order_by_the_kernel_as_by_argsort(high):
    """PairCounts from keys in ascending order (as engines count them) takes by_age's counting sort
    with the kernels: the same store as numpy's argsort of the age keys; keys out of order take numpy's."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(high)
    first, second = rng.integers(0, high, 5000), rng.integers(0, high, 5000)
    keys = np.unique(first.astype(np.int64) << 32 | second.astype(np.int64))  # (x, x) pairs included
    counts = rng.integers(1, 10**12, len(keys))
    plain, fast = PairCounts(keys, counts), PairCounts(keys, counts, use_kernels=True)
    for a, b in zip(plain.arrays(), fast.arrays()):
        np.testing.assert_array_equal(a, b)
    assert fast.arrays()[0].dtype == np.uint64 and np.all(np.diff(fast.arrays()[0].astype(np.float64)) >= 0)
    shuffled = rng.permutation(len(keys))
    unsorted = PairCounts(keys[shuffled], counts[shuffled], use_kernels=True)
    for a, b in zip(plain.arrays(), unsorted.arrays()):
        np.testing.assert_array_equal(a, b)

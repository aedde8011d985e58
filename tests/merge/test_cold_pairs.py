"""The table cut at its cold pairs (merge/cold_pairs.py): its kernels against their numpy twins, and the
merges of the cut table (learn_merges' guard) against those of the whole table."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from parbpe import jit
from parbpe.merge import cold_pairs
from parbpe.merge.cold_pairs import cut_cold_pairs, cut_table, pair_sums
from parbpe.merge.coordinator import ColdPairReached, learn_merges
from parbpe.merge.superword import superword_allowed
from parbpe.merge.table import ChunkTable

pytest.importorskip("numba")


def random_table(seed: int, n_chunks: int = 3000, width: int = 300, max_len: int = 12, heavy: bool = True,
                 dtype: type = np.uint16) -> ChunkTable:
    """Chunks of Zipf-distributed tokens (a few frequent pairs, many rare ones), mostly seen once; some
    chunks of one token, some seen 65,535 times or more (the kernels' heavy entries)."""
    rng = random.Random(seed)
    weights = [1 / (k + 1) for k in range(width)]
    chunks, counts = [], []
    for _ in range(n_chunks):
        chunks.append(rng.choices(range(width), weights, k=rng.randint(1, max_len)))
        counts.append(rng.choice([1, 1, 1, 2, 3, 7, 40]) if not heavy or rng.random() > 0.01 else 70_000 + seed)
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    starts = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    tokens = np.array([t for c in chunks for t in c], dtype=dtype)
    return ChunkTable(tokens=tokens, starts=starts, lengths=lengths, counts=np.array(counts, dtype=np.int64))


def copied(table: ChunkTable) -> ChunkTable:
    """A table of its own (a merge rewrites its table's tokens)."""
    return dataclasses.replace(table, tokens=table.tokens.copy(), starts=table.starts.copy(),
                               lengths=table.lengths.copy(), counts=table.counts.copy())


def rows(table: ChunkTable) -> dict[tuple[int, ...], int]:
    """The table as pieces and their summed counts (rows in any order, a piece in one row or several)."""
    out: dict[tuple[int, ...], int] = {}
    for c in range(len(table.counts)):
        piece = tuple(table.tokens[table.starts[c]:table.starts[c + 1]].tolist())
        out[piece] = out.get(piece, 0) + int(table.counts[c])
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("threads", [1, 2])
def test_the_pair_sums_kernels_equal_the_numpy_twin(seed, threads):
    table = random_table(seed)
    want = pair_sums(table, use_jit=False)
    got = pair_sums(table, use_jit=True, threads=threads)
    order = np.argsort(got[0])
    for mine, theirs in zip(got, want):
        assert np.array_equal(mine[order], theirs)
    # the reference itself, pair by pair
    expected: dict[int, list[int]] = {}
    for c in range(len(table.counts)):
        chunk = table.tokens[table.starts[c]:table.starts[c + 1]].tolist()
        for a, b in zip(chunk, chunk[1:]):
            entry = expected.setdefault(a << 16 | b, [0, 0])
            entry[0] += int(table.counts[c])
            entry[1] += 1
    assert {k: [s, o] for k, s, o in zip(*(x.tolist() for x in want))} == expected


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("share", [0.0, 0.3, 0.9, 1.0])
def test_the_cut_kernel_equals_the_numpy_twin(seed, threads, share):
    """Any set of hot pairs: none (every chunk falls apart into tokens, and none is kept), some, all
    (nothing is cut: the table less its chunks of one token, equal chunks one row)."""
    table = random_table(seed, max_len=30)
    keys = pair_sums(table, use_jit=False)[0]
    rng = np.random.default_rng(seed)
    hot = keys[rng.random(len(keys)) < share]
    want = rows(cut_table(table, hot, use_jit=False))
    got = cut_table(table, hot, use_jit=True, threads=threads)
    assert np.array_equal(got.lengths, np.diff(got.starts)) and got.starts[0] == 0 and got.starts[-1] == len(got.tokens)
    assert rows(got) == want
    if threads == 1:  # one part: each piece one row
        assert len(got.counts) == len(want)
    if share == 1.0:
        whole = rows(table)
        assert want == {piece: count for piece, count in whole.items() if len(piece) > 1}
    if share == 0.0:
        assert want == {}


def test_the_cut_kernel_grows_its_table_of_pieces():
    """More distinct long pieces than the first table of slots holds half full (it starts at a slot a
    chunk, at least 4,096): regrown, the same pieces as numpy's."""
    rng = random.Random(7)
    chunks = [[rng.randrange(1000) for _ in range(3000)] for _ in range(10)]  # 10 chunks, ~6,000 pieces
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    table = ChunkTable(tokens=np.array(sum(chunks, []), dtype=np.uint16), starts=starts, lengths=lengths,
                       counts=np.arange(1, 11, dtype=np.int64))
    keys = pair_sums(table, use_jit=False)[0]
    hot = keys[np.random.default_rng(1).random(len(keys)) < 0.75]
    got = cut_table(table, hot, use_jit=True)
    assert sum(len(p) > 2 for p in rows(got)) > 2048
    assert rows(got) == rows(cut_table(table, hot, use_jit=False))


def merged(table: ChunkTable, n_merges: int, allow=None, width: int = 200, **kwargs):
    """learn_merges on a table whose tokens are below width (the vocabulary of the whole table: a cut
    table may have lost its largest tokens, and new tokens are numbered after the vocabulary)."""
    return learn_merges(table, [bytes([b % 256]) * (1 + b // 256) for b in range(width)], n_merges, allow=allow,
                        **kwargs)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("allow", [None, superword_allowed])
def test_the_cut_table_makes_the_whole_tables_merges(monkeypatch, seed, allow):
    """The guard holds: the same merges in the same rounds as on the whole table; or it does not, and
    the merges before it are the whole table's first ones, which replayed there give all of them."""
    monkeypatch.setenv("PARBPE_JIT", "on")
    table = random_table(seed, n_chunks=6000, width=200)
    n_merges = 150
    whole = merged(copied(table), n_merges, allow)
    cut = cut_cold_pairs(table, n_merges)
    assert cut is not None and 2 <= cut.threshold
    assert len(cut.table.tokens) < len(table.tokens)
    try:
        result = merged(cut.table, n_merges, allow, guard=cut.threshold)
    except ColdPairReached as reached:
        assert reached.merges == whole.merges[:len(reached.merges)]
        result = merged(copied(table), n_merges, allow, replay=(reached.merges, reached.batch_sizes))
    assert (result.merges, result.batch_sizes) == (whole.merges, whole.batch_sizes)


@pytest.mark.parametrize("seed", range(3))
def test_a_round_that_may_rank_a_cut_pair_raises_with_the_merges_before_it(monkeypatch, seed):
    """The table cut far above what its last merges count: the guard stops the rounds where the width-th
    pair falls below it, with the whole table's merges so far; replayed, they lead to its merges."""
    monkeypatch.setenv("PARBPE_JIT", "on")
    table = random_table(seed, n_chunks=6000, width=200)
    n_merges = 150
    whole = merged(copied(table), n_merges)
    keys, sums, _ = pair_sums(table)
    threshold = int(np.sort(sums)[-100])  # the first round ranks 75 pairs: only the 100 most frequent kept whole
    with pytest.raises(ColdPairReached) as reached:
        merged(cut_table(table, keys[sums >= threshold]), n_merges, guard=threshold)
    done = reached.value.merges
    assert 0 < len(done) < n_merges and done == whole.merges[:len(done)]
    assert reached.value.batch_sizes == whole.batch_sizes[:len(reached.value.batch_sizes)]
    assert 0 < reached.value.count < threshold
    again = merged(copied(table), n_merges, replay=(done, reached.value.batch_sizes))
    assert again.merges == whole.merges


@pytest.mark.parametrize("seed", range(3))
def test_cut_lower_each_time_a_round_reaches_below_the_cut_the_merges_are_the_whole_tables(monkeypatch, seed):
    """As the merge stage does (pipeline/merge.py): a cut far too high, lowered below each round that
    reached under it, the merges so far replayed on the new cut, until one holds to the end."""
    monkeypatch.setenv("PARBPE_JIT", "on")
    table = random_table(seed, n_chunks=6000, width=200)
    n_merges = 150
    whole = merged(copied(table), n_merges)
    monkeypatch.setattr(cold_pairs, "CUT_DIVISOR", 1)  # T: the 150th pair's count, which later rounds go below
    cut = cut_cold_pairs(table, n_merges)
    replay, thresholds = None, []
    while True:
        thresholds.append(cut.threshold)
        try:
            result = merged(cut.table, n_merges, replay=replay, guard=cut.threshold)
            break
        except ColdPairReached as reached:
            replay, cut = (reached.merges, reached.batch_sizes), cut.lower(table, reached.count)
            assert cut is not None
    assert len(thresholds) > 1 and thresholds == sorted(thresholds, reverse=True)
    assert (result.merges, result.batch_sizes) == (whole.merges, whole.batch_sizes)


def test_no_cut_where_it_cannot_be_made_or_is_not_worth_it(monkeypatch):
    monkeypatch.setenv("PARBPE_JIT", "on")
    table = random_table(0)
    assert cut_cold_pairs(table, 100) is not None
    assert cut_cold_pairs(dataclasses.replace(table, tokens=table.tokens.astype(np.int32)), 100) is None  # 32 bits
    merged_once = dataclasses.replace(table, lengths=np.maximum(table.lengths - 1, 0))  # chunks not packed
    assert cut_cold_pairs(merged_once, 100) is None
    assert cut_cold_pairs(table, 10**6) is None  # more merges than pairs
    assert cut_cold_pairs(table, 0) is None
    few = random_table(0, n_chunks=50, heavy=False)
    assert cut_cold_pairs(few, 100) is None  # the 100th pair seen fewer than 2 * CUT_DIVISOR times
    monkeypatch.setattr(cold_pairs, "MAX_HOT_SHARE", 0.0)
    assert cut_cold_pairs(table, 100) is None  # the pairs kept hold too much of the table
    monkeypatch.setattr(cold_pairs, "MAX_HOT_SHARE", 0.5)
    assert cut_cold_pairs(table, 100).lower(table, 3) is None  # (below 2 * CUT_DIVISOR: no cut)
    with jit.using("off"):  # numpy's engine merges: no cut
        assert cut_cold_pairs(table, 100) is None

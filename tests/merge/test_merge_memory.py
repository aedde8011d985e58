"""The merge stage under a memory budget: index rebuilds keep the merges, the fit picks the cutoff."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from corpora import random_corpus
from reference import reference_train

import parbpe
from parbpe.merge.coordinator import learn_merges
from parbpe.merge import pair_index
from parbpe.merge.engines import ChunkEngine, LinkedEngine
from parbpe.merge.fit import MAX_AUTO_DROP, fit_merge_stage, merge_estimate
from parbpe.merge.table import build_table, table_from_arrays, tokens_by_cutoff
from parbpe.run.memory import parse_size


def _arrays(counts: dict[bytes, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    items = sorted(counts.items())
    lengths = [len(c) for c, _ in items]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = np.frombuffer(b"".join(c for c, _ in items), dtype=np.uint8)
    return data, offsets, np.array([n for _, n in items], dtype=np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_index_rebuilds_slices_and_groups_keep_the_merges(seed, monkeypatch):
    # Rebuild the index whenever it holds any stale entry, build it a few positions at a time, and
    # apply wide batches a merge or two at a time: the merges must not change.
    _rebuilds_slices_and_groups(seed, monkeypatch)


@pytest.mark.parametrize("seed", range(12))
def test_the_kernels_sweep_a_wide_pair_in_parts_and_keep_the_merges(seed, monkeypatch):
    # With the kernels, a merge whose candidates outnumber a group is swept a slice at a time
    # (LinkedEngine._sweep_in_parts); here a slice is one candidate, and the merges must not change.
    pytest.importorskip("numba")
    monkeypatch.setenv("PARBPE_JIT", "on")
    parts = []
    original = LinkedEngine._sweep_in_parts
    monkeypatch.setattr(LinkedEngine, "_sweep_in_parts", lambda self, found, *rest: parts.append(len(found))
                        or original(self, found, *rest))
    _rebuilds_slices_and_groups(seed, monkeypatch, kernels=True)
    assert max(parts) > 1  # a merge's candidates were swept in several slices


def _rebuilds_slices_and_groups(seed: int, monkeypatch, kernels: bool = False) -> None:
    monkeypatch.setattr(LinkedEngine, "MIN_REBUILD", 0)
    monkeypatch.setattr(LinkedEngine, "STALE_FACTOR", 1.0)
    monkeypatch.setattr(LinkedEngine, "JIT_STALE_FACTOR", 1.0)
    monkeypatch.setattr(LinkedEngine, "SLICE", 7)
    monkeypatch.setattr(LinkedEngine, "GROUP_ENTRIES", 1)
    monkeypatch.setattr(LinkedEngine, "GROUP_SHARE", 10**9)
    rebuilds, groups = [], []
    original = LinkedEngine._index_live_pairs
    monkeypatch.setattr(LinkedEngine, "_index_live_pairs",
                        lambda self, count: rebuilds.append(count) or original(self, count))
    find_hits = LinkedEngine.find_hits
    monkeypatch.setattr(LinkedEngine, "find_hits",
                        lambda self, a, b, spans=None: groups.append(len(a)) or find_hits(self, a, b, spans))
    rng = random.Random(500 + seed)
    counts = random_corpus(rng, rng.choice([b"ab", b"abc", b"the quick"]), rng.randint(5, 80), rng.randint(2, 16))
    n = rng.randint(5, 100)
    items = sorted(counts.items())
    for max_batch_size in (1, 0):
        table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
        merges = learn_merges(table, [bytes([b]) for b in range(256)], n, engine="linked",
                              max_batch_size=max_batch_size).merges
        assert merges == reference_train(counts, n, batched=max_batch_size == 0)
    assert rebuilds.count(False) > 0  # the index was rebuilt mid-training
    if not kernels:  # (the kernels find hits in their sweep)
        assert max(groups) == 1  # every batch was applied a merge at a time


@pytest.mark.parametrize("vocab", ["uint16", "int32"])  # a packed index (lists first), or blocks of int64 keys
@pytest.mark.parametrize("group_tokens", [1, 9], ids=["chunk-groups", "several-chunk-groups"])
@pytest.mark.parametrize("sorted_share", [0, 10**9], ids=["chunks-sorted", "chunks-masked"])
@pytest.mark.parametrize("seed", range(8))
def test_the_chunk_engine_in_groups_keeps_the_merges(seed, sorted_share, group_tokens, vocab, monkeypatch):
    """ChunkEngine counts and merges a few chunks' tokens at a time (GROUP_TOKENS), reads the index a few
    entries at a time (LOOKUP_ENTRIES) or sorts them where few (SORTED_SHARE), and rebuilds it once
    stale entries outgrow it (STALE_FACTOR), reading each group's pairs where they lie in the table,
    past the room merged tokens left; here a group is a chunk or a few, a read an entry or two and one
    stale entry a rebuild: the merges are the reference's, overlapping and not."""
    monkeypatch.setattr(ChunkEngine, "GROUP_TOKENS", group_tokens)
    monkeypatch.setattr(ChunkEngine, "MIN_REBUILD", 0)
    monkeypatch.setattr(ChunkEngine, "STALE_FACTOR", 1.0)  # the index rebuilt once it holds a stale entry
    monkeypatch.setattr(pair_index, "LOOKUP_ENTRIES", 2)
    monkeypatch.setattr(pair_index, "SORTED_SHARE", sorted_share)  # a round's chunks sorted, or marked
    groups, rebuilds = [], []
    original, index_pairs = ChunkEngine._apply_to, ChunkEngine._index_pairs
    monkeypatch.setattr(ChunkEngine, "_apply_to", lambda self, ids, *rest: groups.append(len(ids))
                        or original(self, ids, *rest))
    monkeypatch.setattr(ChunkEngine, "_index_pairs", lambda self, count: rebuilds.append(count)
                        or index_pairs(self, count))
    read, pairs_of = [], ChunkEngine._pairs_of
    monkeypatch.setattr(ChunkEngine, "_pairs_of", lambda self, ids: read.append(len(ids)) or pairs_of(self, ids))
    rng = random.Random(900 + seed)
    counts = random_corpus(rng, rng.choice([b"ab", b"abc", b"the quick"]), rng.randint(5, 80), rng.randint(2, 16))
    n = rng.randint(5, 100)
    items = sorted(counts.items())
    for nonoverlap in (False, True):
        table = build_table([c for c, _ in items], [k for _, k in items], 256 + n if vocab == "uint16" else 2**17)
        assert table.tokens.dtype == vocab
        merges = learn_merges(table, [bytes([b]) for b in range(256)], n, engine="chunk", nonoverlap=nonoverlap,
                              max_batch_size=1).merges
        assert merges == reference_train(counts, n, nonoverlap=nonoverlap)
    assert groups and False in rebuilds
    if group_tokens == 1:
        assert max(groups) == 1
    elif vocab == "uint16":  # (an unpacked index is built from gathered groups)
        assert max(read) > 1  # a rebuild read several chunks at once


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("nonoverlap", [False, True])
def test_the_chunk_engine_holds_its_model(nonoverlap, threads):
    """ChunkEngine's peak above its table stays within the model the fit reckons it by
    (chunk_engine_estimate, and a group more for a second thread): 3M tokens of random words,
    overlapping pairs and not. (Gathering the whole table at once held about three times the model.)"""
    from parbpe.merge.fit import chunk_engine_estimate, chunk_group_bytes
    from parbpe.run.memory import PeakSampler, process_rss, trim_heap

    rng = np.random.default_rng(4)
    lengths = rng.integers(2, 14, size=400_000)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = rng.integers(97, 123, size=int(offsets[-1]), dtype=np.uint8)
    counts = rng.integers(1, 50, size=len(lengths)).astype(np.int64)
    model = chunk_engine_estimate(int(offsets[-1]), len(lengths), int(lengths.max()), nonoverlap=nonoverlap)
    model += (threads - 1) * chunk_group_bytes(int(lengths.max()), nonoverlap)
    trim_heap()
    start = process_rss()  # as the fit's base: the process with the chunk arrays, before the table
    with PeakSampler(interval=0.005) as sampler:
        table = table_from_arrays(data, offsets, counts, 2048)
        del data, offsets, counts  # (the merge stage lets them go once the table holds them)
        learn_merges(table, [bytes([b]) for b in range(256)], 2048 - 256, engine="chunk", nonoverlap=nonoverlap,
                     threads=threads)
    assert sampler.peak - start <= model, ((sampler.peak - start) / 1e6, model / 1e6)


def test_table_from_arrays_equals_build_table_and_cuts_rare_chunks():
    counts = {b"ab": 3, b"a": 9, b"abc": 1, b"xyz": 2, b"q": 1}
    data, offsets, n = _arrays(counts)
    one = table_from_arrays(data, offsets, n, 300)
    two = build_table(sorted(counts), [counts[c] for c in sorted(counts)], 300)
    assert one.tokens.tolist() == two.tokens.tolist() and one.counts.tolist() == two.counts.tolist()
    cut = table_from_arrays(data, offsets, n, 300, min_count=2)
    assert [bytes(cut.chunk_tokens(c)) for c in range(cut.n_chunks)] == [b"ab", b"xyz"]
    chunks, tokens = tokens_by_cutoff(offsets, n, 4)
    assert chunks[1:].tolist() == [3, 2, 1, 0] and tokens[1:].tolist() == [8, 5, 2, 0]


def test_fit_keeps_everything_when_the_budget_allows():
    data, offsets, n = _arrays({b"ab": 3, b"abc": 1, b"xyz": 2})
    fit = fit_merge_stage(offsets, n, budget=10**9, base_rss=10**8)
    assert (fit.min_count, fit.auto_cutoff, fit.tokens, fit.chunks) == (1, False, 8, 3)
    assert fit.estimate == 10**8 + merge_estimate(8, 3)
    assert fit_merge_stage(offsets, n, budget=10**9, base_rss=10**8, freq_cutoff=2).tokens == 5


def test_fit_of_a_table_encoded_before_it_merges():
    """SuperBPE's stage 2: the peak is the encoding (per byte) or the merging of the encoded table
    (per token, fewer than bytes), whichever is larger, and the error speaks of both."""
    from parbpe.merge.fit import ENCODE_BYTES_PER_BYTE, MERGE_BYTES_PER_CHUNK

    data, offsets, n = _arrays({b"ab" * 500: 3, b"abc" * 300: 1, b"xyz" * 200: 2})  # 2,500 bytes, 3 chunks
    fit = fit_merge_stage(offsets, n, budget=10**9, base_rss=10**6, tokens_per_byte=0.25)
    assert fit.tokens == 2500 and fit.tokens_per_byte == 0.25
    merging = merge_estimate(625, 3)
    encoding = ENCODE_BYTES_PER_BYTE * 2500 + MERGE_BYTES_PER_CHUNK * 3
    assert fit.estimate == 10**6 + max(merging, encoding) and fit.to_dict()["tokens_per_byte"] == 0.25
    assert fit_merge_stage(offsets, n, budget=10**9, base_rss=10**6, tokens_per_byte=0.9).estimate == \
        10**6 + merge_estimate(2250, 3)
    # A budget the bytes as tokens would not fit, the encoded table does.
    budget = 10**6 + max(merging, encoding)
    with pytest.raises(ValueError, match="too small"):
        fit_merge_stage(offsets, n, budget=budget, base_rss=10**6)
    assert not fit_merge_stage(offsets, n, budget=budget, base_rss=10**6, tokens_per_byte=0.25).auto_cutoff
    with pytest.raises(ValueError, match=r"its table of 2,500 bytes \(about 625 tokens once encoded\) needs"):
        fit_merge_stage(offsets, n, budget=10**6 + 100, base_rss=10**6, tokens_per_byte=0.25)


def test_fit_of_a_table_the_run_engine_merges(monkeypatch):
    """Hostile text (long runs of one byte) merges in the run engine: estimated per token and per run,
    in one process; a table whose runs do not shrink it keeps the linked engine's estimate."""
    from parbpe.merge import fit as fit_module
    from parbpe.merge.fit import MERGE_BYTES_PER_CHUNK, RUN_BYTES_PER_RUN, RUN_BYTES_PER_TOKEN
    from parbpe.merge.runs import run_starts
    from parbpe.merge.table import table_from_arrays

    monkeypatch.setattr(fit_module, "MIN_RUN_TOKENS", 100)
    data, offsets, n = _arrays({b"a" * 3000: 2, b"ab" * 40: 5, b"xyz": 1})
    table = table_from_arrays(data, offsets, n, 300)
    runs = len(run_starts(table))
    assert runs == 1 + 80 + 3
    fit = fit_merge_stage(offsets, n, budget=10**9, base_rss=10**6, workers=2, data=data)
    assert fit.runs == runs and fit.workers == 1 and fit.to_dict()["engine"] == "runs"
    assert fit.estimate == 10**6 + RUN_BYTES_PER_TOKEN * 3083 + RUN_BYTES_PER_RUN * runs + MERGE_BYTES_PER_CHUNK * 3
    # What fits the run engine would not fit the linked one.
    with pytest.raises(ValueError, match="too small"):
        fit_merge_stage(offsets, n, budget=fit.estimate, base_rss=10**6)
    # At min_count 2 the table keeps only runs-poor chunks ("ab" * 40: 80 runs of 80 tokens): linked.
    short = fit_merge_stage(offsets, n, budget=10**9, base_rss=10**6, freq_cutoff=5, workers=2, data=data)
    assert short.runs is None and short.workers == 2 and short.estimate == 10**6 + merge_estimate(80, 1)
    assert "engine" not in short.to_dict()


def test_sampled_tokens_per_byte_is_what_encoding_leaves():
    from parbpe.merge.encode import encode_byte_table, sampled_tokens_per_byte
    from parbpe.merge.table import table_from_arrays

    rng = random.Random(3)
    counts = {"".join(rng.choice("abcab ") for _ in range(rng.randint(2, 30))).encode(): 1 for _ in range(3000)}
    data, offsets, n = _arrays(counts)
    table = table_from_arrays(data, offsets, n, 400)
    stage1 = learn_merges(table_from_arrays(data, offsets, n, 400), [bytes([b]) for b in range(256)], 60)
    whole = len(encode_byte_table(table, stage1.merges, stage1.batch_sizes).tokens) / len(table.tokens)
    assert sampled_tokens_per_byte(data, offsets, stage1.merges, stage1.batch_sizes, sample_bytes=10**9) == whole
    sampled = sampled_tokens_per_byte(data, offsets, stage1.merges, stage1.batch_sizes, sample_bytes=5000)
    assert 0.2 < whole < 0.9 and abs(sampled - whole) < 0.05 * whole


def test_fit_leaves_out_the_rarest_chunks_or_refuses():
    # 1000 chunks seen once (3 tokens each) and one chunk seen a million times.
    counts = {f"r{k:03d}".encode()[:3] + bytes([97 + k % 26]): 1 for k in range(1000)}
    counts[b"the"] = 10**6
    data, offsets, n = _arrays(counts)
    full = merge_estimate(4 * 1000 + 3, 1001)
    budget = 10**6 + merge_estimate(3, 1)  # only "the" fits
    fit = fit_merge_stage(offsets, n, budget=budget, base_rss=10**6)
    assert fit.auto_cutoff and fit.min_count == 2 and fit.tokens == 3 and fit.dropped_chunks == 1000
    assert fit.dropped_occurrences == 1000 and fit.estimate <= budget
    table = table_from_arrays(data, offsets, n, 300, fit.min_count)
    assert table.n_chunks == 1
    # The same chunks, but the rare ones are 10% of the corpus: leaving them out would drop too much.
    counts[b"the"] = 9000
    data, offsets, n = _arrays(counts)
    assert 1000 / 10000 > MAX_AUTO_DROP
    with pytest.raises(ValueError, match="too small for the merge stage") as error:
        fit_merge_stage(offsets, n, budget=budget, base_rss=10**6)
    suggested = parse_size("".join(str(error.value).split("use at least ")[1].split(" ")[:2]))
    assert suggested >= 10**6 + full
    assert not fit_merge_stage(offsets, n, budget=suggested, base_rss=10**6).auto_cutoff


def test_train_reports_peaks_by_stage_and_the_merge_fit(tmp_path):
    path = tmp_path / "a.txt"
    rng = random.Random(5)
    words = [" " + "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    path.write_text("".join(rng.choice(words) for _ in range(40000)))
    stats = parbpe.train([str(path)], vocab_size=400, workers=1, out_dir=str(tmp_path / "out")).stats
    assert set(stats["peak_rss_by_stage"]) == {"plan", "count", "reduce", "table", "merge", "write"}
    assert max(stats["peak_rss_by_stage"].values()) == stats["peak_rss_bytes"]
    fit = stats["merge_fit"]
    assert fit["table_tokens"] == stats["table_tokens"] and not fit["auto_cutoff"] and fit["min_count"] == 1
    # the estimate leaves out what this (test) process held when the run started: stats say how much
    assert fit["estimate_bytes"] + stats["caller_held_bytes"] > stats["peak_rss_by_stage"]["reduce"] // 2


def test_max_pair_positions_counts_each_chunk_once_and_no_pair_across_chunks():
    from parbpe.merge.fit import max_pair_positions

    data, offsets, _ = _arrays({b"abab": 7, b"ba": 100, b"b": 9, b"xab": 1})
    # (a, b): 2 in "abab", 1 in "xab"; (b, a): 1 in "abab", 1 in "ba"; "ba" + "abab" meet in no pair
    assert max_pair_positions(data, offsets) == 3
    assert max_pair_positions(data, offsets, slice_bytes=2) == 3
    long = np.frombuffer("é".encode() * 1000, dtype=np.uint8)
    assert max_pair_positions(long, np.array([0, len(long)])) == 1000
    assert max_pair_positions(data[:0], np.zeros(1, dtype=np.int64)) == 0


@pytest.mark.parametrize("kernels", [False, True])
def test_fit_reckons_the_round_of_a_pair_wider_than_a_group(kernels, monkeypatch):
    """One merge's occurrences are applied at once: a pair at more positions than a group costs its
    temporaries beyond the linked model (with numba's RSS where the kernels merge), in one process."""
    from parbpe import jit
    from parbpe.merge import fit as fit_module

    monkeypatch.setattr(fit_module, "GROUP_ENTRIES", 100)
    monkeypatch.setattr(jit, "merge_kernels", lambda n_tokens: kernels)
    data, offsets, n = _arrays({"é".encode() * 400: 1, b"xy": 3})
    linked = 10**6 + merge_estimate(802, 2)
    plain = fit_merge_stage(offsets, n, budget=10**10, base_rss=10**6, workers=2, data=data)
    assert plain.estimate == linked and plain.workers == 2  # the worst fits: positions not even counted
    per = fit_module.HIT_BYTES_KERNELS if kernels else fit_module.HIT_BYTES_NUMPY
    wide = linked + (jit.NUMBA_RSS if kernels else 0) + per * (400 - 100)
    with pytest.raises(ValueError, match="too small for the merge stage") as error:
        fit_merge_stage(offsets, n, budget=wide - 1, base_rss=10**6, workers=2, data=data)
    suggested = parse_size("".join(str(error.value).split("use at least ")[1].split(" ")[:2]))
    assert wide <= suggested and not fit_merge_stage(offsets, n, budget=suggested, base_rss=10**6, data=data).auto_cutoff
    fit = fit_merge_stage(offsets, n, budget=wide, base_rss=10**6, workers=2, data=data)
    assert fit.estimate == wide and fit.workers == 1 and fit.numba_counted == kernels


def test_the_chunk_engine_keeps_every_chunk_where_the_linked_engine_would_cut():
    """chunk_engine="fallback": a table the linked engine merges only without its rarest chunks (or not at
    all) is merged whole by the chunk engine where its model fits; "never" cuts as before; "always"
    (nonoverlap) fits every cutoff by the chunk engine's model."""
    from parbpe.merge.engines import ChunkEngine
    from parbpe.merge.fit import CHUNK_BYTES_PER_TOKEN, CHUNK_GROUP_TOKENS, MERGE_BYTES_PER_CHUNK, chunk_engine_estimate

    assert CHUNK_GROUP_TOKENS == ChunkEngine.GROUP_TOKENS

    rng = random.Random(3)
    counts = {bytes(rng.choice(b"abcdefghijklmnop") for _ in range(rng.randint(2, 14))): rng.choice([1, 1, 1, 2, 50])
              for _ in range(300_000)}
    data, offsets, n = _arrays(counts)
    base = 10**8
    tokens, chunks = int(np.diff(offsets).sum()), len(n)
    whole = base + chunk_engine_estimate(tokens, chunks)
    assert whole < base + merge_estimate(tokens, chunks)  # (a table of 2.4M tokens: the chunk engine's is smaller)
    fit = fit_merge_stage(offsets, n, budget=whole, base_rss=base, data=data, chunk_engine="fallback")
    assert (fit.engine, fit.min_count, fit.auto_cutoff, fit.tokens, fit.workers) == ("chunk", 1, False, tokens, 1)
    assert fit.estimate == whole and fit.to_dict()["engine"] == "chunk"
    with pytest.raises(ValueError, match="too small for the merge stage"):  # "never": the linked engine refuses
        fit_merge_stage(offsets, n, budget=whole, base_rss=base, data=data)
    with pytest.raises(ValueError, match="too small for the merge stage"):  # nor does the chunk engine fit
        fit_merge_stage(offsets, n, budget=whole - 1, base_rss=base, data=data, chunk_engine="fallback")
    roomy = fit_merge_stage(offsets, n, budget=10**10, base_rss=base, data=data, chunk_engine="fallback")
    assert roomy.engine == "auto" and not roomy.auto_cutoff  # the linked engine where it fits
    counted = base + chunk_engine_estimate(tokens, chunks, nonoverlap=True)  # (every pair of a group recounted)
    always = fit_merge_stage(offsets, n, budget=counted, base_rss=base, data=data, chunk_engine="always")
    assert (always.engine, always.min_count, always.estimate) == ("chunk", 1, counted) and counted > whole
    assert whole - base - chunk_engine_estimate(0, 0) == CHUNK_BYTES_PER_TOKEN * tokens + MERGE_BYTES_PER_CHUNK * chunks
    assert chunk_engine_estimate(0, 0, 10**6) - chunk_engine_estimate(0, 0) > 0  # a chunk longer than a group
    # a group's bytes, which a second thread adds: in the fit of the chunk engine only
    assert fit.group_bytes == chunk_engine_estimate(0, 0, int(np.diff(offsets).max())) > 0
    assert always.group_bytes == chunk_engine_estimate(0, 0, int(np.diff(offsets).max()), nonoverlap=True)
    assert roomy.group_bytes == 0


def test_a_run_the_linked_engine_would_cut_keeps_every_chunk_with_the_chunk_engine(tmp_path, monkeypatch, capfd):
    """The merge stage takes the chunk engine's fit (here the linked engine's model made too large for the
    budget): no cutoff, a note, and the merges of the run without a budget."""
    from parbpe.merge import fit as fit_module

    path = tmp_path / "a.txt"
    rng = random.Random(8)
    words = [" " + "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    path.write_text("".join(rng.choice(words) for _ in range(40000)))
    free = parbpe.train([str(path)], vocab_size=400, workers=1, out_dir=str(tmp_path / "free"))
    monkeypatch.setattr(fit_module, "MERGE_BYTES_PER_TOKEN", 10**6)  # no budget holds the linked engine
    monkeypatch.setattr(fit_module, "CHUNK_GROUP_BYTES_PER_TOKEN", 0)
    capfd.readouterr()
    made_with = []  # each ChunkEngine's threads
    made = ChunkEngine.__init__

    def record(self, table, nonoverlap=False, threads=1):
        made_with.append(threads)
        made(self, table, nonoverlap, threads)

    monkeypatch.setattr(ChunkEngine, "__init__", record)
    held = parbpe.train([str(path)], vocab_size=400, workers=1, memory_budget="8GB", out_dir=str(tmp_path / "held"),
                        progress="jsonl")
    assert held.stats["merge_fit"]["engine"] == "chunk" and not held.stats["merge_fit"]["auto_cutoff"]
    assert "every chunk kept by the chunk engine" in capfd.readouterr().err
    assert held.tokenizer.merges == free.tokenizer.merges
    assert made_with == [min(2, os.cpu_count())]  # the budget holds a second group: two at a time
    monkeypatch.setattr(fit_module, "CHUNK_GROUP_BYTES_PER_TOKEN", 2 * 10**4)  # a group of 5.2 GB: one fits, not two
    tight = parbpe.train([str(path)], vocab_size=400, workers=1, memory_budget="8GB", out_dir=str(tmp_path / "tight"))
    estimate = tight.stats["merge_fit"]["estimate_bytes"]
    assert tight.stats["merge_fit"]["engine"] == "chunk" and estimate <= 8 * 10**9 < estimate + (1 << 18) * 2 * 10**4
    assert made_with[-1] == 1 and tight.tokenizer.merges == free.tokenizer.merges


@pytest.mark.parametrize("seed", range(6))
def test_the_chunk_engine_in_two_threads_keeps_the_merges(seed, monkeypatch):
    """ChunkEngine(threads=2) applies a round's groups two at a time (here a group is a chunk, so a round
    has many): the merges are the reference's, overlapping and not, and pairs of groups ran."""
    from parbpe.merge import engines

    monkeypatch.setattr(ChunkEngine, "GROUP_TOKENS", 1)  # (a group is one chunk)
    monkeypatch.setattr(ChunkEngine, "MIN_REBUILD", 0)
    pairs = []
    one_or_two = engines.one_or_two
    monkeypatch.setattr(engines, "one_or_two", lambda calls: pairs.append(len(calls)) or one_or_two(calls))
    rng = random.Random(700 + seed)
    counts = random_corpus(rng, rng.choice([b"abc", b"the quick"]), rng.randint(20, 80), rng.randint(6, 16))
    n = rng.randint(5, 100)
    items = sorted(counts.items())
    for nonoverlap in (False, True):
        table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
        merges = learn_merges(table, [bytes([b]) for b in range(256)], n, engine="chunk", nonoverlap=nonoverlap,
                              max_batch_size=0, threads=2).merges
        assert merges == reference_train(counts, n, nonoverlap=nonoverlap, batched=True)
    assert 2 in pairs


def test_the_chunk_engine_reads_a_groups_pairs_where_they_lie():
    """ChunkEngine._pairs_of, on a table whose chunks lost tokens to merges (room left after each),
    one of them down to one token: every pair of the chunks in the range, with its chunk, as the
    chunks' tokens read one by one give them."""
    table = build_table([b"aaaab", b"ab", b"abab", b"ba", b"aab"], [3, 1, 2, 5, 4], 300)
    engine = ChunkEngine(table)
    engine.initial_pair_counts()
    engine.apply(np.array([97]), np.array([97]), np.array([256]))
    engine.apply(np.array([97]), np.array([98]), np.array([257]))
    assert [engine.chunk_tokens(c) for c in range(5)] == [[256, 256, 98], [257], [257, 257], [98, 97], [256, 98]]
    for lo, hi in [(0, 5), (1, 4), (1, 2), (2, 3), (4, 5)]:
        firsts, seconds, holders = engine._pairs_of(np.arange(lo, hi))
        wanted = [(tokens[k], tokens[k + 1], c) for c in range(lo, hi)
                  for tokens in [engine.chunk_tokens(c)] for k in range(len(tokens) - 1)]
        assert list(zip(firsts.tolist(), seconds.tolist(), holders.tolist())) == wanted

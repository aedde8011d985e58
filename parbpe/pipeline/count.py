"""Stages 2 and 3, count and reduce: work units (or streamed texts) -> run files of chunk counts ->
global counts per partition, then freq_cutoff and the stop list. Local processes or Ray tasks.

With a run directory the stage resumes itself: units counted by an earlier attempt are skipped,
and once the reduced counts are saved the whole stage is (its saved output is its marker).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .. import jit
from ..config import TrainConfig
from ..count.chunking import uses_jit
from ..count.counter import CountResult, count_to_runs, prepare, unit_key
from ..count.partitions import N_PARTITIONS
from ..count.reduce import TrainingChunks, check_pair_counts, combine_selections, reduce_runs
from ..count.stream import QUEUE_BATCHES_PER_WORKER, count_stream_to_runs
from ..io.iterables import STREAM_BATCH_BYTES, TextStream, text_batches
from ..io.plan import text_size, unit_text_bytes
from ..io.readers import ReadStats
from ..io.sample import sample_documents
from ..io.units import WorkUnit
from ..patterns import SUPERWORD_PATTERN, pattern_name
from ..run.faults import test_stop
from ..run.memory import (
    CALLER_FLOOR,
    MAX_WORKER_DATA,
    CountLayout,
    LongPiece,
    count_layout,
    format_size,
    process_rss,
    reduce_workers,
    trim_heap,
    worker_data_limit,
)
from ..run.run_dir import RunDirectory
from ..run.temp_dirs import temp_work_dir
from ..merge.fit import MERGE_START_RESIDUE, whole_table_engine
from . import kernels_ahead
from .context import RunContext

TABLE_TOKENS_PER_CHUNK = 12  # a table's tokens per chunk (realmix: 11.05 M in 939,222), for numba_moves_the_merge


EMPTY_CORPUS = "the corpus is empty: no text chunk was found in the inputs"


def nothing_counted(text_bytes: int, config: TrainConfig, sampled_bytes: int | None = None) -> str:
    """Why no chunk was counted: empty inputs, an empty sample (sampled_bytes: the sample's text), or
    text the split pattern matched nowhere."""
    if not text_bytes:
        return EMPTY_CORPUS
    if config.sample_share is not None and not sampled_bytes:
        asked = (f"--sample-bytes {config.sample_bytes}" if config.sample_bytes is not None
                 else f"--sample-docs {config.sample_docs}")
        return (f"the sample is empty: {asked} took none of the documents in {format_size(text_bytes)} of text (a "
                f"share of {config.sample_share:.3g}); ask for a larger sample")
    return (f"the split pattern {pattern_name(config.pattern) or repr(config.pattern)} matched nothing in "
            f"{format_size(text_bytes)} of text: check --pattern")


@dataclass
class Counted:
    """The count stage's output: the training chunks and the counting stats (documents, bytes,
    replaced_bytes, spills, budget, data_limit)."""

    chunks: TrainingChunks
    stats: dict[str, Any]
    superword: Counted | None = None  # SuperBPE: the same text counted with the superword split


def count_stage(ctx: RunContext, units: list[WorkUnit] | TextStream, config: TrainConfig | None = None,
                run: RunDirectory | None = None, nested: bool = False, by_partition: bool = False,
                wanted: bool = True) -> Counted | None:
    """Stages 2-3 with the run's config (or another: SuperBPE's superword split); the saved reduced
    counts of the run directory when an earlier attempt got so far. nested: within a stage of the
    caller's, which times and reports them as one. by_partition: the training chunks sorted by bytes
    within each reduce partition, partitions in order (count/reduce.py), not all together; or, with a
    run directory, local processes and no stop list, written to it by the reduce workers a partition a
    file as they come (RunDirectory.save_reduced_parts, unsorted) and read from there. wanted: False
    where only the run directory's copy is (SuperBPE's count beside stage 1's merge): None is returned."""
    config = config or ctx.config
    if run is not None and run.has_reduced():
        ctx.note("counting and reducing were done: the reduced counts are in the run directory")
        return counted_from_saved(run.load_reduced()) if wanted else None
    in_parts = by_partition and run is not None and ctx.cluster is None and not config.stop_list_size
    with contextlib.ExitStack() as stack:
        if run is not None:  # a failure here leaves the run directory only when resuming can use it
            stack.push(lambda kind, *_: run.discard_unless_resumable(kind))
        with _substage(ctx, "count", nested):
            counted, before = _count(ctx, units, config, run, stack)
        stats = {key: before.get(key, 0) + value for key, value in (("documents", counted.stats.documents),
                                                             ("bytes", counted.stats.bytes),
                                                             ("replaced_bytes", counted.stats.replaced_bytes),
                                                             ("words", counted.stats.words),
                                                             ("sampled_documents", counted.stats.sampled_documents),
                                                             ("sampled_bytes", counted.stats.sampled_bytes),
                                                             ("spills", counted.spills))}
        stats.update(budget=counted.budget, data_limit=counted.data_limit)
        with _substage(ctx, "reduce", nested, report=False):
            # (parts are not sorted: only merges are made of them, which their order does not change, and
            # the cut of the encoded table orders its rows anew: merge/cold_pairs.py)
            selections = list(reduce_partitions(ctx, counted, config, select=True, sort=by_partition and not in_parts,
                                                parts_dir=run.reduced_parts_dir() if in_parts else None))
            chunks = None if in_parts else combine_selections(selections, config)
            if chunks is not None:
                check_pair_counts(chunks.offsets, chunks.counts)
            meta = {"stop_words": [w.hex() for w in chunks.stop_words] if chunks is not None else [],
                    "unique_chunks": sum(s.unique_chunks for s in selections),
                    "total_chunks": sum(s.total_chunks for s in selections),
                    "dropped_by_cutoff": sum(s.dropped_by_cutoff for s in selections), "counted": stats}
            if not meta["unique_chunks"]:
                raise ValueError(nothing_counted(stats["bytes"], config, stats["sampled_bytes"]))
            if in_parts:
                run.save_reduced_parts([s.part for s in selections], meta)
            del selections
    training = len(chunks) if chunks is not None else meta["unique_chunks"] - meta["dropped_by_cutoff"]
    ctx.reporter.event("counted", unique_chunks=meta["unique_chunks"], chunks=meta["total_chunks"],
                       training_chunks=training, MB=stats["bytes"] / 1e6, spills=stats["spills"])
    if not nested:
        ctx.report_stage("reduce")
    if in_parts:
        return counted_from_saved(run.load_reduced()) if wanted else None
    if run is not None:
        run.save_reduced(chunks.data, chunks.offsets, chunks.counts, meta)
    return Counted(chunks, stats)


def counted_from_saved(saved: tuple) -> Counted:
    """The Counted of reduced counts as RunDirectory.load_reduced gives them back."""
    data, offsets, counts, meta = saved
    check_pair_counts(offsets, counts)
    chunks = TrainingChunks(data=data, offsets=offsets, counts=counts,
                            stop_words=[bytes.fromhex(w) for w in meta["stop_words"]],
                            unique_chunks=meta["unique_chunks"], total_chunks=meta["total_chunks"],
                            dropped_by_cutoff=meta["dropped_by_cutoff"])
    return Counted(chunks, meta["counted"])


def _substage(ctx: RunContext, name: str, nested: bool, report: bool = True) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext() if nested else ctx.stage(name, report=report)


def _count(ctx: RunContext, units: list[WorkUnit] | TextStream, config: TrainConfig, run: RunDirectory | None,
           stack: contextlib.ExitStack) -> tuple[CountResult, dict[str, int]]:
    """Count what is left to count, into the run directory (or a temporary one; on Ray, the object
    store); returns the result and the stats of the units counted by earlier attempts."""
    if run is None or ctx.cluster is not None:
        runs_dir = stack.enter_context(temp_work_dir(config.tmp_dir))
        done, runs, before = set(), [], {}
    else:
        done, runs, before = run.committed_units()
        runs_dir = run.new_count_dir()
        if done:
            ctx.note(f"{len(done)} of {len(units)} work units were counted before")
    if isinstance(units, TextStream):  # (local processes only: inputs.check_job)
        counted = count_stream(ctx, units, config, runs_dir)
    elif todo := [u for u in units if unit_key(u) not in done]:
        counted = count_units(ctx, todo, config, runs_dir)
    else:
        counted = CountResult([], ReadStats(), budget=ctx.budget)
    counted.runs = runs + counted.runs
    return counted, before


def count_units(ctx: RunContext, units: list[WorkUnit], config: TrainConfig, run_dir: str) -> CountResult:
    """Count every unit into run files (or, on Ray, partitions in the object store), with the workers'
    memory shares set from the budget."""
    if not units:
        raise ValueError("the corpus is empty: no input to read")
    budget, data_limit, parent_counts, numpy_only = ctx.budget, ctx.options.data_limit, False, False
    workers = max(1, min(config.workers, len(units)))
    if data_limit is None and ctx.cluster is not None:  # a Ray task starts like this process alone
        data_limit = worker_data_limit(budget, workers, process_rss(), max(unit_text_bytes(u) for u in units))
    elif data_limit is None:  # local workers start as the whole tree is now
        trim_heap()
        unit_bytes = max(unit_text_bytes(u) for u in units)
        numpy_only = not jit_fits(budget, workers, unit_bytes, config.pattern, text_size(units)) or (
            ctx.merges_follow and numba_moves_the_merge(budget, text_size(units)))
        if not numpy_only:
            if ctx.kernels_ahead is not None:  # a first run: the counting kernels compiled in several processes
                ctx.kernels_ahead.wait_count()
            prepare(config.pattern, config.jit)  # numba and the lexer: the layout sees their weight
        in_use = ctx.in_use()
        layout = count_layout(budget, workers, in_use, unit_bytes)
        data_limit, parent_counts = layout.data_limit, layout.parent_counts
        if layout.shards < workers or (parent_counts and workers > 1):
            ctx.note(f"counting in {layout.shards} shard(s), this process counting one: "
                     f"the {format_size(budget)} budget leaves each {format_size(data_limit)} of counts")
        if layout.shards < workers:
            config = dataclasses.replace(config, workers=layout.shards)
    started = time.perf_counter()
    finished = []  # the last unit is reported once (the workers' last reports and the join's both say so)

    def on_progress(done: int, total_units: int, done_bytes: int, spills: int) -> None:
        if finished:
            return
        finished.extend([True] if done == total_units else [])
        elapsed = max(time.perf_counter() - started, 1e-9)
        ctx.reporter.update("count", done, total_units, force=done == total_units, MB=done_bytes / 1e6,
                            MB_s=done_bytes / 1e6 / elapsed, rss_MB=ctx.rss_MB(), spills=spills)

    if ctx.cluster is not None:
        from ..count.on_ray import count_on_ray

        counted = count_on_ray(units, config, ctx.cluster, data_limit=data_limit, on_progress=on_progress)
    else:
        if numpy_only:  # the workers are told as a value, in their config
            config = dataclasses.replace(config, jit="off")
        try:
            counted = count_to_runs(units, config, run_dir, data_limit=data_limit, start_method=ctx.start_method,
                                    on_progress=on_progress, parent_counts=parent_counts)
        except LongPiece as exc:
            if ctx.options.data_limit is not None:  # a limit given, not the layout's: the piece's own rule
                raise
            probe = None if jit.loaded() or not jit.enabled() else kernels_ahead.MIN_BUDGET
            least, kernels = piece_budget(exc, budget, workers, unit_bytes, config.pattern, text_size(units),
                                          in_use - (0 if numpy_only else jit.NUMBA_COUNT_RSS), probe)
            raise exc.with_budget(least, kernels and numpy_only) from None
    counted.budget, counted.data_limit = budget, data_limit
    if counted.stats.replaced_bytes:
        ctx.warn(f"replaced {counted.stats.replaced_bytes} invalid UTF-8 sequences with U+FFFD")
    return counted


def jit_fits(budget: int, workers: int, unit_bytes: int, pattern: str, text_bytes: int) -> bool:
    """Whether the numba kernels may count the text: always with --jit on; with auto, when numba is
    there, there is jit.COUNT_MIN_BYTES of text to repay its start, and its weight
    (jit.NUMBA_COUNT_RSS a process, as count_layout reckons starts) leaves as many counting shards as the numpy path has (under a
    tight budget, two numpy shards count faster than one with numba).

    The layouts compared start from CALLER_FLOOR, what every run of the command reckons, not the RSS
    measured: that differs by a few MB from run to run, and whether numba loads decides the merge
    stage's automatic cutoff (it reckons numba's weight once loaded), so the same command at 400 MB
    made two tokenizers (two automatic cutoffs). The layout itself still measures."""
    if not uses_jit(pattern):
        return False
    if jit.mode() == "on":
        return True
    if text_bytes < jit.COUNT_MIN_BYTES:
        return False
    numpy_layout, jit_layout = (_layout_or_none(budget, workers, CALLER_FLOOR + extra, unit_bytes)
                                for extra in (0, jit.NUMBA_COUNT_RSS))
    return jit_layout is not None and (numpy_layout is None or jit_layout.shards >= numpy_layout.shards)


def numba_moves_the_merge(budget: int, text_bytes: int) -> bool:
    """Whether numba, loaded by the count in this process for the rest of the run, would move the merge
    stage of a table the text's size suggests (kernels_ahead.TABLE_TOKENS_PER_BYTE, realmix's) off the
    engine that keeps every chunk without it (fit.whole_table_engine): the linked engine to the slower
    chunk engine, or the chunk engine to an automatic cutoff. Then the count takes numpy: it costs the
    count a third more time, where the other costs the merge twice its time or changes the merges.
    Not where numba is loaded already, or the run asks for it (--jit on)."""
    if jit.loaded() or jit.mode() == "on":
        return False
    tokens = int(text_bytes * kernels_ahead.TABLE_TOKENS_PER_BYTE)
    chunks = tokens // TABLE_TOKENS_PER_CHUNK
    base = CALLER_FLOOR + MERGE_START_RESIDUE + tokens + 16 * chunks  # (the chunk arrays: bytes, offsets, counts)
    return whole_table_engine(budget, base + jit.NUMBA_RSS, tokens, chunks) != whole_table_engine(budget, base,
                                                                                                   tokens, chunks)


def piece_budget(piece: LongPiece, budget: int, workers: int, unit_bytes: int, pattern: str, text_bytes: int,
                 numpy_in_use: int, probe_from: int | None = None) -> tuple[int | None, bool]:
    """The smallest budget, in steps of 100 MB above `budget`, at which count_units' layout gives a
    counting process room for the piece, and whether numba's lexer counts there (None: no budget
    does, a process's counts being capped at MAX_WORKER_DATA). numpy_in_use: the tree's RSS as the
    layout measured it, less the counting kernels' weight where they were loaded; probe_from: the
    budget from which this process imports numba before counting (kernels_ahead's cache probe),
    None where it has numba already or never loads it."""
    least = -(-budget // 10**8) * 10**8
    while True:
        least += 10**8
        kernels = jit_fits(least, workers, unit_bytes, pattern, text_bytes)
        probed = probe_from is not None and least >= probe_from
        numba = jit.NUMBA_COUNT_RSS if kernels else jit.NUMBA_RSS if probed else 0
        layout = _layout_or_none(least, workers, numpy_in_use + numba, unit_bytes)
        if layout is None:
            continue
        if piece.fits(layout.data_limit, kernels):
            return least, kernels
        if layout.data_limit >= MAX_WORKER_DATA:
            return None, kernels


def _layout_or_none(budget: int, workers: int, in_use: int, unit_bytes: int) -> CountLayout | None:
    try:
        return count_layout(budget, workers, in_use, unit_bytes)
    except ValueError:
        return None


def count_stream(ctx: RunContext, stream: TextStream, config: TrainConfig, run_dir: str) -> CountResult:
    """Texts from an iterable: batches of a few MB counted by the workers as they come."""
    data_limit = ctx.options.data_limit
    if data_limit is None:
        in_flight = STREAM_BATCH_BYTES * (QUEUE_BATCHES_PER_WORKER + 2)  # queued, being counted, being built
        data_limit = worker_data_limit(ctx.budget, config.workers, ctx.in_use(), in_flight)
    stats = ReadStats()
    items = 0
    started = time.perf_counter()

    def on_item() -> None:
        nonlocal items
        items += 1

    def on_progress(spills: int) -> None:
        elapsed = max(time.perf_counter() - started, 1e-9)
        ctx.reporter.update("count", items, stream.length, MB=stats.bytes / 1e6, MB_s=stats.bytes / 1e6 / elapsed,
                            rss_MB=ctx.rss_MB(), spills=spills)

    batches = sample_documents(text_batches(stream.texts, stats, config.text_column, on_item=on_item),
                               config.sample_share, config.seed, stats)
    counted = count_stream_to_runs(batches, config, run_dir, data_limit=data_limit, start_method=ctx.start_method,
                                   on_progress=on_progress)
    ctx.reporter.update("count", items, stream.length, force=True, MB=stats.bytes / 1e6, spills=counted.spills)
    if stream.read_stats is not None:
        stats.replaced_bytes += stream.read_stats.replaced_bytes
    counted.stats, counted.budget, counted.data_limit = stats, ctx.budget, data_limit
    if stats.replaced_bytes:
        ctx.warn(f"replaced {stats.replaced_bytes} invalid UTF-8 sequences with U+FFFD")
    return counted


def reduce_partitions(ctx: RunContext, counted: CountResult, config: TrainConfig,
                      select: bool = False, sort: bool = False, parts_dir: str | None = None) -> Iterator[Any]:
    """Each partition's global counts (select: its Selection, sorted if sort; with parts_dir, its kept
    chunks written there: reduce_runs), in partition order, on local processes or as Ray tasks (no
    parts_dir)."""
    def on_progress(done: int, n: int) -> None:
        ctx.reporter.update("reduce", done, n, force=done == n)
        test_stop("reduce", done)

    if ctx.cluster is not None:
        from ..count.on_ray import reduce_on_ray

        return reduce_on_ray(counted.partitions, ctx.cluster, config if select else None, on_progress, sort)
    partition_bytes = sum(os.path.getsize(r) for r in counted.runs) // N_PARTITIONS
    workers = reduce_workers(ctx.budget, config.workers, ctx.in_use(), partition_bytes)
    return reduce_runs(counted.runs, workers, ctx.start_method, config=config if select else None,
                       on_progress=on_progress, sort=sort, parts_dir=parts_dir)


def superword_count_stage(ctx: RunContext, units: list[WorkUnit], run: RunDirectory | None = None) -> Counted:
    """SuperBPE's stage 2, its count and reduce: the corpus split with the superword pattern, line by
    line (patterns.training_pattern), with the run's freq_cutoff; resumed from run (stage 2's own
    run directory) when it has them. The chunks come by partition (count_stage): only merges are made
    of them, which their order does not change; the parent's sort of all of them (2.3 M superword
    chunks of realmix) took longer than the partitions' sorts in the reduce workers, and with a run
    directory these write their partitions unsorted into it."""
    with ctx.stage("superbpe_count"):
        ctx.note("SuperBPE stage 2: counting the superword chunks")
        return count_stage(ctx, units, superword_config(ctx.config), run=run, nested=True, by_partition=True)


def superword_config(config: TrainConfig) -> TrainConfig:
    """The run's settings with SuperBPE's superword split: what its stage 2 counts with."""
    return dataclasses.replace(config, pattern=SUPERWORD_PATTERN, superbpe_transition=None)


def release_arrow_memory() -> None:
    """Give pyarrow's freed buffers back, so the next stage's room is measured without them."""
    pa.default_memory_pool().release_unused()

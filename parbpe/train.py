"""Training, stage by stage: plan, count, reduce, table, merge, write."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import __version__
from .config import TrainConfig
from .count.counter import CountResult, count_to_runs, unit_key
from .count.counts_file import write_counts_file
from .count.partitions import N_PARTITIONS
from .count.reduce import TrainingChunks, combine_selections, reduce_runs
from .count.stream import QUEUE_BATCHES_PER_WORKER, count_stream_to_runs
from .io.atomic import check_output_dir, check_output_file, check_work_dir, write_files_atomically
from .io.filesystems import file_info, is_remote, local_path
from .io.iterables import (
    STREAM_BATCH_BYTES,
    TextStream,
    dataset_source,
    is_datasets_object,
    is_text_source,
    stdin_source,
    text_batches,
)
from .io.plan import default_corpus_files, plan, unit_text_bytes
from .io.readers import ReadStats
from .io.units import WorkUnit
from .merge.coordinator import MergeResult, encode_for_merging, fit_merge_stage, learn_merges
from .merge.encode import rank_order_batches, sampled_tokens_per_byte
from .merge.superword import superword_allowed
from .merge.table import table_from_arrays
from .patterns import SUPERWORD_PATTERN
from .run.memory import (
    PeakSampler,
    count_layout,
    default_budget,
    format_size,
    process_rss,
    reduce_workers,
    tree_rss,
    trim_heap,
    worker_data_limit,
)
from .run.progress import Progress
from .run.run_dir import FREE_SETTINGS, RunDirectory, clean_stale_temp_dirs, temp_work_dir, test_stop
from .tokenizer.evaluate import evaluate
from .tokenizer.exports import file_makers
from .tokenizer.inherit import Inherited, continued, inherit
from .tokenizer.load import read_any
from .tokenizer.model import Tokenizer

SAMPLE_CORPUS = "the built-in sample corpus (the Python standard library's sources)"


@dataclass
class TrainResult:
    tokenizer: Tokenizer
    stats: dict[str, Any]
    files: dict[str, str] | None = None  # what was written where, when out_dir was given


def train(
    inputs: Any,
    config: TrainConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    progress: Progress | str = "none",
    start_method: str | None = None,
    data_limit: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    run_dir: str | None = None,
    resume: bool = False,
    keep_run_dir: bool = False,
    sample_corpus: bool = False,
    heldout: Sequence[str | os.PathLike] | None = None,
    also_save: Sequence[int] = (),
    **overrides: Any,
) -> TrainResult:
    """Train a tokenizer on inputs and return it with the run's stats.

    inputs: a path, glob or directory (str or pathlib.Path), a list of them, or "-" for standard
    input; or texts: an iterator of strings (see train_from_iterator), a pyarrow string array, or a
    Hugging Face `datasets` Dataset (read from its Arrow files in parallel) or IterableDataset.
    With no inputs, sample_corpus=True trains on the built-in sample corpus (the Python standard
    library's sources); otherwise no input is an error.
    Settings come from config, or from keyword arguments (parbpe.train(files, vocab_size=8192)).
    With out_dir, every output file is written there. heldout (paths of text) is encoded at the end:
    bytes/token, tokens/word and unused vocabulary go to stats["heldout"].
    also_save: smaller vocabulary sizes; for each, out_dir/vocab-SIZE/ gets the complete tokenizer
    of the run's first merges (the prefix that makes that size), its files and a stats.json.
    config.init continues an existing tokenizer (TrainConfig, tokenizer/inherit.py): the chunks are
    encoded with its merges, then merging goes on; its tokens keep their ids.
    data_limit (bytes of counts a counting worker holds before it spills) overrides the share the
    memory budget gives; it is for tests and experiments. executor="ray" counts and reduces as Ray
    tasks (ray_address: None starts or uses a local Ray instance, "auto" joins this machine's cluster).

    With out_dir (or run_dir), the run keeps its working files in run_dir (default
    out_dir/.parbpe-run): the plan, counted work units, the reduced counts, merge checkpoints.
    resume=True continues a run that stopped, from its last checkpoint, and writes the same files
    an uninterrupted run writes; the run directory is removed on success unless keep_run_dir.
    Texts from Python (an iterator, standard input) are consumed once: such a run keeps no run
    directory and cannot be resumed.
    """
    if config is None:
        config = TrainConfig(**overrides)
    elif overrides:
        raise ValueError(f"pass either a TrainConfig or keyword settings, not both (got {sorted(overrides)})")
    out_dir = os.fspath(out_dir) if out_dir is not None else None
    if out_dir is not None:
        check_output_dir(out_dir)  # before any work: a run must not be lost for want of a place to write
    if config.tmp_dir is not None:
        check_work_dir(config.tmp_dir)
    if run_dir is not None:
        check_output_dir(run_dir, "--run-dir")
    inherited = inherit(Tokenizer(**read_any(config.init)), config.init) if config.init is not None else None
    also_save = check_also_save(also_save, config, inherited, out_dir)
    reporter = progress if isinstance(progress, Progress) else Progress(progress)
    inputs, described = _resolve_inputs(inputs, config, sample_corpus)
    default_corpus = described == SAMPLE_CORPUS
    reporter.event("config", message="training", **{k: v for k, v in config.to_dict().items() if k != "pattern"},
                   inputs=described)
    skipped: list[tuple[str, str]] = []

    times: dict[str, float] = {}
    run: RunDirectory | None = None
    with PeakSampler() as sampler:
        # 1. plan: inputs -> sorted work units (none for texts streamed from an iterable)
        t = time.perf_counter()
        sampler.stage("plan")
        units = inputs if isinstance(inputs, TextStream) or _is_unit_list(inputs) else plan(inputs, skipped=skipped)
        times["plan"] = time.perf_counter() - t
        if skipped:
            reporter.event("warning", message=f"skipped {len(skipped)} file(s): "
                           + "; ".join(f"{p} ({why})" for p, why in skipped[:5])
                           + (f"; and {len(skipped) - 5} more (see stats.json)" if len(skipped) > 5 else ""))
        for note in clean_stale_temp_dirs(config.tmp_dir):
            reporter.event("note", message=note)
        where = run_dir or (default_run_dir(out_dir) if out_dir is not None else None)
        if config.superbpe_transition is not None:
            check_superbpe_inputs(units, resume, run_dir)
            where = None
        if isinstance(units, TextStream):
            if resume or run_dir is not None:
                raise ValueError(f"texts from {units.description} are consumed once: such a run cannot be "
                                 "resumed and keeps no run directory")
            where = None
        if where is not None:
            run, notes = open_run_dir(where, units, config, resume)
            for note in notes:
                reporter.event("note", message=note)
        elif resume:
            raise ValueError("resume needs the run directory: give out_dir (or run_dir) as the run that stopped did")

        # 2-3. count and reduce: work units -> run files -> global counts, then freq_cutoff and the stop list
        with cluster_for(executor, ray_address, config) as cluster:
            chunks, counted = count_and_reduce(units, config, run, reporter, start_method, data_limit, times, cluster,
                                               sampler)
            superbpe = None
            if config.superbpe_transition is not None:  # SuperBPE's stage 2 counts the text again, superword split
                superbpe = count_superword(units, config, reporter, start_method, data_limit, times, cluster, sampler)
        if isinstance(units, TextStream):
            units = []
        budget = counted["budget"] or config.memory_budget or default_budget()

        # 4. table: chunk counts -> numpy arrays, no larger than the merge stage can hold in the budget
        t = time.perf_counter()
        pa.default_memory_pool().release_unused()
        trim_heap()  # the reduce stage's freed heap: the merge stage's room is measured next
        try:
            fit = fit_merge_stage(chunks.offsets, chunks.counts, budget, sampler.stage("table"), config.freq_cutoff,
                                  config.workers, data=chunks.data if inherited is None else None)
        except ValueError as exc:
            if run is None:
                raise
            raise ValueError(f"{exc}. The reduced counts are kept in {run.path}: the same command with a larger "
                             f"--memory-budget and --resume skips counting (or remove it: rm -r '{run.path}')"
                             ) from None
        reporter.event("merge_plan", table_tokens=fit.tokens, table_chunks=fit.chunks, estimate_MB=fit.estimate / 1e6,
                       budget_MB=budget / 1e6, min_count=fit.min_count, auto_cutoff=fit.auto_cutoff,
                       dropped_chunks=fit.dropped_chunks, merge_workers=fit.workers)
        if fit.auto_cutoff:
            reporter.event("warning", message=f"the merge stage fits {format_size(budget)} only without the rarest "
                           f"chunks: chunks seen fewer than {fit.min_count} times ({fit.dropped_chunks:,} chunks, "
                           f"{fit.dropped_occurrences:,} occurrences) are left out of training (an automatic "
                           "--freq-cutoff)")
        table = table_from_arrays(chunks.data, chunks.offsets, chunks.counts, config.vocab_size, fit.min_count)
        n_training_chunks = len(chunks)
        chunks.data = chunks.offsets = chunks.counts = None  # the table holds them; merge workers fork without them
        pa.default_memory_pool().release_unused()
        n_table_tokens = len(table.tokens)
        times["table"] = time.perf_counter() - t
        _stage_done(reporter, sampler, "table", times)

        sliced, init_workers = None, 0
        if inherited is not None:  # the chunks as the inherited tokenizer leaves them (in merge workers if large)
            t = time.perf_counter()
            sampler.stage("init")
            table, sliced, init_workers = encode_for_merging(table, inherited.merges,
                                                             rank_order_batches(inherited.merges), config.vocab_size,
                                                             fit.workers, start_method)
            times["init"] = time.perf_counter() - t
            _stage_done(reporter, sampler, "init", times)

        # 5. merge: rounds of safe batches until the vocabulary is full
        t = time.perf_counter()
        sampler.stage("merge")
        vocab = [bytes([b]) for b in range(256)] + list(chunks.stop_words) if inherited is None else inherited.vocab()
        first_new = 0 if inherited is None else len(inherited.merges)
        replay = run.load_merges() if run is not None else None
        if replay is not None:
            reporter.event("note", message=f"replaying {len(replay[0])} merges from the checkpoint")
        result = learn_merges(  # (it stops the workers in sliced, if any, on every path)
            table, vocab, (config.n_merges if superbpe is None else config.transition_merges) - first_new,
            max_batch_size=config.max_batch_size,
            cap_divisor=config.cap_divisor, nonoverlap=config.pair_count == "nonoverlap", batching=config.batching,
            workers=fit.workers, start_method=start_method,
            progress=lambda done, total_: reporter.update("merge", done, total_, force=done == total_,
                                                          rss_MB=tree_rss() / 1e6),
            replay=replay, on_round=run.merge_checkpointer() if run is not None else None,
            allow=superword_allowed if inherited is not None and config.pattern == SUPERWORD_PATTERN else None,
            sliced=sliced,
        )
        times["merge"] = time.perf_counter() - t
        del vocab  # the tokenizer makes its own: tokens can be megabytes each (hostile text), never hold both
        result.engine = table = None  # nor the table and engine (the chunks' final tokens are not used)
        _stage_done(reporter, sampler, "merge", times)
        if superbpe is not None:
            del table, result.engine  # stage 1's table is replaced by stage 2's
            result = superbpe_stage2(superbpe, result, config, budget, reporter, sampler, times, start_method)
        if result.stopped_early:
            made = 256 + len(chunks.stop_words) + first_new + len(result.merges) + len(config.special_tokens)
            reporter.event("warning", message=f"no pair left after {first_new + len(result.merges)} merges; the "
                           f"vocabulary has {made} tokens, not {config.vocab_size}")

        def tokenizer_of(n_merges: int) -> Tokenizer:  # the run's first n_merges (new) merges
            pattern = config.pattern if superbpe is None else SUPERWORD_PATTERN
            if inherited is not None:
                return continued(inherited, result.merges[:n_merges], config.special_tokens, pattern)
            first_merge_id = 256 + len(chunks.stop_words)
            return Tokenizer(
                pattern=pattern,
                merges=[(a, b, first_merge_id + r) for r, (a, b) in enumerate(result.merges[:n_merges])],
                stop_words={w: 256 + k for k, w in enumerate(chunks.stop_words)},
                special_tokens={s: first_merge_id + n_merges + k for k, s in enumerate(config.special_tokens)},
            )

        tokenizer = tokenizer_of(len(result.merges))

    sizes = result.batch_sizes or [0]
    stats: dict[str, Any] = {
        "parbpe_version": __version__,
        "python": platform.python_version(),
        "config": config.to_dict(),
        "default_corpus": default_corpus,
        "inputs": {"source": described, "files_read": sorted({u.path for u in units}),
                   "skipped": [{"path": p, "reason": why} for p, why in skipped]},
        "work_units": len(units),
        "documents": counted["documents"],
        "bytes_read": counted["bytes"],
        "replaced_utf8_sequences": counted["replaced_bytes"],
        "memory_budget": counted["budget"],
        "worker_data_limit": counted["data_limit"],
        "spills": counted["spills"],
        "chunks": chunks.total_chunks,
        "unique_chunks": chunks.unique_chunks,
        "training_chunks": n_training_chunks,
        "dropped_by_freq_cutoff": chunks.dropped_by_cutoff,
        "merge_fit": fit.to_dict(),  # the merge stage's estimate and the automatic cutoff, if one was needed
        "stop_words": len(chunks.stop_words),
        "table_tokens": n_table_tokens,
        "vocab_size": tokenizer.n_vocab,
        "merges": len(result.merges),
        "rounds": len(result.batch_sizes),
        "merges_per_round": {"min": min(sizes), "mean": round(sum(sizes) / len(sizes), 2), "max": max(sizes)},
        "batch_sizes": result.batch_sizes,
        "stopped_early": result.stopped_early,
        "executor": executor,
        **({"ray": cluster.stats.to_dict()} if cluster is not None else {}),
        "seconds": {k: round(v, 3) for k, v in times.items()},
        "merge_seconds": result.seconds,  # merge stage: counting pairs, selecting, applying, updating, messages
        "peak_rss_bytes": sampler.peak,
        "peak_rss_by_stage": sampler.by_stage,
        **({"superbpe": superbpe.stats} if superbpe is not None else {}),
        **({"init": {"source": config.init, "inherited_merges": first_new,
                     "inherited_tokens": len(inherited.tokenizer.vocab), "encode_workers": init_workers}}
           if inherited is not None else {}),
    }
    if heldout:
        t = time.perf_counter()
        stats["heldout"] = {"vocab_size": tokenizer.n_vocab,
                            **evaluate(tokenizer, [os.fspath(p) for p in heldout], config.text_column)}
        stats["seconds"]["heldout"] = round(time.perf_counter() - t, 3)
        reporter.event("heldout", **{k: round(v, 4) if isinstance(v, float) else v
                                     for k, v in stats["heldout"].items()})
    smaller = {}  # also_save: {vocab size: (its tokenizer, its stats)}
    for size in also_save:
        n_merges = config.n_merges - first_new - (config.vocab_size - size)
        if n_merges > len(result.merges):
            reporter.event("warning", message=f"not saving vocab-{size}: the run stopped at {tokenizer.n_vocab} tokens")
            continue
        small = tokenizer_of(n_merges)
        small_stats: dict[str, Any] = {"vocab_size": small.n_vocab, "prefix_of": tokenizer.n_vocab,
                                       "merges": first_new + n_merges,
                                       "config": {**config.to_dict(), "vocab_size": size}}
        if heldout:
            small_stats["heldout"] = evaluate(small, [os.fspath(p) for p in heldout], config.text_column)
        smaller[size] = small, small_stats
    if smaller:
        stats["also_save"] = [{"vocab_size": size, "directory": f"vocab-{size}",
                               **{k: v for k, v in small_stats.get("heldout", {}).items() if k != "vocab_size"}}
                              for size, (_, small_stats) in smaller.items()]
    files = None
    if out_dir is not None:  # every file or none (write_files_atomically), stats.json included
        makers, files = file_makers(tokenizer, config.result_settings())
        files["stats.json"] = "written"
        for size, (small, small_stats) in smaller.items():
            small_makers, small_files = file_makers(small, {**config.result_settings(), "vocab_size": size})
            small_makers["stats.json"] = lambda small_stats=small_stats: json.dumps(small_stats, indent=1)
            makers |= {f"vocab-{size}/{name}": make for name, make in small_makers.items()}
            files |= {f"vocab-{size}/{name}": outcome for name, outcome in small_files.items()}
            files[f"vocab-{size}/stats.json"] = "written"
        stats["files"] = files
        started = time.perf_counter()

        def stats_text() -> str:  # made last: the time (making and writing the others) and peak are known
            stats["seconds"]["write"] = round(time.perf_counter() - started, 3)
            stats["peak_rss_by_stage"]["write"] = write_sampler.peak
            stats["peak_rss_bytes"] = max(sampler.peak, write_sampler.peak)
            return json.dumps(stats, indent=1)

        makers = makers | {"stats.json": stats_text}
        with PeakSampler() as write_sampler:
            write_files_atomically(out_dir, makers)
    if run is not None:
        run.finish(keep_run_dir)
    reporter.event("done", vocab_size=tokenizer.n_vocab, rounds=len(result.batch_sizes),
                   seconds=round(sum(times.values()), 2), peak_rss=format_size(stats["peak_rss_bytes"]))
    reporter.close()
    return TrainResult(tokenizer=tokenizer, stats=stats, files=files)


@dataclass
class SuperwordCounts:
    """SuperBPE's stage 2 between its count and its merges: the superword chunks and what is reported."""

    chunks: TrainingChunks | None
    config: TrainConfig  # the run's settings with the superword split
    stats: dict[str, Any]


def check_superbpe_inputs(units: Any, resume: bool, run_dir: str | None) -> None:
    """SuperBPE reads its text twice and keeps no run directory (no checkpoints yet): refuse what
    it cannot do, before any work."""
    if isinstance(units, TextStream):
        raise ValueError(f"SuperBPE (--superbpe-transition) reads its text twice, but texts from {units.description} "
                         "are consumed once: write them to files (text, jsonl or parquet) and train on those")
    counts = sorted({u.path for u in units if u.kind.startswith("counts")})
    if counts:
        raise ValueError(f"SuperBPE (--superbpe-transition) re-counts the text with its superword split, which a "
                         f"counts file cannot give ({counts[0]}): train on the text itself")
    if resume or run_dir is not None:
        raise ValueError("SuperBPE runs (--superbpe-transition) keep no run directory and cannot be resumed yet: "
                         "drop --resume and --run-dir")


def count_superword(units: list[WorkUnit], config: TrainConfig, reporter: Progress, start_method: str | None,
                    data_limit: int | None, times: dict[str, float], cluster,
                    sampler: PeakSampler) -> SuperwordCounts:
    """SuperBPE's stage 2, its count and reduce: the corpus split with the superword pattern, line
    by line (patterns.training_pattern), with the run's freq_cutoff."""
    stage2 = dataclasses.replace(config, pattern=SUPERWORD_PATTERN, superbpe_transition=None)
    own_times: dict[str, float] = {}
    sampler.stage("superbpe_count")
    reporter.event("note", message="SuperBPE stage 2: counting the superword chunks")
    chunks, _ = count_and_reduce(units, stage2, None, reporter, start_method, data_limit, own_times, cluster)
    times["superbpe_count"] = own_times["count"] + own_times["reduce"]
    _stage_done(reporter, sampler, "superbpe_count", times)
    stats = {"transition_merges": config.transition_merges, "chunks": chunks.total_chunks,
             "unique_chunks": chunks.unique_chunks, "training_chunks": len(chunks),
             "dropped_by_freq_cutoff": chunks.dropped_by_cutoff}
    return SuperwordCounts(chunks=chunks, config=stage2, stats=stats)


def superbpe_stage2(counted: SuperwordCounts, stage1: MergeResult, config: TrainConfig, budget: int,
                    reporter: Progress, sampler: PeakSampler, times: dict[str, float],
                    start_method: str | None) -> MergeResult:
    """SuperBPE's stage 2 after stage 1's merges: the superword chunks as a table, each whole chunk
    encoded with stage 1's merges (merge/encode.py: in stage 1's safe batches, which give the tokens
    the merges give one by one), then merging on to the full vocabulary, skipping the tokens
    SuperBPE's rules refuse (merge/superword.py). The merges are stage 1's, then stage 2's."""
    chunks = counted.chunks
    t = time.perf_counter()
    pa.default_memory_pool().release_unused()
    # The table is encoded before it merges: the estimate needs the tokens it will have, from a sample.
    tokens_per_byte = sampled_tokens_per_byte(chunks.data, chunks.offsets, stage1.merges, stage1.batch_sizes)
    fit = fit_merge_stage(chunks.offsets, chunks.counts, budget, sampler.stage("superbpe_table"), config.freq_cutoff,
                          config.workers, tokens_per_byte=tokens_per_byte)
    if fit.auto_cutoff:
        reporter.event("warning", message=f"SuperBPE stage 2 fits {format_size(budget)} only without the rarest "
                       f"superword chunks: chunks seen fewer than {fit.min_count} times are left out")
    table = table_from_arrays(chunks.data, chunks.offsets, chunks.counts, config.vocab_size, fit.min_count)
    counted.chunks = None  # the table holds them
    chunks.data = chunks.offsets = chunks.counts = None
    pa.default_memory_pool().release_unused()
    counted.stats.update(table_tokens=len(table.tokens), merge_fit=fit.to_dict())
    times["superbpe_table"] = time.perf_counter() - t
    _stage_done(reporter, sampler, "superbpe_table", times)

    t = time.perf_counter()
    sampler.stage("superbpe_encode")
    table, sliced, encode_workers = encode_for_merging(table, stage1.merges, stage1.batch_sizes, config.vocab_size,
                                                       fit.workers, start_method)
    counted.stats.update(encoded_table_tokens=len(table.tokens), encode_workers=encode_workers)
    times["superbpe_encode"] = time.perf_counter() - t
    _stage_done(reporter, sampler, "superbpe_encode", times)

    t = time.perf_counter()
    sampler.stage("superbpe_merge")
    vocab = [bytes([b]) for b in range(256)]
    for a, b in stage1.merges:
        vocab.append(vocab[a] + vocab[b])
    done = len(stage1.merges)
    result = learn_merges(  # (it stops the workers in sliced, if any, on every path)
        table, vocab, config.n_merges - done, max_batch_size=config.max_batch_size, cap_divisor=config.cap_divisor,
        nonoverlap=config.pair_count == "nonoverlap", batching=config.batching, workers=fit.workers,
        start_method=start_method, allow=superword_allowed, sliced=sliced,
        progress=lambda made, total_: reporter.update("superbpe_merge", done + made, done + total_,
                                                      force=made == total_, rss_MB=tree_rss() / 1e6),
    )
    times["superbpe_merge"] = time.perf_counter() - t
    _stage_done(reporter, sampler, "superbpe_merge", times)
    stages = ("superbpe_count", "superbpe_table", "superbpe_encode", "superbpe_merge")
    counted.stats.update(
        stage1_merges=done, stage2_merges=len(result.merges), skipped_tokens=result.skipped,
        merge_workers=result.workers, merge_seconds=result.seconds,
        seconds={k: round(times[k], 3) for k in stages},
        peak_rss_bytes=max(sampler.by_stage.get(k, 0) for k in stages))
    result.merges = stage1.merges + result.merges
    result.batch_sizes = stage1.batch_sizes + result.batch_sizes
    return result


def check_also_save(sizes: Sequence[int], config: TrainConfig, inherited: Inherited | None,
                    out_dir: str | None) -> list[int]:
    """also_save's sizes, sorted, checked before any work: each smaller than vocab_size and larger
    than the tokens the run starts with (bytes, stop list, inherited tokens, special tokens)."""
    sizes = sorted(set(sizes))
    if not sizes:
        return []
    if out_dir is None:
        raise ValueError("also_save (--also-save) writes directories into the output directory: give out_dir (--out)")
    least = config.vocab_size - config.n_merges + (len(inherited.merges) if inherited is not None else 0)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or not least < size < config.vocab_size:
            raise ValueError(f"--also-save size {size!r} must be an integer between {least} (the tokens the run "
                             f"starts with) and vocab_size {config.vocab_size}, both excluded")
    return sizes


def _stage_done(reporter: Progress, sampler: PeakSampler, stage: str, times: dict[str, float]) -> None:
    """The progress line that closes a stage: its time and its peak RSS of the process tree."""
    reporter.event("stage", message=stage, seconds=round(times[stage], 2),
                   peak_rss_MB=round(sampler.by_stage.get(stage, 0) / 1e6, 1))


def cluster_for(executor: str, ray_address: str | None, config: TrainConfig) -> contextlib.AbstractContextManager:
    """The Ray executor for executor="ray" (each task gets a worker's share of the memory budget),
    or nothing for local processes."""
    if executor == "local":
        if ray_address is not None:
            raise ValueError("--ray-address needs --executor ray")
        return contextlib.nullcontext()
    if executor != "ray":
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    from .run.ray_executor import RayExecutor

    budget = config.memory_budget or default_budget()
    return RayExecutor(ray_address, task_memory=budget // config.workers, local_cpus=config.workers)


def train_from_iterator(
    texts: Iterable[Any],
    config: TrainConfig | None = None,
    *,
    length: int | None = None,
    out_dir: str | os.PathLike | None = None,
    progress: Progress | str = "none",
    start_method: str | None = None,
    data_limit: int | None = None,
    heldout: Sequence[str | os.PathLike] | None = None,
    also_save: Sequence[int] = (),
    **overrides: Any,
) -> TrainResult:
    """Train on texts from an iterable, as Hugging Face tokenizers' train_from_iterator does.

    texts yields strings, lists of strings or pyarrow string arrays (or is a `datasets` object);
    each string is one document. length (how many items texts yields) drives the progress bar.
    The iterable is consumed once, in this process, in batches of a few MB that counting workers
    count in parallel; the result equals train() on a file holding the same documents.
    Keywords are those of train().
    """
    if isinstance(texts, (str, bytes, os.PathLike)):
        raise ValueError("train_from_iterator takes texts, not a path: iterate over strings, or pass paths "
                         "to parbpe.train")
    if not is_text_source(texts):  # a list or tuple of strings: documents here, not paths
        texts = TextStream(list(texts) if not isinstance(texts, (list, tuple)) else texts,
                           length if length is not None else len(texts))
    elif isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = TextStream([texts], length)
    elif not isinstance(texts, TextStream) and not is_datasets_object(texts):
        texts = TextStream(texts, length)
    return train(texts, config, out_dir=out_dir, progress=progress, start_method=start_method,
                 data_limit=data_limit, heldout=heldout, also_save=also_save, **overrides)


def sample_corpus_files() -> list[str]:
    """The files of the built-in sample corpus: the Python standard library's sources."""
    return default_corpus_files()


def _is_unit_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], WorkUnit)


def _resolve_inputs(inputs: Any, config: TrainConfig, sample_corpus: bool) -> tuple[Any, str]:
    """Inputs as paths (a list of str), work units (a cached Dataset) or a TextStream, and how to
    describe them; refuses what is none of these with a message saying what to pass."""
    if is_text_source(inputs):
        if isinstance(inputs, TextStream):
            return inputs, inputs.description
        if is_datasets_object(inputs):
            source = dataset_source(inputs, config.text_column)
            if isinstance(source, TextStream):
                return source, source.description
            return source, f"a Dataset's {len({u.path for u in source})} Arrow file(s)"
        return TextStream([inputs] if isinstance(inputs, (pa.Array, pa.ChunkedArray)) else inputs), \
            "a Python iterable"
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if inputs is None or not len(inputs):
        if sample_corpus:
            return default_corpus_files(), SAMPLE_CORPUS
        raise ValueError("no input given: pass files, directories or globs (or texts with "
                         "parbpe.train_from_iterator); for the built-in sample corpus (the Python standard "
                         "library's sources) pass sample_corpus=True (CLI: --sample-corpus)")
    bad = [x for x in inputs if not isinstance(x, (str, os.PathLike))]
    if bad:
        raise ValueError(f"inputs must be paths (str or pathlib.Path), got a {type(bad[0]).__name__}; "
                         "to train on texts use parbpe.train_from_iterator")
    paths = [os.fspath(x) for x in inputs]
    if "-" in paths:
        if len(paths) > 1:
            raise ValueError("'-' (standard input) cannot be mixed with other inputs")
        return stdin_source(), "standard input"
    return paths, f"{len(paths)} path(s)"


def count_stream_stage(stream: TextStream, config: TrainConfig, run_dir: str, reporter: Progress,
                       start_method: str | None = None, data_limit: int | None = None) -> CountResult:
    """Stage 2 for texts from an iterable: batches of a few MB counted by the workers as they come."""
    budget = config.memory_budget or default_budget()
    if data_limit is None:
        in_flight = STREAM_BATCH_BYTES * (QUEUE_BATCHES_PER_WORKER + 2)  # queued, being counted, being built
        data_limit = worker_data_limit(budget, config.workers, tree_rss(), in_flight)
    stats = ReadStats()
    items = 0
    t = time.perf_counter()

    def on_item() -> None:
        nonlocal items
        items += 1

    def on_progress(spills: int) -> None:
        elapsed = max(time.perf_counter() - t, 1e-9)
        reporter.update("count", items, stream.length, MB=stats.bytes / 1e6, MB_s=stats.bytes / 1e6 / elapsed,
                        rss_MB=tree_rss() / 1e6, spills=spills)

    batches = text_batches(stream.texts, stats, config.text_column, on_item=on_item)
    counted = count_stream_to_runs(batches, config, run_dir, data_limit=data_limit, start_method=start_method,
                                   on_progress=on_progress)
    reporter.update("count", items, stream.length, force=True, MB=stats.bytes / 1e6, spills=counted.spills)
    if stream.read_stats is not None:
        stats.replaced_bytes += stream.read_stats.replaced_bytes
    counted.stats, counted.budget, counted.data_limit = stats, budget, data_limit
    if stats.replaced_bytes:
        reporter.event("warning", message=f"replaced {stats.replaced_bytes} invalid UTF-8 sequences with U+FFFD")
    return counted


def default_run_dir(out_dir: str) -> str:
    """OUT/.parbpe-run; for a remote OUT, a directory in the system's temporary directory named after
    OUT (the same for the same command, so --resume finds it)."""
    if not is_remote(out_dir):
        return os.path.join(local_path(out_dir), ".parbpe-run")
    name = hashlib.sha256(out_dir.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"parbpe-run-{name}")


def input_fingerprint(units: list[WorkUnit]) -> list[dict[str, Any]]:
    """Each input file's path, size and modification time: what a resumed run checks is unchanged."""
    out = []
    for path in sorted({u.path for u in units}):
        if is_remote(path):
            info = file_info(path)[2]
            size, mtime = info.size, info.mtime_ns
        else:
            st = os.stat(path)
            path, size, mtime = os.path.abspath(path), st.st_size, st.st_mtime_ns
        out.append({"path": path, "size": size, "mtime_ns": mtime})
    return out


def open_run_dir(path: str, units: list[WorkUnit], config: TrainConfig,
                 resume: bool) -> tuple[RunDirectory, list[str]]:
    """The run directory for this run: new, or (resume) the one a stopped run of the same command left."""
    settings = config.to_dict()
    identity = {"parbpe_version": __version__, **{k: v for k, v in settings.items() if k not in FREE_SETTINGS}}
    run, notes = RunDirectory.open(path, identity=identity, settings={k: settings[k] for k in FREE_SETTINGS},
                                   inputs=input_fingerprint(units), resume=resume)
    run.save_plan([unit_key(u) for u in units])
    return run, notes


def count_and_reduce(units: list[WorkUnit] | TextStream, config: TrainConfig, run: RunDirectory | None,
                     reporter: Progress, start_method: str | None, data_limit: int | None, times: dict[str, float],
                     cluster=None, sampler: PeakSampler | None = None) -> tuple[TrainingChunks, dict[str, Any]]:
    """Stages 2 and 3: the training chunks, and the counting stats (documents, bytes, replaced_bytes,
    spills, budget, data_limit). With a run directory, units counted by an earlier attempt are
    skipped, and the reduced counts are kept (or taken from there when an earlier attempt got so far).
    On Ray (cluster), counts live in the object store: only the reduced counts are kept."""
    saved = run.load_reduced() if run is not None else None
    if saved is not None:
        data, offsets, counts, meta = saved
        reporter.event("note", message="counting and reducing were done: the reduced counts are in the run directory")
        chunks = TrainingChunks(data=data, offsets=offsets, counts=counts,
                                stop_words=[bytes.fromhex(w) for w in meta["stop_words"]],
                                unique_chunks=meta["unique_chunks"], total_chunks=meta["total_chunks"],
                                dropped_by_cutoff=meta["dropped_by_cutoff"])
        return chunks, meta["counted"]
    with contextlib.ExitStack() as stack:
        if run is not None:  # a failure here leaves the run directory only when resuming can use it
            stack.push(lambda kind, *_: run.discard_unless_resumable(kind))
        # 2. count: work units -> run files of chunk counts (spilling under the memory budget)
        t = time.perf_counter()
        if sampler is not None:
            sampler.stage("count")
        if run is None or cluster is not None:
            runs_dir = stack.enter_context(temp_work_dir(config.tmp_dir))
            done, runs, before = set(), [], {"documents": 0, "bytes": 0, "replaced_bytes": 0, "spills": 0}
        else:
            done, runs, before = run.committed_units()
            runs_dir = run.new_count_dir()
            if done:
                reporter.event("note", message=f"{len(done)} of {len(units)} work units were counted before")
        if isinstance(units, TextStream):
            if cluster is not None:
                raise ValueError("texts from Python (an iterator, standard input, a streamed dataset) are counted "
                                 "by local processes: use the default executor (local)")
            counted = count_stream_stage(units, config, runs_dir, reporter, start_method, data_limit)
        elif todo := [u for u in units if unit_key(u) not in done]:
            counted = count_stage(todo, config, runs_dir, reporter, start_method, data_limit, cluster)
        else:
            counted = CountResult([], ReadStats(), budget=config.memory_budget or default_budget())
        counted.runs = runs + counted.runs
        stats = {"documents": before["documents"] + counted.stats.documents,
                 "bytes": before["bytes"] + counted.stats.bytes,
                 "replaced_bytes": before["replaced_bytes"] + counted.stats.replaced_bytes,
                 "spills": before["spills"] + counted.spills, "budget": counted.budget,
                 "data_limit": counted.data_limit}
        times["count"] = time.perf_counter() - t
        if sampler is not None:
            _stage_done(reporter, sampler, "count", times)
            sampler.stage("reduce")

        # 3. reduce: runs -> global counts per partition, then freq_cutoff and the stop list
        t = time.perf_counter()

        selections = list(reduce_stage(counted, config, start_method, reporter, cluster, select=True))
        chunks = combine_selections(selections, config)
        del selections
        if not chunks.unique_chunks:
            raise ValueError("the corpus is empty: no text chunk was found in the inputs")
        times["reduce"] = time.perf_counter() - t
    reporter.event("counted", unique_chunks=chunks.unique_chunks, chunks=chunks.total_chunks,
                   training_chunks=len(chunks), MB=stats["bytes"] / 1e6, spills=stats["spills"])
    if sampler is not None:
        _stage_done(reporter, sampler, "reduce", times)
    if run is not None:
        run.save_reduced(chunks.data, chunks.offsets, chunks.counts, {
            "stop_words": [w.hex() for w in chunks.stop_words], "unique_chunks": chunks.unique_chunks,
            "total_chunks": chunks.total_chunks, "dropped_by_cutoff": chunks.dropped_by_cutoff, "counted": stats})
    return chunks, stats


def count_stage(units: list[WorkUnit], config: TrainConfig, run_dir: str, reporter: Progress,
                start_method: str | None = None, data_limit: int | None = None, cluster=None) -> CountResult:
    """Stage 2: count every unit into run files (or, on Ray, partitions in the object store), with
    the workers' memory shares set from the budget."""
    if not units:
        raise ValueError("the corpus is empty: no input to read")
    budget = config.memory_budget or default_budget()
    workers = max(1, min(config.workers, len(units)))
    parent_counts = False
    if data_limit is None and cluster is not None:  # a Ray task starts like this process alone
        data_limit = worker_data_limit(budget, workers, process_rss(), max(unit_text_bytes(u) for u in units))
    elif data_limit is None:  # local workers start as the whole tree is now
        trim_heap()
        layout = count_layout(budget, workers, tree_rss(), max(unit_text_bytes(u) for u in units))
        data_limit, parent_counts = layout.data_limit, layout.parent_counts
        if layout.shards < workers or (parent_counts and workers > 1):
            reporter.event("note", message=f"counting in {layout.shards} shard(s), this process counting one: "
                           f"the {format_size(budget)} budget leaves each {format_size(data_limit)} of counts")
        if layout.shards < workers:
            config = dataclasses.replace(config, workers=layout.shards)
    t = time.perf_counter()

    def on_progress(done: int, total_units: int, done_bytes: int, spills: int) -> None:
        elapsed = max(time.perf_counter() - t, 1e-9)
        reporter.update("count", done, total_units, force=done == total_units, MB=done_bytes / 1e6,
                        MB_s=done_bytes / 1e6 / elapsed, rss_MB=tree_rss() / 1e6, spills=spills)

    if cluster is not None:
        from .count.on_ray import count_on_ray

        counted = count_on_ray(units, config, cluster, data_limit=data_limit, on_progress=on_progress)
    else:
        counted = count_to_runs(units, config, run_dir, data_limit=data_limit, start_method=start_method,
                                on_progress=on_progress, parent_counts=parent_counts)
    counted.budget, counted.data_limit = budget, data_limit
    if counted.stats.replaced_bytes:
        reporter.event("warning", message=f"replaced {counted.stats.replaced_bytes} invalid UTF-8 sequences "
                       "with U+FFFD")
    return counted


def reduce_stage(counted: CountResult, config: TrainConfig, start_method: str | None, reporter: Progress,
                 cluster=None, select: bool = False):
    """Stage 3: each partition's global counts (select: its Selection), in partition order, on local
    processes or as Ray tasks."""
    def on_progress(done: int, n: int) -> None:
        reporter.update("reduce", done, n, force=done == n)
        test_stop("reduce", done)

    if cluster is not None:
        from .count.on_ray import reduce_on_ray

        return reduce_on_ray(counted.partitions, cluster, config if select else None, on_progress)
    budget = counted.budget or config.memory_budget or default_budget()
    partition_bytes = sum(os.path.getsize(r) for r in counted.runs) // N_PARTITIONS
    workers = reduce_workers(budget, config.workers, tree_rss(), partition_bytes)
    return reduce_runs(counted.runs, workers, start_method, config=config if select else None,
                       on_progress=on_progress)


def count_to_file(inputs: Any, out_path: str, config: TrainConfig, *,
                  freq_cutoff: int = 0, progress: Progress | str = "none",
                  start_method: str | None = None, data_limit: int | None = None,
                  executor: str = "local", ray_address: str | None = None,
                  sample_corpus: bool = False) -> dict[str, Any]:
    """Count chunks of inputs and write them as a counts file (stages 1-3 without cutoff/stop list).
    Rows are grouped by hash partition and sorted by chunk bytes within each (see count/counts_file.py)."""
    check_output_file(out_path)
    if config.tmp_dir is not None:
        check_work_dir(config.tmp_dir)
    reporter = progress if isinstance(progress, Progress) else Progress(progress)
    inputs, _ = _resolve_inputs(inputs, config, sample_corpus)
    times: dict[str, float] = {}
    for note in clean_stale_temp_dirs(config.tmp_dir):
        reporter.event("note", message=note)
    with PeakSampler() as sampler, temp_work_dir(config.tmp_dir) as run_dir, \
            cluster_for(executor, ray_address, config) as cluster:
        t = time.perf_counter()
        units = inputs if isinstance(inputs, TextStream) or _is_unit_list(inputs) else plan(inputs)
        times["plan"] = time.perf_counter() - t
        t = time.perf_counter()
        if isinstance(units, TextStream):
            counted = count_stream_stage(units, config, run_dir, reporter, start_method, data_limit)
            units = []
        else:
            counted = count_stage(units, config, run_dir, reporter, start_method, data_limit, cluster)
        times["count"] = time.perf_counter() - t
        t = time.perf_counter()
        totals = {"unique": 0, "chunks": 0}

        def partitions():
            for table in reduce_stage(counted, config, start_method, reporter, cluster):
                totals["unique"] += table.num_rows
                totals["chunks"] += pc.sum(table.column("count")).as_py() or 0
                yield table
            if not totals["unique"]:
                raise ValueError("the corpus is empty: no text chunk was found in the inputs")

        rows = write_counts_file(out_path, partitions(), config, freq_cutoff=freq_cutoff)
        times["reduce"] = time.perf_counter() - t
    summary = {"out": out_path, "unique_chunks": totals["unique"], "rows_written": rows,
               "chunks": totals["chunks"], "documents": counted.stats.documents, "bytes_read": counted.stats.bytes,
               "replaced_utf8_sequences": counted.stats.replaced_bytes, "work_units": len(units),
               "spills": counted.spills, "memory_budget": counted.budget, "worker_data_limit": counted.data_limit,
               "executor": executor, **({"ray": cluster.stats.to_dict()} if cluster is not None else {}),
               "seconds": {k: round(v, 3) for k, v in times.items()}, "peak_rss_bytes": sampler.peak}
    reporter.event("counted", **{k: v for k, v in summary.items() if k != "seconds"})
    return summary

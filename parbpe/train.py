"""Training, stage by stage: plan, count, reduce, table, merge, write."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import __version__
from .config import TrainConfig
from .count.counter import CountResult, count_to_runs
from .count.counts_file import write_counts_file
from .count.reduce import combine_selections, reduce_runs
from .io.atomic import write_text_atomically
from .io.plan import default_corpus_files, plan, unit_text_bytes
from .io.units import WorkUnit
from .merge.coordinator import learn_merges
from .merge.table import build_table
from .run.memory import PeakSampler, default_budget, format_size, process_rss, tree_rss, worker_data_limit
from .run.progress import Progress
from .tokenizer.model import Tokenizer


@dataclass
class TrainResult:
    tokenizer: Tokenizer
    stats: dict[str, Any]
    files: dict[str, str] | None = None  # what was written where, when out_dir was given


def train(
    inputs: Sequence[str] | None,
    config: TrainConfig | None = None,
    *,
    out_dir: str | None = None,
    progress: Progress | str = "none",
    start_method: str | None = None,
    data_limit: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    **overrides: Any,
) -> TrainResult:
    """Train a tokenizer on inputs (paths, globs, directories; None = the built-in default corpus).

    Settings come from config, or from keyword arguments (parbpe.train(files, vocab_size=8192)).
    With out_dir, every output file is written there. Returns the tokenizer and the run's stats.
    data_limit (bytes of counts a counting worker holds before it spills) overrides the share the
    memory budget gives; it is for tests and experiments. executor="ray" counts and reduces as Ray
    tasks (ray_address: None starts or uses a local Ray instance, "auto" joins this machine's cluster).
    """
    if config is None:
        config = TrainConfig(**overrides)
    elif overrides:
        raise ValueError(f"pass either a TrainConfig or keyword settings, not both (got {sorted(overrides)})")
    reporter = progress if isinstance(progress, Progress) else Progress(progress)
    default_corpus = not inputs
    if default_corpus:
        inputs = default_corpus_files()
    reporter.event("config", message="training", **{k: v for k, v in config.to_dict().items() if k != "pattern"},
                   inputs=("the Python standard library's sources" if default_corpus else len(inputs)))

    times: dict[str, float] = {}
    with PeakSampler() as sampler:
        # 1. plan: inputs -> sorted work units
        t = time.perf_counter()
        units = plan(inputs)
        times["plan"] = time.perf_counter() - t

        with tempfile.TemporaryDirectory(prefix="parbpe-", dir=config.tmp_dir) as run_dir, \
                cluster_for(executor, ray_address, config) as cluster:
            # 2. count: work units -> run files of chunk counts (spilling under the memory budget)
            t = time.perf_counter()
            counted = count_stage(units, config, run_dir, reporter, start_method, data_limit, cluster)
            times["count"] = time.perf_counter() - t

            # 3. reduce: runs -> global counts per partition, then freq_cutoff and the stop list
            t = time.perf_counter()
            selections = list(reduce_stage(counted, config, start_method, reporter, cluster, select=True))
            chunks = combine_selections(selections, config)
            del selections
            if not chunks.unique_chunks:
                raise ValueError("the corpus is empty: no text chunk was found in the inputs")
            times["reduce"] = time.perf_counter() - t
            reporter.event("counted", unique_chunks=chunks.unique_chunks, chunks=chunks.total_chunks,
                           training_chunks=len(chunks.chunks), MB=counted.stats.bytes / 1e6, spills=counted.spills)

        # 4. table: chunk counts -> numpy arrays
        t = time.perf_counter()
        table = build_table(chunks.chunks, chunks.counts, config.vocab_size)
        n_training_chunks = len(chunks.chunks)
        chunks.chunks, chunks.counts = [], []  # the table holds them now; merge workers fork without them
        pa.default_memory_pool().release_unused()
        n_table_tokens = len(table.tokens)
        times["table"] = time.perf_counter() - t

        # 5. merge: rounds of safe batches until the vocabulary is full
        t = time.perf_counter()
        vocab = [bytes([b]) for b in range(256)] + list(chunks.stop_words)
        result = learn_merges(
            table, vocab, config.n_merges, max_batch_size=config.max_batch_size,
            cap_divisor=config.cap_divisor, nonoverlap=config.pair_count == "nonoverlap", batching=config.batching,
            workers=config.workers, start_method=start_method,
            progress=lambda done, total_: reporter.update("merge", done, total_, force=done == total_),
        )
        times["merge"] = time.perf_counter() - t
        if result.stopped_early:
            reporter.event("warning", message=f"no pair left after {len(result.merges)} merges; the vocabulary "
                           f"has {len(vocab) + len(config.special_tokens)} tokens, not {config.vocab_size}")

        first_merge_id = 256 + len(chunks.stop_words)
        n_regular = first_merge_id + len(result.merges)
        tokenizer = Tokenizer(
            pattern=config.pattern,
            merges=[(a, b, first_merge_id + r) for r, (a, b) in enumerate(result.merges)],
            stop_words={w: 256 + k for k, w in enumerate(chunks.stop_words)},
            special_tokens={s: n_regular + k for k, s in enumerate(config.special_tokens)},
        )

    sizes = result.batch_sizes or [0]
    stats: dict[str, Any] = {
        "parbpe_version": __version__,
        "python": platform.python_version(),
        "config": config.to_dict(),
        "default_corpus": default_corpus,
        "work_units": len(units),
        "documents": counted.stats.documents,
        "bytes_read": counted.stats.bytes,
        "replaced_utf8_sequences": counted.stats.replaced_bytes,
        "memory_budget": counted.budget,
        "worker_data_limit": counted.data_limit,
        "spills": counted.spills,
        "chunks": chunks.total_chunks,
        "unique_chunks": chunks.unique_chunks,
        "training_chunks": n_training_chunks,
        "dropped_by_freq_cutoff": chunks.dropped_by_cutoff,
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
    }
    files = None
    if out_dir is not None:
        t = time.perf_counter()
        files = tokenizer.save(out_dir, config=config.result_settings())
        stats["seconds"]["write"] = round(time.perf_counter() - t, 3)
        files["stats.json"] = "written"
        stats["files"] = files
        write_text_atomically(os.path.join(out_dir, "stats.json"), json.dumps(stats, indent=1))
    reporter.event("done", vocab_size=tokenizer.n_vocab, rounds=len(result.batch_sizes),
                   seconds=round(sum(times.values()), 2), peak_rss=format_size(sampler.peak))
    reporter.close()
    return TrainResult(tokenizer=tokenizer, stats=stats, files=files)


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


def count_stage(units: list[WorkUnit], config: TrainConfig, run_dir: str, reporter: Progress,
                start_method: str | None = None, data_limit: int | None = None, cluster=None) -> CountResult:
    """Stage 2: count every unit into run files (or, on Ray, partitions in the object store), with
    the workers' memory shares set from the budget."""
    if not units:
        raise ValueError("the corpus is empty: no input to read")
    budget = config.memory_budget or default_budget()
    workers = max(1, min(config.workers, len(units)))
    if data_limit is None:
        # A Ray task starts like this process alone; locally the workers start as the whole tree is now.
        base = process_rss() if cluster is not None else tree_rss()
        data_limit = worker_data_limit(budget, workers, base, max(unit_text_bytes(u) for u in units))
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
                                on_progress=on_progress)
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

    if cluster is not None:
        from .count.on_ray import reduce_on_ray

        return reduce_on_ray(counted.partitions, cluster, config if select else None, on_progress)
    return reduce_runs(counted.runs, config.workers, start_method, config=config if select else None,
                       on_progress=on_progress)


def count_to_file(inputs: Sequence[str] | None, out_path: str, config: TrainConfig, *,
                  freq_cutoff: int = 0, progress: Progress | str = "none",
                  start_method: str | None = None, data_limit: int | None = None,
                  executor: str = "local", ray_address: str | None = None) -> dict[str, Any]:
    """Count chunks of inputs and write them as a counts file (stages 1-3 without cutoff/stop list).
    Rows are grouped by hash partition and sorted by chunk bytes within each (see count/counts_file.py)."""
    reporter = progress if isinstance(progress, Progress) else Progress(progress)
    inputs = list(inputs) if inputs else default_corpus_files()
    times: dict[str, float] = {}
    with PeakSampler() as sampler, tempfile.TemporaryDirectory(prefix="parbpe-", dir=config.tmp_dir) as run_dir, \
            cluster_for(executor, ray_address, config) as cluster:
        t = time.perf_counter()
        units = plan(inputs)
        times["plan"] = time.perf_counter() - t
        t = time.perf_counter()
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

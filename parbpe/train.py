"""Training, stage by stage: plan, count, reduce, table, merge, write."""

from __future__ import annotations

import json
import os
import platform
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import __version__
from .config import TrainConfig
from .count import count_units
from .memory import PeakSampler, format_size, tree_rss
from .merge import learn_merges
from .progress import Progress
from .read import default_corpus_files, plan
from .reduce import add_counts_files, select_training_chunks
from .table import build_table
from .tokenizer import Tokenizer, write_text_atomically


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
    **overrides: Any,
) -> TrainResult:
    """Train a tokenizer on inputs (paths, globs, directories; None = the built-in default corpus).

    Settings come from config, or from keyword arguments (parbpe.train(files, vocab_size=8192)).
    With out_dir, every output file is written there. Returns the tokenizer and the run's stats.
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

    if config.memory_budget is not None:
        reporter.event("warning", message="memory_budget is recorded but not enforced yet: counting keeps all "
                       "chunk counts in memory (spilling to disk comes with data-parallel counting)")
    times: dict[str, float] = {}
    with PeakSampler() as sampler:
        # 1. plan: inputs -> sorted work units
        t = time.perf_counter()
        units = plan(inputs)
        text_units = [u for u in units if not u.kind.startswith("counts")]
        counts_units = [u for u in units if u.kind.startswith("counts")]
        times["plan"] = time.perf_counter() - t

        # 2. count: each text unit -> partial chunk counts, summed
        t = time.perf_counter()

        def count_progress(done: int, total_units: int, done_bytes: int) -> None:
            elapsed = max(time.perf_counter() - t, 1e-9)
            reporter.update("count", done, total_units, force=done == total_units, MB=done_bytes / 1e6,
                            MB_s=done_bytes / 1e6 / elapsed, rss_MB=tree_rss() / 1e6)

        total, read_stats = count_units(text_units, config, start_method=start_method, on_progress=count_progress)
        times["count"] = time.perf_counter() - t

        # 3. reduce: add counts files, then freq_cutoff and the stop list on the global counts
        t = time.perf_counter()
        add_counts_files(total, counts_units, config)
        if not total:
            raise ValueError("the corpus is empty: no text chunk was found in the inputs")
        if read_stats.replaced_bytes:
            reporter.event("warning", message=f"replaced {read_stats.replaced_bytes} invalid UTF-8 sequences "
                           "with U+FFFD")
        chunks = select_training_chunks(total, config)
        del total
        times["reduce"] = time.perf_counter() - t
        reporter.event("counted", unique_chunks=chunks.unique_chunks, chunks=chunks.total_chunks,
                       training_chunks=len(chunks.chunks), MB=read_stats.bytes / 1e6)

        # 4. table: chunk counts -> numpy arrays
        t = time.perf_counter()
        table = build_table(chunks.chunks, chunks.counts, config.vocab_size)
        n_table_tokens = len(table.tokens)
        times["table"] = time.perf_counter() - t

        # 5. merge: rounds of safe batches until the vocabulary is full
        t = time.perf_counter()
        vocab = [bytes([b]) for b in range(256)] + list(chunks.stop_words)
        result = learn_merges(
            table, vocab, config.n_merges, max_batch_size=config.max_batch_size,
            cap_divisor=config.cap_divisor, nonoverlap=config.pair_count == "nonoverlap",
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
        "documents": read_stats.documents,
        "bytes_read": read_stats.bytes,
        "replaced_utf8_sequences": read_stats.replaced_bytes,
        "chunks": chunks.total_chunks,
        "unique_chunks": chunks.unique_chunks,
        "training_chunks": len(chunks.chunks),
        "dropped_by_freq_cutoff": chunks.dropped_by_cutoff,
        "stop_words": len(chunks.stop_words),
        "table_tokens": n_table_tokens,
        "vocab_size": tokenizer.n_vocab,
        "merges": len(result.merges),
        "rounds": len(result.batch_sizes),
        "merges_per_round": {"min": min(sizes), "mean": round(sum(sizes) / len(sizes), 2), "max": max(sizes)},
        "batch_sizes": result.batch_sizes,
        "stopped_early": result.stopped_early,
        "seconds": {k: round(v, 3) for k, v in times.items()},
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


def count_to_file(inputs: Sequence[str] | None, out_path: str, config: TrainConfig, *,
                  freq_cutoff: int = 0, progress: Progress | str = "none",
                  start_method: str | None = None) -> dict[str, Any]:
    """Count chunks of inputs and write them as a counts file (stages 1-3 without cutoff/stop list)."""
    from .reduce import write_counts_file

    reporter = progress if isinstance(progress, Progress) else Progress(progress)
    inputs = list(inputs) if inputs else default_corpus_files()
    t = time.perf_counter()
    units = plan(inputs)
    total: Counter[str]
    total, read_stats = count_units([u for u in units if not u.kind.startswith("counts")], config,
                                    start_method=start_method)
    add_counts_files(total, [u for u in units if u.kind.startswith("counts")], config)
    if not total:
        raise ValueError("the corpus is empty: no text chunk was found in the inputs")
    rows = write_counts_file(out_path, total, config, freq_cutoff=freq_cutoff)
    summary = {"out": out_path, "unique_chunks": len(total), "rows_written": rows,
               "chunks": sum(total.values()), "bytes_read": read_stats.bytes,
               "seconds": round(time.perf_counter() - t, 3)}
    reporter.event("counted", **summary)
    return summary

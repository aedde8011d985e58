"""`parbpe count`: stages 1-3 without freq_cutoff's selection or the stop list, written as a counts
file (rows grouped by hash partition, sorted by chunk bytes within each: count/counts_file.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..count.counts_file import write_counts_file
from ..io.iterables import TextStream
from ..io.plan import plan
from ..io.sample import sample_summary
from ..run.temp_dirs import clean_stale_temp_dirs, temp_work_dir
from .context import RunContext
from .count import count_stream, count_units, nothing_counted, reduce_partitions
from .inputs import Inputs, is_unit_list, sample_stage


def counts_file_stage(ctx: RunContext, job: Inputs, out_path: str, freq_cutoff: int) -> dict[str, Any]:
    """Count job's inputs into out_path; returns the summary (what was read and written, times, peak)."""
    config = ctx.config
    for note in clean_stale_temp_dirs(config.tmp_dir):
        ctx.note(note)
    with temp_work_dir(config.tmp_dir) as run_dir, ctx.executor():
        with ctx.stage("plan", report=False):
            source = job.source
            skipped: list[tuple[str, str]] = []
            units = source if isinstance(source, TextStream) or is_unit_list(source) else plan(
                source, skipped=skipped, outputs=[out_path], text_column=config.text_column)
            if skipped:  # the output file itself among them: a rerun never counts its own earlier output
                ctx.warn(f"skipped {len(skipped)} file(s): " + "; ".join(f"{p} ({why})" for p, why in skipped[:5])
                         + (f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""))
            sample_stage(ctx, units)
            config = ctx.config
        with ctx.stage("count", report=False):
            if isinstance(units, TextStream):
                counted = count_stream(ctx, units, config, run_dir)
                units = []
            else:
                counted = count_units(ctx, units, config, run_dir)
        totals = {"unique": 0, "chunks": 0}

        def partitions() -> Iterator[pa.Table]:
            for table in reduce_partitions(ctx, counted, config):
                totals["unique"] += table.num_rows
                totals["chunks"] += pc.sum(table.column("count")).as_py() or 0
                yield table
            if not totals["unique"]:
                raise ValueError(nothing_counted(counted.stats.bytes, config, counted.stats.sampled_bytes))

        with ctx.stage("reduce", report=False):
            rows = write_counts_file(out_path, partitions(), config, freq_cutoff=freq_cutoff)
    summary = {"out": out_path, "unique_chunks": totals["unique"], "rows_written": rows,
               "chunks": totals["chunks"], "documents": counted.stats.documents, "bytes_read": counted.stats.bytes,
               "replaced_utf8_sequences": counted.stats.replaced_bytes, "work_units": len(units),
               "sample": sample_summary(config, counted.stats.sampled_documents, counted.stats.sampled_bytes),
               "spills": counted.spills, "memory_budget": counted.budget, "worker_data_limit": counted.data_limit,
               "executor": ctx.options.executor, **({"ray": ctx.cluster_stats} if ctx.cluster_stats else {}),
               "seconds": {k: round(v, 3) for k, v in ctx.times.items()}, "peak_rss_bytes": ctx.sampler.peak}
    ctx.reporter.event("counted", **{k: v for k, v in summary.items() if k != "seconds"})
    return summary

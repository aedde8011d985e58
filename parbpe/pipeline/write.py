"""Stage 8, write: every output file or none (io/atomic write_files_atomically), stats.json last,
then the run directory is let go (removed, or kept and marked finished)."""

from __future__ import annotations

import json
import time
from typing import Any

from ..config import TrainConfig
from ..io.atomic import write_files_atomically
from ..run.memory import PeakSampler
from ..tokenizer.exports import file_makers
from ..tokenizer.model import Tokenizer
from .context import RunContext
from .evaluate import Smaller
from .out_dir import DIGESTS, earlier_files, remove_stale


def write_stage(ctx: RunContext, out_dir: str, tokenizer: Tokenizer, smaller: Smaller,
                stats: dict[str, Any]) -> dict[str, str]:
    """Write the tokenizer's files (and each smaller one's in vocab-SIZE/) into out_dir; returns what
    was written where. stats.json is made last: the time and peak of writing the others are in it."""
    makers, files = _makers(tokenizer, ctx.config, smaller)
    written = [*makers, "stats.json"]
    stale = earlier_files(out_dir, written)
    files |= {name: f"{files[name]} (an earlier run's file removed)" if name in files else
              "removed: an earlier run's file" for name in stale}
    stats["files"] = files
    started = time.perf_counter()
    digests: dict[str, str] = {}

    def stats_text() -> str:
        stats["seconds"]["write"] = round(time.perf_counter() - started, 3)
        stats["peak_rss_by_stage"]["write"] = write_sampler.peak
        stats["peak_rss_bytes"] = max(stats["peak_rss_bytes"], write_sampler.peak)
        stats[DIGESTS] = dict(digests)  # every other file is written by now: what a later run may replace
        return json.dumps(stats, indent=1)

    with PeakSampler() as write_sampler:
        write_files_atomically(out_dir, makers | {"stats.json": stats_text}, digests=digests)
    remove_stale(out_dir, stale)
    return files


def _makers(tokenizer: Tokenizer, config: TrainConfig, smaller: Smaller) -> tuple[dict[str, Any], dict[str, str]]:
    """The file makers of every output file but stats.json, and what each file becomes."""
    makers, files = file_makers(tokenizer, config.result_settings())
    files["stats.json"] = "written"
    for size, (small, small_stats) in smaller.items():
        small_makers, small_files = file_makers(small, {**config.result_settings(), "vocab_size": size})
        small_makers["stats.json"] = lambda small_stats=small_stats: json.dumps(small_stats, indent=1)
        makers |= {f"vocab-{size}/{name}": make for name, make in small_makers.items()}
        files |= {f"vocab-{size}/{name}": outcome for name, outcome in small_files.items()}
        files[f"vocab-{size}/stats.json"] = "written"
    return makers, files


def finish(ctx: RunContext, tokenizer: Tokenizer, stats: dict[str, Any]) -> None:
    """The run succeeded: its directory goes (or stays, marked finished), and the reporter says done."""
    if ctx.run is not None:
        ctx.run.finish(ctx.options.keep_run_dir)
    ctx.reporter.event("done", vocab_size=tokenizer.n_vocab, rounds=stats["rounds"],
                       seconds=round(sum(stats["seconds"].values()), 2),  # the summary line's sum
                       peak_rss_MB=round(stats["peak_rss_bytes"] / 1e6, 1))
    ctx.reporter.close()

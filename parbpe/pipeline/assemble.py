"""Stage 6, assemble: the tokenizer and the run's stats (stats.json) from what the stages made."""

from __future__ import annotations

import platform
from typing import Any

from .. import __version__
from ..io.sample import sample_summary
from ..tokenizer.model import Tokenizer
from ..warnings import EarlyStopWarning
from .context import RunContext
from .count import Counted
from .inputs import Inputs
from .vocabulary import Built


def assemble_stats(ctx: RunContext, job: Inputs, counted: Counted, built: Built,
                   tokenizer: Tokenizer) -> dict[str, Any]:
    """stats.json's content: inputs, counting, the table, the merges, times and peak memory by stage."""
    chunks, result, merged = counted.chunks, built.result, built.merged
    units = [] if job.streamed else job.units
    sizes = result.batch_sizes or [0]
    return {
        "parbpe_version": __version__,
        "python": platform.python_version(),
        "config": ctx.given.to_dict(),
        "default_corpus": job.default_corpus,
        "inputs": {"source": job.described, "files_read": sorted({u.path for u in units}),
                   "skipped": [{"path": p, "reason": why} for p, why in job.skipped]},
        "work_units": len(units),
        "documents": counted.stats["documents"],
        "bytes_read": counted.stats["bytes"],
        "replaced_utf8_sequences": counted.stats["replaced_bytes"],
        "sample": sample_summary(ctx.config, counted.stats.get("sampled_documents", 0),
                                 counted.stats.get("sampled_bytes", 0), counted.stats["documents"]),
        "memory_budget": counted.stats["budget"],
        "caller_held_bytes": ctx.caller_held,  # held by the calling process at the start: left out of the models
        "worker_data_limit": counted.stats["data_limit"],
        "spills": counted.stats["spills"],
        "chunks": chunks.total_chunks,
        "unique_chunks": chunks.unique_chunks,
        "training_chunks": merged.training_chunks if merged else None,  # None: PathPiece resumed past BPE
        "dropped_by_freq_cutoff": chunks.dropped_by_cutoff,
        "merge_workers": result.workers,  # the processes that merged (merge_fit.workers: what the budget allowed)
        "merge_fit": merged.fit.to_dict() if merged else None,  # the merge stage's estimate, its automatic cutoff
        "stop_words": len(chunks.stop_words),
        "table_tokens": merged.table_tokens if merged else None,
        "vocab_size": tokenizer.n_vocab,
        "merges": len(result.merges),
        "rounds": len(result.batch_sizes),
        "merges_per_round": {"min": min(sizes), "mean": round(sum(sizes) / len(sizes), 2), "max": max(sizes)},
        "batch_sizes": result.batch_sizes,
        "stopped_early": result.stopped_early,
        "result_changes": ctx.changes,  # what changed the result without failing the run (--strict fails)
        "executor": ctx.options.executor,
        **({"ray": ctx.cluster_stats} if ctx.cluster_stats is not None else {}),
        "seconds": {k: round(v, 3) for k, v in ctx.times.items()},
        "kernels": ctx.kernels(),
        "merge_seconds": result.seconds,  # merge stage: counting pairs, selecting, applying, updating, messages
        "peak_rss_bytes": ctx.sampler.peak,
        "peak_rss_by_stage": dict(ctx.sampler.by_stage),
        **built.stats,
    }


def warn_if_short(ctx: RunContext, built: Built, counted: Counted) -> None:
    """A warning when no pair was left before the vocabulary was full."""
    if built.result.stopped_early:
        new = built.first_new + len(built.result.merges)
        made = 256 + len(counted.chunks.stop_words) + new + len(ctx.config.special_tokens)
        why = (f"no pair seen {ctx.config.min_pair_count} times (--min-pair-count)" if ctx.config.min_pair_count > 1
               else "no pair left")
        ctx.result_changed(EarlyStopWarning, f"{why} after {new} merges: the vocabulary has {made} tokens, "
                           f"not {ctx.config.vocab_size}", vocab_size=made)


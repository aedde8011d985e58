"""Stage 7, evaluate: the held-out text encoded with the tokenizer (and with each --also-save size's),
and the smaller tokenizers themselves: the run's first merges, each a complete tokenizer."""

from __future__ import annotations

import time
from typing import Any

from ..tokenizer.evaluate import evaluate
from ..tokenizer.model import Tokenizer
from ..warnings import PrefixSizesWarning
from .context import RunContext
from .inputs import Inputs, prefix_message, prefixes_differ
from .vocabulary import Built

Smaller = dict[int, tuple[Tokenizer, dict[str, Any]]]  # vocabulary size: (its tokenizer, its stats)



def evaluate_stage(ctx: RunContext, job: Inputs, built: Built, tokenizer: Tokenizer, stats: dict[str, Any]) -> Smaller:
    """stats["heldout"] (and the time it took), and the --also-save tokenizers with their stats."""
    config = ctx.config
    if job.heldout:
        started = time.perf_counter()
        stats["heldout"] = {"vocab_size": tokenizer.n_vocab, **evaluate(tokenizer, job.heldout, config.text_column)}
        stats["seconds"]["heldout"] = round(time.perf_counter() - started, 3)
        ctx.reporter.event("heldout", **{k: round(v, 4) if isinstance(v, float) else v
                                         for k, v in stats["heldout"].items()})
    smaller: Smaller = {}
    for size in job.also_save:
        n_merges = config.merges_for(size, built.first_new)
        if n_merges > len(built.result.merges):
            ctx.warn(f"not saving vocab-{size}: the run stopped at {tokenizer.n_vocab} tokens")
            continue
        small = built.tokenizer(config, n_merges)
        small_stats: dict[str, Any] = {"vocab_size": small.n_vocab, "prefix_of": tokenizer.n_vocab,
                                       "merges": built.first_new + n_merges,
                                       "config": {**ctx.given.to_dict(), "vocab_size": size}}
        if job.heldout:
            small_stats["heldout"] = evaluate(small, job.heldout, config.text_column)
        smaller[size] = small, small_stats
    if smaller and prefixes_differ(config):
        ctx.result_changed(PrefixSizesWarning, prefix_message(sorted(smaller)), sizes=sorted(smaller))
    if smaller:
        stats["also_save"] = [{"vocab_size": size, "directory": f"vocab-{size}",
                               **{k: v for k, v in small_stats.get("heldout", {}).items() if k != "vocab_size"}}
                              for size, (_, small_stats) in smaller.items()]
    return smaller

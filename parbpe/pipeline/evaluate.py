"""Stage 7, evaluate: the --also-save tokenizers (the run's first merges, each a complete tokenizer)
and the held-out text measured with the tokenizer and each of them: counted once by the counting
stage, then each unique chunk encoded by each tokenizer's merges (pipeline/corpus_eval.py)."""

from __future__ import annotations

import time
from typing import Any

from ..tokenizer.model import Tokenizer
from ..warnings import PrefixSizesWarning
from .context import RunContext
from .corpus_eval import count_text_in, row, score_text
from .inputs import Inputs, prefix_message, prefixes_differ
from .vocabulary import Built

Smaller = dict[int, tuple[Tokenizer, dict[str, Any]]]  # vocabulary size: (its tokenizer, its stats)


def evaluate_stage(ctx: RunContext, job: Inputs, built: Built, tokenizer: Tokenizer, stats: dict[str, Any]) -> Smaller:
    """stats["heldout"] (and the time it took), and the --also-save tokenizers with their stats."""
    config = ctx.config
    smaller = smaller_tokenizers(ctx, job, built, tokenizer)
    if job.heldout:
        started = time.perf_counter()
        rows = heldout_rows(ctx, job.heldout, [tokenizer, *(small for small, _ in smaller.values())])
        stats["heldout"] = rows[0]
        if job.heldout_overlap:
            stats["heldout"]["also_training"] = job.heldout_overlap
        for (_, small_stats), small_row in zip(smaller.values(), rows[1:]):
            small_stats["heldout"] = small_row
        stats["seconds"]["heldout"] = round(time.perf_counter() - started, 3)
        ctx.reporter.event("heldout", **{k: round(v, 4) if isinstance(v, float) else v
                                         for k, v in stats["heldout"].items()})
    if smaller and prefixes_differ(config):
        ctx.result_changed(PrefixSizesWarning, prefix_message(sorted(smaller)), sizes=sorted(smaller))
    if smaller:
        stats["also_save"] = [{"vocab_size": size, "directory": f"vocab-{size}",
                               **{k: v for k, v in small_stats.get("heldout", {}).items() if k != "vocab_size"}}
                              for size, (_, small_stats) in smaller.items()]
    return smaller


def heldout_rows(ctx: RunContext, heldout: list[str], tokenizers: list[Tokenizer]) -> list[dict[str, Any]]:
    """The held-out text counted once (the counting stage, nested in this one) and each tokenizer's
    merges on it (pipeline/corpus_eval.py): what `parbpe eval` reports, and equal to encoding the
    documents one by one."""
    text = count_text_in(ctx, heldout, tokenizers[0].pattern, tokenizers[0].normalize)
    methods = [[tok.segmentation] for tok in tokenizers]  # each its own: merges, or shortest (PathPiece)
    totals = score_text(text, tokenizers, methods, ctx.config.workers, ctx.start_method)
    rows = [row("", tok, tok.segmentation, totals[k, tok.segmentation], text, 2.5) for k, tok in enumerate(tokenizers)]
    return [{k: v for k, v in r.items() if k not in ("tokenizer", "method")} for r in rows]


def smaller_tokenizers(ctx: RunContext, job: Inputs, built: Built, tokenizer: Tokenizer) -> Smaller:
    """--also-save's tokenizers: the run's first merges for each size, with their stats."""
    config = ctx.config
    smaller: Smaller = {}
    for size in job.also_save:
        n_merges = config.merges_for(size, built.first_new, len(built.stop_words))
        if n_merges > len(built.result.merges):
            ctx.warn(f"not saving vocab-{size}: the run stopped at {tokenizer.n_vocab} tokens")
            continue
        small = built.tokenizer(config, n_merges)
        small_stats: dict[str, Any] = {"vocab_size": small.n_vocab, "prefix_of": tokenizer.n_vocab,
                                       "merges": built.first_new + n_merges,
                                       "config": {**ctx.given.to_dict(), "vocab_size": size}}
        smaller[size] = small, small_stats
    return smaller

"""PathPiece's prune stage: the vocabulary cut down to its size, an iteration at a time, with the
chunk table's scores summed by workers (pathpiece/workers.py) and a checkpoint after each iteration
(run directory: pathpiece.json), so that a killed run resumes at the iteration it reached. Each
iteration reports the tokens left and, with --heldout, the held-out text's tokens with them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .. import jit
from ..pathpiece.prune import prune_rounds
from ..pathpiece.score import chunk_batches
from ..pathpiece.workers import ScoringPool
from ..run.memory import format_size
from ..tokenizer.segment import VocabIndex, shortest_tokens
from ..tokenizer.tables import KernelTables, Trie, token_totals
from .context import RunContext
from .corpus_eval import CountedText

# A scoring worker's memory, measured on realmix (1,014,480 chunks, 262,144 tokens, 2 workers: 798 MB
# for the tree): the interpreter with numpy and its batch arrays, the vocabulary's index (per token),
# and its slice of the chunk table as bytes objects (per chunk, beside the bytes themselves).
WORKER_FIXED = 120 << 20
PER_TOKEN = 400
PER_CHUNK = 90
# With the kernel (jit.score_kernels), a worker holds numba (jit.NUMBA_RSS) and its slice's windows
# instead of bytes objects: per chunk byte (realmix, 262,144 tokens: 2.7 windows a byte, 5 bytes each).
KERNEL_PER_BYTE = 16


def scoring_workers(ctx: RunContext, data: np.ndarray, offsets: np.ndarray, tokens: int) -> int:
    """The scoring workers the budget holds (at most --workers): each holds its slice of the chunk
    table and the vocabulary's index; one is the least, and if one does not fit, the run stops here
    with what it would need."""
    held = ctx.in_use()
    kernel = jit.score_kernels(len(data))
    fixed = WORKER_FIXED + PER_TOKEN * tokens + (jit.NUMBA_RSS if kernel else 0)
    table = len(data) + (KERNEL_PER_BYTE * len(data) if kernel else PER_CHUNK * (len(offsets) - 1))

    def need(workers: int) -> int:
        return workers * fixed + table

    for workers in range(ctx.config.workers, 0, -1):
        if held + need(workers) <= ctx.budget:
            return workers
    raise ValueError(f"PathPiece's prune stage needs about {format_size(held + need(1))} with one scoring "
                     f"worker ({len(offsets) - 1:,} chunks, {tokens:,} tokens), over the memory budget of "
                     f"{format_size(ctx.budget)}: give a larger --memory-budget, or a smaller --initial-vocab-size")


def prune_stage(ctx: RunContext, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, vocab: list[bytes],
                target: int, iteration: int, facts: dict[str, Any], heldout: CountedText | None = None
                ) -> tuple[list[bytes], int]:
    """Drop tokens of vocab (single bytes first) until `target` are left; returns the vocabulary and the
    iterations made in all (iteration: those made before, by the run that stopped). facts (the
    initial vocabulary's) go into each checkpoint; per iteration, facts["sizes"] gets the size reached
    and, with heldout (the held-out text counted), facts["heldout_tokens"] its tokens with that size."""
    config = ctx.config
    facts.setdefault("sizes", [])
    facts.setdefault("seconds", [])
    if heldout is not None:
        facts.setdefault("heldout_tokens", [])
    started = len(vocab)
    workers = scoring_workers(ctx, data, offsets, len(vocab))
    with ScoringPool(data, offsets, counts, workers, ctx.start_method) as pool:
        facts["workers"] = max(pool.workers, 1)
        facts["scoring"] = pool.scoring
        clock = time.perf_counter()
        for iteration, vocab in prune_rounds(pool.scores, vocab, target, config.prune_share, iteration):
            facts["sizes"].append(len(vocab))
            facts["seconds"].append(round(time.perf_counter() - clock, 3))
            shown: dict[str, int] = {"tokens": len(vocab)}  # left; first, so that a narrow line keeps them
            if heldout is not None:
                shown["heldout"] = heldout_tokens(vocab, heldout)
                facts["heldout_tokens"].append(shown["heldout"])
            ctx.reporter.update("prune", started - len(vocab), started - target, force=True, **shown,
                                iteration=iteration)
            if ctx.run is not None:
                ctx.run.save_pruned(iteration, vocab, facts)
            clock = time.perf_counter()
    return vocab, iteration


def heldout_tokens(vocab: list[bytes], text: CountedText) -> int:
    """The tokens of a counted text (its chunks into the fewest tokens of vocab, times their counts):
    what the evaluate stage reports for the held-out text once vocab is the tokenizer's (special
    tokens are text there too). By the segmentation kernel where jit.SEGMENT_MIN_BYTES says so."""
    data, offsets, counts = text.data, text.offsets, text.counts
    if jit.worth(int(offsets[-1] - offsets[0]), jit.SEGMENT_MIN_BYTES):
        tables = KernelTables(Trie.of(vocab, np.arange(len(vocab), dtype=np.int64)), None, len(vocab))
        return int(token_totals(tables, ["shortest"], data, offsets, counts)["shortest"].sum())
    index = VocabIndex(vocab)
    total = 0
    for batch in chunk_batches(np.diff(offsets), index.max_len):
        owner, _, _ = shortest_tokens(index, [data[offsets[k]:offsets[k + 1]].tobytes() for k in batch.tolist()])
        total += int(counts[batch[owner]].sum())
    return total

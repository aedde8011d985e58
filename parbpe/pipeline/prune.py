"""PathPiece's prune stage: the vocabulary cut down to its size, an iteration at a time, with the
chunk table's scores summed by workers (pathpiece/workers.py) and a checkpoint after each iteration
(run directory: pathpiece.json), so that a killed run resumes at the iteration it reached."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..pathpiece.score import drop_schedule, prune_step
from ..pathpiece.workers import ScoringPool
from .context import RunContext


def prune_stage(ctx: RunContext, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, vocab: list[bytes],
                target: int, iteration: int, facts: dict[str, Any]) -> tuple[list[bytes], int]:
    """Drop tokens of vocab (single bytes first) until `target` are left; returns the vocabulary and the
    iterations made in all (iteration: those made before, by the run that stopped). facts (the
    initial vocabulary's) go into each checkpoint; per iteration, facts["sizes"] gets the size reached."""
    config = ctx.config
    report = ctx.progress("prune")
    facts.setdefault("sizes", [])
    facts.setdefault("seconds", [])
    started = len(vocab)
    with ScoringPool(data, offsets, counts, config.workers, ctx.start_method) as pool:
        facts["workers"] = max(pool.workers, 1)
        while len(vocab) > target:
            clock = time.perf_counter()
            scores, usage = pool.scores(vocab)
            drop = set(prune_step(vocab, scores, usage, drop_schedule(len(vocab), target, config.prune_share)))
            vocab = [t for k, t in enumerate(vocab) if k not in drop]
            iteration += 1
            facts["sizes"].append(len(vocab))
            facts["seconds"].append(round(time.perf_counter() - clock, 3))
            report(started - len(vocab), started - target)
            if ctx.run is not None:
                ctx.run.save_pruned(iteration, vocab, facts)
    return vocab, iteration

"""PathPieceL's loop: score every token, drop the lowest, rebuild the index, repeat. The scoring runs
in this process, or on worker processes that each hold a slice of the chunk table (workers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..tokenizer.segment import check_vocabulary
from .score import drop_schedule, prune_step
from .workers import ScoringPool, chunk_arrays

SINGLE_BYTES = [bytes([b]) for b in range(256)]

Scorer = Callable[[list[bytes]], tuple[np.ndarray, np.ndarray]]
"""tokens -> (scores, usage) over the whole chunk table, int64 per token id (score.token_scores)."""


def prune(
    tokens: list[bytes],
    chunks: list[bytes],
    counts: Sequence[int] | np.ndarray,
    target: int,
    share: float = 0.1,
    on_iteration: Callable[[int, int], None] | None = None,
    workers: int = 1,
    start_method: str | None = None,
    scorer: Scorer | None = None,
) -> list[bytes]:
    """The vocabulary of `target` tokens that PathPieceL keeps of `tokens` for the chunk table
    (chunks with their counts): single bytes 0..255 first, then the kept multi-byte tokens in their
    order in `tokens`. Each iteration drops `drop_schedule(size, target, share)` tokens and then calls
    on_iteration(iteration, size). A vocabulary already within target comes back reordered only.
    The scores come from scorer when given, else from `workers` processes (ScoringPool; one: this
    process; the kernel or numpy as jit.score_kernels says); the result is the same for every worker
    count and either way."""
    if target < 256:
        raise ValueError(f"target={target} is below 256: every single byte stays in the vocabulary")
    if workers < 1:
        raise ValueError(f"workers={workers}: give 1 or more")
    if len(counts) != len(chunks):
        raise ValueError(f"{len(chunks)} chunks but {len(counts)} counts: give one count per chunk")
    present = set(tokens)
    missing = [t for t in SINGLE_BYTES if t not in present]
    if missing:
        raise ValueError(f"tokens lack single bytes {missing[:8]}...; every byte 0..255 must be a token")
    vocab = SINGLE_BYTES + [t for t in tokens if len(t) > 1]
    check_vocabulary(vocab)  # rejects repeated tokens and tokens over 16 bytes here, before any worker starts
    if scorer is None and len(vocab) > target:
        with ScoringPool(*chunk_arrays(chunks), np.asarray(counts, dtype=np.int64), workers, start_method) as pool:
            return _prune_with(pool.scores, vocab, target, share, on_iteration)
    return _prune_with(scorer or _never, vocab, target, share, on_iteration)


def _never(vocab: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    raise AssertionError("a vocabulary within its target is not scored")


def _prune_with(
    scorer: Scorer,
    vocab: list[bytes],
    target: int,
    share: float,
    on_iteration: Callable[[int, int], None] | None,
) -> list[bytes]:
    """prune's loop over a valid vocabulary (single bytes first), scored by scorer."""
    for iteration, vocab in prune_rounds(scorer, vocab, target, share):
        if on_iteration is not None:
            on_iteration(iteration, len(vocab))
    return vocab


def prune_rounds(scorer: Scorer, vocab: list[bytes], target: int, share: float, iteration: int = 0
                 ) -> Iterator[tuple[int, list[bytes]]]:
    """The iterations of PathPieceL from vocab (single bytes first) down to target tokens: each yields
    its number (counting on from `iteration`, those made before) and the vocabulary it leaves."""
    while len(vocab) > target:
        scores, usage = scorer(vocab)
        drop = set(prune_step(vocab, scores, usage, drop_schedule(len(vocab), target, share)))
        vocab = [t for k, t in enumerate(vocab) if k not in drop]
        iteration += 1
        yield iteration, vocab

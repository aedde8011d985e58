"""Scoring a tokenizer on counted chunks: each unique chunk segmented once per method, weighted by its count.

Rows carry the corpus token count (CTC), bytes, bytes/token, tokens/word, Rényi efficiency of the token
unigram distribution (Zouhar et al. 2023) and the unused vocabulary share. The merges method encodes a chunk
exactly as Tokenizer.encode_ordinary does (the same per-chunk function), so its counts equal
document-by-document encoding of the same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .model import Tokenizer

METHODS = ("merges", "greedy", "shortest")


def renyi_efficiency(counts: np.ndarray, n_vocab: int, alpha: float = 2.5) -> float:
    """H_alpha of the unigram distribution of counts divided by log n_vocab (alpha = 1: Shannon)."""
    total = counts.sum()
    if total == 0 or n_vocab < 2:
        return 0.0
    p = counts[counts > 0] / total
    entropy = -float(np.sum(p * np.log(p))) if alpha == 1 else float(np.log(np.sum(p**alpha)) / (1 - alpha))
    return entropy / float(np.log(n_vocab))


def segment_chunks(tokenizer: Tokenizer, chunks: Sequence[str], method: str) -> list[list[int]]:
    """Token ids of each chunk by one method (merges exactly as encode_ordinary, or greedy/shortest)."""
    return tokenizer._chunk_encoder(method, 0.0, None)(list(chunks))


def score_chunks(
    tokenizer: Tokenizer, chunk_counts: Mapping[str, int], method: str, *, words: int, alpha: float = 2.5
) -> dict[str, Any]:
    """One row for tokenizer x method over chunk -> count (words: whitespace words of the same text)."""
    chunks = list(chunk_counts)
    weights = np.array([chunk_counts[c] for c in chunks], dtype=np.int64)
    counts = np.zeros(max(tokenizer.vocab) + 1, dtype=np.int64)
    n_bytes = int(np.dot(weights, [len(c.encode("utf-8")) for c in chunks])) if chunks else 0
    for seg, w in zip(segment_chunks(tokenizer, chunks, method), weights.tolist(), strict=True):
        np.add.at(counts, np.asarray(seg, dtype=np.int64), w)
    n_tokens = int(counts.sum())
    special = set(tokenizer.special_tokens.values())
    regular = [i for i in tokenizer.vocab if i not in special]
    return {
        "method": method,
        "tokens": n_tokens,
        "bytes": n_bytes,
        "bytes_per_token": n_bytes / n_tokens if n_tokens else 0.0,
        "tokens_per_word": n_tokens / words if words else 0.0,
        "renyi_efficiency": renyi_efficiency(counts[regular], len(regular), alpha),
        "vocab_unused_share": float(np.mean(counts[regular] == 0)) if regular else 0.0,
    }

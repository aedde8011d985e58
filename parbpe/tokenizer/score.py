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
from .segment import VocabIndex, greedy, shortest

METHODS = ("merges", "greedy", "shortest")
_BATCH = 4096


def renyi_efficiency(counts: np.ndarray, n_vocab: int, alpha: float = 2.5) -> float:
    """H_alpha of the unigram distribution of counts divided by log n_vocab (alpha = 1: Shannon)."""
    total = counts.sum()
    if total == 0 or n_vocab < 2:
        return 0.0
    p = counts[counts > 0] / total
    entropy = -float(np.sum(p * np.log(p))) if alpha == 1 else float(np.log(np.sum(p**alpha)) / (1 - alpha))
    return entropy / float(np.log(n_vocab))


def vocab_index(tokenizer: Tokenizer) -> tuple[VocabIndex, np.ndarray]:
    """The tokenizer's non-special tokens indexed for greedy/shortest, and the ids of the index's positions."""
    special = set(tokenizer.special_tokens.values())
    ids = np.array(sorted(i for i in tokenizer.vocab if i not in special), dtype=np.int64)
    tokens = [tokenizer.vocab[int(i)] for i in ids]
    return VocabIndex(tokens, max(16, max(len(t) for t in tokens))), ids


def segment_chunks(tokenizer: Tokenizer, chunks: Sequence[str], method: str) -> list[list[int]]:
    """Token ids of each chunk by one method; chunks are batched by length so the padded matrices stay small."""
    if method == "merges":
        return [tokenizer._encode_chunk(c) for c in chunks]
    if method not in METHODS:
        raise ValueError(f"unknown segmentation method {method!r}; use one of {', '.join(METHODS)}")
    index, ids = getattr(tokenizer, "_vocab_index", None) or vocab_index(tokenizer)
    tokenizer._vocab_index = (index, ids)  # type: ignore[attr-defined]
    run = greedy if method == "greedy" else shortest
    raw = [c.encode("utf-8") for c in chunks]
    order = sorted(range(len(raw)), key=lambda k: len(raw[k]))
    out: list[list[int]] = [[] for _ in raw]
    for start in range(0, len(order), _BATCH):
        batch = order[start : start + _BATCH]
        for k, seg in zip(batch, run(index, [raw[k] for k in batch]), strict=True):
            out[k] = ids[seg].tolist()
    return out


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

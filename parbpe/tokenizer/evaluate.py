"""Measuring a tokenizer on text: bytes per token, tokens per word, superword tokens, unused vocabulary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..io.plan import plan
from ..io.readers import ReadStats, iter_documents
from .model import Tokenizer


def evaluate(tokenizer: Tokenizer, inputs: Sequence[str], text_column: str = "text") -> dict[str, Any]:
    """Encode every document of inputs (special-token strings as plain text) and summarise."""
    units = [u for u in plan(inputs) if not u.kind.startswith("counts")]
    if not units:
        raise ValueError("eval needs text inputs (parquet, txt, jsonl), not counts files")
    used = np.zeros(tokenizer.n_vocab + 1, dtype=bool)
    counts = np.zeros(tokenizer.n_vocab + 1, dtype=np.int64)
    n_tokens = n_bytes = n_words = 0
    stats = ReadStats()
    for unit in units:
        for text in iter_documents(unit, text_column, stats):
            ids = tokenizer.encode_ordinary(text)
            n_tokens += len(ids)
            n_bytes += len(text.encode("utf-8"))
            n_words += len(text.split())
            counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=len(counts))
    used = counts > 0
    superword = np.array([is_superword(tokenizer.vocab.get(i, b"")) for i in range(tokenizer.n_vocab)] + [False])
    regular = tokenizer.n_vocab - len(tokenizer.special_tokens)
    unused = regular - int(used[[i for i in tokenizer.vocab if i not in tokenizer.special_tokens.values()]].sum())
    return {
        "vocab_size": tokenizer.n_vocab,
        "documents": stats.documents,
        "bytes": n_bytes,
        "tokens": n_tokens,
        "words": n_words,
        "bytes_per_token": n_bytes / n_tokens if n_tokens else 0.0,
        "tokens_per_word": n_tokens / n_words if n_words else 0.0,
        "superword_share": int(counts[superword].sum()) / n_tokens if n_tokens else 0.0,
        "vocab_unused_share": unused / regular if regular else 0.0,
        "superword_vocab": int(superword.sum()),
    }


def is_superword(token: bytes) -> bool:
    """True if the token spans a space: a space with something other than whitespace on both sides
    ("of the", " of the", "end. The"), not a word with its leading space (" the") or spaces alone.
    SuperBPE's superword tokens are these; ordinary BPE with a GPT-style pattern makes none."""
    return b" " in token.strip()

"""SuperBPE's rules for new tokens in its second stage (Liu et al., 2025, and their trainer).

The authors' tokenizers fork skips, while extending a tokenizer, every new token that contains
": " (a colon then a space: such tokens would glue a prompt's "Answer:" to what follows) or that
holds more than 4 words, a word being a non-empty run between spaces (their byte-level strings
split on "Ġ", the space). A skipped pair is never merged later either.
"""

from __future__ import annotations

MAX_WORDS = 4


def superword_allowed(token: bytes) -> bool:
    """True if SuperBPE's second stage may make this token (no ": ", at most MAX_WORDS words)."""
    if b": " in token:
        return False
    return sum(1 for part in token.split(b" ") if part) <= MAX_WORDS


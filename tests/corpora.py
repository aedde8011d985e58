"""Generated corpora shared by tests in several packages (text with every character class, random words)."""

from __future__ import annotations

import random

ALPHABET = (
    list("abcXYZ019") + [" ", " ", "  ", "\n", "\n", "\r\n", "\t", "\x0b", "\x0c", "\x85", "\xa0", "\u3000"]
    + list(".,!?'\"/-_()#") + ["'s", "'T", "'ll"]
    + ["é", "ß", "\u0301", "中", "文", "ж", "😀", "١", "²", "\x00", "\x1c"]
)


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def random_corpus(rng: random.Random, alphabet: bytes, n_words: int, max_len: int) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}
    for _ in range(n_words):
        word = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, max_len)))
        counts[word] = counts.get(word, 0) + rng.randint(1, 9)
    return counts

"""The vectorized GPT-4 lexer gives exactly the chunks of the `regex` pattern."""

from __future__ import annotations

import random

import numpy as np
import pyarrow.parquet as pq
import pytest
import regex

from parbpe.lexer import BYTE_CLASS, HIGH, gpt4_chunk_starts
from parbpe.patterns import PATTERNS

GPT4 = regex.compile(PATTERNS["gpt4"])

# Every byte class, and the letters contractions are made of, in the combinations the rules look at.
TRICKY = (list("aAsSdDmMtTlLvVeErRxZ0129 \t\n\r'.,-_/\x0b\x0c\x1c\x1f\x00\x7f!\"")
          + ["'s", "'ll", "'VE", "'Re", "'d", "'M", "'t", "  ", "   ", "\n\n", " \n", "\n ", " '", ".\n", "\r\n",
             "123456", "1234", " .", "\t.", "''", " 's", "\t's", ".'s", "don't", "'sa", "'llama", " x", "\tx"])


def lex(pieces: list[str]) -> list[str]:
    """Chunks of each piece, split as a string of its own, by the lexer."""
    text = "".join(pieces)
    data = np.frombuffer(text.encode(), np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in pieces])
    bounds = np.append(gpt4_chunk_starts(data, offsets), len(data)).tolist()
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def by_regex(pieces: list[str]) -> list[str]:
    return [chunk for piece in pieces for chunk in GPT4.findall(piece)]


def test_byte_classes_cover_ascii_only():
    assert (BYTE_CLASS[128:] == HIGH).all() and (BYTE_CLASS[:128] != HIGH).all()


@pytest.mark.parametrize("text", ["a", "'", "'s", "'S", "'ll", "'lL", "'l", "'x", "don't", "DON'T", "x'sy", "'sdmt",
                                  " 's", "\t's", "..'s", "1's", "\n's", " ", "  ", "   a", "\t\ta", " \n ", "\n\n  x",
                                  ".\n\n  \nx", " .\n", "a\r\n\r\nb", "12345678", "a1234b", " 1", "\t.", " ...a",
                                  "x  ", "\x0b\x0cz", "!!!\n", "a .b", ".a", "..a", "'''s", " \t'x"])
def test_small_cases(text):
    assert lex([text]) == by_regex([text])


@pytest.mark.parametrize("seed", range(8))
def test_random_pieces_equal_regex(seed):
    rng = random.Random(seed)
    for _ in range(300):
        pieces = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 14))) for _ in range(rng.randint(1, 8))]
        assert lex(pieces) == by_regex(pieces), pieces


def test_long_random_text_equals_regex():
    rng = random.Random(99)
    pieces = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 2000))) for _ in range(200)]
    assert lex(pieces) == by_regex(pieces)


def test_rejects_non_ascii():
    with pytest.raises(ValueError, match="ASCII"):
        gpt4_chunk_starts(np.frombuffer("é".encode(), np.uint8), np.array([0, 2]))
    assert gpt4_chunk_starts(np.zeros(0, np.uint8), np.array([0])).size == 0


@pytest.mark.shared_data
def test_real_text_equals_regex(shared_data):
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    docs = [doc for doc in docs if doc and doc.isascii()]
    assert len(docs) > 100
    assert lex(docs) == by_regex(docs)

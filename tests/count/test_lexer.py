"""The vectorized GPT-4 lexer gives exactly the chunks of the `regex` pattern."""

from __future__ import annotations

import random

import numpy as np
import pyarrow.parquet as pq
import pytest
import regex

from parbpe.count.lexer import (
    BYTE_CANON,
    BYTE_CLASS,
    HIGH,
    code_point_tables,
    decode_utf8,
    gpt4_chunk_starts,
    gpt4_chunk_starts_utf8,
)
from parbpe.patterns import PATTERNS

GPT4 = regex.compile(PATTERNS["gpt4"])

# Every byte class, and the letters contractions are made of, in the combinations the rules look at.
TRICKY = (list("aAsSdDmMtTlLvVeErRxZ0129 \t\n\r'.,-_/\x0b\x0c\x1c\x1f\x00\x7f!\"")
          + ["'s", "'ll", "'VE", "'Re", "'d", "'M", "'t", "  ", "   ", "\n\n", " \n", "\n ", " '", ".\n", "\r\n",
             "123456", "1234", " .", "\t.", "''", " 's", "\t's", ".'s", "don't", "'sa", "'llama", " x", "\tx"])


def lex(pieces: list[str], chunk_starts=gpt4_chunk_starts) -> list[str]:
    """Chunks of each piece, split as a string of its own, by the lexer."""
    encoded = [p.encode() for p in pieces]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in encoded])
    bounds = np.append(chunk_starts(data, offsets), len(data)).tolist()
    return [data[a:b].tobytes().decode() for a, b in zip(bounds, bounds[1:])]


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


# Non-ASCII: letters (with and without case), marks, digits of other scripts, whitespace of other
# kinds, symbols, the long s that `regex` folds to s in contractions, 4-byte characters.
UNICODE = TRICKY + ["é", "É", "ß", "\u0301", "中", "文", "ж", "Ж", "😀", "١", "²", "Ⅻ", "\x85", "\xa0", "\u3000",
                    "\u2028", "\u1680", "ſ", "'ſ", "'ſa", "ǅ", "ʰ", "。", "，", "€", "\U00010400", "𝟙", " é", "'é",
                    "\u200b", "\ufeff"]


@pytest.mark.parametrize("seed", range(8))
def test_random_unicode_pieces_equal_regex(seed):
    rng = random.Random(100 + seed)
    for _ in range(300):
        pieces = ["".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 14))) for _ in range(rng.randint(1, 8))]
        assert lex(pieces, gpt4_chunk_starts_utf8) == by_regex(pieces), pieces


def test_utf8_lexer_equals_ascii_lexer_on_ascii():
    rng = random.Random(7)
    pieces = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 300))) for _ in range(300)]
    assert lex(pieces, gpt4_chunk_starts_utf8) == lex(pieces) == by_regex(pieces)


def test_decode_utf8_and_code_point_classes():
    text = "aé中😀\x00\U0010ffff"
    leads, points = decode_utf8(np.frombuffer(text.encode(), np.uint8))
    assert points.tolist() == [ord(c) for c in text]
    assert leads.tolist() == [0, 1, 3, 6, 10, 11]
    classes, canon = code_point_tables()
    assert (classes[:128] == BYTE_CLASS[:128]).all() and (canon[:128] == BYTE_CANON[:128]).all()
    assert canon[ord("ſ")] == ord("s") and canon[ord("S")] == ord("s") and canon[ord("x")] == 0


@pytest.mark.shared_data
def test_real_unicode_text_equals_regex(shared_data):
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    docs = [doc for doc in docs if doc and not doc.isascii()]
    assert len(docs) > 50
    assert lex(docs, gpt4_chunk_starts_utf8) == by_regex(docs)

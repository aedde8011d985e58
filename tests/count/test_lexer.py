"""The vectorized lexers (GPT-2, GPT-4, GPT-4o) give exactly the chunks of their `regex` pattern."""

from __future__ import annotations

import functools
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
    gpt2_chunk_starts,
    gpt2_chunk_starts_utf8,
    gpt4_chunk_starts,
    gpt4_chunk_starts_utf8,
    gpt4o_chunk_starts,
)
from parbpe.patterns import PATTERNS, with_digits

# Each lexer: (its pattern, the ASCII lexer, the UTF-8 lexer or None).
LEXERS = {"gpt2": (regex.compile(PATTERNS["gpt2"]), gpt2_chunk_starts, gpt2_chunk_starts_utf8),
          "gpt4": (regex.compile(PATTERNS["gpt4"]), gpt4_chunk_starts, gpt4_chunk_starts_utf8),
          "gpt4o": (regex.compile(PATTERNS["gpt4o"]), gpt4o_chunk_starts, None)}
# The --digits variants: the same lexers told their digit group (gpt2-d3: GPT-2 with \p{N}{1,3}).
for _name, _group in (("gpt2", 1), ("gpt2", 3), ("gpt4", 1), ("gpt4o", 1)):
    _, _ascii, _utf8 = LEXERS[_name]
    LEXERS[f"{_name}-d{_group}"] = (regex.compile(with_digits(PATTERNS[_name], _group)),
                                    functools.partial(_ascii, digit_group=_group),
                                    _utf8 and functools.partial(_utf8, digit_group=_group))
NAMES = sorted(LEXERS)
UTF8_NAMES = [name for name in NAMES if LEXERS[name][2] is not None]
# Random tests: 8 seeds for each pattern, 3 for each --digits variant (its rule differs in digits only).
SEEDED = [(seed, name) for name in NAMES for seed in range(3 if "-d" in name else 8)]
UTF8_SEEDED = [(seed, name) for seed, name in SEEDED if name in UTF8_NAMES]
_REFUSED = regex.compile(r"[\r\n]/")  # what the GPT-4o lexer leaves to regex (its symbol runs take it)


def lexable(name: str, pieces: list[str]) -> list[str]:
    """The pieces the lexer takes (the GPT-4o one refuses "/" right after a line break)."""
    return [p for p in pieces if not _REFUSED.search(p)] if name.startswith("gpt4o") else pieces

# Every byte class, and the letters contractions are made of, in the combinations the rules look at.
TRICKY = (list("aAsSdDmMtTlLvVeErRxZ0129 \t\n\r'.,-_/\x0b\x0c\x1c\x1f\x00\x7f!\"")
          + ["'s", "'ll", "'VE", "'Re", "'d", "'M", "'t", "  ", "   ", "\n\n", " \n", "\n ", " '", ".\n", "\r\n",
             "123456", "1234", " .", "\t.", "''", " 's", "\t's", ".'s", "don't", "'sa", "'llama", " x", "\tx",
             "'ve", "'re", "'lv", "'S", "'LL", "aB", "AbC", "ABc", "x'S", "IT'S", "'lL", "a'Re", "/", "\n/"])

SMALL_CASES = ["a", "'", "'s", "'S", "'ll", "'lL", "'l", "'x", "don't", "DON'T", "x'sy", "'sdmt", " 's", "\t's",
               "..'s", "1's", "\n's", " ", "  ", "   a", "\t\ta", " \n ", "\n\n  x", ".\n\n  \nx", " .\n", "a\r\n\r\nb",
               "12345678", "a1234b", " 1", "\t.", " ...a", "x  ", "\x0b\x0cz", "!!!\n", "a .b", ".a", "..a", "'''s",
               " \t'x", "'LL", "'lv", "'ve'", "'s's", "\n\n's", "  's", "\t 's", "a\t", "\t\ta\t", "'1", "'re'd",
               "camelCase", "HTTPServer", "ABCdef", "it's", "IT'S", "x's's's", "C'T'LL", "don'tknow", "a'lL", "'sa",
               "1's", "x'y", "/x", ".//", "a/b"]


def lex(pieces: list[str], chunk_starts=gpt4_chunk_starts) -> list[str]:
    """Chunks of each piece, split as a string of its own, by the lexer."""
    encoded = [p.encode() for p in pieces]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in encoded])
    bounds = np.append(chunk_starts(data, offsets), len(data)).tolist()
    return [data[a:b].tobytes().decode() for a, b in zip(bounds, bounds[1:])]


def by_regex(pieces: list[str], pattern: regex.Pattern) -> list[str]:
    return [chunk for piece in pieces for chunk in pattern.findall(piece)]


def test_byte_classes_cover_ascii_only():
    assert (BYTE_CLASS[128:] == HIGH).all() and (BYTE_CLASS[:128] != HIGH).all()


@pytest.mark.parametrize("text", SMALL_CASES)
@pytest.mark.parametrize("name", NAMES)
def test_small_cases(text, name):
    pattern, ascii_lexer, utf8_lexer = LEXERS[name]
    assert lex([text], ascii_lexer) == by_regex([text], pattern)
    if utf8_lexer is not None:
        assert lex([text], utf8_lexer) == by_regex([text], pattern)


@pytest.mark.parametrize(("seed", "name"), SEEDED)
def test_random_pieces_equal_regex(seed, name):
    pattern, ascii_lexer, _ = LEXERS[name]
    rng = random.Random(seed)
    for _ in range(300):
        pieces = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 14))) for _ in range(rng.randint(1, 8))]
        pieces = lexable(name, pieces) or ["a"]
        assert lex(pieces, ascii_lexer) == by_regex(pieces, pattern), pieces


@pytest.mark.parametrize("name", NAMES)
def test_long_random_text_equals_regex(name):
    pattern, ascii_lexer, _ = LEXERS[name]
    rng = random.Random(99)
    alphabet = [c for c in TRICKY if "/" not in c] if name.startswith("gpt4o") else TRICKY
    pieces = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 2000))) for _ in range(200)]
    assert lex(pieces, ascii_lexer) == by_regex(pieces, pattern)


@pytest.mark.parametrize("name", NAMES)
def test_rejects_non_ascii(name):
    _, ascii_lexer, utf8_lexer = LEXERS[name]
    with pytest.raises(ValueError, match="ASCII"):
        ascii_lexer(np.frombuffer("é".encode(), np.uint8), np.array([0, 2]))
    assert ascii_lexer(np.zeros(0, np.uint8), np.array([0])).size == 0
    if utf8_lexer is not None:
        assert utf8_lexer(np.zeros(0, np.uint8), np.array([0])).size == 0


def test_gpt4o_lexer_refuses_a_slash_after_a_line_break_within_a_piece():
    with pytest.raises(ValueError, match="line break"):
        lex(["a.\n/b"], gpt4o_chunk_starts)
    assert lex(["a.\n", "/b"], gpt4o_chunk_starts) == ["a", ".\n", "/b"]  # across two pieces it is no matter


@pytest.mark.shared_data
@pytest.mark.parametrize("name", NAMES)
def test_real_text_equals_regex(shared_data, name):
    pattern, ascii_lexer, _ = LEXERS[name]
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    docs = lexable(name, [doc for doc in docs if doc and doc.isascii()])
    assert len(docs) > 100
    assert lex(docs, ascii_lexer) == by_regex(docs, pattern)


# Non-ASCII: letters (with and without case), marks, digits of other scripts, whitespace of other
# kinds, symbols, the long s that `regex` folds to s in contractions, 4-byte characters.
UNICODE = TRICKY + ["é", "É", "ß", "\u0301", "中", "文", "ж", "Ж", "😀", "١", "²", "Ⅻ", "\x85", "\xa0", "\u3000",
                    "\u2028", "\u1680", "ſ", "'ſ", "'ſa", "ǅ", "ʰ", "。", "，", "€", "\U00010400", "𝟙", " é", "'é",
                    "\u200b", "\ufeff", "'\u0301", "s\u0301", "'ｓ", "K", "\u212a"]


@pytest.mark.parametrize(("seed", "name"), UTF8_SEEDED)
def test_random_unicode_pieces_equal_regex(seed, name):
    pattern, _, utf8_lexer = LEXERS[name]
    rng = random.Random(100 + seed)
    for _ in range(300):
        pieces = ["".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 14))) for _ in range(rng.randint(1, 8))]
        assert lex(pieces, utf8_lexer) == by_regex(pieces, pattern), pieces


@pytest.mark.parametrize("name", UTF8_NAMES)
def test_utf8_lexer_equals_ascii_lexer_on_ascii(name):
    pattern, ascii_lexer, utf8_lexer = LEXERS[name]
    rng = random.Random(7)
    pieces = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 300))) for _ in range(300)]
    assert lex(pieces, utf8_lexer) == lex(pieces, ascii_lexer) == by_regex(pieces, pattern)


def test_decode_utf8_and_code_point_classes():
    text = "aé中😀\x00\U0010ffff"
    leads, points = decode_utf8(np.frombuffer(text.encode(), np.uint8))
    assert points.tolist() == [ord(c) for c in text]
    assert leads.tolist() == [0, 1, 3, 6, 10, 11]
    classes, canon = code_point_tables()
    assert (classes[:128] == BYTE_CLASS[:128]).all() and (canon[:128] == BYTE_CANON[:128]).all()
    assert canon[ord("ſ")] == ord("s") and canon[ord("S")] == ord("s") and canon[ord("x")] == 0


@pytest.mark.shared_data
@pytest.mark.parametrize("name", UTF8_NAMES)
def test_real_unicode_text_equals_regex(shared_data, name):
    pattern, _, utf8_lexer = LEXERS[name]
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    docs = [doc for doc in docs if doc and not doc.isascii()]
    assert len(docs) > 50
    assert lex(docs, utf8_lexer) == by_regex(docs, pattern)

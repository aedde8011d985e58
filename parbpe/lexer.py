r"""The GPT-4 split pattern on ASCII text, vectorized with numpy: exactly the chunks `regex` finds.

Used by pieces.py for the distinct ASCII pieces (most of them), where running the pattern once per
piece was the count stage's largest cost. Each byte gets a class (letter, digit, apostrophe, other
symbol, space, other horizontal whitespace, line break); a chunk starts where the pattern's
leftmost-first alternatives end one match and begin the next, which for GPT-4's

    '(?i:[sdmt]|ll|ve|re) | [^\r\n\p{L}\p{N}]?+\p{L}+ | \p{N}{1,3} | ' ?[^\s\p{L}\p{N}]++[\r\n]*'
    | \s*[\r\n] | \s+(?!\S) | \s+

comes down to rules about runs of one kind of character:
- digits: a chunk every three digits from the start of the run;
- symbols (punctuation, the apostrophe, control characters): the run is one chunk with the line
  breaks right after it, taking one space before it; a lone symbol before letters starts the
  letters' chunk instead (a lone apostrophe before s, d, m, t, ll, ve, re — any case — is a
  contraction: the chunk ends after those letters);
- letters: one chunk, unless glued to a whitespace character or lone symbol before them;
- whitespace: up to its last line break is one chunk (minus line breaks a symbol run took); of
  the rest, the last character goes with what follows when something follows, the others are one
  chunk.
Every piece given is matched from its start, as the pattern would match it alone. tests/test_lexer.py
checks the chunks against `regex` on random strings of the characters that matter and on real text.
"""

from __future__ import annotations

import numpy as np
import regex

LETTER, DIGIT, APOSTROPHE, SYMBOL, SPACE, TAB, BREAK, HIGH, EDGE = range(9)


def _byte_classes() -> np.ndarray:
    """The class of each byte, asked of `regex` itself (bytes from 0x80 on are HIGH: not lexed)."""
    classes = np.full(256, HIGH, np.uint8)
    for byte in range(128):
        char = chr(byte)
        if regex.match(r"\p{L}", char):
            classes[byte] = LETTER
        elif regex.match(r"\p{N}", char):
            classes[byte] = DIGIT
        elif char == "'":
            classes[byte] = APOSTROPHE
        elif char == " ":
            classes[byte] = SPACE
        elif char in "\r\n":
            classes[byte] = BREAK
        elif regex.match(r"\s", char):
            classes[byte] = TAB
        else:
            classes[byte] = SYMBOL
    return classes


BYTE_CLASS = _byte_classes()


def _of(*members: int) -> np.ndarray:
    table = np.zeros(EDGE + 1, bool)
    table[list(members)] = True
    return table


IS_SYMBOL = _of(SYMBOL, APOSTROPHE)
IS_WHITESPACE = _of(SPACE, TAB, BREAK)
IS_GLUE = _of(SPACE, TAB)  # whitespace that may lead a letters chunk
_ONE_LETTER = np.zeros(256, bool)
_ONE_LETTER[[ord(c) for c in "sdmt"]] = True
_TWO_LETTERS = {(ord(a), ord(b)) for a, b in ("ll", "ve", "re")}


def gpt4_chunk_starts(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Where each chunk begins (sorted byte positions) in pieces data[offsets[i]:offsets[i + 1]].

    data holds only ASCII bytes; every piece is non-empty and is split as a string of its own.
    A chunk ends where the next begins (or at len(data)).
    """
    n = len(data)
    if n == 0:
        return np.zeros(0, np.int64)
    cls = BYTE_CLASS[data]
    if (cls == HIGH).any():
        raise ValueError("gpt4_chunk_starts takes ASCII text only")
    first = np.zeros(n, bool)
    first[offsets[:-1]] = True
    last = np.zeros(n, bool)
    last[offsets[1:] - 1] = True
    prev = np.empty(n, np.uint8)
    prev[0] = EDGE
    prev[1:] = cls[:-1]
    prev[first] = EDGE
    nxt = np.empty(n, np.uint8)
    nxt[-1] = EDGE
    nxt[:-1] = cls[1:]
    nxt[last] = EDGE
    prev2 = np.empty(n, np.uint8)
    prev2[0] = EDGE
    prev2[1:] = prev[:-1]
    prev2[first] = EDGE
    start = first.copy()

    # Symbol runs begin a chunk, unless a space before them begins it.
    start |= IS_SYMBOL[cls] & ~IS_SYMBOL[prev] & (prev != SPACE)

    # Letter runs begin a chunk, unless glued to the whitespace or lone symbol before them.
    letters_begin = (cls == LETTER) & (prev != LETTER)
    lone_symbol = IS_SYMBOL[prev] & ~IS_SYMBOL[prev2] & (prev2 != SPACE)  # one symbol, a chunk's start
    start |= letters_begin & ~(IS_GLUE[prev] | lone_symbol)
    contraction = letters_begin & lone_symbol & (prev == APOSTROPHE)
    if contraction.any():
        lower = data | 0x20
        one = contraction & _ONE_LETTER[lower]
        at = np.flatnonzero(contraction & ~one & (nxt == LETTER))
        pairs = np.fromiter((pair in _TWO_LETTERS for pair in zip(lower[at].tolist(), lower[at + 1].tolist())),
                            bool, count=len(at))
        for length, where in ((1, np.flatnonzero(one)), (2, at[pairs])):
            after = where + length
            after = after[after < n]
            after = after[(cls[after] == LETTER) & ~first[after]]
            start[after] = True

    # Digit runs: a chunk every three digits.
    digits = np.flatnonzero(cls == DIGIT)
    if len(digits):
        begins = prev[digits] != DIGIT
        run = np.cumsum(begins) - 1
        into = digits - digits[begins][run]
        start[digits[into % 3 == 0]] = True

    spaces = np.flatnonzero(IS_WHITESPACE[cls])
    if len(spaces):
        _whitespace_starts(start, spaces, cls[spaces], prev, nxt)
    return np.flatnonzero(start)


def _whitespace_starts(start: np.ndarray, spaces: np.ndarray, kinds: np.ndarray, prev: np.ndarray,
                       nxt: np.ndarray) -> None:
    """Mark the chunk starts inside runs of whitespace (spaces: all whitespace positions)."""
    begins = ~IS_WHITESPACE[prev[spaces]]
    run_begin = spaces[begins]
    run_end = spaces[~IS_WHITESPACE[nxt[spaces]]] + 1
    run = np.cumsum(begins) - 1

    breaks = kinds == BREAK
    first_other = run_end.copy()  # first position in the run that is not a line break
    at, of_run = spaces[~breaks], run[~breaks]
    if len(at):
        firsts = np.r_[True, of_run[1:] != of_run[:-1]]
        first_other[of_run[firsts]] = at[firsts]
    last_break = np.full(len(run_begin), -1, np.int64)
    at, of_run = spaces[breaks], run[breaks]
    if len(at):
        lasts = np.r_[of_run[1:] != of_run[:-1], True]
        last_break[of_run[lasts]] = at[lasts]

    # Line breaks right after a symbol run belong to its chunk.
    begin = np.where(IS_SYMBOL[prev[run_begin]], first_other, run_begin)
    start[begin[begin < run_end]] = True
    # Up to the last line break is one chunk; what follows it begins the next.
    rest = np.where(last_break >= begin, last_break + 1, begin)
    start[rest[rest < run_end]] = True
    # Before something that is not whitespace, the rest's last character goes with it.
    followed = nxt[run_end - 1] != EDGE
    start[run_end[followed & (run_end - rest >= 2)] - 1] = True

r"""The GPT-4 split pattern, vectorized with numpy: exactly the chunks `regex` finds.

Used by pieces.py for the distinct pieces, where running the pattern once per piece was the count
stage's largest cost. Each character gets a class (letter, digit, apostrophe, other symbol, space,
other horizontal whitespace, line break); a chunk starts where the pattern's leftmost-first
alternatives end one match and begin the next, which for GPT-4's

    '(?i:[sdmt]|ll|ve|re) | [^\r\n\p{L}\p{N}]?+\p{L}+ | \p{N}{1,3} | ' ?[^\s\p{L}\p{N}]++[\r\n]*'
    | \s*[\r\n] | \s+(?!\S) | \s+

comes down to rules about runs of one kind of character:
- digits: a chunk every three digits from the start of the run;
- symbols (punctuation, the apostrophe, marks, control characters: all that is not a letter, digit
  or whitespace): the run is one chunk with the line breaks right after it, taking one space before
  it; a lone symbol before letters starts the letters' chunk instead (a lone apostrophe before s,
  d, m, t, ll, ve, re — any case, as `regex` folds it — is a contraction: the chunk ends after
  those letters);
- letters: one chunk, unless glued to a whitespace character or lone symbol before them;
- whitespace: up to its last line break is one chunk (minus line breaks a symbol run took); of
  the rest, the last character goes with what follows when something follows, the others are one
  chunk.
The classes are `regex`'s own (\p{L}, \p{N}, \s, case folding), read off it for every code point.
ASCII text is classified byte by byte; other text is decoded from UTF-8 first. Every piece given
is matched from its start, as the pattern would match it alone. tests/count/test_lexer.py checks the
chunks against `regex` on random strings of the characters that matter and on real text.
"""

from __future__ import annotations

import functools

import numpy as np
import regex

# Character classes, numbered so that the tests below are comparisons: symbols <= APOSTROPHE, whitespace
# from SPACE to BREAK, whitespace that may lead letters SPACE or TAB.
SYMBOL, APOSTROPHE, SPACE, TAB, BREAK, LETTER, DIGIT, HIGH, EDGE = (np.uint8(code) for code in range(9))


_CONTRACTION_LETTERS = "sdmtlver"
_ONE_LETTER = np.zeros(256, bool)  # contractions: 's 'd 'm 't and 'll 've 're, any case
_ONE_LETTER[[ord(c) for c in "sdmt"]] = True
_TWO_LETTERS = {(ord(a), ord(b)) for a, b in ("ll", "ve", "re")}


def _classes_of(points: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(class, contraction letter: the lower-case one it matches case-insensitively, else 0) of the
    given code points, read off `regex` itself; tables of `size` entries, other entries SYMBOL and 0."""
    text = points.astype(np.uint32).tobytes().decode("utf-32-le")
    classes = np.full(size, SYMBOL, np.uint8)
    canon = np.zeros(size, np.uint8)

    def mark(table: np.ndarray, pattern: str, value: int) -> None:
        for match in regex.finditer(pattern, text):
            start, end = match.span()
            table[points[start:end]] = value

    mark(classes, r"\p{L}+", LETTER)
    mark(classes, r"\p{N}+", DIGIT)
    mark(classes, r"\s+", TAB)
    classes[[ord("'"), ord(" "), ord("\r"), ord("\n")]] = [APOSTROPHE, SPACE, BREAK, BREAK]
    for letter in _CONTRACTION_LETTERS:
        mark(canon, f"(?i:{letter})", ord(letter))
    return classes, canon


# ASCII, byte by byte; bytes from 0x80 on are HIGH (the ASCII lexer refuses them).
BYTE_CLASS, BYTE_CANON = _classes_of(np.arange(128), 256)
BYTE_CLASS[128:] = HIGH


@functools.lru_cache(maxsize=1)
def code_point_tables() -> tuple[np.ndarray, np.ndarray]:
    """(class, contraction letter) of every code point (made once per process)."""
    points = np.arange(0x110000, dtype=np.uint32)
    return _classes_of(points[(points < 0xD800) | (points > 0xDFFF)], 0x110000)


def _is_whitespace(classes: np.ndarray) -> np.ndarray:
    return classes - SPACE < 3


def _is_glue(classes: np.ndarray) -> np.ndarray:
    """Whitespace that may lead a letters chunk (not a line break)."""
    return classes - SPACE < 2


def gpt4_chunk_starts(data: np.ndarray, offsets: np.ndarray, digit_group: int = 3) -> np.ndarray:
    """Where each chunk begins (sorted byte positions) in pieces data[offsets[i]:offsets[i + 1]].

    data holds only ASCII bytes; every piece is non-empty and is split as a string of its own.
    A chunk ends where the next begins (or at len(data)). digit_group: digits a chunk at most (3, as
    GPT-4's \\p{N}{1,3}; 1 for the --digits 1 variant).
    """
    if len(data) == 0:
        return np.zeros(0, np.int64)
    cls = BYTE_CLASS[data]
    if (cls == HIGH).any():
        raise ValueError("gpt4_chunk_starts takes ASCII text only (gpt4_chunk_starts_utf8 takes any)")
    return _chunk_starts(cls, BYTE_CANON[data], offsets, digit_group)


def gpt4_chunk_starts_utf8(data: np.ndarray, offsets: np.ndarray, digit_group: int = 3) -> np.ndarray:
    """gpt4_chunk_starts for UTF-8 text (valid, as pyarrow strings are): byte positions again."""
    if len(data) == 0:
        return np.zeros(0, np.int64)
    leads, points = decode_utf8(data)
    classes, canon = code_point_tables()
    starts = _chunk_starts(classes[points], canon[points], np.searchsorted(leads, offsets), digit_group)
    return leads[starts]


def gpt2_chunk_starts(data: np.ndarray, offsets: np.ndarray, digit_group: int | None = None) -> np.ndarray:
    """gpt4_chunk_starts for the GPT-2 pattern (ASCII pieces); digit_group None: a run of digits is
    one chunk (GPT-2's \\p{N}+), else at most that many digits a chunk (the --digits variants)."""
    if len(data) == 0:
        return np.zeros(0, np.int64)
    cls = BYTE_CLASS[data]
    if (cls == HIGH).any():
        raise ValueError("gpt2_chunk_starts takes ASCII text only (gpt2_chunk_starts_utf8 takes any)")
    return _gpt2_chunk_starts(cls, data, offsets, digit_group)


def gpt2_chunk_starts_utf8(data: np.ndarray, offsets: np.ndarray, digit_group: int | None = None) -> np.ndarray:
    """gpt2_chunk_starts for UTF-8 text (valid, as pyarrow strings are): byte positions again."""
    if len(data) == 0:
        return np.zeros(0, np.int64)
    leads, points = decode_utf8(data)
    classes, _ = code_point_tables()
    ascii_points = np.where(points < 128, points, 0).astype(np.uint8)  # contractions are ASCII letters only
    starts = _gpt2_chunk_starts(classes[points], ascii_points, np.searchsorted(leads, offsets), digit_group)
    return leads[starts]


# The GPT-2 contraction letters, exactly (its pattern has no case folding): 's 'd 'm 't and 'll 've 're.
_GPT2_ONE = np.zeros(256, bool)
_GPT2_ONE[[ord(c) for c in "sdmt"]] = True
_GPT2_FIRST = np.zeros(256, np.uint8)  # the second letter of a two-letter contraction, by its first
_GPT2_FIRST[[ord("l"), ord("v"), ord("r")]] = [ord("l"), ord("e"), ord("e")]
# Each class's kind of run: symbols (the apostrophe too), whitespace, letters, digits; EDGE apart.
_RUN_KIND = np.array([0, 0, 1, 1, 1, 2, 3, 5, 4], np.uint8)


def _gpt2_chunk_starts(cls: np.ndarray, chars: np.ndarray, offsets: np.ndarray,
                       digit_group: int | None = None) -> np.ndarray:
    r"""Chunk starts (character positions) of GPT-2's '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+
    | ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, from each character's class and, for ASCII letters, the
    letter itself (chars: 0 for others). The rules: a run of letters, of digits or of symbols (the
    apostrophe among them) is one chunk, taking one space right before it; a run of whitespace is
    one chunk, but for its last character when something follows (that one is a chunk of its own,
    or, a space, goes with what follows); an apostrophe that begins a match (at a piece's start,
    or after a letter, a digit, or whitespace other than a space) followed by s, d, m, t or ll,
    ve, re is a chunk of its own. With a digit_group, a run of digits is cut every digit_group
    digits after its first chunk (which keeps the space before it).
    """
    n = len(cls)
    firsts, lasts = offsets[:-1], offsets[1:] - 1
    prev = np.empty(n, np.uint8)
    prev[1:] = cls[:-1]
    prev[firsts] = EDGE
    nxt = np.empty(n, np.uint8)
    nxt[:-1] = cls[1:]
    nxt[lasts] = EDGE
    kind, prev_kind, next_kind = _RUN_KIND[cls], _RUN_KIND[prev], _RUN_KIND[nxt]
    whitespace = kind == 1
    start = np.zeros(n, bool)
    start[firsts] = True
    # Runs begin a chunk, unless a space right before begins it (that space: see whitespace below).
    start |= (kind != prev_kind) & (prev != SPACE)
    # Whitespace before something that is not whitespace: its last character begins a chunk.
    start |= whitespace & (next_kind != 1) & (nxt != EDGE)
    begins_match = (cls == APOSTROPHE) & ((prev == EDGE) | (prev_kind >= 2) | (prev == TAB) | (prev == BREAK))
    at = np.flatnonzero(begins_match & (nxt == LETTER))
    if len(at):
        first = chars[at + 1]
        one = _GPT2_ONE[first]
        two = np.zeros(len(at), bool)
        room = ~one & (_GPT2_FIRST[first] != 0) & (nxt[at + 1] == LETTER)
        two[room] = chars[at[room] + 2] == _GPT2_FIRST[first[room]]
        for length, where in ((2, at[one]), (3, at[two])):
            start[where + 1] = False  # the contraction's letters go with the apostrophe
            after = where + length
            after = after[(after < n)]
            after = after[prev[after] != EDGE]  # still in the piece
            start[after] = True
    if digit_group is not None:
        mark_digit_groups(start, cls, prev, DIGIT, digit_group, first=False)
    return np.flatnonzero(start)


def decode_utf8(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(byte position, code point) of every character of UTF-8 bytes."""
    leads = np.flatnonzero((data & 0xC0) != 0x80)
    last = len(data) - 1
    first = data[leads].astype(np.uint32)

    points = first.copy()
    wide = np.flatnonzero(first >= 0x80)  # lead bytes of multi-byte characters
    lead, at = first[wide], leads[wide]
    t1, t2, t3 = (data[np.minimum(at + k, last)].astype(np.uint32) & 0x3F for k in (1, 2, 3))
    points[wide] = np.where(lead < 0xE0, ((lead & 0x1F) << 6) | t1,
                            np.where(lead < 0xF0, ((lead & 0x0F) << 12) | (t1 << 6) | t2,
                                     ((lead & 0x07) << 18) | (t1 << 12) | (t2 << 6) | t3))
    return leads, np.minimum(points, 0x10FFFF)


def _neighbours(cls: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(class before, class after, class two before: EDGE across a piece's bounds; chunk starts with
    each piece's first character marked) for pieces from offsets."""
    n = len(cls)
    firsts, lasts = offsets[:-1], offsets[1:] - 1
    prev = np.empty(n, np.uint8)  # the class before each character in its piece, EDGE at a piece's start
    prev[1:] = cls[:-1]
    prev[firsts] = EDGE
    nxt = np.empty(n, np.uint8)
    nxt[:-1] = cls[1:]
    nxt[lasts] = EDGE
    prev2 = np.empty(n, np.uint8)
    prev2[1:] = prev[:-1]
    prev2[firsts] = EDGE
    start = np.zeros(n, bool)
    start[firsts] = True
    return prev, nxt, prev2, start


def _contractions(canon: np.ndarray, nxt: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of the letters at positions `at`: those that begin s, d, m, t (as `regex` folds case), and
    those that begin ll, ve, re (their next character a letter of the same piece)."""
    one = _ONE_LETTER[canon[at]]
    maybe = at[~one & (nxt[at] == LETTER)]
    firsts, seconds = canon[maybe].tolist(), canon[maybe + 1].tolist()
    two = np.zeros(len(at), bool)
    two[np.flatnonzero(~one & (nxt[at] == LETTER))] = np.fromiter(
        (pair in _TWO_LETTERS for pair in zip(firsts, seconds)), bool, count=len(maybe))
    return one, two


def _chunk_starts(cls: np.ndarray, canon: np.ndarray, offsets: np.ndarray, digit_group: int = 3) -> np.ndarray:
    """Chunk starts (character positions) from each character's class and contraction letter."""
    n = len(cls)
    prev, nxt, prev2, start = _neighbours(cls, offsets)

    # Symbol runs begin a chunk, unless a space before them begins it.
    start |= (cls <= APOSTROPHE) & (prev > SPACE)

    # Letter runs begin a chunk, unless glued to the whitespace or lone symbol before them.
    letters_begin = (cls == LETTER) & (prev != LETTER)
    lone_symbol = (prev <= APOSTROPHE) & (prev2 > SPACE)  # one symbol that begins a chunk
    start |= letters_begin & ~(_is_glue(prev) | lone_symbol)
    contraction = np.flatnonzero(letters_begin & lone_symbol & (prev == APOSTROPHE))
    if len(contraction):
        one, two = _contractions(canon, nxt, contraction)
        for length, where in ((1, contraction[one]), (2, contraction[two])):
            after = where + length
            after = after[after < n]
            after = after[(cls[after] == LETTER) & (prev[after] == LETTER)]  # the letters go on in the piece
            start[after] = True

    mark_digit_groups(start, cls, prev, DIGIT, digit_group)  # digit runs: a chunk every three digits
    _whitespace_starts(start, cls, prev, nxt)
    return np.flatnonzero(start)


# ASCII upper-case letters (\p{Lu}, \p{Lt}: what GPT-4o's words begin with), read off `regex`.
BYTE_UPPER = np.zeros(256, bool)
BYTE_UPPER[[c for c in range(128) if regex.fullmatch(r"[\p{Lu}\p{Lt}]", chr(c))]] = True
_SLASH = ord("/")


def gpt4o_chunk_starts(data: np.ndarray, offsets: np.ndarray, digit_group: int = 3) -> np.ndarray:
    r"""gpt4_chunk_starts for the GPT-4o pattern, ASCII pieces holding no "/" right after a line
    break (which its symbol runs take, as [\r\n/]*; the caller leaves those to `regex`).

    In ASCII, GPT-4o splits as GPT-4 but for three rules: a run of letters is cut before an
    upper-case letter that follows a lower-case one (a word is [A-Z]*[a-z]+ or [A-Z]+); an
    apostrophe right after a word followed by s, t, m, d, re, ve or ll (any case) ends that word
    (GPT-4 makes it a chunk of its own); and an apostrophe that begins a match glues to the
    letters after it like any lone symbol.
    """
    if len(data) == 0:
        return np.zeros(0, np.int64)
    cls = BYTE_CLASS[data]
    if (cls == HIGH).any():
        raise ValueError("gpt4o_chunk_starts takes ASCII text only")
    slash_after_break = np.flatnonzero((cls[:-1] == BREAK) & (data[1:] == _SLASH)) + 1
    if np.setdiff1d(slash_after_break, offsets).size:  # within a piece
        raise ValueError('gpt4o_chunk_starts takes no "/" right after a line break')
    return _gpt4o_chunk_starts(cls, BYTE_CANON[data], BYTE_UPPER[data], offsets, digit_group)


def _drop_chained(apostrophes: np.ndarray, one: np.ndarray, two: np.ndarray) -> None:
    """A contraction ends its match: an apostrophe right after one's letters begins the next match
    (a lone symbol), so it is no contraction, and one right after that may be again ("x's's's" is
    x's, 's's). Settled left to right along such chains (rare), in place."""
    valid = one | two
    ends = apostrophes + 1 + one + 2 * two  # just past each contraction
    chained = np.flatnonzero(apostrophes[1:] == ends[:-1]) + 1
    for k in chained.tolist():
        if valid[k - 1] and valid[k]:
            one[k] = two[k] = valid[k] = False


def _gpt4o_chunk_starts(cls: np.ndarray, canon: np.ndarray, upper: np.ndarray, offsets: np.ndarray,
                        digit_group: int = 3) -> np.ndarray:
    """Chunk starts (character positions) of ASCII pieces for GPT-4o (see gpt4o_chunk_starts)."""
    n = len(cls)
    prev, nxt, prev2, start = _neighbours(cls, offsets)
    start |= (cls <= APOSTROPHE) & (prev > SPACE)  # symbol runs, as GPT-4
    letters_begin = (cls == LETTER) & (prev != LETTER)
    lone_symbol = (prev <= APOSTROPHE) & (prev2 > SPACE)
    start |= letters_begin & ~(_is_glue(prev) | lone_symbol)
    lower = (cls == LETTER) & ~upper
    start[1:] |= upper[1:] & lower[:-1] & (prev[1:] == LETTER)  # a word ends before an upper-case letter
    apostrophes = np.flatnonzero((cls == APOSTROPHE) & (prev == LETTER) & (nxt == LETTER))
    if len(apostrophes):
        one, two = _contractions(canon, nxt, apostrophes + 1)
        _drop_chained(apostrophes, one, two)
        for length, where in ((1, apostrophes[one]), (2, apostrophes[two])):
            start[where] = False  # the apostrophe and its letters end the word before
            for inside in range(1, length + 1):
                start[where + inside] = False
            after = where + length + 1
            after = after[after < n]
            start[after[prev[after] != EDGE]] = True
    mark_digit_groups(start, cls, prev, DIGIT, digit_group)
    _whitespace_starts(start, cls, prev, nxt)
    return np.flatnonzero(start)


def mark_digit_groups(start: np.ndarray, cls: np.ndarray, prev: np.ndarray, digit: int, group: int = 3,
                      first: bool = True) -> None:
    """Mark a chunk start at every `group`-th digit of each run of digits (class `digit`), from the
    run's first: the \\p{N}{1,3} of the GPT-4 and superword patterns (group 1: \\p{N}{1}). first False
    leaves the run's first digit as it is (GPT-2: a space before it begins its chunk)."""
    digits = np.flatnonzero(cls == digit)
    if len(digits):
        begins = prev[digits] != digit
        run = np.cumsum(begins) - 1
        into = digits - digits[begins][run]
        at = into % group == 0
        if not first:
            at &= into > 0
        start[digits[at]] = True


def _whitespace_starts(start: np.ndarray, cls: np.ndarray, prev: np.ndarray, nxt: np.ndarray) -> None:
    """Mark the chunk starts in runs of whitespace."""
    whitespace = _is_whitespace(cls)
    # A run begins a chunk, unless it begins with line breaks right after symbols (their chunk takes them).
    run_begins = whitespace & ~_is_whitespace(prev)
    start |= run_begins & ~((cls == BREAK) & (prev <= APOSTROPHE))
    # Before something that is not whitespace, the last of two or more spaces or tabs goes with it.
    start |= _is_glue(cls) & _is_glue(prev) & (nxt <= DIGIT) & ~_is_whitespace(nxt)
    # A space or tab right after a line break begins a chunk if no line break follows in the run
    # (\s*[\r\n] ends at the run's last line break), or if only line breaks a symbol run took come before it.
    after_break = np.flatnonzero(_is_glue(cls) & (prev == BREAK))
    if len(after_break) == 0:
        return
    breaks = np.flatnonzero(cls == BREAK)
    run_ends = np.flatnonzero(whitespace & ~_is_whitespace(nxt))
    run_begin = np.flatnonzero(run_begins)
    run_begin = run_begin[np.searchsorted(run_begin, after_break, "right") - 1]
    later = np.searchsorted(breaks, after_break)
    next_break = np.append(breaks, len(cls))[later]
    last_of_run = run_ends[np.searchsorted(run_ends, after_break)]
    only_breaks_before = later - np.searchsorted(breaks, run_begin) == after_break - run_begin
    taken = only_breaks_before & (prev[run_begin] <= APOSTROPHE)
    start[after_break[(next_break > last_of_run) | taken]] = True

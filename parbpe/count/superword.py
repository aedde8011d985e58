r"""SuperBPE's superword split, line by line, vectorized with numpy: exactly the chunks `regex` finds
with patterns.SUPERWORD_LINES_PATTERN.

The split is the SuperBPE authors' pattern \p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S) used
as an isolating split, each line (with its "\n") on its own. A chunk starts:
- at a text's start and after every "\n";
- digits: every three digits from the start of a run, and after the run;
- a run of two or more symbols (neither letter, digit nor whitespace) starts one, taking one space
  before it; it ends after the carriage returns that follow it and one "\n" after them;
- a run of spaces: before whitespace or the text's end, the run is one chunk (and what follows
  starts one); before two symbols, all spaces but the last are one chunk (the last goes with the
  symbols); before anything else, two or more spaces are a chunk of all but the last, and the last
  starts the text that follows;
- everything else (letters, other whitespace, a lone symbol, a single space before a word) runs on
  in the chunk it is in.
After a symbol run the pattern also takes "/" following a carriage return; texts holding "\r/" take
the `regex` path instead (SuperwordCounter's caller checks). tests/count/test_superword.py checks
the chunks against `regex` on random strings of the characters that matter and on real text.
"""

from __future__ import annotations

import functools

import numpy as np

from . import chunking
from .lexer import BREAK, DIGIT, LETTER, SPACE, TAB, code_point_tables, decode_utf8, mark_digit_groups
from .pieces import BatchCounter, _buffers

LETTER_, DIGIT_, SYMBOL_, SPACE_, CR_, NL_, OTHER_WS_, EDGE_ = (np.uint8(code) for code in range(8))
_WINDOW = 4 << 20  # bytes of text split at a time (bounds the temporary arrays)


@functools.lru_cache(maxsize=1)
def _class_table() -> np.ndarray:
    """The superword class of every code point, from the GPT-4 lexer's (regex's own) classes."""
    classes, _ = code_point_tables()
    table = np.full(len(classes), SYMBOL_, np.uint8)
    table[classes == LETTER] = LETTER_
    table[classes == DIGIT] = DIGIT_
    table[(classes == TAB) | (classes == BREAK) | (classes == SPACE)] = OTHER_WS_
    table[[ord(" "), ord("\r"), ord("\n")]] = [SPACE_, CR_, NL_]
    return table


def superword_chunk_starts(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Where each chunk begins (sorted byte positions) in the texts data[offsets[i]:offsets[i + 1]]
    (UTF-8, as pyarrow strings are; none holding "\r/"). A chunk ends where the next begins."""
    if len(data) == 0:
        return np.zeros(0, np.int64)
    if int(data.max()) < 0x80:
        return _starts(_class_table()[data], offsets)
    leads, points = decode_utf8(data)
    return leads[_starts(_class_table()[points], np.searchsorted(leads, offsets))]


def _starts(cls: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Chunk starts (character positions) from each character's class; texts from offsets."""
    n = len(cls)
    firsts = offsets[:-1][offsets[:-1] < offsets[1:]]  # non-empty texts only
    lasts = offsets[1:][offsets[:-1] < offsets[1:]] - 1
    prev = np.empty(n, np.uint8)
    prev[1:] = cls[:-1]
    prev[firsts] = EDGE_
    nxt = np.empty(n, np.uint8)
    nxt[:-1] = cls[1:]
    nxt[lasts] = EDGE_
    start = np.zeros(n, bool)
    start[firsts] = True
    start |= prev == NL_

    # Digits: a chunk every three from the run's start, and one after the run.
    mark_digit_groups(start, cls, prev, DIGIT_)
    start |= (prev == DIGIT_) & (cls != DIGIT_)

    # Symbol runs of two or more: from the space before them, to the carriage returns and one "\n" after.
    symbol = cls == SYMBOL_
    prev_symbol, next_symbol = prev == SYMBOL_, nxt == SYMBOL_
    begins = np.flatnonzero(symbol & ~prev_symbol & next_symbol)
    if len(begins):
        start[begins - (prev[begins] == SPACE_)] = True
        after = np.flatnonzero(symbol & prev_symbol & ~next_symbol) + 1  # just past each run
        edge = np.zeros(n + 1, bool)
        edge[lasts + 1] = True  # a text's end stops the carriage returns
        stops = np.flatnonzero(np.append(cls != CR_, True) | edge)
        end = stops[np.searchsorted(stops, after)]
        newline = (end < n) & ~edge[end]
        newline[newline] = cls[end[newline]] == NL_
        end = end + newline
        start[end[end < n]] = True

    # Runs of spaces.
    space = cls == SPACE_
    run_first = np.flatnonzero(space & (prev != SPACE_))
    if len(run_first):
        run_last = np.flatnonzero(space & (nxt != SPACE_))
        after = nxt[run_last]
        after2 = np.full(len(run_last), EDGE_)
        inside = after != EDGE_
        after2[inside] = nxt[run_last[inside] + 1]
        several = run_last > run_first
        to_whitespace = (after == EDGE_) | (after == CR_) | (after == NL_) | (after == OTHER_WS_)
        start[run_first[to_whitespace | several]] = True
        follows = run_last[to_whitespace & inside] + 1
        start[follows] = True
        to_symbols = (after == SYMBOL_) & (after2 == SYMBOL_)
        start[run_last[~to_whitespace & ~to_symbols & several]] = True
    return np.flatnonzero(start)


class SuperwordCounter(BatchCounter):
    """Counts of the superword chunks of many texts (the interface of pieces.PieceCounter)."""

    compact_rows = 2_000_000
    rows_repeat = True  # (chunk_counts)

    def __init__(self, use_jit: bool = False) -> None:
        super().__init__(hashed=use_jit)
        self._use_jit = use_jit  # the numba lexer finds the chunks (chunking.superword_starts)

    def add(self, texts) -> None:
        """Add the chunks of texts (a string array), a window of texts at a time."""
        offsets, data = _buffers(texts)
        for first, last in chunking.document_spans(offsets, _WINDOW):
            part = data[offsets[first]:offsets[last]]
            if len(part):
                self._held.add(part, self._bounds(part, offsets[first:last + 1] - offsets[first]))
        self._added()

    def _bounds(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Bounds of the chunks of the texts data[offsets[i]:offsets[i + 1]]: numpy's, or the numba lexer's."""
        if self._use_jit:
            bounds = chunking.chunk_bounds(data, offsets, chunking.SUPERWORD, 0, chunking.char_tables())
            return bounds.astype(np.int64)
        return np.append(superword_chunk_starts(data, offsets), len(data))

    def chunk_counts(self):
        """The chunk counts of everything added (and the counter is emptied); the long chunks (over 16
        bytes) not summed here but in the reduce: most are seen once (realmix: 1.85 M distinct in
        2.17 M), and hashing them here too cost each worker a large share of its finish."""
        return self._take().table(count_long=False)

r"""Chunk bounds of documents by the kernels of kernels/lexer.py, for the built-in split patterns
(GPT-2, GPT-4, GPT-4o and their --digits variants, and the superword split).

Characters get their classes from a table of every code point read off `regex` itself (\p{L}, \p{N},
\s, GPT-4o's letter classes, case folding for contractions), built once per process (fork: once, in
the parent) and kept in a cache file. The numpy lexers of lexer.py stay the reference and run where
numba is absent or the JIT is off; tests/count/test_jit_count.py checks the kernels against
`regex.findall`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import unicodedata
import zipfile
from collections.abc import Iterator

import numpy as np
import regex

from .. import jit
from ..kernels import lexer as lexing
from ..patterns import SUPERWORD_PATTERN, digit_groups
from .key_tables import KeyCounts
from .piece_keyer import PieceKeyer, keyed_pieces, spell

KINDS = {"gpt2": 0, "gpt4": 1, "gpt4o": 2}
SUPERWORD = 3  # the superword split line by line (its own kind: no --digits variants)
NO_GROUP = 1 << 30  # GPT-2's \p{N}+: no bound on the digits of a chunk
_FOLDED = "sdmtlver"  # the letters of contractions, as (?i:...) matches them


@functools.lru_cache(maxsize=1)
def char_tables() -> tuple[np.ndarray, np.ndarray]:
    """(class bits, contraction letter: the lower-case ASCII letter it matches case-insensitively,
    else 0) of every code point, read off `regex` (slow: a pass over every code point) and kept in a
    cache file named after `regex`'s and Unicode's versions (quick to load), once per process."""
    path = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "parbpe",
                        f"char-classes-v2-regex{regex.__version__}-unicode{unicodedata.unidata_version}.npz")
    try:
        with np.load(path) as saved:
            both, digest = saved["tables"], saved["digest"].tobytes()
        if both.shape == (2, 0x110000) and both.dtype == np.uint8 and digest == _digest(both):
            return both[0], both[1]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # missing, garbage or changed: built again
        pass
    both = np.stack(_read_char_tables())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "wb") as f:
            np.savez(f, tables=both, digest=np.frombuffer(_digest(both), dtype=np.uint8))
        os.replace(temporary, path)
    except OSError:  # a read-only home or a full disk: build the tables in each process
        pass
    return both[0], both[1]


def _digest(tables: np.ndarray) -> bytes:
    """The tables' BLAKE2b: a cache file whose bytes changed after it was written is not used."""
    return hashlib.blake2b(np.ascontiguousarray(tables).tobytes(), digest_size=16).digest()


def _read_char_tables() -> tuple[np.ndarray, np.ndarray]:
    points = np.arange(0x110000, dtype=np.uint32)
    points = points[(points < 0xD800) | (points > 0xDFFF)]
    text = points.tobytes().decode("utf-32-le")
    bits = np.zeros(0x110000, np.uint8)
    canon = np.zeros(0x110000, np.uint8)
    for pattern, bit in ((r"\p{L}+", lexing.LETTER), (r"\p{N}+", lexing.NUMBER), (r"\s+", lexing.SPACE),
                         (r"[\r\n]+", lexing.BREAK), (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+", lexing.UPPER),
                         (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]+", lexing.LOWER)):
        for match in regex.finditer(pattern, text):
            bits[points[match.start():match.end()]] |= bit
    for letter in _FOLDED:
        for match in regex.finditer(f"(?i:{letter})+", text):
            canon[points[match.start():match.end()]] = ord(letter)
    return bits, canon


def kind_of(pattern: str) -> tuple[int, int] | None:
    """(lexer kind, digits a chunk at most) of a built-in pattern, --digits variant or the superword
    split (the pattern a run names: SUPERWORD_PATTERN, counted line by line), else None."""
    if pattern == SUPERWORD_PATTERN:
        return SUPERWORD, 3
    known = digit_groups(pattern)
    if known is None:
        return None
    name, group = known
    if group is None:
        group = NO_GROUP if name == "gpt2" else 3
    return KINDS[name], group


@functools.lru_cache(maxsize=1)
def superword_classes() -> np.ndarray:
    """The superword class (kernels/lexer.py's SW_LETTER ... SW_OTHER_WS) of every code point, from
    char_tables()'s bits: a letter, else a number, else whitespace (space, carriage return and line
    feed each their own), else a symbol."""
    bits = char_tables()[0]
    classes = np.full(len(bits), lexing.SW_SYMBOL, np.uint8)
    classes[bits & lexing.SPACE != 0] = lexing.SW_OTHER_WS
    classes[[ord(" "), ord("\r"), ord("\n")]] = [lexing.SW_SPACE, lexing.SW_CR, lexing.SW_NL]
    classes[bits & lexing.NUMBER != 0] = lexing.SW_DIGIT
    classes[bits & lexing.LETTER != 0] = lexing.SW_LETTER
    return classes


def document_spans(offsets: np.ndarray, size: int) -> Iterator[tuple[int, int]]:
    """(first, end) of consecutive runs of the documents data[offsets[d]:offsets[d + 1]], each run
    about `size` bytes at most (a longer document is a run of its own)."""
    first = 0
    while first < len(offsets) - 1:
        last = max(int(np.searchsorted(offsets, offsets[first] + size, "right")) - 1, first + 1)
        yield first, last
        first = last


# Bytes of documents a chunk_bounds call decodes and splits at a time (a longer document whole).
CHUNK_BOUNDS_BYTES = 1 << 19


def chunk_bounds(data: np.ndarray, docs: np.ndarray, kind: int, group: int,
                 tables: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Bounds (int32, from 0 to len(data)) of the chunks of the UTF-8 documents data[docs[d]:docs[d + 1]],
    split by the pattern `kind` (KINDS) with `group` digits a chunk at most; tables: char_tables().

    The documents are decoded and split CHUNK_BOUNDS_BYTES of them at a time, into the same buffers
    (chunks never cross documents). Buffers the size of a whole call (13 bytes a byte of text: the
    superword split's 4 MB windows) were handed back to the OS when freed and mapped afresh by the
    next call: its page faults made the split much slower."""
    size = len(data)
    spans = list(document_spans(docs, CHUNK_BOUNDS_BYTES))
    widest = max((int(docs[b] - docs[a]) for a, b in spans), default=0)
    pos = np.empty(widest + 1, np.int32)  # (a pyarrow string array's bytes fit in int32)
    char_docs = np.empty(max((b - a + 1 for a, b in spans), default=1), np.int64)
    starts = np.empty(widest, np.int32)
    if kind == SUPERWORD:  # the classes alone (superword_decode), and the marks kept clear between calls
        cls, marks, classes = np.empty(widest + 2, np.uint8), np.zeros(widest, np.bool_), superword_classes()
    else:
        bits, low, folded = (np.empty(widest, np.uint8) for _ in range(3))
    parts = []
    for a, b in spans:
        lo, n = int(docs[a]), int(docs[b] - docs[a])
        part_docs = char_docs[:b - a + 1]
        if kind == SUPERWORD:
            chars = lexing.superword_decode(data[lo:lo + n], docs[a:b + 1] - lo, classes, cls, pos[:n + 1],
                                            part_docs)
            found = lexing.superword_starts(cls, chars, part_docs, marks, starts)
        else:
            chars = lexing.decode(data[lo:lo + n], docs[a:b + 1] - lo, tables[0], tables[1], bits[:n], low[:n],
                           folded[:n], pos[:n + 1], part_docs)
            found = chunk_starts(kind, group, bits[:n], low[:n], folded[:n], part_docs, starts[:chars])
        parts.append(pos[starts[:found]] + np.int32(lo))
    parts.append(np.array([size], np.int32))
    return np.concatenate(parts)


def chunk_starts(kind: int, group: int, bits, low, folded, char_docs, out) -> int:
    """Chunk starts of the pattern `kind` (KINDS but the superword split, which chunk_bounds finds from
    superword_decode's classes) into out; returns how many (the JIT's or plain Python)."""
    if kind == 0:
        return lexing.gpt2_starts(bits, low, char_docs, group, out)
    if kind == 1:
        return lexing.gpt4_starts(bits, low, folded, char_docs, group, out)
    return lexing.gpt4o_starts(bits, low, folded, char_docs, group, out)


def uses_jit(pattern: str, mode: str | None = None) -> bool:
    """Whether the numba lexer splits pattern's pieces: a built-in pattern, the mode (the run's, as its
    config carries it; else this process's) not off, numba installed; said without importing numba.
    Under auto, the count stage chooses numpy below jit.COUNT_MIN_BYTES of text (pipeline/count.py::jit_fits)
    by giving its workers a config whose mode is off."""
    if kind_of(pattern) is None:
        return False
    if mode is None:
        return jit.enabled()
    if mode == "on":
        jit.require()
    return mode != "off" and jit.installed()


def prepare(pattern: str, mode: str | None = None) -> None:
    """When the numba lexer splits pattern: load numba, the character tables and the kernels in this
    process, so that workers forked from it find them ready, each for the argument types the workers
    pass: a kernel's other types are another load from the cache, slower in each worker than once
    here. mode: the run's (uses_jit)."""
    if uses_jit(pattern, mode):
        load_kernels(pattern)


def load_kernels(pattern: str) -> None:
    """The counting kernels for pattern (a built-in one), each called once on a few bytes."""
    data = np.frombuffer("It's 12 x\n\n  é's".encode(), np.uint8).copy()
    docs = np.array([0, len(data)], np.int64)
    kind, group = kind_of(pattern)
    bounds = chunk_bounds(data, docs, kind, group, char_tables())
    for width in (1, 2):  # the counts' hash tables (every kind)
        KeyCounts(width).add((np.ones(1, np.uint64),) * width)
    if kind != SUPERWORD:  # the pieces' kernels too: cutting and keying, spelling and splitting the
        keyed_pieces(docs, data)  # distinct pieces, keying the split's chunks
        spell(np.ones(1, np.uint64))
        PieceKeyer().chunks(data, docs, bounds, np.ones(1, np.int64))  # (any counts: one signature)

r"""Fast, exact pre-tokenization: count distinct pieces at C speed, run the pattern once per piece.

Applying the split pattern with `regex` to every document is the count stage's inner loop (about
5 MB/s per core here). Text repeats, so instead: cut each document into small pieces at places
where no match of a built-in pattern can cross, count the distinct pieces with pyarrow (C++), and
run the pattern once per distinct piece, multiplying its chunks by the piece's count.

The cuts (pyarrow's RE2, all at C speed) fall where the character before is not whitespace:
- before a space;
- between an ASCII letter or digit and an ASCII punctuation character other than the apostrophe,
  or a line break (\n, \r).
There every built-in pattern ends one match and starts the next (no alternative continues past a
non-space character into a space, or from a letter or digit into such punctuation or a line
break: only a run of punctuation takes trailing line breaks); the text after the cut
is matched exactly as before (no pattern looks behind); and the text before it ends in a character
that is not whitespace, where the only lookahead, (?!\S) after whitespace, is never tried.
tests/test_pieces.py checks the counts against the plain path on random Unicode built from the
characters that matter, and on real text. Documents holding the marker character (NUL) or a
special token, and custom patterns, take the plain path.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .patterns import pattern_name

MARK = "\x00"
# Exactly the characters the `regex` module's \s matches (tests check all code points), in RE2 syntax.
WHITESPACE_CLASS = r"\t\n\x{0b}\x{0c}\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
_OTHER_WHITESPACE = WHITESPACE_CLASS.replace(" ", "").replace("\\n", "")
ASCII_PUNCT_NO_APOSTROPHE = r"!-&(-/:-@\[-`{-~"

# Pieces that are one chunk as they stand (a word with an optional leading space) skip the pattern.
_ONE_CHUNK = {
    "gpt2": r"^ ?[A-Za-z]+$",
    "gpt4": r"^ ?[A-Za-z]+$",
    "gpt4o": r"^ ?(?:[A-Z]*[a-z]+|[A-Z]+)$",
}

# string, not large_string: pyarrow groups 32-bit-offset strings about 3x faster. Tables stay far
# below 2 GB of text each (a worker's held counts are capped by MAX_WORKER_DATA in memory.py).
SCHEMA = pa.schema([("chunk", pa.string()), ("count", pa.int64())])
_CONVERT_BATCH = 200_000  # distinct pieces run through the pattern per batch (bounds the Python lists)


def supports(pattern: str) -> bool:
    """True if the piece cuts are proven for this pattern (the built-in ones)."""
    return pattern_name(pattern) in _ONE_CHUNK


def cut_pieces(texts: pa.Array) -> pa.Array:
    """All pieces of texts (none may hold MARK), as one flat string array."""
    marked = pc.replace_substring(texts, pattern=" ", replacement=MARK + " ")
    # No cut where the character before the space is whitespace (a space itself included). Plain
    # replacements for the common two; one regex for the rest, whose class RE2 skips through fast.
    marked = pc.replace_substring(marked, pattern=" " + MARK, replacement=" ")
    marked = pc.replace_substring(marked, pattern="\n" + MARK, replacement="\n")
    marked = pc.replace_substring_regex(marked, pattern=f"([{_OTHER_WHITESPACE}]){MARK}", replacement="\\1")
    marked = pc.replace_substring_regex(marked, pattern=f"([A-Za-z0-9])([{ASCII_PUNCT_NO_APOSTROPHE}\\n\\r])",
                                        replacement="\\1" + MARK + "\\2")
    pieces = pc.list_flatten(pc.split_pattern(marked, pattern=MARK))
    return pieces.filter(pc.not_equal(pc.binary_length(pieces), 0))


def count_table(values: pa.Array, counts: pa.Array | None = None) -> pa.Table:
    """Sum counts per distinct value (each value counts once if counts is None)."""
    values = values.cast(pa.string())
    if counts is None:
        found = pc.value_counts(values)
        return pa.table([found.field(0), found.field(1)], schema=SCHEMA)
    table = pa.table({"chunk": values, "count": counts.cast(pa.int64())})
    grouped = table.group_by("chunk", use_threads=False).aggregate([("count", "sum")])
    return pa.table([grouped.column(0), grouped.column(1)], schema=SCHEMA)


def sum_tables(tables: list[pa.Table]) -> pa.Table:
    """Counts tables added up into one (distinct chunks, summed counts)."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return SCHEMA.empty_table()
    if len(tables) == 1:
        return tables[0]
    table = pa.concat_tables(tables)
    return count_table(table.column("chunk"), table.column("count"))


def counter_table(counter: Counter[str]) -> pa.Table:
    return pa.table({"chunk": pa.array(list(counter.keys()), pa.string()),
                     "count": pa.array(list(counter.values()), pa.int64())}, schema=SCHEMA)


class PieceCounter:
    """Counts of the pieces of many texts, kept as pyarrow tables and compacted as they grow."""

    def __init__(self, pattern: str, findall) -> None:
        name = pattern_name(pattern)
        if name not in _ONE_CHUNK:
            raise ValueError("the piece shortcut is only proven for the built-in patterns")
        self._one_chunk = _ONE_CHUNK[name]
        self._findall = findall
        self._compacted = SCHEMA.empty_table()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def add(self, texts: pa.Array) -> None:
        """Add the pieces of texts (string array; no MARK inside)."""
        table = count_table(cut_pieces(texts))
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows > max(1_000_000, self._compacted.num_rows):
            self._compact()

    def _compact(self) -> None:
        self._compacted = sum_tables([self._compacted, *self._pending])
        self._pending, self._pending_rows = [], 0
        pa.default_memory_pool().release_unused()  # the grouping's hash tables go back to the OS

    @property
    def nbytes(self) -> int:
        return self._compacted.nbytes + sum(t.nbytes for t in self._pending)

    def __bool__(self) -> bool:
        return bool(self._compacted.num_rows or self._pending_rows)

    def chunk_counts(self) -> pa.Table:
        """The chunk counts of everything added (and the counter is emptied)."""
        self._compact()
        pieces, self._compacted = self._compacted, SCHEMA.empty_table()
        one = pc.match_substring_regex(pieces.column("chunk"), self._one_chunk)
        parts = [pieces.filter(one)]
        rest = pieces.filter(pc.invert(one))
        del pieces
        for start in range(0, rest.num_rows, _CONVERT_BATCH):
            part = rest.slice(start, _CONVERT_BATCH)
            found = list(map(self._findall, part.column("chunk").to_pylist()))  # the loop stays in C
            lengths = np.fromiter(map(len, found), dtype=np.int64, count=len(found))
            chunks = pa.array(list(itertools.chain.from_iterable(found)), pa.string())
            counts = np.repeat(part.column("count").to_numpy(), lengths)
            del found
            parts.append(count_table(chunks, pa.array(counts)))
        return sum_tables(parts)

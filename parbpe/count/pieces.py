r"""Fast, exact pre-tokenization: count distinct pieces at C speed, split each distinct piece once.

Applying the split pattern with `regex` to every document is the count stage's inner loop (about
5 MB/s per core here). Text repeats, so instead: cut each document into small pieces at places
where no match of a built-in pattern can cross (numpy, over the UTF-8 bytes), count the distinct
pieces (those of up to 8 bytes as integer keys sorted by numpy, longer ones hashed by pyarrow), and
split each distinct piece once, multiplying its chunks by the piece's count. With the GPT-2 and
GPT-4 patterns the vectorized lexers of lexer.py split every piece; with GPT-4o, the ASCII pieces
(those not holding "/" after a line break), and `regex` the others.

The cuts are cuts.py's (numpy) or piece_keyer.py's (numba, which also keys the pieces).
Documents holding a special token, and custom patterns, take the plain path.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..patterns import digit_groups
from . import chunking, piece_keyer, short_keys
from .cuts import cut_bounds
from .key_tables import KeyCounts
from .lexer import (
    gpt2_chunk_starts,
    gpt2_chunk_starts_utf8,
    gpt4_chunk_starts,
    gpt4_chunk_starts_utf8,
    gpt4o_chunk_starts,
)

# The vectorized lexers (lexer.py), by pattern: for ASCII pieces, for any UTF-8 (None: the pattern
# splits the pieces that are not ASCII), and a regex of the ASCII pieces the first one refuses.
_LEXERS = {"gpt2": (gpt2_chunk_starts, gpt2_chunk_starts_utf8, None),
           "gpt4": (gpt4_chunk_starts, gpt4_chunk_starts_utf8, None),
           "gpt4o": (gpt4o_chunk_starts, None, r"[\r\n]/")}

# string, not large_string: pyarrow groups 32-bit-offset strings about 3x faster. Tables stay far
# below 2 GB of text each (a worker's held counts are capped by MAX_WORKER_DATA in run/memory.py).
SCHEMA = pa.schema([("chunk", pa.string()), ("count", pa.int64())])
_FLOAT_EXACT = 2**53
# The largest count, sum of counts or pair count parbpe takes: counts are int64, and sums and count changes of
# either sign stay exact below 2**63 with this margin (a float64 total, inexact past 2**53, decides safely).
COUNT_LIMIT = 2**62


def check_counts(counts: pa.Array | pa.ChunkedArray, where: str = "") -> None:
    """Refuse counts parbpe cannot add up exactly: a negative one, or a total past COUNT_LIMIT (where: the
    file they come from, for the message)."""
    if not len(counts):
        return
    source = f"{where}: " if where else ""
    least = pc.min(counts).as_py()
    if least is not None and least < 0:
        raise ValueError(f"{source}negative count {least:,}: a chunk count is how often it was seen")
    total = pc.sum(pc.cast(counts, pa.float64(), safe=False)).as_py() or 0.0
    if total > COUNT_LIMIT:
        raise ValueError(f"{source}chunk counts add up to about {total:.4g}, past the limit of {COUNT_LIMIT:,} "
                         "(2**62) that parbpe's 64-bit counts hold exactly: scale the counts down")
_COMPACT_ROWS = 8_000_000  # pending rows (distinct within their batch) that force a compaction
_CONVERT_BATCH = 200_000  # distinct pieces split per batch (bounds the Python lists and numpy arrays)


def supports(pattern: str) -> bool:
    """True if the piece cuts are proven for this pattern (the built-in ones and their --digits
    variants: cutting a run of digits into groups moves no cut)."""
    return digit_groups(pattern) is not None


def _lexers(pattern: str) -> tuple:
    """The lexers of a built-in pattern, told its digit group."""
    name, group = digit_groups(pattern)
    ascii_lexer, utf8_lexer, refused = _LEXERS[name]
    if group is None:
        return ascii_lexer, utf8_lexer, refused
    return (functools.partial(ascii_lexer, digit_group=group),
            utf8_lexer and functools.partial(utf8_lexer, digit_group=group), refused)


def string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, UTF-8 bytes) of a string array without nulls, as numpy views where possible."""
    if len(array) == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.uint8)
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, np.int32)[array.offset:array.offset + len(array) + 1].astype(np.int64)
    data = np.frombuffer(data, np.uint8)[offsets[0]:offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data


def _string_array(bounds: np.ndarray, data: np.ndarray) -> pa.Array:
    """A string array over data (no copy) whose values lie between consecutive bounds."""
    return pa.StringArray.from_buffers(len(bounds) - 1, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(data))


def string_array(texts: pa.Array) -> pa.Array:
    """A string array's non-null values, as a string (not large_string) array."""
    texts = texts.cast(pa.string())
    return texts.drop_null() if texts.null_count else texts


def _buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, UTF-8 bytes) of a string array's non-null values."""
    return string_buffers(string_array(texts))


def documents_holding(texts: pa.Array, needles: Sequence[str]) -> np.ndarray | None:
    """Which documents of a string array without nulls hold any of the needles (a bool mask), or
    None if none does. One C search (bytes.find) over all the text, not one per document."""
    if not needles or not len(texts):
        return None
    offsets, data = string_buffers(texts)
    text = data.tobytes()
    found = []
    for needle in needles:
        needle_bytes = needle.encode("utf-8")
        at = text.find(needle_bytes)
        while at != -1:
            document = int(np.searchsorted(offsets, at, side="right")) - 1
            if at + len(needle_bytes) <= offsets[document + 1]:  # not across two documents
                found.append(document)
                at = text.find(needle_bytes, int(offsets[document + 1]))  # the next document
            else:
                at = text.find(needle_bytes, at + 1)
    if not found:
        return None
    mask = np.zeros(len(texts), bool)
    mask[found] = True
    return mask


def cut_pieces(texts: pa.Array) -> pa.Array:
    """All pieces of texts (a string array), as one flat string array viewing the same bytes."""
    offsets, data = _buffers(texts)
    return _string_array(cut_bounds(offsets, data), data)


def count_table(values: pa.Array, counts: pa.Array | None = None) -> pa.Table:
    """Sum counts per distinct value (each value counts once if counts is None)."""
    values = values.cast(pa.string())
    if counts is None:
        found = pc.value_counts(values)
        return pa.table([found.field(0), found.field(1)], schema=SCHEMA)
    counts = counts.cast(pa.int64())
    check_counts(counts)
    total = pc.sum(counts).as_py() or 0
    if total >= _FLOAT_EXACT:  # the sums below are float64: exact only below 2**53
        table = pa.table({"chunk": values, "count": counts})
        grouped = table.group_by("chunk", use_threads=False).aggregate([("count", "sum")])
        return pa.table([grouped.column(0), grouped.column(1)], schema=SCHEMA)
    # Hash each value to its index among the distinct ones (C++), then add up by index: faster
    # than pyarrow's group_by. Chunked input is encoded chunk by chunk against one dictionary, so
    # the strings are never copied into one array first.
    encoded = pc.dictionary_encode(values)
    if isinstance(encoded, pa.ChunkedArray):
        if encoded.num_chunks == 0:
            return SCHEMA.empty_table()
        dictionary = encoded.chunk(encoded.num_chunks - 1).dictionary  # every chunk holds the whole, final one
        if any(len(chunk.dictionary) != len(dictionary) for chunk in encoded.chunks):
            raise AssertionError("pyarrow encoded the chunks against different dictionaries")
        indices = np.concatenate([chunk.indices.to_numpy() for chunk in encoded.chunks])
    else:
        dictionary, indices = encoded.dictionary, encoded.indices.to_numpy()
    sums = np.bincount(indices, weights=np.asarray(counts.to_numpy(), dtype=np.float64), minlength=len(dictionary))
    return pa.table([dictionary, pa.array(sums.astype(np.int64))], schema=SCHEMA)


def sum_tables(tables: list[pa.Table], distinct: bool = True) -> pa.Table:
    """Counts tables added up into one (distinct chunks, summed counts); distinct=False: a table's own
    rows may repeat a chunk, so even a lone table is summed."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return SCHEMA.empty_table()
    if len(tables) == 1 and distinct:
        return tables[0]
    table = pa.concat_tables(tables)
    return count_table(table.column("chunk"), table.column("count"))


def counter_table(counter: Counter[str]) -> pa.Table:
    return pa.table({"chunk": pa.array(list(counter.keys()), pa.string()),
                     "count": pa.array(list(counter.values()), pa.int64())}, schema=SCHEMA)


class StringCounts:
    """Counts of strings, summed on demand: strings of up to 8 bytes (most pieces and chunks) as
    uint64 keys and strings of 9 to 16 bytes as pairs of them, counted with numpy sorts
    (short_keys.py), or with hashed=True (the JIT's path) summed as they come in numba hash tables
    (key_tables.py); longer ones as pyarrow tables counted by hashing. A string is in one part or
    another by its bytes alone, so the parts never overlap.
    """

    def __init__(self, hashed: bool = False, seed: int = 0) -> None:
        # hashed (with the JIT): short strings and pairs summed as they come, in key_tables.py's hash
        # tables (seed picks their hash), instead of sorted per batch and merged by sum()
        self._hashed = (KeyCounts(1, seed=seed), KeyCounts(2, seed=seed)) if hashed else None
        self._keys: list[np.ndarray] = []
        self._key_counts: list[np.ndarray] = []
        self._pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # first words, second words, counts
        self._tables: list[pa.Table] = []
        self._uncounted: list[pa.Array] = []  # long strings not counted yet
        self.rows = 0  # rows held (a string held in several parts counts in each)

    def add(self, data: np.ndarray, bounds: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Count the strings data[bounds[i]:bounds[i + 1]] (each weights[i] times, or once)."""
        starts, lengths = bounds[:-1], np.diff(bounds)
        fit = short_keys.fits(data, starts, lengths, 2 * short_keys.MAX_BYTES)
        short = fit & (lengths <= short_keys.MAX_BYTES)
        keys = short_keys.keys_of(data, starts, lengths)
        mid = np.flatnonzero(fit & ~short)
        second = short_keys.keys_of(data, starts[mid] + short_keys.MAX_BYTES, lengths[mid] - short_keys.MAX_BYTES)
        long = np.flatnonzero(~fit)
        long_strings = _string_array(bounds, data).take(pa.array(long)) if len(long) else pa.array([], pa.string())
        parts = (weights[short], weights[mid], weights[long]) if weights is not None else None
        self.add_keyed(keys[short], keys[mid], second, long_strings, parts)

    def add_keyed(self, keys: np.ndarray, first: np.ndarray, second: np.ndarray, long: pa.Array,
                  weights: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        """Count strings already keyed: the keys of the short ones, the two words of those of 9 to 16
        bytes, and the others as a string array (short_keys.fits says which is which); each once, or
        weights[0], [1], [2] times (of the keys, the pairs, the long ones)."""
        self._add_long(long, None if weights is None else weights[2])
        if self._hashed is not None:  # summed as they come: the tables hold each key once
            key_table, pair_table = self._hashed
            before = len(key_table) + len(pair_table)
            key_table.add((keys,), None if weights is None else weights[0])
            pair_table.add((first, second), None if weights is None else weights[1])
            self.rows += len(key_table) + len(pair_table) - before
        elif weights is None:
            self._append(*short_keys.count_keys(keys), short_keys.sum_pairs(first, second))
        else:
            self._append(*short_keys.sum_keys(keys, weights[0]), short_keys.sum_pairs(first, second, weights[1]))

    def _add_long(self, long: pa.Array, weights: np.ndarray | None) -> None:
        """Hold long strings: uncounted when each counts once (hashed once, when summed: counting them
        per batch and then summing the tables hashed most of them twice),
        else counted now with their weights."""
        if not len(long):
            return
        if weights is None:
            self._uncounted.append(long)
            self.rows += len(long)
        else:
            self._tables.append(count_table(long, pa.array(weights)))
            self.rows += self._tables[-1].num_rows

    def _append(self, keys: np.ndarray, counts: np.ndarray, pairs: short_keys.Pairs) -> None:
        self._keys.append(keys)
        self._key_counts.append(counts)
        self._pairs.append(pairs)
        self.rows += len(keys) + len(pairs[0])

    def sum(self) -> None:
        """Sum the parts into one of each kind (a string held in several parts is held once)."""
        if len(self._keys) > 1:
            keys, counts = short_keys.merge_keys(list(zip(self._keys, self._key_counts)))
            self._keys, self._key_counts = [keys], [counts]
        if len(self._pairs) > 1:
            self._pairs = [short_keys.merge_pairs(self._pairs)]
        if self._uncounted:
            self._tables.append(count_table(pa.chunked_array(self._uncounted, pa.string())))
            self._uncounted = []
        if len(self._tables) > 1:
            self._tables[:] = [sum_tables(self._tables)]
        self.rows = (sum(map(len, self._keys)) + sum(len(p[0]) for p in self._pairs)
                     + sum(t.num_rows for t in self._tables) + sum(map(len, self._hashed or ())))
        pa.default_memory_pool().release_unused()  # the grouping's hash tables go back to the OS

    @property
    def nbytes(self) -> int:
        held = sum(t.nbytes for t in self._tables) + sum(a.nbytes for a in self._uncounted)
        held += sum(table.nbytes for table in self._hashed or ())
        return held + 16 * sum(map(len, self._keys)) + 24 * sum(len(p[0]) for p in self._pairs)

    def buffers(self, batch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Everything counted, batch distinct strings at a time, as (offsets from 0, UTF-8 bytes,
        counts): table()'s strings without making the table (the short ones spelled by a kernel,
        piece_keyer.spell). The strings of a kind come in their table() order; the kinds, long first."""
        self.sum()
        for table in self._tables:
            for start in range(0, table.num_rows, batch):
                part = table.slice(start, batch)
                offsets, data = string_buffers(part.column("chunk").combine_chunks())
                yield offsets, data, part.column("count").to_numpy()
        short, pairs = self._summed_keys()
        for keys, counts in short:
            for start in range(0, len(keys), batch):
                yield *piece_keyer.spell(keys[start:start + batch]), counts[start:start + batch]
        for first, second, counts in pairs:
            for start in range(0, len(first), batch):
                end = start + batch
                yield *piece_keyer.spell(first[start:end], second[start:end]), counts[start:end]

    def table(self, count_long: bool = True) -> pa.Table:
        """Everything counted, as one counts table (SCHEMA) of distinct strings; count_long=False: the
        long strings held uncounted come as rows of count 1 each instead, a string perhaps in several
        rows (a run file's rows are summed by the reduce all the same: mostly distinct strings, such
        as superword chunks, are then hashed once, not twice)."""
        uncounted = [] if count_long else self._uncounted
        self._uncounted = [] if not count_long else self._uncounted
        self.sum()
        tables = list(self._tables)
        for strings in uncounted:
            tables.append(pa.table([strings.cast(pa.string()), pa.array(np.ones(len(strings), np.int64))],
                                   schema=SCHEMA))
        short, pairs = self._summed_keys()
        for keys, counts in short:
            tables.append(pa.table([short_keys.strings_of(keys), pa.array(counts, pa.int64())], schema=SCHEMA))
        for first, second, counts in pairs:
            tables.append(pa.table([short_keys.strings_of(first, second), pa.array(counts, pa.int64())], schema=SCHEMA))
        return pa.concat_tables(tables) if tables else SCHEMA.empty_table()

    def _summed_keys(self) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[short_keys.Pairs]]:
        """The short strings' distinct keys and counts, and the pairs', as lists of at most one part
        each (after sum(); from the hash tables where they are hashed)."""
        if self._hashed is None:
            return list(zip(self._keys, self._key_counts)), list(self._pairs)
        key_table, pair_table = self._hashed
        return [key_table.items()] if len(key_table) else [], [pair_table.items()] if len(pair_table) else []


class BatchCounter:
    """What the chunk counters (PieceCounter, superword.SuperwordCounter) share: strings counted
    batch by batch (StringCounts), the batches summed once they hold more than compact_rows rows
    and three times the rows left by the last sum (or when the worker's limit is near)."""

    compact_rows = _COMPACT_ROWS
    rows_repeat = False  # chunk_counts may give a chunk in several rows (summed downstream)

    def __init__(self, hashed: bool = False) -> None:
        self._use_tables = hashed  # StringCounts with hash tables (the JIT)
        self._held = StringCounts(hashed)
        self._summed_rows = 0

    def _added(self) -> None:
        """Called after each batch: sum the batches when they hold enough rows."""
        if self._held.rows > max(self.compact_rows, 3 * self._summed_rows):
            self.compact()

    def compact(self) -> None:
        """Sum the batches held (a string seen in several batches is held once)."""
        self._held.sum()
        self._summed_rows = self._held.rows

    @property
    def nbytes(self) -> int:
        return self._held.nbytes

    def __bool__(self) -> bool:
        return self._held.rows > 0

    def _take(self) -> StringCounts:
        """Everything counted, leaving the counter empty."""
        held, self._held, self._summed_rows = self._held, StringCounts(self._use_tables), 0
        return held


class PieceCounter(BatchCounter):
    """Counts of the pieces of many texts, split into chunk counts at the end (chunk_counts)."""

    def __init__(self, pattern: str, findall, use_jit: bool = False) -> None:
        super().__init__(hashed=use_jit)
        if not supports(pattern):
            raise ValueError("the piece shortcut is only proven for the built-in patterns")
        self._lexer = _lexers(pattern)
        self._findall = findall
        self._jit_kind = chunking.kind_of(pattern) if use_jit else None  # the numba lexer splits every piece
        self._keyer = piece_keyer.PieceKeyer() if use_jit else None  # and the numba kernel cuts and keys them

    @property
    def lexes_with_jit(self) -> bool:
        """Whether numba's lexer splits the pieces (else numpy's, or the pattern)."""
        return self._jit_kind is not None

    def add(self, texts: pa.Array) -> None:
        """Add the pieces of texts (a string array)."""
        offsets, data = _buffers(texts)
        if self._jit_kind is None:
            self._held.add(data, cut_bounds(offsets, data))
        else:
            for keyed in self._keyer.pieces(offsets, data):
                self._held.add_keyed(*keyed)
        self._added()

    def chunk_counts(self) -> pa.Table:
        """The chunk counts of everything added (and the counter is emptied)."""
        if self._jit_kind is not None:
            return self._jit_chunk_counts(self._take())
        pieces = self._take().table()
        column = pieces.column("chunk")
        ascii_lexer, utf8_lexer, refused = self._lexer
        lexed = pc.equal(pc.binary_length(column), pc.utf8_length(column))  # ASCII: lexed without decoding
        if refused:
            lexed = pc.and_(lexed, pc.invert(pc.match_substring_regex(column, refused)))
        chunks = StringCounts()
        for part in _batches(pieces.filter(lexed)):
            _lex_into(chunks, part, ascii_lexer)
        rest = pieces.filter(pc.invert(lexed))
        for part in _batches(rest if utf8_lexer is not None else rest.slice(0, 0)):
            _lex_into(chunks, part, utf8_lexer)
        parts = [chunks.table()]
        for part in _batches(rest if utf8_lexer is None else rest.slice(0, 0)):  # the pattern, once per piece
            found = list(map(self._findall, part.column("chunk").to_pylist()))  # the loop stays in C
            lengths = np.fromiter(map(len, found), dtype=np.int64, count=len(found))
            split = pa.array(list(itertools.chain.from_iterable(found)), pa.string())
            counts = np.repeat(part.column("count").to_numpy(), lengths)
            del found
            parts.append(count_table(split, pa.array(counts)))
        return sum_tables(parts)


    def _jit_chunk_counts(self, pieces: StringCounts) -> pa.Table:
        """The chunk counts of counted pieces, each split by the numba lexer (chunking.py): any text, no `regex`."""
        kind, group = self._jit_kind
        tables = chunking.char_tables()
        chunks = StringCounts(hashed=True, seed=1)  # (its keys come in the order of the pieces' tables)
        for offsets, data, counts in pieces.buffers(_CONVERT_BATCH):
            bounds = chunking.chunk_bounds(data, offsets, kind, group, tables)
            keys, first, second, long, weights = self._keyer.chunks(data, offsets, bounds, counts)
            chunks.add_keyed(keys, first, second, long, weights)
        return chunks.table()


def _batches(table: pa.Table) -> list[pa.Table]:
    return [table.slice(start, _CONVERT_BATCH).combine_chunks() for start in range(0, table.num_rows, _CONVERT_BATCH)]


def _lex_into(chunks: StringCounts, pieces: pa.Table, chunk_starts) -> None:
    """Count the chunks of distinct pieces, split by a lexer (lexer.py), into chunks."""
    offsets, data = string_buffers(pieces.column("chunk").chunk(0))
    starts = chunk_starts(data, offsets)
    piece = np.searchsorted(offsets, starts, side="right") - 1  # the piece each chunk starts in
    chunks.add(data, np.append(starts, len(data)), pieces.column("count").to_numpy()[piece])

"""Streaming the text of one work unit as pyarrow string arrays of documents.

Parquet is read by row group, only the text column; Arrow files (Hugging Face `datasets` cache
files) by ranges of record batches, memory-mapped; text and jsonl files in blocks between safe
cuts, so no reader ever holds a whole file. Invalid UTF-8 is replaced and counted in ReadStats.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .filesystems import open_input_file, open_input_stream
from .units import WorkUnit, compression

READ_BLOCK = 8 << 20  # bytes of a text file decoded at a time
BATCH_BYTES = 8 << 20  # documents of a jsonl file handed on together


@dataclass
class ReadStats:
    """What reading saw; values add up across units."""

    documents: int = 0
    bytes: int = 0
    replaced_bytes: int = 0  # invalid UTF-8 sequences replaced by U+FFFD
    words: int = 0  # whitespace-separated words, when counted (count_words: parbpe eval's tokens/word)
    sampled_documents: int = 0  # documents and bytes in the sample (--sample-docs, --sample-bytes)
    sampled_bytes: int = 0

    def __iadd__(self, other: ReadStats) -> ReadStats:
        self.documents += other.documents
        self.bytes += other.bytes
        self.replaced_bytes += other.replaced_bytes
        self.words += other.words
        self.sampled_documents += other.sampled_documents
        self.sampled_bytes += other.sampled_bytes
        return self


# A word is a run of characters that are not whitespace as str.split() knows it (str.isspace()).
_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
               + "\u2028\u2029\u202f\u205f\u3000")


def count_words(texts: pa.Array) -> int:
    """sum(len(t.split()) for t in texts) (checked equal in tests), counted over the array's UTF-8
    buffer with numpy: a word starts at a byte outside whitespace that begins its document or follows
    a whitespace byte (every byte of a multi-byte whitespace character is one)."""
    if texts.null_count:
        texts = texts.fill_null("")
    ends = np.frombuffer(texts.buffers()[1], dtype=np.int64 if pa.types.is_large_string(texts.type) else np.int32)
    offsets = ends[texts.offset:texts.offset + len(texts) + 1].astype(np.int64)
    if not len(texts) or offsets[-1] == offsets[0]:
        return 0
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    space = (data - np.uint8(9)) <= 4  # ASCII whitespace: 9-13 and 28-32 (comparisons: faster than a lookup)
    space |= (data - np.uint8(28)) <= 4
    lead = (data - np.uint8(0xE1)) <= 2  # the first byte of a character that may be whitespace: C2, E1-E3
    lead |= data == 0xC2
    lead = np.flatnonzero(lead)
    if len(lead):
        nxt = data[np.minimum(lead + 1, len(data) - 1)].astype(np.int64)
        code2 = (data[lead].astype(np.int64) << 8) | nxt
        code3 = (code2 << 8) | data[np.minimum(lead + 2, len(data) - 1)]
        for code, size in ((code2, 2), (code3, 3)):
            at = lead[np.isin(code, _WIDE[size])]
            for k in range(size):
                space[at + k] = True
    starts = offsets[:-1][np.diff(offsets) > 0] - offsets[0]  # the non-empty documents
    after_space = np.count_nonzero(space[:-1] > space[1:])  # whitespace then not, anywhere
    counted = np.zeros(len(starts), dtype=bool)  # a document's first word counted as after whitespace already
    inner = starts > 0
    counted[inner] = space[starts[inner] - 1]
    return int(after_space + np.count_nonzero(~space[starts] & ~counted))


def _wide_whitespace() -> dict[int, np.ndarray]:
    """The multi-byte whitespace characters by UTF-8 length, their bytes as big-endian ints."""
    wide: dict[int, list[int]] = {2: [], 3: []}
    for char in _WHITESPACE:
        raw = char.encode("utf-8")
        if len(raw) > 1:
            wide[len(raw)].append(int.from_bytes(raw, "big"))
    return {n: np.array(codes, dtype=np.int64) for n, codes in wide.items()}


_WIDE = _wide_whitespace()


def _decode(data: bytes, stats: ReadStats) -> str:
    """Decode UTF-8, replacing invalid bytes and counting how many sequences were replaced."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        stats.replaced_bytes += text.count("\ufffd") - data.count("\ufffd".encode())
        return text


def replace_surrogates(text: str, stats: ReadStats | None = None) -> str:
    """Replace lone surrogates (possible in JSON, never valid UTF-8) by U+FFFD, counting them."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if stats is not None:
            stats.replaced_bytes += sum(1 for a, b in zip(text, fixed) if a != b)
        return fixed


def _open_binary(path: str) -> pa.NativeFile:
    return open_input_stream(path, compression(path))


def open_parquet(path: str) -> pq.ParquetFile:
    """A parquet file opened for ranged reads (footer first, then only the row groups and columns asked for)."""
    source = open_input_file(path)
    try:
        return pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as exc:
        source.close()
        raise ValueError(f"{path}: not a readable parquet file ({exc})") from None


def iter_text_batches(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[pa.Array]:
    """Stream the documents of a text work unit as pyarrow string arrays; never holds a whole
    file's text at once (a text file comes in pieces between safe cuts, see iter_text_pieces)."""
    if unit.kind == "parquet":
        yield from _parquet_batches(unit, text_column, stats)
    elif unit.kind == "arrow":
        yield from _arrow_batches(unit, text_column, stats)
    elif unit.kind == "jsonl":
        batch: list[str] = []
        size = 0
        for text in _jsonl_documents(unit, text_column, stats):
            batch.append(text)
            size += len(text)
            if size >= BATCH_BYTES:
                yield pa.array(batch, pa.string())
                batch, size = [], 0
        if batch:
            yield pa.array(batch, pa.string())
    elif unit.kind == "text":
        for piece in iter_text_pieces(unit.path, stats, start=unit.start, end=unit.end):
            yield pa.array([piece], pa.string())
    else:
        raise ValueError(f"{unit.describe()} is a counts file, not text")


def iter_documents(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[str]:
    """The documents of a text work unit as Python strings (see iter_text_batches)."""
    for texts in iter_text_batches(unit, text_column, stats):
        yield from texts.to_pylist()


def check_text_column(schema: pa.Schema, path: str, text_column: str) -> None:
    """A parquet file's text column exists and holds strings (checked when planning, before work)."""
    if text_column not in schema.names:
        raise ValueError(f"{path} has no column {text_column!r}; its columns are {schema.names}. "
                         "Choose one with --text-column (text_column=...).")
    column_type = schema.field(text_column).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise ValueError(f"{path}: column {text_column!r} holds {column_type}, not text")


def _parquet_batches(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[pa.Array]:
    pf = open_parquet(unit.path)
    check_text_column(pf.schema_arrow, unit.path, text_column)
    try:
        for batch in pf.iter_batches(batch_size=1024, columns=[text_column], row_groups=[unit.row_group],
                                     use_threads=False):
            texts = batch.column(0)
            if texts.null_count:
                texts = texts.drop_null()
            stats.documents += len(texts)
            stats.bytes += pc.sum(pc.binary_length(texts)).as_py() or 0
            yield texts
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(f"{unit.describe()}: corrupt or unreadable parquet data ({detail})") from None


def _record_batches(source: pa.NativeFile, path: str) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow IPC file or stream (datasets writes streams)."""
    try:
        if source.read(6) == b"ARROW1":
            source.seek(0)
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
            return
        source.seek(0)
        yield from pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{path}: not a readable Arrow file ({exc})") from None


def arrow_batch_sizes(path: str) -> list[int]:
    """The bytes of each record batch of an Arrow file (memory-mapped, so nothing is read twice)."""
    with pa.memory_map(path) as source:
        return [batch.nbytes for batch in _record_batches(source, path)]


def text_strings(texts: pa.Array, where: str, text_column: str) -> pa.Array:
    """A column's values as a string array without nulls, or a ValueError saying what it holds."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if pa.types.is_large_string(texts.type) or pa.types.is_string_view(texts.type):
        texts = texts.cast(pa.string())
    if not pa.types.is_string(texts.type):
        raise ValueError(f"{where}: column {text_column!r} holds {texts.type}, not text")
    return texts.drop_null() if texts.null_count else texts


def _arrow_batches(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[pa.Array]:
    with pa.memory_map(unit.path) as source:
        for i, batch in enumerate(_record_batches(source, unit.path)):
            if i >= unit.end:
                break
            if i < unit.start:
                continue
            if text_column not in batch.schema.names:
                raise ValueError(f"{unit.path} has no column {text_column!r}; its columns are "
                                 f"{batch.schema.names}. Choose one with --text-column (text_column=...).")
            texts = text_strings(batch.column(text_column), unit.path, text_column)
            stats.documents += len(texts)
            stats.bytes += pc.sum(pc.binary_length(texts)).as_py() or 0
            yield texts


def _jsonl_documents(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[str]:
    with _open_binary(unit.path) as stream:
        start, end = _range(unit, stream, snap_line)
        lines = _binary_lines(stream, end - start if end >= 0 else -1, unit.path)
        where = functools.partial(_line_of, unit.path, start)
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(_decode(line, stats))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where(line_no)}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or text_column not in record:
                keys = list(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(
                    f"{where(line_no)}: no field {text_column!r} (found {keys}); "
                    "choose one with --text-column"
                )
            text = record[text_column]
            if text is None:
                continue
            if not isinstance(text, str):
                raise ValueError(f"{where(line_no)}: field {text_column!r} is not a string")
            text = replace_surrogates(text, stats)
            stats.documents += 1
            stats.bytes += len(line)
            yield text


def _range(unit: WorkUnit, stream: pa.NativeFile, snap) -> tuple[int, int]:
    """The snapped [start, end) of a byte-range unit, with stream positioned at start (end -1: to EOF)."""
    if unit.start == 0 and unit.end == -1:
        return 0, -1
    with open_input_file(unit.path) as f:
        start = snap(f, unit.start)
        end = snap(f, unit.end) if unit.end != -1 else -1
    stream.seek(start)
    return start, end


def _line_of(path: str, start: int, line_in_range: int) -> str:
    """path:line for an error on a line of a byte range (counts the lines before it only then)."""
    return f"{path}:{line_in_range + (_count_newlines(path, start) if start else 0)}"


def _count_newlines(path: str, upto: int) -> int:
    """Newlines in the first upto bytes of a file."""
    count = 0
    with open_input_file(path) as f:
        while upto > 0:
            block = f.read(min(READ_BLOCK, upto))
            if not block:
                break
            count += block.count(b"\n")
            upto -= len(block)
    return count


def snap_line(f, position: int) -> int:
    """The first line start at or after position (the file size if none)."""
    if position <= 0:
        return 0
    f.seek(position - 1)
    offset = position - 1
    while True:
        block = f.read(1 << 20)
        if not block:
            return offset
        i = block.find(b"\n")
        if i != -1:
            return offset + i + 1
        offset += len(block)


def snap_text(f, position: int) -> int:
    """The first safe cut (see _is_safe_cut) at or after position (the file size if none)."""
    if position <= 0:
        return 0
    base = max(position - 2, 0)  # data[i] is byte base + i; a cut before data[i] needs data[i-2:i+1]
    f.seek(base)
    data = f.read(1 << 20)
    first = position - base  # the first candidate i
    while True:
        j = data.find(b"\n", max(first - 1, 1))
        while j != -1 and j + 1 < len(data):
            if _is_safe_cut(data, j + 1):
                return base + j + 1
            j = data.find(b"\n", j + 1)
        more = f.read(1 << 20)
        if not more:
            return base + len(data)
        base += len(data) - 2
        data = data[-2:] + more
        first = 2


def _blocks(stream: pa.NativeFile, size: int, limit: int = -1, path: str = "the input") -> Iterator[bytes]:
    """Blocks of at most size bytes from stream, stopping after limit bytes (-1: at its end).
    A truncated or corrupt compressed stream is a ValueError naming path."""
    while limit != 0:
        try:
            block = stream.read(size if limit < 0 else min(size, limit))
        except (OSError, pa.ArrowException) as exc:
            kind = compression(path) or "file"
            raise ValueError(f"{path}: truncated or corrupt {kind} data ({exc}); check the file, e.g. "
                             f"download it again") from None
        if not block:
            return
        if limit > 0:
            limit -= len(block)
        yield block


def _binary_lines(stream: pa.NativeFile, limit: int = -1, path: str = "the input") -> Iterator[bytes]:
    rest = b""
    for block in _blocks(stream, READ_BLOCK, limit, path):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def _is_safe_cut(data: bytes, i: int) -> bool:
    """True if a text may be cut before data[i] without changing the chunks of any built-in pattern.

    The cut falls after a newline that follows a visible ASCII character and precedes an ASCII
    letter or digit: no match of the GPT-2, GPT-4 or GPT-4o patterns can span it, and the only
    lookahead, (?!\\S) after whitespace, sees the same answer on both sides (tests prove it).
    """
    return (
        i >= 2
        and data[i - 1] == 0x0A
        and 0x21 <= data[i - 2] <= 0x7E
        and (0x30 <= data[i] <= 0x39 or 0x41 <= data[i] <= 0x5A or 0x61 <= data[i] <= 0x7A)
    )


def find_last_safe_cut(data: bytes, start: int = 2) -> int:
    """The last safe cut position in data at or after start, or -1."""
    i = data.rfind(b"\n")
    while i != -1 and i + 1 >= start:
        if i + 1 < len(data) and _is_safe_cut(data, i + 1):
            return i + 1
        i = data.rfind(b"\n", 0, i)
    return -1


def iter_text_pieces(path: str, stats: ReadStats, block: int = READ_BLOCK, start: int = 0,
                     end: int = -1) -> Iterator[str]:
    """A text file (or its byte range) as one document, yielded in pieces cut only at safe places
    (see _is_safe_cut), so that chunk counts equal those of the whole file while memory stays near
    one block. The range [start, end) is snapped to safe cuts like a work unit's."""
    if start == 0:
        stats.documents += 1
    with _open_binary(path) as stream:
        start, end = _range(WorkUnit(path, "text", start=start, end=end), stream, snap_text)
        buffer = b""
        for data in _blocks(stream, block, end - start if end >= 0 else -1, path):
            buffer += data
            cut = find_last_safe_cut(buffer, max(len(buffer) - len(data), 2))
            if cut > 0:
                stats.bytes += cut
                yield _decode(buffer[:cut], stats)
                buffer = buffer[cut:]
        if buffer:
            stats.bytes += len(buffer)
            yield _decode(buffer, stats)

"""Planning inputs into work units, and streaming the text of one work unit.

Inputs are paths, globs or directories. Text inputs become work units: one parquet row group, or
a byte range of an uncompressed text/jsonl file (cut where no split pattern can match across, so
the counts equal those of the whole file), or a whole compressed file. Counts files (parbpe's
parquet, BatchBPE's CSV) are one unit each. Units are sorted so the plan, and everything computed
from it, is deterministic. Text is streamed as pyarrow string arrays of documents.
"""

from __future__ import annotations

import csv
import functools
import glob
import json
import os
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COUNTS_MAGIC = b"parbpe.counts"  # parquet key-value metadata marking a parbpe counts file
TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst", ".py")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
READ_BLOCK = 8 << 20  # bytes of a text file decoded at a time
RANGE_BYTES = 64 << 20  # uncompressed text/jsonl files larger than this become several units
BATCH_BYTES = 8 << 20  # documents of a jsonl file handed on together


@dataclass(frozen=True, order=True)
class WorkUnit:
    """One piece of input: a parquet row group, a byte range of a text or jsonl file, or a counts file.

    A byte range [start, end) is nominal: the unit reads from the first cut at or after start to
    the first cut at or after end (see snap_text, snap_line), so neighbouring units tile the file.
    end == -1 means the end of the file.
    """

    path: str
    kind: str  # "parquet", "text", "jsonl", "counts-parquet", "counts-csv"
    row_group: int = -1
    start: int = 0
    end: int = -1

    def describe(self) -> str:
        if self.row_group >= 0:
            return f"{self.path} (row group {self.row_group})"
        if self.start or self.end != -1:
            return f"{self.path} (bytes {self.start}-{self.end if self.end != -1 else 'end'})"
        return self.path


@dataclass
class ReadStats:
    """What reading saw; values add up across units."""

    documents: int = 0
    bytes: int = 0
    replaced_bytes: int = 0  # invalid UTF-8 sequences replaced by U+FFFD

    def __iadd__(self, other: ReadStats) -> ReadStats:
        self.documents += other.documents
        self.bytes += other.bytes
        self.replaced_bytes += other.replaced_bytes
        return self


def _kind_of(path: str) -> str | None:
    name = path.lower()
    for suffix in COMPRESSIONS:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith(".parquet"):
        return "parquet"  # refined to counts-parquet by its metadata
    if name.endswith(".csv"):
        return "counts-csv"
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Files named by paths, globs and directories (recursively), sorted and without duplicates."""
    files: set[str] = set()
    for item in inputs:
        if os.path.isdir(item):
            found = [str(p) for p in Path(item).rglob("*") if p.is_file() and _kind_of(str(p))]
            if not found:
                raise FileNotFoundError(f"directory {item!r} holds no readable input (.parquet, .txt, .jsonl, .csv)")
            files.update(found)
        elif os.path.isfile(item):
            files.add(item)
        else:
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise FileNotFoundError(f"no such file, directory or glob match: {item!r}")
            for m in matches:
                if os.path.isdir(m):
                    files.update(expand_inputs([m]))
                else:
                    files.add(m)
    return sorted(files)


def plan(inputs: Sequence[str], range_bytes: int = RANGE_BYTES) -> list[WorkUnit]:
    """Expand inputs into sorted work units: one per parquet row group, byte ranges of about
    range_bytes for uncompressed text and jsonl files, one per other file."""
    units = []
    for path in expand_inputs(inputs):
        kind = _kind_of(path)
        if kind is None:
            raise ValueError(
                f"cannot tell how to read {path!r}: use .parquet, .txt, .jsonl (optionally .gz/.zst) "
                "or a counts file (.parquet made by `parbpe count`, or BatchBPE's .csv)"
            )
        if kind == "parquet":
            try:
                pf = pq.ParquetFile(path)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ValueError(f"{path}: not a readable parquet file ({exc})") from None
            metadata = pf.schema_arrow.metadata or {}
            if COUNTS_MAGIC in metadata:
                units.append(WorkUnit(path, "counts-parquet"))
            else:
                units.extend(WorkUnit(path, "parquet", rg) for rg in range(pf.metadata.num_row_groups))
        elif kind in ("text", "jsonl") and _compression(path) is None:
            size = os.path.getsize(path)
            starts = range(0, max(size, 1), range_bytes)
            units.extend(WorkUnit(path, kind, start=a, end=a + range_bytes if a + range_bytes < size else -1)
                         for a in starts)
        else:
            units.append(WorkUnit(path, kind))
    return sorted(units)


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


def _compression(path: str) -> str | None:
    return next((c for s, c in COMPRESSIONS.items() if path.lower().endswith(s)), None)


def _open_binary(path: str) -> pa.NativeFile:
    return pa.input_stream(path, compression=_compression(path))


def iter_text_batches(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[pa.Array]:
    """Stream the documents of a text work unit as pyarrow string arrays; never holds a whole
    file's text at once (a text file comes in pieces between safe cuts, see iter_text_pieces)."""
    if unit.kind == "parquet":
        yield from _parquet_batches(unit, text_column, stats)
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


def unit_text_bytes(unit: WorkUnit) -> int:
    """The most text bytes reading this unit holds at once (for the memory budget's floor)."""
    if unit.kind == "parquet":
        try:
            meta = pq.ParquetFile(unit.path).metadata
            return max(meta.row_group(unit.row_group).total_byte_size, 1)
        except (pa.ArrowInvalid, OSError):
            return 1
    if unit.kind == "text":
        return 2 * READ_BLOCK
    if unit.kind == "jsonl":
        return 2 * BATCH_BYTES
    return os.path.getsize(unit.path)  # a counts file is read whole


def _parquet_batches(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[pa.Array]:
    try:
        pf = pq.ParquetFile(unit.path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{unit.path}: not a readable parquet file ({exc})") from None
    names = pf.schema_arrow.names
    if text_column not in names:
        raise ValueError(
            f"{unit.path} has no column {text_column!r}; its columns are {names}. "
            "Choose one with --text-column (text_column=...)."
        )
    column_type = pf.schema_arrow.field(text_column).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise ValueError(f"{unit.path}: column {text_column!r} holds {column_type}, not text")
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
        raise ValueError(f"{unit.describe()}: corrupt or unreadable parquet data ({exc})") from None


def _jsonl_documents(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[str]:
    with _open_binary(unit.path) as stream:
        start, end = _range(unit, stream, snap_line)
        lines = _binary_lines(stream, end - start) if end >= 0 else _binary_lines(stream)
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
    with open(unit.path, "rb") as f:
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
    with open(path, "rb") as f:
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


def _blocks(stream: pa.NativeFile, size: int, limit: int = -1) -> Iterator[bytes]:
    """Blocks of at most size bytes from stream, stopping after limit bytes (-1: at its end)."""
    while limit != 0:
        block = stream.read(size if limit < 0 else min(size, limit))
        if not block:
            return
        if limit > 0:
            limit -= len(block)
        yield block


def _binary_lines(stream: pa.NativeFile, limit: int = -1) -> Iterator[bytes]:
    rest = b""
    for block in _blocks(stream, READ_BLOCK, limit):
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
        for data in _blocks(stream, block, end - start if end >= 0 else -1):
            buffer += data
            cut = find_last_safe_cut(buffer, max(len(buffer) - len(data), 2))
            if cut > 0:
                stats.bytes += cut
                yield _decode(buffer[:cut], stats)
                buffer = buffer[cut:]
        if buffer:
            stats.bytes += len(buffer)
            yield _decode(buffer, stats)


# -- counts files ---------------------------------------------------------------------------


@dataclass
class CountsFile:
    chunks: list[bytes]
    counts: list[int]
    pattern: str | None
    special_tokens: tuple[str, ...] | None


def read_counts(unit: WorkUnit) -> CountsFile:
    """Read a parbpe counts parquet file or a BatchBPE counts CSV."""
    if unit.kind == "counts-parquet":
        table = pq.read_table(unit.path)
        meta = json.loads(table.schema.metadata[COUNTS_MAGIC])
        if "chunk" not in table.column_names or "count" not in table.column_names:
            raise ValueError(f"{unit.path}: a counts file needs columns 'chunk' and 'count'")
        return CountsFile(
            chunks=table.column("chunk").to_pylist(),
            counts=table.column("count").to_pylist(),
            pattern=meta.get("pattern"),
            special_tokens=tuple(meta.get("special_tokens", ())),
        )
    if unit.kind == "counts-csv":
        return _read_batchbpe_csv(unit.path)
    raise ValueError(f"{unit.describe()} is not a counts file")


def _read_batchbpe_csv(path: str) -> CountsFile:
    """BatchBPE's CSV: a header, then chunk,count rows; a last row of count 0 may hold the pattern."""
    chunks: list[bytes] = []
    counts: list[int] = []
    pattern = None
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or len(header) != 2:
            raise ValueError(f"{path}:1: expected a header of two columns (chunk,count), got {header}")
        for line_no, row in enumerate(reader, start=2):
            if len(row) != 2:
                raise ValueError(f"{path}:{line_no}: expected two columns (chunk,count), got {len(row)}")
            try:
                count = int(row[1])
            except ValueError:
                raise ValueError(f"{path}:{line_no}: count {row[1]!r} is not an integer") from None
            if count == 0:
                pattern = row[0]  # BatchBPE stores the split pattern as a row with count 0
                continue
            if count < 0:
                raise ValueError(f"{path}:{line_no}: negative count {count}")
            chunks.append(row[0].encode("utf-8"))
            counts.append(count)
    return CountsFile(chunks=chunks, counts=counts, pattern=pattern, special_tokens=None)


# -- the built-in default corpus ------------------------------------------------------------


def default_corpus_files() -> list[str]:
    """The Python standard library's own sources: text every machine with Python already has.

    Test suites, site-packages and idle's data are left out; the result is sorted so it is the
    same on every run of the same Python.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    files = [
        str(p)
        for p in stdlib.rglob("*.py")
        if not skip.intersection(p.relative_to(stdlib).parts) and p.is_file()
    ]
    if not files:
        raise FileNotFoundError(f"no standard-library sources found under {stdlib}")
    return sorted(files)

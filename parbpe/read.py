"""Planning inputs into work units, and streaming the text of one work unit.

Inputs are paths, globs or directories. Text inputs become work units (one parquet row group, or
one text/jsonl file); counts files (parbpe's parquet, BatchBPE's CSV) are read whole as counts.
Units are sorted so the plan, and everything computed from it, is deterministic.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

COUNTS_MAGIC = b"parbpe.counts"  # parquet key-value metadata marking a parbpe counts file
TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst", ".py")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
READ_BLOCK = 8 << 20  # bytes of a text file decoded at a time


@dataclass(frozen=True, order=True)
class WorkUnit:
    """One piece of input: a parquet row group, a whole text or jsonl file, or a counts file."""

    path: str
    kind: str  # "parquet", "text", "jsonl", "counts-parquet", "counts-csv"
    row_group: int = -1

    def describe(self) -> str:
        return f"{self.path} (row group {self.row_group})" if self.row_group >= 0 else self.path


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


def plan(inputs: Sequence[str]) -> list[WorkUnit]:
    """Expand inputs into sorted work units (one per parquet row group, one per other file)."""
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


def _open_binary(path: str) -> pa.NativeFile:
    compression = next((c for s, c in COMPRESSIONS.items() if path.lower().endswith(s)), None)
    return pa.input_stream(path, compression=compression)


def iter_documents(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[str]:
    """Stream the documents of a text work unit; never holds a whole file's text at once
    (except a text file's pieces between safe cuts, see iter_text_pieces)."""
    if unit.kind == "parquet":
        yield from _parquet_documents(unit, text_column, stats)
    elif unit.kind == "jsonl":
        yield from _jsonl_documents(unit, text_column, stats)
    elif unit.kind == "text":
        yield from iter_text_pieces(unit.path, stats)
    else:
        raise ValueError(f"{unit.describe()} is a counts file, not text")


def _parquet_documents(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[str]:
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
        for batch in pf.iter_batches(batch_size=1024, columns=[text_column], row_groups=[unit.row_group]):
            for text in batch.column(0).to_pylist():
                if text is None:
                    continue
                stats.documents += 1
                stats.bytes += len(text.encode("utf-8")) if not text.isascii() else len(text)
                yield text
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise ValueError(f"{unit.describe()}: corrupt or unreadable parquet data ({exc})") from None


def _jsonl_documents(unit: WorkUnit, text_column: str, stats: ReadStats) -> Iterator[str]:
    with _open_binary(unit.path) as stream:
        for line_no, line in enumerate(_binary_lines(stream), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(_decode(line, stats))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{unit.path}:{line_no}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or text_column not in record:
                keys = list(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(
                    f"{unit.path}:{line_no}: no field {text_column!r} (found {keys}); "
                    "choose one with --text-column"
                )
            text = record[text_column]
            if text is None:
                continue
            if not isinstance(text, str):
                raise ValueError(f"{unit.path}:{line_no}: field {text_column!r} is not a string")
            text = replace_surrogates(text, stats)
            stats.documents += 1
            stats.bytes += len(line)
            yield text


def _binary_lines(stream: pa.NativeFile) -> Iterator[bytes]:
    rest = b""
    while True:
        block = stream.read(READ_BLOCK)
        if not block:
            break
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


def iter_text_pieces(path: str, stats: ReadStats, block: int = READ_BLOCK) -> Iterator[str]:
    """A text file as one document, yielded in pieces cut only at safe places (see _is_safe_cut),
    so that chunk counts equal those of the whole file while memory stays near one block."""
    stats.documents += 1
    with _open_binary(path) as stream:
        buffer = b""
        while True:
            data = stream.read(block)
            if not data:
                break
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

"""Reading counts files: parbpe's parquet (chunk, count; pattern and specials in the metadata) and
BatchBPE's CSV (chunk,count rows; a last row of count 0 may hold the split pattern).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import dataclass

import pyarrow.parquet as pq

from .filesystems import open_input_file
from .units import WorkUnit

COUNTS_MAGIC = b"parbpe.counts"  # parquet key-value metadata marking a parbpe counts file


@dataclass
class CountsFile:
    chunks: list[bytes]
    counts: list[int]
    pattern: str | None
    special_tokens: tuple[str, ...] | None


def read_counts(unit: WorkUnit) -> CountsFile:
    """Read a parbpe counts parquet file or a BatchBPE counts CSV."""
    if unit.kind == "counts-parquet":
        with open_input_file(unit.path) as source:
            table = pq.read_table(source)
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
    with open_input_file(path) as source, io.TextIOWrapper(source, encoding="utf-8", newline="") as f:
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

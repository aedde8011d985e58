"""What parbpe reads: the kinds of input file, and the work unit that names one piece of one.

A work unit is a parquet row group, a byte range of an uncompressed text or jsonl file, a whole
compressed file, or a counts file. Units sort, so a plan (and all computed from it) is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst", ".py")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


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


def kind_of(path: str) -> str | None:
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


def compression(path: str) -> str | None:
    return next((c for s, c in COMPRESSIONS.items() if path.lower().endswith(s)), None)

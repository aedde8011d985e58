"""What parbpe reads: the kinds of input file, and the work unit that names one piece of one.

A work unit is a parquet row group, a byte range of an uncompressed text or jsonl file, a whole
compressed file, a range of record batches of an Arrow stream file (a Hugging Face `datasets` cache
file), or a counts file. Units sort, so a plan (and all computed from it) is deterministic.
A file of any other extension is read as UTF-8 text, unless its first bytes show it is binary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst", ".py")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
SNIFF_BYTES = 8192  # how much of a file's start binary detection reads

# Signatures of binary formats at the start of a file, with what to say about them.
MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed data (name it .gz to read it compressed)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data (name it .zst to read it compressed)"),
    (b"PK\x03\x04", "a zip archive (unpack it first)"),
    (b"\x89PNG", "a PNG image"),
    (b"\x7fELF", "an ELF executable"),
    (b"%PDF", "a PDF document (extract its text first)"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"BZh", "bzip2-compressed data (decompress it first)"),
    (b"\xfd7zXZ\x00", "xz-compressed data (decompress it first)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive (unpack it first)"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"PAR1", "parquet data (name it .parquet)"),
    (b"ARROW1", "an Arrow file"),
)


@dataclass(frozen=True, order=True)
class WorkUnit:
    """One piece of input: a parquet row group, a byte range of a text or jsonl file, or a counts file.

    A byte range [start, end) is nominal: the unit reads from the first cut at or after start to
    the first cut at or after end (see snap_text, snap_line), so neighbouring units tile the file.
    end == -1 means the end of the file.
    """

    path: str
    kind: str  # "parquet", "text", "jsonl", "arrow", "counts-parquet", "counts-csv"
    row_group: int = -1
    start: int = 0
    end: int = -1
    # A parquet row group's uncompressed bytes, read with the file's footer when planned (0: not known):
    # what reading it holds at once, asked for every unit (plan.unit_text_bytes) without opening the file
    # again. Not part of what the unit is (its key, its order).
    size: int = field(default=0, compare=False)

    def describe(self) -> str:
        if self.kind == "arrow":
            return f"{self.path} (record batches {self.start}-{self.end - 1})"
        if self.row_group >= 0:
            return f"{self.path} (row group {self.row_group})"
        if self.start or self.end != -1:
            return f"{self.path} (bytes {self.start}-{self.end if self.end != -1 else 'end'})"
        return self.path


def kind_of(path: str) -> str:
    """How a file is read, from its name: parquet, counts-csv, jsonl, arrow, or text (any other name)."""
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
    if name.endswith(".arrow"):
        return "arrow"
    return "text"


def binary_reason(head: bytes, known_text: bool = False) -> str | None:
    """Why a file starting with head is not text (a known binary signature, or NUL bytes), or None.

    NUL bytes are only a sign for files of unknown extension: a .txt or .jsonl file is taken at its
    word (NUL is a valid character), but no text file starts with a binary format's signature.
    """
    for magic, what in MAGICS:
        if head.startswith(magic):
            return what
    if not known_text and b"\x00" in head[:SNIFF_BYTES]:
        return "binary data (NUL bytes in its first 8 KB)"
    return None


def has_text_suffix(path: str) -> bool:
    """True for the extensions that say a file is text or jsonl (.txt, .md, .jsonl, ...)."""
    return path.lower().endswith(TEXT_SUFFIXES + JSONL_SUFFIXES)


def compression(path: str) -> str | None:
    return next((c for s, c in COMPRESSIONS.items() if path.lower().endswith(s)), None)

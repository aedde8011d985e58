"""A deterministic sample of documents (--sample-docs, --sample-bytes with --seed).

A document is in the sample when a keyed hash of its UTF-8 bytes (BLAKE2b, 8 bytes, keyed by the
seed) falls below share x 2^64: the decision depends on the document alone, so the sample is the same
whatever the work units, worker count or executor, and a resumed run reads the same one. Equal
documents are all in or all out. A plain text file is one document to parbpe: there the line (with
its "\n") is what is sampled, as sentencepiece samples sentences, and the kept lines are counted as
one text (a line cut by a work unit's boundary, in files over 64 MB, is two lines).

--sample-bytes becomes a share of the input's text bytes (as the files' sizes and parquet metadata
give them) before any work: the sample then holds about that many bytes, and stats.json says how
many it has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .filesystems import file_size
from .readers import ReadStats, arrow_batch_sizes, open_parquet
from .units import WorkUnit

_SCALE = 2.0**64


def sample_mask(texts: pa.Array, share: float, seed: int) -> np.ndarray:
    """True for the documents of a string array that are in the sample."""
    key, below = _key(seed), _below(share)
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    texts = texts.cast(pa.large_string()) if texts.type != pa.large_string() else texts
    validity, offsets, data = texts.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64)[texts.offset:texts.offset + len(texts) + 1]
    raw = memoryview(data) if data is not None else memoryview(b"")
    out = np.fromiter(
        (_hash(raw[a:b], key) < below
         for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())), dtype=bool, count=len(texts))
    if validity is not None:
        out &= texts.is_valid().to_numpy(zero_copy_only=False)
    return out


def sample_lines(pieces: Iterator[pa.Array], share: float | None, seed: int, stats: ReadStats
                 ) -> Iterator[pa.Array]:
    """The kept lines of a text file's pieces (string arrays of one piece each), a piece's kept lines
    as one string; a line that runs across pieces is put together first."""
    if share is None:
        yield from pieces
        return
    key, below = _key(seed), _below(share)
    carry = ""
    for piece in pieces:
        lines = (carry + piece[0].as_py()).split("\n")
        carry = lines.pop()
        kept_lines = [line + "\n" for line in lines if _hash(f"{line}\n".encode(), key) < below]
        kept = "".join(kept_lines)
        stats.sampled_documents += len(kept_lines)  # lines, for a text file
        stats.sampled_bytes += len(kept.encode())
        yield pa.array([kept], pa.string())
    if carry and _hash(carry.encode(), key) < below:
        stats.sampled_documents += 1
        stats.sampled_bytes += len(carry.encode())
        yield pa.array([carry], pa.string())


def _key(seed: int) -> bytes:
    return seed.to_bytes(8, "little", signed=True)


def _below(share: float) -> int:
    return min(int(share * _SCALE), 2**64)


def _hash(data, key: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "little")


def sample_documents(batches: Iterator[pa.Array], share: float | None, seed: int, stats: ReadStats
                     ) -> Iterator[pa.Array]:
    """The documents of each string array that are in the sample (see take_sample)."""
    for texts in batches:
        yield take_sample(texts, share, seed, stats)


def take_sample(texts: pa.Array, share: float | None, seed: int, stats: ReadStats) -> pa.Array:
    """The documents of texts in the sample (all when share is None), counted in stats."""
    if share is None:
        return texts
    if share < 1:
        texts = texts.filter(pa.array(sample_mask(texts, share, seed)))
    stats.sampled_documents += len(texts)
    stats.sampled_bytes += int(pc.sum(pc.binary_length(texts)).as_py() or 0)
    return texts


def sample_summary(config, documents: int, nbytes: int, read_documents: int | None = None) -> dict | None:
    """stats.json's "sample": the share of documents asked for, the seed, what the sample holds, and
    (read_documents: the documents read) the share it took (None: every document was counted)."""
    if config.sample_share is None:
        return None
    summary = {"share": config.sample_share, "seed": config.seed, "sample_bytes": config.sample_bytes,
               "documents": documents, "bytes": nbytes}
    if read_documents is not None:
        summary["taken_share"] = documents / read_documents if read_documents else 0.0
    return summary


def share_for_bytes(units: Sequence[WorkUnit], size: int, text_column: str) -> float:
    """The share of documents that holds about `size` bytes of the units' text (1.0: all of it)."""
    total = sum(unit_text_size(u, text_column) for u in units)
    return 1.0 if total <= size else size / total


def unit_text_size(unit: WorkUnit, text_column: str) -> int:
    """A unit's text bytes without reading it: the parquet column's uncompressed size (text and
    offsets), a byte range's length (text, jsonl: its JSON syntax too), an Arrow file's batches."""
    if unit.kind.startswith("counts"):
        raise ValueError(f"sampling takes documents, which a counts file no longer has ({unit.path}): "
                         "sample the text itself")
    if unit.kind == "parquet":
        group = open_parquet(unit.path).metadata.row_group(unit.row_group)
        for k in range(group.num_columns):
            column = group.column(k)
            if column.path_in_schema == text_column:
                return column.total_uncompressed_size
        return group.total_byte_size
    if unit.kind == "arrow":
        return sum(arrow_batch_sizes(unit.path)[unit.start:unit.end])
    end = file_size(unit.path) if unit.end == -1 else unit.end
    return max(end - unit.start, 0)

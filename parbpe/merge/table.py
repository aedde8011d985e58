"""The chunk table: the corpus as flat numpy arrays that the merge engine edits in place.

Chunk c owns the slots tokens[starts[c] : starts[c + 1]]; its current tokens are the first
lengths[c] of them (merging only ever shortens a chunk, so it never outgrows its slots). Chunks of
one byte carry no pair and are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every token id fits, else int32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


@dataclass
class ChunkTable:
    tokens: np.ndarray  # token ids, uint16 or int32
    starts: np.ndarray  # int64, n_chunks + 1 region boundaries
    lengths: np.ndarray  # int64, current number of tokens per chunk
    counts: np.ndarray  # int64, how often each chunk occurs in the corpus

    @property
    def n_chunks(self) -> int:
        return len(self.counts)

    def chunk_tokens(self, c: int) -> list[int]:
        """Current tokens of chunk c (for tests and debugging)."""
        start = int(self.starts[c])
        return self.tokens[start : start + int(self.lengths[c])].tolist()


def build_table(chunks: Sequence[bytes], counts: Sequence[int], vocab_size: int) -> ChunkTable:
    """Lay chunks (as UTF-8 bytes) and their counts out as a ChunkTable, in the order given."""
    lengths = np.fromiter((len(c) for c in chunks), dtype=np.int64, count=len(chunks))
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    return table_from_arrays(data, offsets, np.asarray(counts, dtype=np.int64), vocab_size)


def table_from_arrays(data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, vocab_size: int,
                      min_count: int = 1, dtype: np.dtype | None = None) -> ChunkTable:
    """The ChunkTable of chunks given as flat arrays (chunk k is data[offsets[k]:offsets[k + 1]],
    seen counts[k] times), in the order given, leaving out chunks seen fewer than min_count times.
    dtype: the tokens' (default token_dtype(vocab_size); uint8 for a table of bytes to encode with
    earlier merges, merge/encode.py, which reads them as uint8: no copy there)."""
    lengths = np.diff(offsets)
    keep = lengths > 1
    if min_count > 1:
        keep &= counts >= min_count
    kept_lengths = lengths[keep]
    starts = np.zeros(len(kept_lengths) + 1, dtype=np.int64)
    np.cumsum(kept_lengths, out=starts[1:])
    tokens = data[np.repeat(keep, lengths)].astype(dtype or token_dtype(vocab_size), copy=False)
    return ChunkTable(tokens=tokens, starts=starts, lengths=kept_lengths, counts=counts[keep].astype(np.int64))


def tokens_by_cutoff(offsets: np.ndarray, counts: np.ndarray, largest: int) -> tuple[np.ndarray, np.ndarray]:
    """For every min_count m in 1..largest: (chunks, tokens) of the table that keeps chunks seen at
    least m times, as two arrays indexed by m (index 0 unused), from one pass over the counts."""
    lengths = np.diff(offsets)
    return sum_by_cutoff(offsets, counts, largest), sum_by_cutoff(offsets, counts, largest, lengths)


def sum_by_cutoff(offsets: np.ndarray, counts: np.ndarray, largest: int, per_chunk: np.ndarray | None = None
                  ) -> np.ndarray:
    """For every min_count m in 1..largest: the sum of per_chunk (default 1 a chunk) over the chunks
    the table keeps at that cutoff (longer than one byte, seen at least m times), indexed by m."""
    multi = np.diff(offsets) > 1
    capped = np.minimum(counts[multi], largest)
    weights = None if per_chunk is None else per_chunk[multi]
    return np.bincount(capped, weights=weights, minlength=largest + 1)[::-1].cumsum()[::-1].astype(np.int64)

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
    keep = [i for i, c in enumerate(chunks) if len(c) > 1]
    kept = [chunks[i] for i in keep]
    lengths = np.fromiter((len(c) for c in kept), dtype=np.int64, count=len(kept))
    starts = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    tokens = np.frombuffer(b"".join(kept), dtype=np.uint8).astype(token_dtype(vocab_size))
    count_arr = np.asarray(counts, dtype=np.int64)[keep] if keep else np.zeros(0, dtype=np.int64)
    return ChunkTable(tokens=tokens, starts=starts, lengths=lengths.copy(), counts=count_arr)

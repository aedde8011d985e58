"""A table of bytes encoded with earlier merges before it merges on (SuperBPE's stage 2, --init):
in this process, or in merge workers at once when the table is large, which then go on to merge it."""

from __future__ import annotations

import numpy as np

from ..run.memory import trim_heap
from . import workers as workers_module
from .encode import encode_byte_table
from .table import ChunkTable, token_dtype
from .workers import SlicedEngine

# A worker encoding a slice of SuperBPE's stage-2 table (encode_for_merging) must get this many
# bytes: a spawned worker's start must be small beside the encoding it takes over.
MIN_BYTES_PER_ENCODE_WORKER = 16_000_000


def encode_for_merging(table: ChunkTable, merges: list[tuple[int, int]], batch_sizes: list[int], vocab_size: int,
                       workers: int = 1, start_method: str | None = None, *, threads: int = 1,
                       min_bytes_per_worker: int | None = None, min_tokens_per_worker: int | None = None
                       ) -> tuple[ChunkTable, SlicedEngine | None, int]:
    """A table of bytes encoded with merges (merge/encode.py), ready for learn_merges: (the encoded
    table, the merge workers that hold it or None, the processes that encoded it). Where the kernels
    encode it and workers is at most 2, in this process, in `threads` threads (the kernels then merge
    it here too: workers.merge_workers); else, with workers > 1 and at least MIN_BYTES_PER_ENCODE_WORKER bytes
    each, the slices encode in merge workers at once, and those workers go on to merge the table if
    its slices are worth it (MIN_TOKENS_PER_WORKER tokens each; else they stop and the table, in
    shared memory, merges in this process). The caller lets go of `table` (the workers' copy is then
    the only one) and passes the result to learn_merges(sliced=...). min_bytes_per_worker and
    min_tokens_per_worker override those two thresholds (None: the defaults), the kernels' too."""
    dtype = token_dtype(vocab_size)
    here = min_bytes_per_worker is None and workers_module.kernels_alone(len(table.tokens), workers)
    per_worker = MIN_BYTES_PER_ENCODE_WORKER if min_bytes_per_worker is None else min_bytes_per_worker
    workers = min(workers, len(table.tokens) // max(per_worker, 1))
    if here or workers <= 1 or table.n_chunks < 2 * workers:
        return encode_byte_table(table, merges, batch_sizes, dtype=dtype, threads=threads), None, 1
    trim_heap()  # what this process freed (the counts the table was made of) goes back before the workers start
    sliced = SlicedEngine(table, workers, start_method=start_method, token_dtype=np.dtype(np.uint8),
                          fault_stage="encode")  # PARBPE_TEST_KILL=encode:1 kills it while encoding
    try:
        sliced.encode(merges, batch_sizes, dtype)
    except BaseException:
        sliced.close()
        raise
    per_worker = workers_module.MIN_TOKENS_PER_WORKER if min_tokens_per_worker is None else min_tokens_per_worker
    if len(sliced.table.tokens) < sliced.workers * per_worker:
        sliced.close()
        return sliced.table, None, workers
    return sliced.table, sliced, workers

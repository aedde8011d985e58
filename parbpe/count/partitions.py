"""Hash partitions and run files: how partial counts travel from counting to reducing.

A chunk's partition is a fixed polynomial hash of its UTF-8 bytes (numpy, wrapping uint64), the
same in every process and start method. A run file is Arrow IPC holding one record batch per
partition, so the global counts of partition p are the sum of batch p of every run.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from .. import jit
from ..io.atomic import disk_full
from ..kernels.partitions import BASE, MULT, partition_hashes
from .byte_order import byte_order
from .pieces import SCHEMA, sum_tables

N_PARTITIONS = 32
_STRING_BYTES = 2**31 - 1  # what a string (not large_string) array's offsets reach
_HASH_ROWS = 1 << 18  # rows hashed per numpy pass (bounds the temporary arrays) ...
_HASH_BYTES = 1 << 22  # ... and bytes (a longer row is hashed alone, in windows of this size)
_REPEATS = {"parbpe.rows": "a chunk may be in several rows"}  # a run file's schema metadata (write_run)


def partition_ids(chunks: pa.Array | pa.ChunkedArray, n_partitions: int = N_PARTITIONS) -> np.ndarray:
    """A fixed hash of each chunk's UTF-8 bytes, modulo n_partitions (the same in every process).

    Rows are hashed in slices of at most _HASH_ROWS rows and _HASH_BYTES bytes (the temporaries are
    several uint64 per byte); a row longer than that (one chunk of megabytes: hostile text) is
    hashed alone, a window of bytes at a time, to the same value."""
    if isinstance(chunks, pa.ChunkedArray):
        chunks = chunks.combine_chunks() if chunks.num_chunks != 1 else chunks.chunk(0)
    chunks = chunks.cast(pa.large_binary())
    out = np.empty(len(chunks), dtype=np.int64)
    _, offsets_buf, data_buf = chunks.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[chunks.offset: chunks.offset + len(chunks) + 1]
    if len(chunks) and _kernel_hashes():
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        partition_hashes(data, offsets, n_partitions, out)
        return out
    first = 0
    while first < len(chunks):
        last = int(np.searchsorted(offsets, offsets[first] + _HASH_BYTES, side="right")) - 1
        last = min(max(last, first + 1), first + _HASH_ROWS, len(chunks))
        part = chunks.slice(first, last - first)
        out[first:last] = (_hash_long(part) if offsets[last] - offsets[first] > _HASH_BYTES
                           else _hash_slice(part)) % n_partitions
        first = last
    return out


def _kernel_hashes() -> bool:
    """Whether partition_hashes hashes (the same ids): where numba is loaded in this process already
    (SuperBPE's second count forks its workers from a parent that merged with the kernels), or --jit
    on (enabled() then imports it). The numpy hash makes several uint64 arrays per byte, several times
    the kernel's time on SuperBPE's superword counts."""
    return jit.warm()


def _hash_slice(chunks: pa.Array) -> np.ndarray:
    """Polynomial hash over bytes (wrapping uint64 arithmetic), then mixed; keeps the top bits."""
    _, offsets_buf, data_buf = chunks.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[chunks.offset: chunks.offset + len(chunks) + 1]
    lengths = np.diff(offsets)
    h = lengths.astype(np.uint64) * MULT
    nonempty = lengths > 0
    if data_buf is not None and nonempty.any():
        data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0]: offsets[-1]].astype(np.uint64)
        starts = offsets[:-1] - offsets[0]
        pos = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
        sums = np.add.reduceat(data * _powers(int(lengths.max()))[pos], starts[nonempty])
        h[nonempty] ^= sums
    return _mix(h)


def _hash_long(chunks: pa.Array) -> np.ndarray:
    """_hash_slice of one long row, summed a window of _HASH_BYTES bytes at a time: the sum over
    window k is the window's own sum times BASE ** (k * _HASH_BYTES) (wrapping arithmetic
    distributes), so no temporary is larger than a window."""
    _, offsets_buf, data_buf = chunks.buffers()
    lo, hi = np.frombuffer(offsets_buf, dtype=np.int64)[chunks.offset: chunks.offset + 2]
    data = np.frombuffer(data_buf, dtype=np.uint8)[lo:hi]
    powers = _powers(_HASH_BYTES)
    step = powers[-1:] * BASE  # BASE ** _HASH_BYTES, as a one-element array (wraps silently)
    scale = np.ones(1, dtype=np.uint64)
    total = np.zeros(1, dtype=np.uint64)
    for start in range(0, len(data), _HASH_BYTES):
        window = data[start:start + _HASH_BYTES].astype(np.uint64)
        window *= powers[:len(window)]
        total += scale * np.add.reduce(window, dtype=np.uint64)
        scale *= step
    return _mix(np.array([hi - lo], dtype=np.uint64) * MULT ^ total)


def _powers(n: int) -> np.ndarray:
    """BASE ** i for i < n (wrapping uint64)."""
    powers = np.cumprod(np.full(n, BASE, dtype=np.uint64))
    return np.concatenate([np.ones(1, dtype=np.uint64), powers[:-1]])


def _mix(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint64(31)
    h *= MULT
    h ^= h >> np.uint64(29)
    return (h >> np.uint64(33)).astype(np.int64)


def write_run(path: str, table: pa.Table, n_partitions: int = N_PARTITIONS, distinct: bool = True) -> None:
    """Write counts as a run file: record batch p holds the rows of partition p. distinct=False: a
    chunk may be in several rows (the file says so: read_partition then sums even a lone run)."""
    pids = partition_ids(table.column("chunk"), n_partitions)
    # numpy's stable sort of one-byte values is a radix sort, several times faster than one of int64 ids
    order = np.argsort(pids.astype(np.uint8) if n_partitions <= 256 else pids, kind="stable")
    bounds = np.zeros(n_partitions + 1, np.int64)
    np.cumsum(np.bincount(pids, minlength=n_partitions), out=bounds[1:])
    batches = table.take(pa.array(order)).combine_chunks().to_batches()
    batch = batches[0] if batches else pa.RecordBatch.from_arrays(
        [pa.array([], pa.string()), pa.array([], pa.int64())], schema=SCHEMA)
    try:
        schema = SCHEMA if distinct else SCHEMA.with_metadata(_REPEATS)
        with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, schema) as writer:
            for p in range(n_partitions):
                writer.write_batch(batch.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])))
    except OSError as exc:
        if os.path.exists(path):
            os.unlink(path)
        if exc.errno == errno.ENOSPC or "No space left" in str(exc):
            raise disk_full(path, needed=batch.nbytes, hint="free some space there, or put the spilled counts "
                            "elsewhere (--run-dir for train, --tmp-dir for count)") from None
        raise


def read_partition(runs: Iterable[str], partition: int) -> pa.Table:
    """The global counts of one partition: batch `partition` of every run, summed."""
    tables, distinct = [], True
    for path in runs:
        with pa.OSFile(path, "rb") as source:
            reader = ipc.open_file(source)
            distinct = distinct and not _rows_repeat(reader.schema)
            tables.append(pa.Table.from_batches([reader.get_batch(partition)], schema=SCHEMA))
    return sum_tables(tables, distinct)


def _rows_repeat(schema: pa.Schema) -> bool:
    """Whether a run file's schema says a chunk may be in several of its rows (write_run)."""
    return (schema.metadata or {}).get(b"parbpe.rows") == _REPEATS["parbpe.rows"].encode()


def split_partitions(table: pa.Table, n_partitions: int = N_PARTITIONS) -> Iterator[pa.Table]:
    """A counts table held whole, cut into its hash partitions in order (like read_partition gives)."""
    pids = partition_ids(table.column("chunk"), n_partitions)
    for p in range(n_partitions):
        yield table.filter(pa.array(pids == p))


def sort_by_chunk(table: pa.Table) -> pa.Table:
    """Rows in the order of their chunk's UTF-8 bytes (byte_order.py; pyarrow's sort past 2 GB of chunks)."""
    chunks = table.column("chunk")
    if (pc.sum(pc.binary_length(chunks)).as_py() or 0) >= _STRING_BYTES:
        return table.take(pc.sort_indices(chunks.cast(pa.large_binary())))
    return table.take(pa.array(byte_order(chunks.cast(pa.string()).combine_chunks())))

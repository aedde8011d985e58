"""Reducing: partial counts become the global chunk counts, then freq_cutoff and the stop list.

The count stage leaves its partial counts in run files: Arrow IPC files holding one record batch
per partition, where a chunk's partition is a fixed hash of its bytes (partition_ids). So the
global counts of partition p are the sum of batch p of every run, and partitions are reduced one
per task, in parallel, never all in memory at once. The same hash orders the rows of counts files
(by partition, then chunk bytes), so a counts file is the same whether the run spilled or not.

Counts files (parquet: chunk as binary, count as int64, pattern and special tokens in the
metadata) made with the same pattern add up; they enter the runs like counted text.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from .config import TrainConfig
from .pieces import SCHEMA, sum_tables
from .pool import get_context, parallel
from .read import COUNTS_MAGIC, WorkUnit, read_counts

N_PARTITIONS = 32
_HASH_ROWS = 1 << 18  # rows hashed per numpy pass (bounds the temporary arrays)
_MULT = np.uint64(0x9E3779B97F4A7C15)


# -- partitions and run files ---------------------------------------------------------------


def partition_ids(chunks: pa.Array | pa.ChunkedArray, n_partitions: int = N_PARTITIONS) -> np.ndarray:
    """A fixed hash of each chunk's UTF-8 bytes, modulo n_partitions (the same in every process)."""
    if isinstance(chunks, pa.ChunkedArray):
        chunks = chunks.combine_chunks() if chunks.num_chunks != 1 else chunks.chunk(0)
    chunks = chunks.cast(pa.large_binary())
    out = np.empty(len(chunks), dtype=np.int64)
    for first in range(0, len(chunks), _HASH_ROWS):
        part = chunks.slice(first, _HASH_ROWS)
        out[first:first + len(part)] = _hash_slice(part) % n_partitions
    return out


def _hash_slice(chunks: pa.Array) -> np.ndarray:
    """Polynomial hash over bytes (wrapping uint64 arithmetic), then mixed; keeps the top bits."""
    _, offsets_buf, data_buf = chunks.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[chunks.offset: chunks.offset + len(chunks) + 1]
    lengths = np.diff(offsets)
    h = lengths.astype(np.uint64) * _MULT
    nonempty = lengths > 0
    if data_buf is not None and nonempty.any():
        data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0]: offsets[-1]].astype(np.uint64)
        starts = offsets[:-1] - offsets[0]
        pos = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
        powers = np.cumprod(np.full(int(lengths.max()), np.uint64(1099511628211), dtype=np.uint64))
        powers = np.concatenate([np.ones(1, dtype=np.uint64), powers[:-1]])
        sums = np.add.reduceat(data * powers[pos], starts[nonempty])
        h[nonempty] ^= sums
    h ^= h >> np.uint64(31)
    h *= _MULT
    h ^= h >> np.uint64(29)
    return (h >> np.uint64(33)).astype(np.int64)


def write_run(path: str, table: pa.Table, n_partitions: int = N_PARTITIONS) -> None:
    """Write counts as a run file: record batch p holds the rows of partition p."""
    pids = partition_ids(table.column("chunk"), n_partitions)
    order = np.argsort(pids, kind="stable")
    bounds = np.searchsorted(pids[order], np.arange(n_partitions + 1))
    batches = table.take(pa.array(order)).combine_chunks().to_batches()
    batch = batches[0] if batches else pa.RecordBatch.from_arrays(
        [pa.array([], pa.string()), pa.array([], pa.int64())], schema=SCHEMA)
    with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, SCHEMA) as writer:
        for p in range(n_partitions):
            writer.write_batch(batch.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])))


def read_partition(runs: Iterable[str], partition: int) -> pa.Table:
    """The global counts of one partition: batch `partition` of every run, summed."""
    tables = []
    for path in runs:
        with pa.OSFile(path, "rb") as source:
            reader = ipc.open_file(source)
            tables.append(pa.Table.from_batches([reader.get_batch(partition)], schema=SCHEMA))
    return sum_tables(tables)


def sort_by_chunk(table: pa.Table) -> pa.Table:
    """Rows in the order of their chunk's UTF-8 bytes."""
    order = pc.sort_indices(table.column("chunk").cast(pa.large_binary()))
    return table.take(order)


# -- freq_cutoff and the stop list ----------------------------------------------------------


@dataclass
class Selection:
    """One partition's share of the training chunks (or, after combine, all of them)."""

    kept: pa.Table  # chunks with count >= freq_cutoff
    stop_candidates: pa.Table  # the partition's top stop_list_size chunks longer than one character
    unique_chunks: int
    total_chunks: int
    dropped_by_cutoff: int


def select_partition(table: pa.Table, config: TrainConfig) -> Selection:
    """freq_cutoff on one partition's global counts, and its candidates for the stop list."""
    counts = table.column("count")
    candidates = SCHEMA.empty_table()
    if config.stop_list_size:
        long = table.filter(pc.greater(pc.utf8_length(table.column("chunk")), 1))
        candidates = _top(long, config.stop_list_size)
    kept = table.filter(pc.greater_equal(counts, config.freq_cutoff)) if config.freq_cutoff > 1 else table
    return Selection(kept=kept, stop_candidates=candidates, unique_chunks=table.num_rows,
                     total_chunks=pc.sum(counts).as_py() or 0, dropped_by_cutoff=table.num_rows - kept.num_rows)


def _top(table: pa.Table, n: int) -> pa.Table:
    """The n rows of greatest (count, chunk bytes)."""
    keyed = pa.table({"count": table.column("count"), "bytes": table.column("chunk").cast(pa.large_binary())})
    order = pc.sort_indices(keyed, sort_keys=[("count", "descending"), ("bytes", "descending")])
    return table.take(order[:n])


@dataclass
class TrainingChunks:
    """What the merge stage trains on: chunks (UTF-8 bytes, sorted) and counts, plus the stop list."""

    chunks: list[bytes]
    counts: list[int]
    stop_words: list[bytes]  # in token order: stop word k is token 256 + k
    unique_chunks: int  # before freq_cutoff and the stop list
    total_chunks: int  # occurrences, before freq_cutoff and the stop list
    dropped_by_cutoff: int


def combine_selections(selections: list[Selection], config: TrainConfig) -> TrainingChunks:
    """The stop list from every partition's candidates; the kept chunks minus stop words, sorted.

    Stop list (BatchBPE): the stop_list_size most frequent chunks longer than one character get
    whole-chunk tokens and leave training; ties go to the greater chunk bytes, as for pairs.
    """
    stop_words: list[bytes] = []
    kept = pa.concat_tables([s.kept for s in selections]) if selections else SCHEMA.empty_table()
    if config.stop_list_size:
        top = _top(pa.concat_tables([s.stop_candidates for s in selections]), config.stop_list_size)
        stop_words = [c.encode("utf-8") for c in top.column("chunk").to_pylist()]
        if stop_words:
            kept = kept.filter(pc.invert(pc.is_in(kept.column("chunk"), value_set=top.column("chunk"))))
    kept = sort_by_chunk(kept)
    return TrainingChunks(
        chunks=kept.column("chunk").cast(pa.large_binary()).to_pylist(),
        counts=kept.column("count").to_pylist(),
        stop_words=stop_words,
        unique_chunks=sum(s.unique_chunks for s in selections),
        total_chunks=sum(s.total_chunks for s in selections),
        dropped_by_cutoff=sum(s.dropped_by_cutoff for s in selections),
    )


def select_training_chunks(table: pa.Table, config: TrainConfig) -> TrainingChunks:
    """freq_cutoff and the stop list on global counts held in one table."""
    return combine_selections([select_partition(table, config)], config)


def _partition_job(args: tuple[list[str], int]) -> pa.Table:
    runs, partition = args
    try:
        return read_partition(runs, partition)
    except Exception as exc:
        raise RuntimeError(f"reducing partition {partition} failed: {exc}") from exc


def _select_job(args: tuple[list[str], int, TrainConfig]) -> Selection:
    runs, partition, config = args
    return select_partition(_partition_job((runs, partition)), config)


def reduce_runs(runs: list[str], workers: int = 1, start_method: str | None = None,
                on_progress: Callable[[int, int], None] | None = None, config: TrainConfig | None = None,
                n_partitions: int = N_PARTITIONS) -> Iterator:
    """The global counts of every partition, in partition order: one task per partition, on
    `workers` processes. With config, each partition comes as its Selection instead."""
    if config is None:
        func, tasks = _partition_job, [(runs, p) for p in range(n_partitions)]
    else:
        func, tasks = _select_job, [(runs, p, config) for p in range(n_partitions)]
    if workers <= 1:
        results: Iterable = map(func, tasks)
    else:
        results = parallel(func, tasks, workers, get_context(start_method))
    for done, result in enumerate(results, start=1):
        if on_progress:
            on_progress(done, n_partitions)
        yield result


# -- counts files ---------------------------------------------------------------------------


def counts_file_table(unit: WorkUnit, config: TrainConfig) -> pa.Table:
    """A counts file as a counts table, checking it was made with this run's pattern and specials."""
    counts = read_counts(unit)
    if counts.pattern is not None and counts.pattern != config.pattern:
        raise ValueError(
            f"{unit.path} was counted with the pattern {counts.pattern!r}, but this run uses "
            f"{config.pattern!r}; pass the same pattern (--pattern) or recount the text"
        )
    if counts.special_tokens is not None and tuple(counts.special_tokens) != config.special_tokens:
        raise ValueError(
            f"{unit.path} was counted with special tokens {list(counts.special_tokens)}, but this "
            f"run uses {list(config.special_tokens)}; pass the same --special-tokens"
        )
    try:
        chunks = pa.array(counts.chunks, pa.large_binary()).cast(pa.string())
    except pa.ArrowInvalid:
        raise ValueError(f"{unit.path}: a chunk is not valid UTF-8; the counts file is damaged") from None
    return sum_tables([pa.table({"chunk": chunks, "count": pa.array(counts.counts, pa.int64())}, schema=SCHEMA)])


def load_counts_files(units: Iterable[WorkUnit], config: TrainConfig) -> pa.Table:
    """Counts files added up into one counts table (for tools that start from counts)."""
    return sum_tables([counts_file_table(u, config) for u in units])


def write_counts_file(path: str, partitions: Iterable[pa.Table], config: TrainConfig, freq_cutoff: int = 0) -> int:
    """Write counts as parquet, one row group per partition in order (rows sorted by chunk bytes
    within each), atomically; partitions come from read_partition or split_partitions. Returns rows."""
    schema = pa.schema([("chunk", pa.binary()), ("count", pa.int64())])
    meta = {"pattern": config.pattern, "special_tokens": list(config.special_tokens),
            "freq_cutoff": freq_cutoff, "format": 1}
    schema = schema.with_metadata({COUNTS_MAGIC: json.dumps(meta).encode()})
    rows = 0

    def write(tmp: str) -> None:
        nonlocal rows
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for table in partitions:
                if freq_cutoff > 1:
                    table = table.filter(pc.greater_equal(table.column("count"), freq_cutoff))
                table = sort_by_chunk(table)
                out = pa.table([table.column("chunk").cast(pa.binary()), table.column("count")], schema=schema)
                writer.write_table(out)
                rows += out.num_rows

    write_atomically(path, write)
    return rows


def split_partitions(table: pa.Table, n_partitions: int = N_PARTITIONS) -> Iterator[pa.Table]:
    """A counts table held whole, cut into its hash partitions in order (like read_partition gives)."""
    pids = partition_ids(table.column("chunk"), n_partitions)
    for p in range(n_partitions):
        yield table.filter(pa.array(pids == p))


def write_atomically(path: str, write) -> None:
    """Call write(temporary path) next to path, then rename it into place."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes private files; outputs get the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

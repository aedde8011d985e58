"""Stage 3, reduce: partial counts become the global chunk counts, then freq_cutoff and the stop list.

Partitions are reduced one per task, in parallel, never all in memory at once; freq_cutoff applies
to global counts only. The parent picks the stop list from every partition's candidates and sorts
the kept chunks by bytes, so the result never depends on which worker finished first. Where only
the merges are made of them (SuperBPE's stage 2), each task sorts its own partition instead and the
parent joins them in partition order: as independent of the workers, and without the parent's sort
of every chunk (by_partition). Stage 1 keeps the byte order although its merges do not depend on it
either: chunks that share their first bytes lie side by side, so a pair's occurrences cluster in the
table, and the merge stage is faster on them by more than the parent's sort costs (docs/DECISIONS.md,
"Reduce and counts").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import TrainConfig
from ..run.pool import get_context, parallel
from ..run.run_dir import counts_arrays, write_counts
from .partitions import N_PARTITIONS, read_partition, sort_by_chunk
from .pieces import COUNT_LIMIT, SCHEMA


@dataclass
class Selection:
    """One partition's share of the training chunks (or, after combine, all of them)."""

    kept: pa.Table  # chunks with count >= freq_cutoff
    stop_candidates: pa.Table  # the partition's top stop_list_size chunks longer than one character
    unique_chunks: int
    total_chunks: int
    dropped_by_cutoff: int
    sorted: bool = False  # kept is in the order of its chunks' bytes
    part: tuple[str, int, int] | None = None  # (path, chunks, bytes) where kept was written instead (reduce_runs)


def select_partition(table: pa.Table, config: TrainConfig, sort: bool = False) -> Selection:
    """freq_cutoff on one partition's global counts, and its candidates for the stop list; sort: the
    kept chunks sorted by their bytes (sort_by_chunk)."""
    counts = table.column("count")
    candidates = SCHEMA.empty_table()
    if config.stop_list_size:
        long = pc.greater(pc.utf8_length(table.column("chunk")), 1)
        if config.max_token_bytes:  # a stop word is a token: no longer than the cap
            long = pc.and_(long, pc.less_equal(pc.binary_length(table.column("chunk")), config.max_token_bytes))
        long = table.filter(long)
        candidates = _top(long, config.stop_list_size)
    kept = table.filter(pc.greater_equal(counts, config.freq_cutoff)) if config.freq_cutoff > 1 else table
    return Selection(kept=sort_by_chunk(kept) if sort else kept, stop_candidates=candidates,
                     unique_chunks=table.num_rows, total_chunks=pc.sum(counts).as_py() or 0,
                     dropped_by_cutoff=table.num_rows - kept.num_rows, sorted=sort)


def _top(table: pa.Table, n: int) -> pa.Table:
    """The n rows of greatest (count, chunk bytes)."""
    keyed = pa.table({"count": table.column("count"), "bytes": table.column("chunk").cast(pa.large_binary())})
    order = pc.sort_indices(keyed, sort_keys=[("count", "descending"), ("bytes", "descending")])
    return table.take(order[:n])


@dataclass
class TrainingChunks:
    """What the merge stage trains on, as flat arrays (no Python object per chunk): chunk k is
    data[offsets[k]:offsets[k + 1]] (UTF-8 bytes, chunks sorted by bytes, or by bytes within each
    reduce partition where the selections were sorted so) seen counts[k] times; plus the stop list."""

    data: np.ndarray  # uint8, every chunk's bytes one after another
    offsets: np.ndarray  # int64, n + 1 boundaries into data, from 0
    counts: np.ndarray  # int64
    stop_words: list[bytes]  # in token order: stop word k is token 256 + k
    unique_chunks: int  # before freq_cutoff and the stop list
    total_chunks: int  # occurrences, before freq_cutoff and the stop list
    dropped_by_cutoff: int

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def chunks(self) -> list[bytes]:
        """The chunks as bytes objects (for tests and small tables)."""
        data = self.data.tobytes()
        return [data[a:b] for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())]


def check_pair_counts(data_offsets: np.ndarray, counts: np.ndarray) -> None:
    """Refuse training chunks whose pairs add up past COUNT_LIMIT (a chunk of n bytes holds n - 1 pairs
    at most, seen count times): no pair count, nor a change to one, can then leave int64."""
    pairs = np.maximum(np.diff(data_offsets) - 1, 0).astype(np.float64)
    total = float(np.dot(counts.astype(np.float64), pairs))
    if total > COUNT_LIMIT:
        raise ValueError(f"the training chunks hold about {total:.4g} pairs in all (their counts times their "
                         f"lengths), past the limit of {COUNT_LIMIT:,} (2**62) that parbpe's 64-bit pair counts "
                         "hold exactly: scale the counts down")


def combine_selections(selections: list[Selection], config: TrainConfig) -> TrainingChunks:
    """The stop list from every partition's candidates; the kept chunks minus stop words, sorted (where
    every selection came sorted, select_partition's sort, joined in their order as they are).

    Stop list (BatchBPE): the stop_list_size most frequent chunks longer than one character (and of at
    most max_token_bytes bytes, when set) get whole-chunk tokens and leave training; ties go to the
    greater chunk bytes, as for pairs.

    The selections' kept tables are let go of once joined, and each copy of the chunks once the next
    is made: at a tight budget this is the reduce stage's peak.
    """
    stop_words: list[bytes] = []
    kept = pa.concat_tables([s.kept for s in selections]) if selections else SCHEMA.empty_table()
    for selection in selections:
        selection.kept = SCHEMA.empty_table()
    if config.stop_list_size:
        top = _top(pa.concat_tables([s.stop_candidates for s in selections]), config.stop_list_size)
        stop_words = [c.encode("utf-8") for c in top.column("chunk").to_pylist()]
        if stop_words:
            kept = kept.filter(pc.invert(pc.is_in(kept.column("chunk"), value_set=top.column("chunk"))))
    by_partition = bool(selections) and all(s.sorted for s in selections)
    ordered = kept if by_partition else sort_by_chunk(kept)
    del kept
    data, offsets, counts = counts_arrays(ordered)
    del ordered
    pa.default_memory_pool().release_unused()
    return TrainingChunks(
        data=data, offsets=offsets, counts=counts,
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
    except OSError:
        raise  # a disk error names its file already
    except ValueError as exc:  # the counts themselves (pieces.check_counts): the user's to fix, one line
        raise ValueError(f"reducing partition {partition}: {exc}") from exc
    except Exception as exc:
        raise RuntimeError(f"reducing partition {partition} failed: {exc}") from exc


def _select_job(args: tuple[list[str], int, TrainConfig, bool]) -> Selection:
    runs, partition, config, sort = args
    selection = select_partition(_partition_job((runs, partition)), config, sort)
    # The partition's reading and summing freed more than its selection keeps: given back before the
    # next (pyarrow's pool kept it; the 1 GB corpus at 400 MB: 166 against 207 MB after the 32).
    pa.default_memory_pool().release_unused()
    return selection


def _select_part_job(args: tuple[list[str], int, TrainConfig, bool, str]) -> Selection:
    """_select_job, its kept chunks written to a file of their own (flushed to disk), not sent back."""
    runs, partition, config, sort, path = args
    selection = _select_job((runs, partition, config, sort))
    data, offsets, counts = counts_arrays(selection.kept)
    write_counts(path, data, offsets, counts, durable=True)
    selection.kept, selection.part = SCHEMA.empty_table(), (path, len(counts), len(data))
    return selection


def reduce_runs(runs: list[str], workers: int = 1, start_method: str | None = None,
                on_progress: Callable[[int, int], None] | None = None, config: TrainConfig | None = None,
                n_partitions: int = N_PARTITIONS, sort: bool = False, parts_dir: str | None = None) -> Iterator:
    """The global counts of every partition, in partition order: one task per partition, on
    `workers` processes. With config, each partition comes as its Selection instead (sorted: sort);
    with parts_dir too, its kept chunks written to parts_dir/part-NNNNN.arrow (Selection.part): the
    reduced counts of SuperBPE's stage 2, which nothing but the run directory reads."""
    if config is None:
        func, tasks = _partition_job, [(runs, p) for p in range(n_partitions)]
    elif parts_dir is not None:
        func, tasks = _select_part_job, [(runs, p, config, sort, os.path.join(parts_dir, f"part-{p:05d}.arrow"))
                                         for p in range(n_partitions)]
    else:
        func, tasks = _select_job, [(runs, p, config, sort) for p in range(n_partitions)]
    if workers <= 1:
        results: Iterable = map(func, tasks)
    else:
        results = parallel(func, tasks, workers, get_context(start_method), stage="reduce",
                           describe=lambda k, p: f"reducing worker {k} (partition {p} of {n_partitions})",
                           hint="try --workers 1 (one partition in memory at a time)")
    for done, result in enumerate(results, start=1):
        if on_progress:
            on_progress(done, n_partitions)
        yield result

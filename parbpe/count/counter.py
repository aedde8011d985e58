"""Counting: from work units to run files of chunk counts (the map side of the count stage).

Each worker process owns a ShardCounter: it is handed units as it frees up, counts their chunks
(with the exact piece shortcut of pieces.py where it is proven, the plain pattern otherwise), and
writes its counts to a run file whenever they pass its share of the memory budget (a spill), and
once at the end. Only file names and small stats travel between processes, never text or counts.
Partial counts add up, so the order in which workers finish never matters. reduce.py sums runs (partitions.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import TrainConfig
from ..io.plan import unit_text_bytes
from ..io.readers import ReadStats, count_words, iter_text_batches
from ..io.sample import sample_documents, sample_lines
from ..io.units import WorkUnit
from ..patterns import SUPERWORD_LINES_PATTERN, SUPERWORD_PATTERN, Splitter, training_pattern
from ..run.memory import (
    HELD_FACTOR,
    LONG_PIECE_ASCII,
    LONG_PIECE_JIT,
    LONG_PIECE_NUMPY,
    WORKER_OVERHEAD,
    format_size,
    long_piece_error,
    system_pool,
    trim_heap,
    use_system_pool,
)
from ..run.pool import get_context, parallel, worker_rank
from ..run.run_dir import COUNT_COMMIT_SECONDS, checkpoint_seconds, sync_file, test_stop, write_json
from . import chunking
from .chunking import uses_jit
from .counts_file import counts_file_table
from .partitions import partition_ids, write_run
from .cuts import cut_bounds
from .pieces import (
    PieceCounter,
    count_table,
    counter_table,
    documents_holding,
    string_array,
    string_buffers,
    sum_tables,
    supports,
)
from .superword import SuperwordCounter

_PLAIN_ENTRY_BYTES = 120  # estimated memory of one entry of a Counter[str] (object, int, hash slot)


@functools.lru_cache(maxsize=8)
def _splitter(pattern: str, special_tokens: tuple[str, ...], normalize: str | None) -> Splitter:
    return Splitter(pattern, special_tokens, normalize)


def stop_label(config: TrainConfig) -> str:
    """The counting stage's name for the test stop hook: SuperBPE's superword count is its own."""
    return "superword_count" if config.pattern == SUPERWORD_PATTERN else "count"


def unit_key(unit: WorkUnit) -> str:
    """A work unit as a string, as commit records name it."""
    return json.dumps([unit.path, unit.kind, unit.row_group, unit.start, unit.end])


class ShardCounter:
    """One worker's counts, written to run files in run_dir (named after `name`).

    data_limit bounds the bytes of counts held in memory; passing it writes a run (a spill).
    use_pieces=False forces the plain path (tests compare both).
    Commits: at the end, and after a unit when 10 s have passed since the last (run/run_dir.py),
    what is held goes to a run and a record `NAME-commitNNNNN.json` names the units now wholly in
    the runs it lists (with their read stats), so a resumed run skips them.
    """

    def __init__(self, config: TrainConfig, run_dir: str, name: str, data_limit: int | None = None,
                 use_pieces: bool = True) -> None:
        self.config = config
        self.run_dir = run_dir
        self.name = name
        self.data_limit = data_limit
        # The superword split counts line by line, as SuperBPE's authors train (patterns.py).
        self.splitter = _splitter(training_pattern(config.pattern), config.special_tokens, config.normalize)
        self.superword = self.splitter.pattern == SUPERWORD_LINES_PATTERN
        self.pieces: PieceCounter | SuperwordCounter | None = None
        if use_pieces and self.superword:
            self.pieces = SuperwordCounter(use_jit=uses_jit(config.pattern, config.jit))
        elif use_pieces and supports(config.pattern):  # with the JIT on, the numba lexer splits the pieces
            self.pieces = PieceCounter(config.pattern, self.splitter.chunks, use_jit=uses_jit(config.pattern, config.jit))
        self.plain: Counter[str] = Counter()
        self.counted: list[pa.Table] = []  # counts files, already counts
        self.runs: list[str] = []
        self.spills = 0
        self.stats = ReadStats()
        self.commits = 0
        self._commit_every = checkpoint_seconds(COUNT_COMMIT_SECONDS)
        self._last_commit = time.monotonic()
        self._uncommitted_units: list[str] = []
        self._committed = (0, ReadStats(), 0)  # runs, stats and spills at the last commit
        self._unit_bytes = 0  # the text the unit being read may hold at once (unit_text_bytes)

    @property
    def nbytes(self) -> int:
        held = len(self.plain) * _PLAIN_ENTRY_BYTES + sum(t.nbytes for t in self.counted)
        return held + (self.pieces.nbytes if self.pieces is not None else 0)

    def add_unit(self, unit: WorkUnit) -> None:
        if unit.kind.startswith("counts"):
            self.counted.append(counts_file_table(unit, self.config))
            self._check_limit()
        else:
            self._unit_bytes = unit_text_bytes(unit) if self.data_limit is not None else 0
            sample = sample_lines if unit.kind == "text" else sample_documents  # a text file: its lines
            for texts in sample(iter_text_batches(unit, self.config.text_column, self.stats), self.config.sample_share,
                                self.config.seed, self.stats):
                if self.config.count_words:
                    self.stats.words += count_words(texts)
                self.add_batch(texts)
        self._uncommitted_units.append(unit_key(unit))
        if time.monotonic() - self._last_commit >= self._commit_every:
            self.commit()

    def add_batch(self, texts: pa.Array) -> None:
        """Count a string array of documents, then spill if the counts held passed the limit."""
        self.add_texts(texts)
        self._check_limit()

    def add_texts(self, texts: pa.Array) -> None:
        """Count the chunks of a string array of documents."""
        if self.pieces is None:
            self._add_plain(texts.to_pylist())
            return
        texts = string_array(texts)
        if self.superword:  # documents holding "\r/", which superword.py leaves to regex, take the plain path
            odd = documents_holding(texts, ("\r/",))
            if odd is not None:
                self._add_plain(texts.filter(pa.array(odd)).to_pylist())
                texts = texts.filter(pa.array(~odd))
        # Documents holding a special token: the text between the specials, each piece a document of its own.
        holding = documents_holding(texts, self.config.special_tokens)
        if holding is not None:
            between = [piece for document in texts.filter(pa.array(holding)).to_pylist()
                       for piece, is_special in self.splitter.segments(document) if not is_special]
            texts = texts.filter(pa.array(~holding))
            if between:
                self.pieces.add(pa.array(between, pa.string()))
        if len(texts):
            if self.config.normalize:  # (the documents holding specials: their pieces, in segments())
                texts = pc.utf8_normalize(texts, self.config.normalize.upper())
            self.check_pieces(texts)
            self.pieces.add(texts)

    def check_pieces(self, texts: pa.Array) -> None:
        """A ValueError naming the budget that fits, before a piece (text with no cut in it) longer than
        this process's share is counted: the counting layout reckons 4x a unit's text, WORKER_OVERHEAD
        and HELD_FACTOR x the counts held, while one piece costs LONG_PIECE_NUMPY (ASCII, JIT) a byte
        and the rest of its text 4x. Only texts that long are cut to find their longest piece."""
        if self.data_limit is None or not self.config.memory_budget or not len(texts):
            return
        jit = getattr(self.pieces, "lexes_with_jit", False)
        room = 4 * self._unit_bytes + WORKER_OVERHEAD + HELD_FACTOR * self.data_limit
        lengths = pc.binary_length(texts)
        most = LONG_PIECE_JIT if jit else LONG_PIECE_NUMPY
        if most * int(pc.max(lengths).as_py()) <= room:
            return
        long = string_array(texts.filter(pc.greater(lengths, room // most)))
        offsets, data = string_buffers(long)
        if self.superword:  # its pieces are lines
            bounds = np.union1d(offsets, np.flatnonzero(data == 0x0A) + 1)
        else:
            bounds = cut_bounds(offsets, data)
        k = int(np.argmax(np.diff(bounds)))
        piece = int(bounds[k + 1] - bounds[k])
        ascii_only = int(data[bounds[k]:bounds[k + 1]].max(initial=0)) < 0x80
        factor = LONG_PIECE_JIT if jit else LONG_PIECE_ASCII if ascii_only else LONG_PIECE_NUMPY
        holder = int(np.searchsorted(offsets, bounds[k], side="right")) - 1  # the text the piece is in
        rest = int(offsets[holder + 1] - offsets[holder]) - piece
        need = factor * piece + 4 * rest
        if need > room:
            raise long_piece_error(self.config.memory_budget, self.config.workers, piece, rest, ascii_only, need,
                                   room, room - HELD_FACTOR * self.data_limit)

    def _add_plain(self, documents: list[str]) -> None:
        findall = self.splitter.chunks
        for document in documents:
            for piece, is_special in self.splitter.segments(document):
                if not is_special:
                    self.plain.update(findall(piece))

    def _check_limit(self) -> None:
        if self.data_limit is None or self.nbytes <= self.data_limit:
            return
        if self.pieces is not None:
            self.pieces.compact()  # pieces are held as counted per batch until the limit is near
        if self.nbytes > self.data_limit // 2:
            self.write_run()
            self.spills += 1

    def write_run(self) -> None:
        """Write what is held to a new run file and start again empty."""
        parts = list(self.counted)
        from_pieces = self.pieces is not None and bool(self.pieces)
        if from_pieces:
            parts.append(self.pieces.chunk_counts())
        if self.plain:
            parts.append(counter_table(self.plain))
        # the pieces' counts alone may repeat a chunk (rows_repeat): the reduce sums them; else summed here
        distinct = not (from_pieces and self.pieces.rows_repeat and len(parts) == 1)
        table = sum_tables(parts)
        del parts
        if self.config.max_chunk_bytes:
            table = cut_long_chunks(table, self.config.max_chunk_bytes)
        self.plain, self.counted = Counter(), []
        path = os.path.join(self.run_dir, f"{self.name}-run{len(self.runs):05d}.arrow")
        write_run(path, table, distinct=distinct)
        self.runs.append(path)
        del table
        pa.default_memory_pool().release_unused()  # give freed buffers back to the OS
        trim_heap()

    def commit(self) -> None:
        """Write what is held to a run, flush the new runs to disk, and record the units they finish."""
        if self.nbytes:
            self.write_run()
        runs, stats, spills = self._committed
        for path in self.runs[runs:]:
            sync_file(path)
        write_json(os.path.join(self.run_dir, f"{self.name}-commit{self.commits:05d}.json"), {
            "units": self._uncommitted_units, "runs": [os.path.basename(p) for p in self.runs[runs:]],
            "documents": self.stats.documents - stats.documents, "bytes": self.stats.bytes - stats.bytes,
            "replaced_bytes": self.stats.replaced_bytes - stats.replaced_bytes, "spills": self.spills - spills,
            "sampled_documents": self.stats.sampled_documents - stats.sampled_documents,
            "sampled_bytes": self.stats.sampled_bytes - stats.sampled_bytes})
        self.commits += 1
        self._uncommitted_units = []
        self._committed = (len(self.runs), dataclasses.replace(self.stats), self.spills)
        self._last_commit = time.monotonic()

    def finish(self) -> list[str]:
        """Write the last run (always at least one per counter), commit, and return all run files."""
        if not self.runs or self.nbytes:
            self.write_run()
        if self._uncommitted_units or self._committed[0] < len(self.runs):
            self.commit()
        return self.runs


def cut_long_chunks(table: pa.Table, max_bytes: int) -> pa.Table:
    """A counts table whose chunks longer than max_bytes are cut into pieces of at most max_bytes
    (--max-chunk-bytes): each piece ends at the last character boundary within max_bytes of its
    start (a character longer than max_bytes is a piece of its own), and counts as its chunk did."""
    long = pc.greater(pc.binary_length(table.column("chunk")), max_bytes)
    if not pc.any(long).as_py():
        return table
    cut = table.filter(long)
    pieces, counts = [], []
    for chunk, count in zip(cut.column("chunk").to_pylist(), cut.column("count").to_pylist()):
        for piece in cut_chunk(chunk.encode("utf-8"), max_bytes):
            pieces.append(piece.decode("utf-8"))
            counts.append(count)
    return sum_tables([table.filter(pc.invert(long)), count_table(pa.array(pieces, pa.string()), pa.array(counts))])


def cut_chunk(data: bytes, max_bytes: int) -> list[bytes]:
    """UTF-8 bytes in pieces of at most max_bytes, cut only between characters (see cut_long_chunks)."""
    out, start = [], 0
    while len(data) - start > max_bytes:
        end = start + max_bytes
        while end > start and data[end] & 0xC0 == 0x80:  # a continuation byte: not a character's start
            end -= 1
        if end == start:  # one character longer than max_bytes
            end = start + 1
            while end < len(data) and data[end] & 0xC0 == 0x80:
                end += 1
        out.append(data[start:end])
        start = end
    if start < len(data):
        out.append(data[start:])
    return out


def prepare(pattern: str, mode: str | None = None) -> None:
    """Every kernel a counting worker calls loaded in this process before workers fork: the lexer's
    (chunking.prepare) and the run files' partition hash; mode: the run's (its config's), as the
    workers will take it."""
    chunking.prepare(pattern, mode)
    if uses_jit(pattern, mode):
        partition_ids(pa.array(["x"]))


def count_unit(unit: WorkUnit, shard: ShardCounter) -> None:
    """Count one work unit into a shard (the step a worker repeats)."""
    shard.add_unit(unit)


@dataclass
class CountResult:
    runs: list[str]
    stats: ReadStats
    spills: int = 0
    budget: int | None = None  # set by the caller that chose data_limit
    data_limit: int | None = None
    partitions: list | None = None  # on Ray: each count task's partition refs instead of run files (on_ray.py)


class _UnitCounter:
    """A counting worker's part in parallel(): each unit it is handed goes into the worker's own
    ShardCounter (w<rank>, made at its first unit), and finish() writes the last run and returns
    (runs, spills, stats). Units go to whichever worker is free, so the workers end together
    whatever each unit costs. progress is the shared array of units, bytes and spills, three slots
    per worker; each slot has one writer and no lock, so a worker that dies never blocks the parent."""

    def __init__(self, config: TrainConfig, run_dir: str, data_limit: int | None, progress) -> None:
        self.config, self.run_dir, self.data_limit, self.progress = config, run_dir, data_limit, progress
        self.shard: ShardCounter | None = None
        self.rank = self.done = 0

    def __call__(self, unit: WorkUnit) -> None:
        if self.shard is None:
            self.rank = worker_rank()
            self.shard = ShardCounter(self.config, self.run_dir, f"w{self.rank}", self.data_limit)
        try:
            count_unit(unit, self.shard)
        except Exception as exc:  # re-raised in the parent, naming the worker and its unit
            raise _unit_failed(exc, self.rank, unit) from exc
        self.done += 1
        test_stop(stop_label(self.config), self.done)
        self.progress[3 * self.rank:3 * self.rank + 3] = [self.done, self.shard.stats.bytes, self.shard.spills]

    def finish(self) -> tuple[list[str], int, ReadStats]:
        if self.shard is None:  # handed no unit: the others took them all
            return [], 0, ReadStats()
        return self.shard.finish(), self.shard.spills, self.shard.stats


def _unit_failed(exc: Exception, rank: int, unit: WorkUnit) -> Exception:
    """A unit's failure as one line naming the worker and the unit, of the same kind (OSError with
    its errno for a full disk, ValueError for bad input, else RuntimeError)."""
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror and not exc.filename else str(exc)
    where = f"worker {rank} (pid {os.getpid()}) failed on {unit.describe()}: {detail}"
    if unit.describe() in detail:
        where = detail
    if isinstance(exc, OSError):
        return OSError(exc.errno, where)
    if isinstance(exc, ValueError):
        return ValueError(where)
    return RuntimeError(where)


def memory_hint(config: TrainConfig) -> str:
    """What to try when a worker was killed for memory: a smaller budget, fewer workers."""
    fewer = f" or --workers {config.workers // 2}" if config.workers > 1 else ""
    if not config.memory_budget:  # the run context resolves the budget once; a direct caller may not have
        return f"try a smaller --memory-budget{fewer}"
    return f"try --memory-budget {format_size(config.memory_budget // 2).replace(' ', '')}{fewer}"


def count_to_runs(
    units: Sequence[WorkUnit],
    config: TrainConfig,
    run_dir: str,
    *,
    data_limit: int | None = None,
    start_method: str | None = None,
    on_progress: Callable[[int, int, int, int], None] | None = None,
    parent_counts: bool = False,
) -> CountResult:
    """Count work units (text and counts files) into run files in run_dir, with config.workers processes.

    Each unit goes to whichever worker is free (counts add up: which worker counted a unit never
    changes the result). data_limit is each worker's bound on counts held in memory.
    on_progress(units_done, total_units, bytes_done, spills) is called as units finish.
    parent_counts: this process is worker 0 itself (a thread, beside its waiting for the others),
    so `workers` shards need one process fewer: what a tight memory budget picks
    (run/memory.py count_layout), since each process costs its start besides its counts.
    Counting processes allocate pyarrow's buffers with malloc (run/memory.py system_pool).
    """
    with system_pool():
        return _count_to_runs(list(units), config, run_dir, data_limit, start_method, on_progress, parent_counts)


def _count_to_runs(units: list[WorkUnit], config: TrainConfig, run_dir: str, data_limit: int | None,
                   start_method: str | None, on_progress: Callable[[int, int, int, int], None] | None,
                   parent_counts: bool) -> CountResult:
    workers = max(1, min(config.workers, len(units)))
    prepare(config.pattern, config.jit)  # the JIT's tables and kernels, once, before workers fork
    if workers == 1:
        shard = ShardCounter(config, run_dir, "w0", data_limit)
        for done, unit in enumerate(units, start=1):
            count_unit(unit, shard)
            test_stop(stop_label(config), done)
            if on_progress:
                on_progress(done, len(units), shard.stats.bytes, shard.spills)
        return CountResult(shard.finish(), shard.stats, shard.spills)

    context = get_context(start_method)
    progress = context.Array("q", 3 * workers, lock=False)
    counter = _UnitCounter(config, run_dir, data_limit, progress)

    def tick() -> None:
        if on_progress:
            done, done_bytes, spills = (sum(progress[i::3]) for i in range(3))
            on_progress(done, len(units), done_bytes, spills)

    def describe(k: int, index: int) -> str:
        return f"worker {k} (counting {units[index].describe()})" if index >= 0 else f"worker {k}"

    answers = list(parallel(counter, units, workers, context, tick, initializer=use_system_pool, stage="count",
                            describe=describe, hint=memory_hint(config), finish=counter.finish, local=parent_counts))
    results = answers[len(units):]
    stats = ReadStats()
    runs: list[str] = []
    for shard_runs, _, shard_stats in results:
        runs += shard_runs
        stats += shard_stats
    spills = [s for _, s, _ in results]
    if on_progress:
        on_progress(len(units), len(units), stats.bytes, sum(spills))
    return CountResult(runs, stats, sum(spills))

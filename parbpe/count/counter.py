"""Counting: from work units to run files of chunk counts (the map side of the count stage).

Each worker process owns a ShardCounter: worker r takes units[r::workers], counts their chunks
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
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..config import TrainConfig
from ..io.readers import ReadStats, count_words, iter_text_batches
from ..io.sample import sample_documents, sample_lines
from ..io.units import WorkUnit
from ..patterns import SUPERWORD_LINES_PATTERN, SUPERWORD_PATTERN, Splitter, training_pattern
from ..run.memory import format_size, system_pool, trim_heap, use_system_pool
from ..run.pool import fault_point, get_context, parallel
from ..run.run_dir import COUNT_COMMIT_SECONDS, checkpoint_seconds, sync_file, test_stop, write_json
from .counts_file import counts_file_table
from .jit_lexer import prepare, uses_jit
from .partitions import write_run
from .pieces import PieceCounter, count_table, counter_table, documents_holding, string_array, sum_tables, supports
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
            self.pieces = SuperwordCounter(use_jit=uses_jit(config.pattern))
        elif use_pieces and supports(config.pattern):  # with the JIT on, the numba lexer splits the pieces
            self.pieces = PieceCounter(config.pattern, self.splitter.chunks, use_jit=uses_jit(config.pattern))
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

    @property
    def nbytes(self) -> int:
        held = len(self.plain) * _PLAIN_ENTRY_BYTES + sum(t.nbytes for t in self.counted)
        return held + (self.pieces.nbytes if self.pieces is not None else 0)

    def add_unit(self, unit: WorkUnit) -> None:
        if unit.kind.startswith("counts"):
            self.counted.append(counts_file_table(unit, self.config))
            self._check_limit()
        else:
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
            self.pieces.add(texts)

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
        if self.pieces is not None and self.pieces:
            parts.append(self.pieces.chunk_counts())
        if self.plain:
            parts.append(counter_table(self.plain))
        table = sum_tables(parts)
        del parts
        if self.config.max_chunk_bytes:
            table = cut_long_chunks(table, self.config.max_chunk_bytes)
        self.plain, self.counted = Counter(), []
        path = os.path.join(self.run_dir, f"{self.name}-run{len(self.runs):05d}.arrow")
        write_run(path, table)
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


# Set in each worker by the pool initializer: units, bytes and spills done, three slots per worker
# rank. Each slot has one writer and no lock, so a worker that dies can never block the parent.
_shared_progress = None


def _init_worker(progress) -> None:
    global _shared_progress
    _shared_progress = progress
    use_system_pool()  # inherited when forked; a spawned worker sets it here


def _count_shard_job(args: tuple[int, list[WorkUnit], TrainConfig, str, int | None]):
    """One worker's shard: all its units into run files; returns (runs, spills, stats)."""
    return count_shard(*args, progress=_shared_progress)


def count_shard(rank: int, units: list[WorkUnit], config: TrainConfig, run_dir: str, data_limit: int | None,
                progress=None, stop: threading.Event | None = None, in_worker: bool = True):
    """Shard `rank`: all its units into run files; returns (runs, spills, stats). progress is the
    shared array of units, bytes and spills (three slots per rank); stop, when set, ends the shard
    after the unit at hand (returns None). in_worker: a worker process (the test kill hook applies)."""
    shard = ShardCounter(config, run_dir, f"w{rank}", data_limit)
    for done, unit in enumerate(units, start=1):
        if in_worker:
            fault_point("count", done - 1)
        try:
            count_unit(unit, shard)
        except Exception as exc:  # re-raised in the parent, naming the worker and its unit
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror and not exc.filename else str(exc)
            where = f"worker {rank} (pid {os.getpid()}) failed on {unit.describe()}: {detail}"
            if unit.describe() in detail:
                where = detail
            if isinstance(exc, OSError):  # a full disk: the same kind (and errno), for one line
                raise OSError(exc.errno, where) from exc
            if isinstance(exc, ValueError):  # bad input
                raise ValueError(where) from exc
            raise RuntimeError(where) from exc
        test_stop(stop_label(config), done)
        if progress is not None:
            progress[3 * rank:3 * rank + 3] = [done, shard.stats.bytes, shard.spills]
        if stop is not None and stop.is_set():
            return None
    return shard.finish(), shard.spills, shard.stats


def _unit_names(units: list[WorkUnit], shown: int = 3) -> str:
    """A short list of work units for a message: the first few, then how many more."""
    names = ", ".join(u.describe() for u in units[:shown])
    return names + (f" and {len(units) - shown} more" if len(units) > shown else "")


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

    Worker r takes units[r::workers] (deterministic sharding). data_limit is each worker's bound on
    counts held in memory. on_progress(units_done, total_units, bytes_done, spills) is called as
    units finish. parent_counts: this process counts shard 0 itself (in a thread, while it waits
    for the others), so `workers` shards need one process fewer: what a tight memory budget picks
    (run/memory.py count_layout), since each process costs its start besides its counts.
    Counting processes allocate pyarrow's buffers with malloc (run/memory.py system_pool).
    """
    with system_pool():
        return _count_to_runs(list(units), config, run_dir, data_limit, start_method, on_progress, parent_counts)


def _count_to_runs(units: list[WorkUnit], config: TrainConfig, run_dir: str, data_limit: int | None,
                   start_method: str | None, on_progress: Callable[[int, int, int, int], None] | None,
                   parent_counts: bool) -> CountResult:
    workers = max(1, min(config.workers, len(units)))
    prepare(config.pattern)  # the JIT's tables and kernels, once, before workers fork
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
    jobs = [(r, units[r::workers], config, run_dir, data_limit) for r in range(workers)]
    first = 1 if parent_counts else 0  # the first shard a worker process takes
    own: dict[str, object] = {}  # the parent's shard: its result or its exception
    stop = threading.Event()

    def count_own() -> None:
        try:
            own["result"] = count_shard(*jobs[0], progress=progress, stop=stop, in_worker=False)
        except BaseException as exc:  # re-raised by the waiting thread
            own["error"] = exc

    thread = threading.Thread(target=count_own, name="parbpe-count-shard-0", daemon=True)

    def tick() -> None:
        if "error" in own:  # the parent's own shard failed: stop the workers now
            raise own["error"]
        if on_progress:
            done, done_bytes, spills = (sum(progress[i::3]) for i in range(3))
            on_progress(done, len(units), done_bytes, spills)

    def describe(_: int, index: int) -> str:  # worker k runs shard first + k: one task each
        shard = jobs[first + index][1]
        return f"worker {first + index} (units {_unit_names(shard)})"

    failed = True
    try:
        results = list(parallel(_count_shard_job, jobs[first:], workers - first, context, tick,
                                initializer=_init_worker, initargs=(progress,), describe=describe,
                                hint=memory_hint(config), started=thread.start if parent_counts else None))
        failed = False
    finally:
        if failed:  # a worker failed, or Ctrl-C: the parent's shard stops after the unit at hand
            stop.set()
        if thread.is_alive():
            thread.join()
    if parent_counts:
        if "error" in own:
            raise own["error"]
        results.insert(0, own["result"])
    stats = ReadStats()
    runs: list[str] = []
    for shard_runs, _, shard_stats in results:
        runs += shard_runs
        stats += shard_stats
    spills = [s for _, s, _ in results]
    if on_progress:
        on_progress(len(units), len(units), stats.bytes, sum(spills))
    return CountResult(runs, stats, sum(spills))

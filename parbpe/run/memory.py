"""Memory sizes, the default budget, and resident memory of the whole process tree (via psutil)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import regex

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str | int) -> int:
    """Parse '2GB', '512MiB', '1.5g' or a plain number of bytes."""
    if isinstance(text, int):
        return text
    match = regex.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read the size {text!r}: use a number with an optional unit, e.g. 2GB or 512MiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(n: float) -> str:
    """Human-readable size in decimal units."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


MIN_WORKER_DATA = 4 * 10**6  # a worker that may hold less than this would spill all the time (see count_layout)
HELD_FACTOR = 4  # peak memory of a worker per byte of counts it holds (measured: see worker_data_limit)
WORKER_OVERHEAD = 96 * 10**6  # what a counting worker keeps besides its start, its unit and its counts
MAX_WORKER_DATA = 10**9  # runs stay far below pyarrow's 2 GB limit of one string array
ROOMY_WORKER_DATA = 64 * 10**6  # with this much per worker spills are few: the parent need not count
REDUCE_FACTOR = 3  # a reducing worker's peak per byte of one partition's share of the run files
PARENT_COUNTING = 48 * 10**6  # what the parent adds when it counts a shard (its counting code's heap)
# Peak bytes a counting process adds per byte of one piece (text with no cut in it: a chunk of 50 MB,
# or a run the pattern splits) while it reads, keys and splits it, above its start: numpy's lexer
# decodes UTF-8 into several int64 a character (34 measured on one two-byte character), ASCII costs
# 15.6, numba's lexer 9.4 (see ShardCounter.check_pieces).
LONG_PIECE_NUMPY = 40
LONG_PIECE_ASCII = 16
LONG_PIECE_JIT = 12


def default_budget() -> int:
    """Half of the memory psutil reports as available now: safe beside other programs."""
    return psutil.virtual_memory().available // 2


def worker_data_limit(budget: int, workers: int, base_rss: int, unit_bytes: int, processes: int | None = None,
                      extra: int = 0) -> int:
    """Bytes of counts one counting worker may hold before it spills, so the tree stays under budget.

    Each of the processes (default workers + 1: the parent waits) starts at about base_rss, and
    `extra` more is kept aside (what the parent adds when it counts too, PARENT_COUNTING). A
    worker's share of the rest covers reading its largest unit (about 4x its text: the text, its
    cut mask and piece offsets), WORKER_OVERHEAD, and HELD_FACTOR times the counts it holds:
    grouping (compacting pieces, splitting them into chunks, writing a run) briefly needs hash
    tables and copies several times the size of what it groups. These factors come from the largest
    RSS of a counting parent, its worker and their tree on the generated 1 GB corpus at limits from 8
    to 64 MB: the parent stays about within its start + PARENT_COUNTING + 4x its unit +
    WORKER_OVERHEAD + 4x its limit, the worker and the tree well within (the worker does not touch all
    of the start it shares). Counting code that holds more per count needs a larger HELD_FACTOR.
    """
    processes = workers + 1 if processes is None else processes
    share = (budget - processes * base_rss - extra) // workers
    limit = (share - 4 * unit_bytes - WORKER_OVERHEAD) // HELD_FACTOR
    if limit < MIN_WORKER_DATA:
        need = processes * base_rss + extra + workers * (4 * unit_bytes + WORKER_OVERHEAD
                                                         + HELD_FACTOR * MIN_WORKER_DATA)
        need = -(-need // 10**8) * 10**8  # rounded up, so the size named is enough as printed
        raise ValueError(
            f"memory budget {format_size(budget)} is too small for {workers} worker(s): each process starts "
            f"at about {format_size(base_rss)} and a worker must hold its largest work unit "
            f"({format_size(unit_bytes)} of text) plus some counts; use at least {format_size(need)} "
            "(--memory-budget) or fewer workers"
        )
    return min(limit, MAX_WORKER_DATA)


@dataclass(frozen=True)
class CountLayout:
    """How counting uses the budget: `shards` counting shards, the parent counting shard 0 itself
    or not, each holding up to data_limit bytes of counts before it spills."""

    shards: int
    parent_counts: bool
    data_limit: int


def count_layout(budget: int, workers: int, base_rss: int, unit_bytes: int) -> CountLayout:
    """The counting layout for a budget: `workers` worker processes while each may hold at least
    ROOMY_WORKER_DATA of counts; under a tighter budget the parent counts a shard too, since a
    process that only waits costs its start (about base_rss) and leaves each worker less, spilling
    more; if even that leaves a worker less than MIN_WORKER_DATA, fewer shards (down to the parent
    alone). A ValueError names the budget that would do when one shard does not fit either.

    MIN_WORKER_DATA is small: smaller limits only spill more (the same peak, the same merges), while a
    lost shard halves the counting. (At 400 MB the generated 1 GB corpus counts in one shard, the
    parent's: two processes' starts leave neither its minimum.)"""
    if workers > 1:
        try:
            limit = worker_data_limit(budget, workers, base_rss, unit_bytes)
        except ValueError:
            limit = 0
        if limit >= ROOMY_WORKER_DATA:
            return CountLayout(workers, False, limit)
    first_error = None
    for shards in range(workers, 0, -1):
        try:
            limit = worker_data_limit(budget, shards, base_rss, unit_bytes, processes=shards, extra=PARENT_COUNTING)
            return CountLayout(shards, True, limit)
        except ValueError as exc:
            first_error = first_error or exc
    raise first_error


class LongPiece(ValueError):
    """A piece (text with no cut in it) too long for a counting process's share (ShardCounter.check_pieces),
    with what naming the smallest budget that counts it takes: the piece's bytes, the rest of its
    text's, whether it is ASCII, and the process's room less its counts' share (4x its unit and
    WORKER_OVERHEAD). Its message names a budget by the rule of thumb of long_piece_error; the count
    stage, which knows the layout, names the smallest (pipeline/count.py::piece_budget)."""

    def __init__(self, message: str, piece: int, rest: int, ascii_only: bool, fixed_room: int) -> None:
        super().__init__(message, piece, rest, ascii_only, fixed_room)

    def __str__(self) -> str:
        return self.args[0]

    @property
    def piece(self) -> int:
        return self.args[1]

    def need(self, kernels: bool) -> int:
        """What counting the piece takes in a process (numba's lexer, or numpy's)."""
        piece, rest, ascii_only = self.args[1:4]
        return (LONG_PIECE_JIT if kernels else LONG_PIECE_ASCII if ascii_only else LONG_PIECE_NUMPY) * piece + 4 * rest

    def fits(self, data_limit: int, kernels: bool) -> bool:
        """Whether a counting process whose counts are bounded by data_limit has room for it."""
        return self.need(kernels) <= self.args[4] + HELD_FACTOR * data_limit

    def with_budget(self, least: int | None, kernels_there: bool = False) -> ValueError:
        """The one-line error naming `least` (None: no budget gives a counting process room for it);
        kernels_there: numba's lexer counts at that budget (while numpy's counts at this one)."""
        head = self.args[0].split("; use at least ")[0]
        if least is None:
            return ValueError(f"{head}; no memory budget gives a counting process that much (its counts are "
                              f"capped at {format_size(MAX_WORKER_DATA)}): split the text (a newline or a space)")
        lexer = f" (where numba's lexer counts it, in about {format_size(self.need(True))})" if kernels_there else ""
        return ValueError(f"{head}; use at least {format_size(least)}{lexer} (--memory-budget)")


def long_piece_error(budget: int, workers: int, piece: int, rest: int, ascii_only: bool, need: int, room: int,
                     fixed_room: int) -> LongPiece:
    """The error of a counting process whose longest piece needs more than its share: it names the
    budget with `workers + 1` times the shortfall (each counting process, and a waiting parent),
    rounded up, where nothing better is known (a Ray task, a ShardCounter used alone)."""
    least = -(-(budget + (workers + 1) * (need - room)) // 10**8) * 10**8
    return LongPiece(
        f"memory budget {format_size(budget)} is too small for a piece of {format_size(piece)} of text with no "
        f"cut in it (one chunk, or a run the pattern splits): counting it takes about {format_size(need)}, "
        f"a counting process has {format_size(room)}; use at least {format_size(least)} (--memory-budget)",
        piece, rest, ascii_only, fixed_room)


def reduce_workers(budget: int, workers: int, base_rss: int, partition_bytes: int) -> int:
    """Processes for the reduce stage under budget: the most of `workers` whose starts (about
    base_rss each, beside this process) and partitions (REDUCE_FACTOR x partition_bytes, the run
    files' share of one partition, plus WORKER_OVERHEAD) fit; 1 means this process reduces alone."""
    need = partition_bytes * REDUCE_FACTOR + WORKER_OVERHEAD
    for n in range(max(workers, 1), 1, -1):
        if base_rss + n * (base_rss + need) <= budget:
            return n
    return 1


# The RSS of a process that has imported parbpe and nothing else of its own (just under it after
# `import parbpe`, or when the parbpe command starts a run): what a caller holds beyond it
# when a run starts (texts for train_from_iterator, a notebook's data) is the caller's, not the
# run's, and the merge stage's fit leaves it out (pipeline/context.py caller_held).
CALLER_FLOOR = 100 * 10**6


def process_rss() -> int:
    """Resident memory of this process alone, in bytes."""
    return psutil.Process().memory_info().rss


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """glibc, loaded by its soname: ctypes.util.find_library would run ldconfig in a child process,
    and a forked child of a large worker counts that worker's memory again (an RSS spike of the
    tree); None where it is not found (musl)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def trim_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing).

    numpy's arrays live on the C heap, and glibc keeps freed space mapped, so a worker's RSS stays
    at its largest moment (a spill) long after; trimming after a spill makes room for the next."""
    if sys.platform.startswith("linux") and (libc := _libc()) is not None:
        libc.malloc_trim(0)


@contextlib.contextmanager
def system_pool() -> Iterator[None]:
    """pyarrow's buffers from the C allocator (malloc) instead of its default pool, while the block runs.

    A counting process allocates and frees buffers of a few MB for every batch; pyarrow's default
    pool (mimalloc) keeps such memory mapped, the C heap gives it back when trimmed (trim_heap).
    On a shard of the generated 1 GB corpus this lowers a counting process's peak RSS by some 15%,
    at no time cost that shows on realmix.
    Buffers made in the block stay valid after it (each knows its pool)."""
    import pyarrow as pa

    before = use_system_pool()
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def use_system_pool():
    """Make the C allocator pyarrow's default pool in this process (see system_pool); returns the pool
    it replaces."""
    import pyarrow as pa

    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    return before


def tree_rss(pid: int | None = None) -> int:
    """Resident memory of a process and all its descendants, in bytes."""
    return processes_rss(tree_processes(pid))


def tree_processes(pid: int | None = None) -> list[psutil.Process]:
    """A process and all its descendants (finding them reads /proc of every process on the machine)."""
    try:
        root = psutil.Process(pid or os.getpid())
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def processes_rss(procs: list[psutil.Process]) -> int:
    """Resident memory of the given processes, in bytes; those that are gone count nothing."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


class PeakSampler:
    """Samples the process tree's RSS in a background thread; `peak` is the largest value seen.

    stage(name) labels the samples that follow, so `by_stage` holds the peak of each stage (the
    sample taken at a change of stage counts for both sides). `latest` is the last sample: what a
    progress line shows, at no cost per call (reading the tree walks /proc of every process).
    """

    # The tree's processes are found again every REFRESH_SECONDS (and at each stage's start): finding
    # them reads /proc of every process on the machine (milliseconds on a busy machine: 20 times a second
    # it would take a noticeable share of a core from the workers); reading their RSS is cheap.
    REFRESH_SECONDS = 0.25

    def __init__(self, interval: float = 0.05, pid: int | None = None) -> None:
        self.interval = interval
        self.pid = pid
        self._procs = tree_processes(pid)
        self._found = time.monotonic()
        self.peak = self.latest = processes_rss(self._procs)
        self.by_stage: dict[str, int] = {}
        self._stage: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self, refresh: bool = False) -> int:
        """The tree's RSS now, counted in the peaks (its processes found again if refresh, or if
        REFRESH_SECONDS have passed)."""
        if refresh or time.monotonic() - self._found >= self.REFRESH_SECONDS:
            self._procs, self._found = tree_processes(self.pid), time.monotonic()
        rss = processes_rss(self._procs)
        self.latest = rss
        self.peak = max(self.peak, rss)
        if self._stage is not None:
            self.by_stage[self._stage] = max(self.by_stage.get(self._stage, 0), rss)
        return rss

    def stage(self, name: str) -> int:
        """Start labelling samples with stage `name`; returns the tree's RSS now."""
        self.sample(refresh=True)
        self._stage = name
        return self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample(refresh=True)

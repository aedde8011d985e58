"""Memory sizes, the default budget, and resident memory of the whole process tree (via psutil)."""

from __future__ import annotations

import os
import threading

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


MIN_WORKER_DATA = 16 * 10**6  # a worker that may hold less than this would spill all the time
HELD_FACTOR = 6  # peak memory of a worker per byte of counts it holds
WORKER_OVERHEAD = 128 * 10**6  # what a counting worker keeps besides its counts (allocator caches, freed heap)
MAX_WORKER_DATA = 10**9  # runs stay far below pyarrow's 2 GB limit of one string array


def default_budget() -> int:
    """Half of the memory psutil reports as available now: safe beside other programs."""
    return psutil.virtual_memory().available // 2


def worker_data_limit(budget: int, workers: int, base_rss: int, unit_bytes: int) -> int:
    """Bytes of counts one counting worker may hold before it spills, so the tree stays under budget.

    Each of the workers + 1 processes starts at about base_rss. A worker's share of the rest covers
    reading its largest unit (about 4x its text: the text, its cut mask and piece offsets),
    WORKER_OVERHEAD, and HELD_FACTOR times the counts it holds: grouping (compacting pieces,
    splitting them into chunks, writing a run) briefly needs hash tables and copies several times
    the size of what it groups. Measured on a generated 1 GB corpus (2026-11-22): a worker's peak
    above its start was about 200 MB + 3.4x its limit (limits of 59 and 142 MB); the constants
    here cover that with room.
    """
    share = (budget - (workers + 1) * base_rss) // workers
    limit = (share - 4 * unit_bytes - WORKER_OVERHEAD) // HELD_FACTOR
    if limit < MIN_WORKER_DATA:
        need = (workers + 1) * base_rss + workers * (4 * unit_bytes + WORKER_OVERHEAD + HELD_FACTOR * MIN_WORKER_DATA)
        need = -(-need // 10**8) * 10**8  # rounded up, so the size named is enough as printed
        raise ValueError(
            f"memory budget {format_size(budget)} is too small for {workers} worker(s): each process starts "
            f"at about {format_size(base_rss)} and a worker must hold its largest work unit "
            f"({format_size(unit_bytes)} of text) plus some counts; use at least {format_size(need)} "
            "(--memory-budget) or fewer workers"
        )
    return min(limit, MAX_WORKER_DATA)


def process_rss() -> int:
    """Resident memory of this process alone, in bytes."""
    return psutil.Process().memory_info().rss


def tree_rss(pid: int | None = None) -> int:
    """Resident memory of a process and all its descendants, in bytes."""
    try:
        root = psutil.Process(pid or os.getpid())
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class PeakSampler:
    """Samples the process tree's RSS in a background thread; `peak` is the largest value seen."""

    def __init__(self, interval: float = 0.05, pid: int | None = None) -> None:
        self.interval = interval
        self.pid = pid
        self.peak = tree_rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, tree_rss(self.pid))

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.pid))

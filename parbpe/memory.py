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

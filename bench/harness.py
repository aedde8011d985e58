"""Measuring a benchmark run in its own process: wall time and peak RSS of its whole process tree.

The parent samples the tree's RSS with psutil every 50 ms; the child reports what the kernel saw
(ru_maxrss of itself and of its largest child) with write_rusage, since the parent's own
RUSAGE_CHILDREN keeps the maximum over every run it has made.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time


def write_rusage(path: str) -> None:
    """In the child, at the end: the kernel's peak RSS of this process and of its largest child."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    with open(path, "w") as f:
        json.dump({"self_maxrss": own, "children_maxrss": kids}, f)


def run_sampled(cmd: list[str], rusage_path: str, interval: float = 0.05, check: bool = True) -> dict:
    """Run cmd; return wall seconds, the sampled peak RSS of its tree and the kernel's peak (bytes).
    check=False: a failed run returns too, with its exit code and the last line of its stderr."""
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    try:
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                tree = [ps, *ps.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(interval)
    finally:
        _, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0 and not check:
        if os.path.exists(rusage_path):
            os.unlink(rusage_path)
        lines = err.decode().strip().splitlines()
        return {"wall": wall, "peak_sampled": peak, "returncode": proc.returncode, "error": lines[-1] if lines else ""}
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    with open(rusage_path) as f:
        rusage = json.load(f)
    os.unlink(rusage_path)
    return {"wall": wall, "peak_sampled": peak,
            "peak_kernel_process": max(rusage["self_maxrss"], rusage["children_maxrss"])}


def run_tree(cmd: list[str], interval: float = 0.05, cwd: str | None = None) -> tuple[float, int]:
    """Run cmd (any program: no rusage file); its wall seconds and the sampled peak RSS of its process
    tree in bytes. A failure ends the benchmark with the command's last stderr."""
    import psutil

    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    ps, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(interval)
    err = proc.communicate()[1]
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed (exit {proc.returncode}): {err.decode()[-800:]}")
    return time.perf_counter() - started, peak


def save_results(path: str, **fields) -> None:
    """Write a benchmark's results as JSON, with the Python version and core count of the machine."""
    with open(path, "w") as f:
        json.dump({**fields, "python": platform.python_version(), "cores": os.cpu_count()}, f, indent=1)

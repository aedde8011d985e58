"""Counting: from work units to chunk counts (the map side of the count stage).

`count_unit` is a pure function from one work unit to its partial counts, so it can run in any
process (or, later, on any machine). `count_units` runs it over a plan, in-process for one worker
and on a `multiprocess` pool otherwise; partial counts add up, so finishing order never matters.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence

from .config import TrainConfig
from .patterns import Splitter
from .read import ReadStats, WorkUnit, iter_documents


@functools.lru_cache(maxsize=8)
def _splitter(pattern: str, special_tokens: tuple[str, ...]) -> Splitter:
    return Splitter(pattern, special_tokens)


def count_unit(unit: WorkUnit, pattern: str, special_tokens: tuple[str, ...], text_column: str):
    """Chunk counts of one work unit: (Counter of chunk strings, ReadStats)."""
    splitter = _splitter(pattern, special_tokens)
    counter: Counter[str] = Counter()
    stats = ReadStats()
    findall = splitter.chunks
    for document in iter_documents(unit, text_column, stats):
        for piece, is_special in splitter.segments(document):
            if not is_special:
                counter.update(findall(piece))
    return counter, stats


def _count_unit_job(args: tuple[WorkUnit, str, tuple[str, ...], str]):
    unit = args[0]
    try:
        return count_unit(*args)
    except Exception as exc:  # re-raised in the parent, naming the worker and its unit
        raise RuntimeError(f"worker {os.getpid()} failed on {unit.describe()}: {exc}") from exc


def default_start_method() -> str:
    """fork where the platform has it (fast, nothing to re-import), else spawn."""
    import multiprocess

    return "fork" if "fork" in multiprocess.get_all_start_methods() else "spawn"


def count_units(
    units: Sequence[WorkUnit],
    config: TrainConfig,
    *,
    start_method: str | None = None,
    on_unit_done: Callable[[WorkUnit, ReadStats], None] | None = None,
) -> tuple[Counter[str], ReadStats]:
    """Sum of count_unit over text work units, with config.workers processes."""
    total: Counter[str] = Counter()
    stats = ReadStats()
    jobs = [(u, config.pattern, config.special_tokens, config.text_column) for u in units]
    workers = min(config.workers, len(jobs))
    if workers <= 1:
        for job in jobs:
            counter, unit_stats = count_unit(*job)
            total.update(counter)
            stats += unit_stats
            if on_unit_done:
                on_unit_done(job[0], stats)
        return total, stats

    import multiprocess

    context = multiprocess.get_context(start_method or default_start_method())
    with context.Pool(workers) as pool:
        try:
            results = pool.imap_unordered(_count_unit_job, jobs)
            for done, (counter, unit_stats) in enumerate(_with_death_check(results, pool), start=1):
                total.update(counter)
                stats += unit_stats
                if on_unit_done:
                    on_unit_done(jobs[done - 1][0], stats)
        finally:
            pool.terminate()
    return total, stats


def _with_death_check(results, pool, poll: float = 1.0):
    """Yield pool results; a worker killed by the kernel becomes a clear error, never a hang."""
    pids = {p.pid for p in pool._pool}
    while True:
        try:
            yield results.next(timeout=poll)
        except StopIteration:
            return
        except Exception as exc:
            if type(exc).__name__ != "TimeoutError":
                raise
            dead = [p for p in pool._pool if p.exitcode is not None and p.exitcode < 0]
            current = {p.pid for p in pool._pool}
            if dead or current - pids:
                codes = ", ".join(f"pid {p.pid} exit {p.exitcode}" for p in dead) or "a worker was replaced"
                raise RuntimeError(
                    f"a counting worker died ({codes}); it was probably killed for running out of "
                    "memory: lower --workers or --memory-budget, or free memory"
                ) from None
            time.sleep(0)

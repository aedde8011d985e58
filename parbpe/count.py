"""Counting: from work units to chunk counts (the map side of the count stage).

`count_unit` is a pure function from one work unit to its partial counts, so it can run in any
process (or, later, on any machine). `count_units` runs it over a plan: in-process for one worker,
otherwise on a `multiprocess` pool where worker r takes units[r::workers] and returns one Counter.
Partial counts add up, so the order in which workers finish never matters.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable, Sequence

from .config import TrainConfig
from .patterns import Splitter
from .read import ReadStats, WorkUnit, iter_documents


@functools.lru_cache(maxsize=8)
def _splitter(pattern: str, special_tokens: tuple[str, ...]) -> Splitter:
    return Splitter(pattern, special_tokens)


def count_unit(unit: WorkUnit, pattern: str, special_tokens: tuple[str, ...], text_column: str,
               counter: Counter[str] | None = None, stats: ReadStats | None = None):
    """Chunk counts of one work unit, added into counter (a new one by default): (counter, stats)."""
    splitter = _splitter(pattern, special_tokens)
    counter = Counter() if counter is None else counter
    stats = ReadStats() if stats is None else stats
    findall = splitter.chunks
    for document in iter_documents(unit, text_column, stats):
        for piece, is_special in splitter.segments(document):
            if not is_special:
                counter.update(findall(piece))
    return counter, stats


# Set in each worker by the pool initializer: shared counters of units and bytes done.
_shared_progress = None


def _init_worker(progress) -> None:
    global _shared_progress
    _shared_progress = progress


def _count_shard_job(args: tuple[list[WorkUnit], str, tuple[str, ...], str]):
    """One worker's shard: all its units into one Counter, returned once (little to pickle)."""
    units, pattern, special_tokens, text_column = args
    counter: Counter[str] = Counter()
    stats = ReadStats()
    for unit in units:
        before = stats.bytes
        try:
            count_unit(unit, pattern, special_tokens, text_column, counter, stats)
        except Exception as exc:  # re-raised in the parent, naming the worker and its unit
            raise RuntimeError(f"worker {os.getpid()} failed on {unit.describe()}: {exc}") from exc
        if _shared_progress is not None:
            with _shared_progress.get_lock():
                _shared_progress[0] += 1
                _shared_progress[1] += stats.bytes - before
    return counter, stats


def default_start_method() -> str:
    """fork where the platform has it (fast, nothing to re-import), else spawn."""
    import multiprocess

    return "fork" if "fork" in multiprocess.get_all_start_methods() else "spawn"


def count_units(
    units: Sequence[WorkUnit],
    config: TrainConfig,
    *,
    start_method: str | None = None,
    on_progress: Callable[[int, int, int], None] | None = None,
) -> tuple[Counter[str], ReadStats]:
    """Sum of count_unit over text work units, with config.workers processes.

    Worker r takes units[r::workers] (deterministic sharding) and returns one Counter; partial
    counts add up, so the result never depends on which worker finishes first.
    on_progress(units_done, total_units, bytes_done) is called as units finish.
    """
    jobs_units = list(units)
    workers = min(config.workers, len(jobs_units))
    if workers <= 1:
        counter: Counter[str] = Counter()
        stats = ReadStats()
        for done, unit in enumerate(jobs_units, start=1):
            count_unit(unit, config.pattern, config.special_tokens, config.text_column, counter, stats)
            if on_progress:
                on_progress(done, len(jobs_units), stats.bytes)
        return counter, stats

    import multiprocess

    context = multiprocess.get_context(start_method or default_start_method())
    progress = context.Array("q", [0, 0])
    shards = [(jobs_units[r::workers], config.pattern, config.special_tokens, config.text_column)
              for r in range(workers)]
    with context.Pool(workers, initializer=_init_worker, initargs=(progress,)) as pool:
        try:
            pending = pool.map_async(_count_shard_job, shards)
            results = _wait(pending, pool,
                            lambda: on_progress and on_progress(progress[0], len(jobs_units), progress[1]))
        finally:
            pool.terminate()
    total, stats = results[0]
    for counter, shard_stats in results[1:]:
        total.update(counter)
        stats += shard_stats
    if on_progress:
        on_progress(len(jobs_units), len(jobs_units), stats.bytes)
    return total, stats


def _wait(pending, pool, tick: Callable[[], object], poll: float = 0.5):
    """Wait for an async pool result; a worker killed by the kernel becomes a clear error, not a hang.

    The pool silently replaces a dead worker (and its task is lost), so a change in the set of
    worker pids is the sign: workers of a running map never exit on their own.
    """
    pids = {p.pid for p in pool._pool}
    while True:
        try:
            return pending.get(timeout=poll)
        except Exception as exc:
            if type(exc).__name__ != "TimeoutError":
                raise
        tick()
        workers = list(pool._pool)
        dead = [p for p in workers if p.exitcode is not None]
        if dead or {p.pid for p in workers} != pids:
            codes = ", ".join(f"pid {p.pid} exit {p.exitcode}" for p in dead) or "a worker vanished"
            raise RuntimeError(
                f"a counting worker died ({codes}); it was probably killed for running out of "
                "memory: lower --workers or --memory-budget, or free memory"
            )

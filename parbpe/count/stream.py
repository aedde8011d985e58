"""Counting texts that come from a Python iterable (train_from_iterator, standard input, streamed
datasets): the parent consumes the iterable in batches of a few MB and deals them to counting
workers through a bounded queue, so counting stays parallel and the batches in flight stay few.

Each worker owns a ShardCounter, as in count_to_runs, and returns its run files at the end; counts
add up, so which worker counted which batch never changes the result, and the result equals the
count of a file holding the same documents.
"""

from __future__ import annotations

import os
import queue as queue_module
import time
import traceback
from collections.abc import Callable, Iterable

import pyarrow as pa

from ..config import TrainConfig
from ..io.readers import ReadStats
from ..run.memory import system_pool, use_system_pool
from ..run.pool import WorkerDied, death_reason, fault_point, get_context, ignore_sigint, start_workers, stop_workers
from .counter import CountResult, ShardCounter, prepare

QUEUE_BATCHES_PER_WORKER = 2  # batches waiting per worker: enough to keep them busy, few enough for memory
_POLL = 0.2


def count_stream_to_runs(
    batches: Iterable[pa.Array],
    config: TrainConfig,
    run_dir: str,
    *,
    data_limit: int | None = None,
    start_method: str | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> CountResult:
    """Count string arrays of documents into run files in run_dir with config.workers processes.

    on_progress(spills) is called as batches are handed on (the caller knows how far the iterable
    is). A worker that dies or fails ends the run with an error naming it; the iterable is then
    left unconsumed.
    """
    if config.workers == 1:
        with system_pool():
            shard = ShardCounter(config, run_dir, "s0", data_limit)
            for texts in batches:
                shard.add_batch(texts)
                if on_progress:
                    on_progress(shard.spills)
            return CountResult(shard.finish(), ReadStats(), shard.spills)

    prepare(config.pattern, config.jit)  # the JIT's tables and kernels, once, before workers fork
    context = get_context(start_method)
    tasks = context.Queue(maxsize=QUEUE_BATCHES_PER_WORKER * config.workers)
    results = context.Queue()
    procs = start_workers(context, _stream_worker, lambda r: (r, tasks, results, config, run_dir, data_limit),
                          config.workers)
    try:
        collected: dict[int, tuple[list[str], int]] = {}
        for texts in batches:
            _put(tasks, texts, procs, results, collected)
            if on_progress:
                on_progress(sum(s for _, s in collected.values()))
        for _ in procs:
            _put(tasks, None, procs, results, collected)
        while len(collected) < len(procs):
            _receive(results, procs, collected, wait=True)
    finally:
        stop_workers(procs)
        tasks.close()
        tasks.cancel_join_thread()  # batches left in the queue are dropped, not flushed to nobody
    runs = [run for r in sorted(collected) for run in collected[r][0]]
    spills = sum(s for _, s in collected.values())
    if on_progress:
        on_progress(spills)
    return CountResult(runs, ReadStats(), spills)


def _put(tasks, item, procs, results, collected) -> None:
    """Put item on the bounded queue, checking meanwhile that every worker is alive."""
    while True:
        try:
            tasks.put(item, timeout=_POLL)
            return
        except queue_module.Full:
            _receive(results, procs, collected, wait=False)


def _receive(results, procs, collected: dict, wait: bool) -> None:
    """Take the workers' messages (a result or an error); raise if a worker failed or died."""
    _drain(results, collected, _POLL if wait else 0)
    if any(rank not in collected and p.exitcode is not None for rank, p in enumerate(procs)):
        _drain(results, collected, 2.0)  # a worker that just finished may have its result in the pipe
        for rank, p in enumerate(procs):
            if rank not in collected and p.exitcode is not None:
                reason = death_reason(p.exitcode, "try a smaller --memory-budget or fewer --workers")
                raise WorkerDied(f"counting worker {rank} (pid {p.pid}, batches of an iterable) died ({reason})")


def _drain(results, collected: dict, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            rank, payload = results.get(timeout=max(deadline - time.monotonic(), 0.001))
        except queue_module.Empty:
            return
        if isinstance(payload, BaseException):
            raise payload
        collected[rank] = payload


def _stream_worker(rank: int, tasks, results, config: TrainConfig, run_dir: str, data_limit: int | None) -> None:
    """A counting worker: batches from tasks until None, then its run files on results."""
    ignore_sigint()
    use_system_pool()
    shard = ShardCounter(config, run_dir, f"s{rank}", data_limit)
    try:
        done = 0
        while (texts := tasks.get()) is not None:
            fault_point("count", done)
            done += 1
            shard.add_batch(texts)
        results.put((rank, (shard.finish(), shard.spills)))
    except Exception as exc:  # re-raised in the parent, with the worker and its traceback as a note
        exc.add_note(f"in counting worker {rank} (pid {os.getpid()}):\n{traceback.format_exc()}")
        results.put((rank, exc))

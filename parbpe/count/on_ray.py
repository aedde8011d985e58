"""The count and reduce stages as Ray tasks (the cluster counterpart of count_to_runs and reduce_runs).

A count task counts its work units with the same code as a local worker (a ShardCounter: the piece
shortcut, the lexer, StringCounts, spills to run files under the worker's share of the budget), in
a temporary directory of its own attempt, and returns its counts already cut into the hash
partitions: batch p of its runs, summed (read_partition). The partitions stay in Ray's object
store; reduce task p takes partition p of every count task and sums it (sum_tables, as locally),
then applies freq_cutoff and picks its stop-list candidates when training. The driver receives only
the reduced partitions, in partition order, so every output is the same bytes as a local run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from .. import jit
from ..config import TrainConfig
from ..io.readers import ReadStats
from ..io.units import WorkUnit
from ..run.ray_executor import RayExecutor
from .counter import CountResult, ShardCounter, count_unit
from .partitions import N_PARTITIONS, read_partition
from .pieces import sum_tables
from .reduce import select_partition

TASKS_PER_CPU = 4  # count tasks per cluster CPU: enough to balance load and make a retry cheap


def count_task(units: Sequence[WorkUnit], config: TrainConfig, data_limit: int | None) -> tuple:
    """Count units into (stats, partition 0, ..., partition N-1): a pure function of its arguments.

    Spilled run files go to a temporary directory of this attempt on its node (the system's temporary
    directory there; removed when the attempt ends), so a failed attempt leaves nothing another
    attempt reads.
    """
    jit.set_mode(config.jit or jit.mode())  # a Ray worker does not inherit the driver's environment
    with tempfile.TemporaryDirectory(prefix="parbpe-task-") as run_dir:
        shard = ShardCounter(config, run_dir, "t", data_limit)
        for unit in units:
            count_unit(unit, shard)  # errors name the unit (readers) and the task (the executor)
        runs = shard.finish()
        partitions = [read_partition(runs, p) for p in range(N_PARTITIONS)]
    stats = {"units": len(units), "spills": shard.spills, "read": shard.stats}
    return (stats, *partitions)


def reduce_task(config: TrainConfig | None, sort: bool, *tables: pa.Table) -> tuple:
    """One partition's global counts (the sum of that partition of every count task); with config,
    its Selection (freq_cutoff, stop-list candidates; sorted: sort) instead."""
    table = sum_tables(list(tables))
    return (table if config is None else select_partition(table, config, sort),)


def count_on_ray(units: Sequence[WorkUnit], config: TrainConfig, executor: RayExecutor, *,
                 data_limit: int | None = None,
                 on_progress: Callable[[int, int, int, int], None] | None = None) -> CountResult:
    """Count units as Ray tasks; the result's `partitions` holds each task's partition refs for
    reduce_on_ray. on_progress(units_done, total_units, bytes_done, spills) as tasks finish."""
    units = list(units)
    n_tasks = max(1, min(len(units), TASKS_PER_CPU * executor.cpus))
    groups = [units[t::n_tasks] for t in range(n_tasks)]
    handles = executor.submit("count", count_task, [(g, config, data_limit) for g in groups], 1 + N_PARTITIONS)
    stats, spills, done = ReadStats(), 0, 0

    def finished(_: int, value: dict[str, Any]) -> None:
        nonlocal spills, done
        stats.__iadd__(value["read"])
        spills += value["spills"]
        done += value["units"]
        if on_progress:
            on_progress(done, len(units), stats.bytes, spills)

    for _ in executor.results("count", handles, lambda t: f"{len(groups[t])} work units from "
                              f"{groups[t][0].describe()}", on_done=finished):
        pass
    return CountResult(runs=[], stats=stats, spills=spills, partitions=[h[1:] for h in handles])


def reduce_on_ray(partitions: list[list], executor: RayExecutor, config: TrainConfig | None = None,
                  on_progress: Callable[[int, int], None] | None = None, sort: bool = False) -> Iterator:
    """The global counts of every partition (with config: its Selection, sorted if sort), in partition
    order, one Ray task per partition over partition p of every count task."""
    tasks = [(config, sort, *(refs[p] for refs in partitions)) for p in range(N_PARTITIONS)]
    handles = executor.submit("reduce", reduce_task, tasks, 1)
    for p, result in enumerate(executor.results("reduce", handles, lambda p: f"partition {p}"), start=1):
        if on_progress:
            on_progress(p, N_PARTITIONS)
        yield result

"""Running data-parallel stages as Ray tasks, on a local Ray instance or an existing cluster.

The executor knows nothing of counting: it runs a module-level function on argument tuples, one
Ray task each, with the resources the memory budget gives a worker. Each function returns a tuple
whose first value is small (it travels to the driver at once: stats, or a reduced partition) and
whose other values stay in Ray's object store (which spills to disk by itself) until a later task
takes them as arguments. Ray retries a task whose worker or node dies, or that raised an error other
than a user's mistake; the outputs of a failed attempt are never seen, since only the returns of the
attempt that succeeded exist. A user's mistake (ValueError, FileNotFoundError) is not retried and is
raised on the driver as it is. Retries are counted by an actor of the run's (AttemptLog, on the
driver's node, attempt_log_class): each attempt tells it its task as it starts, and learns how many started before it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .faults import FAIL_ONCE_ENV, inject_failure
from .pool import WorkerDied

MAX_RETRIES = 3


def import_ray():
    """Ray, or an error naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'parbpe[ray]'") from None
    return ray


@dataclass
class _Failure:
    """A user's mistake inside a task, carried back as a value so that Ray does not retry it."""

    error: Exception


@dataclass
class RayStats:
    """What the cluster did: nodes, tasks per stage and node, and retries (values add up)."""

    nodes: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    tasks_per_node: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "nodes_used": len(self.tasks_per_node), "tasks": dict(self.tasks),
                "retries": dict(self.retries), "tasks_per_node": dict(sorted(self.tasks_per_node.items()))}


def attempt_log_class() -> type:
    """AttemptLog: how many attempts of each task have started (a Ray actor of the executor's: Ray's own
    attempt number is not in its public API); started(key) counts one more and returns the earlier
    ones. Made here, not at module level, so that Ray ships the class by value: its process imports
    nothing of parbpe's (the package's import is most of a worker's start)."""

    class AttemptLog:
        def __init__(self) -> None:
            self.started_before: dict[int, int] = {}

        def started(self, key: int) -> int:
            earlier = self.started_before.get(key, 0)
            self.started_before[key] = earlier + 1
            return earlier

    return AttemptLog


def _run_attempt(func: Callable[..., tuple], n_outputs: int, fail_once: str | None, attempts: Any, key: int,
                 *args: Any) -> tuple:
    """One attempt of a task: func(*args) -> (first, *rest); returns (info, *rest), info carrying
    first, the attempts that started before this one (attempts: the AttemptLog; key: this task's)
    and the node."""
    import ray

    started = attempts.started.remote(key)  # told at once, read once the work is done: the actor's start
    try:                                    # (a process of its own) overlaps the first tasks' work
        first, *rest = func(*args)
    except (ValueError, FileNotFoundError) as exc:
        first, rest = _Failure(exc), [None] * (n_outputs - 1)
    else:
        earlier = _earlier_attempts(ray, started)
        inject_failure(fail_once)
        first = {"value": first, "attempt": earlier, "node": ray.get_runtime_context().get_node_id()}
    return (first, *rest) if n_outputs > 1 else first  # Ray stores a task's single return as it is


def _earlier_attempts(ray: Any, started: Any) -> int:
    """The AttemptLog's answer: 0 where its actor is gone (the work goes on, its retries uncounted)."""
    try:
        return ray.get(started)
    except ray.exceptions.RayError:
        return 0


class RayExecutor:
    """Ray tasks for the count and reduce stages (use as a context manager).

    address: None starts a local Ray instance (or uses the one this process is already connected
    to); "auto" joins the cluster running on this machine; "ray://host:port" or "host:port" joins
    that one. Each task reserves num_cpus=1 and `task_memory` bytes of Ray's memory resource, so a
    node runs at most as many tasks at once as its CPUs and its memory allow.
    """

    def __init__(self, address: str | None = None, *, task_memory: int | None = None, local_cpus: int | None = None,
                 max_retries: int = MAX_RETRIES) -> None:
        self.address = address
        self.task_memory = task_memory
        self.local_cpus = local_cpus
        self.max_retries = max_retries
        self.fail_once = os.environ.get(FAIL_ONCE_ENV)
        self.stats = RayStats()
        self._owned = False
        self._attempts: Any = None  # the AttemptLog actor, while the executor is open
        self._tasks_submitted = 0

    def __enter__(self) -> RayExecutor:
        ray = import_ray()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if self.address is None:
                kwargs["num_cpus"] = self.local_cpus
            try:
                ray.init(address=self.address, **kwargs)
            except ConnectionError as exc:
                raise ValueError(f"cannot join the Ray cluster at {self.address!r} ({exc}); start it with "
                                 "`ray start --head` or pass --ray-address") from None
            self._owned = True
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
        self._attempts = ray.remote(attempt_log_class()).options(num_cpus=0, scheduling_strategy=here).remote()
        alive = [n for n in ray.nodes() if n.get("Alive")]
        self.stats.nodes = len(alive)
        most = max((n["Resources"].get("memory", 0) for n in alive), default=0)
        if self.task_memory and self.task_memory > most:
            self.close()
            raise ValueError(f"each task needs {self.task_memory / 1e9:.2f} GB (--memory-budget / --workers) but no "
                             f"Ray node offers more than {most / 1e9:.2f} GB of memory; lower --memory-budget or "
                             "raise --workers")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._attempts is not None:
            import ray

            ray.kill(self._attempts)
            self._attempts = None
        if self._owned:
            import ray

            ray.shutdown()
            self._owned = False

    @property
    def cpus(self) -> int:
        """CPUs of the whole cluster (how many tasks can run at once)."""
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def submit(self, stage: str, func: Callable[..., tuple], tasks: Sequence[tuple], n_outputs: int) -> list[list]:
        """Start func(*args) as one Ray task per args tuple; returns each task's object refs
        [info, *outputs]. Refs may be passed as arguments of later tasks."""
        ray = import_ray()
        options: dict[str, Any] = {"num_cpus": 1, "num_returns": n_outputs, "max_retries": self.max_retries,
                                   "retry_exceptions": True}
        if self.task_memory:
            options["memory"] = self.task_memory
        remote = ray.remote(_run_attempt).options(name=f"parbpe-{stage}", **options)
        first = self._tasks_submitted
        self._tasks_submitted += len(tasks)
        refs = [remote.remote(func, n_outputs, self.fail_once, self._attempts, first + i, *args)
                for i, args in enumerate(tasks)]
        self.stats.tasks[stage] = self.stats.tasks.get(stage, 0) + len(refs)
        self.stats.retries.setdefault(stage, 0)
        return [r if isinstance(r, list) else [r] for r in refs]

    def results(self, stage: str, handles: list[list], describe: Callable[[int], str],
                on_done: Callable[[int, Any], None] | None = None, poll: float = 0.5) -> Iterator[Any]:
        """Yield each task's first value in task order, calling on_done(index, value) as tasks finish
        in any order. A task that failed past its retries raises an error naming it (describe(index))."""
        ray = import_ray()
        pending = {h[0]: i for i, h in enumerate(handles)}
        done: dict[int, Any] = {}
        following = 0
        while following < len(handles):
            if pending:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=poll)
                for ref in ready:
                    index = pending.pop(ref)
                    done[index] = self._value(ray, stage, ref, describe(index))
                    if on_done is not None:
                        on_done(index, done[index])
            while following in done:
                yield done.pop(following)
                following += 1

    def _value(self, ray, stage: str, ref, what: str) -> Any:
        try:
            info = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            raise RuntimeError(f"Ray task for {what} failed after {self.max_retries + 1} attempts: "
                               f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1]}") from None
        except ray.exceptions.RayError as exc:
            raise WorkerDied(f"Ray task for {what} was lost after {self.max_retries + 1} attempts (its worker or "
                               f"node died: {type(exc).__name__}); it may have run out of memory: lower "
                               "--memory-budget or raise --workers") from None
        if isinstance(info, _Failure):
            raise info.error
        self.stats.retries[stage] = self.stats.retries.get(stage, 0) + info["attempt"]
        node = info["node"][:12]
        self.stats.tasks_per_node[node] = self.stats.tasks_per_node.get(node, 0) + 1
        return info["value"]

"""parallel(): tasks go to whichever worker is free, each worker finishes once, and worker 0 may be a
thread of the parent (local=True) that fails and ends like the others."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from parbpe.run.pool import WorkerDied, get_context, parallel, worker_rank

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and SIGKILL of a worker")


def _where(task: str) -> tuple[str, int, int]:
    if task == "slow":
        time.sleep(1.0)
    return task, worker_rank(), os.getpid()


class _Collector:
    """Remembers the tasks its worker was handed; finish() tells them, or dies if told to."""

    def __init__(self, die_finishing: int | None = None) -> None:
        self.seen: list[int] = []
        self.die_finishing = die_finishing

    def __call__(self, task: int) -> None:
        if task < 0:
            raise ValueError(f"task {task} is bad")
        self.seen.append(task)

    def finish(self) -> tuple[int, int, list[int]]:
        if worker_rank() == self.die_finishing:
            os.kill(os.getpid(), signal.SIGKILL)
        return worker_rank(), os.getpid(), self.seen


def test_tasks_go_to_whichever_worker_is_free():
    tasks = ["slow", "a", "b", "c", "d", "e"]
    results = list(parallel(_where, tasks, 2, get_context("fork")))
    assert [task for task, _, _ in results] == tasks  # in order
    slow_rank = results[0][1]
    assert {rank for _, rank, _ in results[1:]} == {1 - slow_rank}  # the free worker took all the rest
    assert os.getpid() not in {pid for _, _, pid in results}


@pytest.mark.parametrize("local", [False, True])
def test_each_worker_finishes_once_after_the_tasks(local):
    collector = _Collector()
    fds = len(os.listdir("/proc/self/fd"))
    answers = list(parallel(collector, list(range(20)), 3, get_context("fork"), finish=collector.finish,
                            local=local))
    assert answers[:20] == [None] * 20
    finished = answers[20:]
    assert [rank for rank, _, _ in finished] == [0, 1, 2]
    assert sorted(task for _, _, seen in finished for task in seen) == list(range(20))  # each task once
    assert all(seen for _, _, seen in finished)  # every worker is handed a task first
    pids = [pid for _, pid, _ in finished]
    assert (pids[0] == os.getpid()) == local and os.getpid() not in pids[1:] and len(set(pids)) == 3
    assert len(os.listdir("/proc/self/fd")) == fds  # the pipes (and the local worker's sentinel) closed


def test_a_worker_killed_while_finishing_is_named():
    collector = _Collector(die_finishing=1)
    with pytest.raises(WorkerDied, match=r"^worker 1 \(finishing\) died \(signal 9"):
        list(parallel(collector, list(range(6)), 2, get_context("fork"), finish=collector.finish))


def test_an_error_in_the_local_worker_ends_the_pool():
    collector = _Collector()
    clock = time.monotonic()
    with pytest.raises(ValueError, match="task -1 is bad") as caught:
        list(parallel(collector, [-1, *range(40)], 2, get_context("fork"), finish=collector.finish, local=True))
    assert time.monotonic() - clock < 5
    assert "in the worker process" in "".join(caught.value.__notes__)

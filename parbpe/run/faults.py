"""Fault injection for tests, in one place: each hook is read from the environment, costs one
lookup when unset, and is named PARBPE_TEST_*.

- PARBPE_TEST_STOP=stage:N:SIGNAL (test_stop): the whole process group gets SIGNAL once `done`
  reaches N in stage (count units, reduce partitions, merge rounds; SuperBPE's stage 2:
  superword_count units, superword_merge rounds; PathPiece's pathpiece iterations), as a user's
  kill would;
- PARBPE_TEST_KILL=stage:n (fault_point): a worker of that stage (count, reduce, merge; encode:
  merge workers that encode first; pathpiece: scoring workers) SIGKILLs itself at its n-th unit,
  task, round or scoring;
- PARBPE_TEST_FAIL_ONCE=raise:PATH,kill:PATH (inject_failure): the first Ray task attempt to create
  PATH fails after doing its work, by raising or by killing its own worker.
"""

from __future__ import annotations

import os
import signal
import time

STOP_HOOK = "PARBPE_TEST_STOP"
KILL_HOOK = "PARBPE_TEST_KILL"
FAIL_ONCE_ENV = "PARBPE_TEST_FAIL_ONCE"


def test_stop(stage: str, done: int) -> None:
    """STOP_HOOK: signal the whole process group once `done` reaches N in `stage`."""
    spec = os.environ.get(STOP_HOOK)
    if not spec:
        return
    want, n, name = spec.split(":")
    if want == stage and done >= int(n):
        os.killpg(os.getpgrp(), getattr(signal, f"SIG{name}"))
        time.sleep(5)  # the signal arrives; a handled SIGINT raises KeyboardInterrupt here


def fault_point(stage: str, n: int) -> None:
    """KILL_HOOK: SIGKILL this process at the n-th step of stage when asked to."""
    if os.environ.get(KILL_HOOK) == f"{stage}:{n}":
        os.kill(os.getpid(), signal.SIGKILL)


def inject_failure(spec: str | None) -> None:
    """FAIL_ONCE_ENV: the first attempt (of any task) to create PATH fails, after doing its work, by
    raising ("raise:PATH") or by killing its own worker process with SIGKILL ("kill:PATH")."""
    for item in filter(None, (spec or "").split(",")):
        how, _, path = item.partition(":")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected failure ({FAIL_ONCE_ENV}={item})")

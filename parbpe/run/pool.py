"""Process pools for the data-parallel stages: ordered results, and no hang when a worker dies.

Each worker has its own pipe to the parent and nothing else is shared: no lock, no queue a dying
worker could hold. The parent waits on every pipe and every worker's exit at once, so a worker
killed by the kernel (or by anyone) ends the stage within a poll with WorkerDied, naming the task
it held. Workers ignore SIGINT: on Ctrl-C only the parent stops (and stops them), with no worker
tracebacks.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import jit
from .faults import KILL_HOOK, fault_point  # noqa: F401 (the test hook of dying workers: see run/faults.py)

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class WorkerDied(RuntimeError):
    """A worker process ended without answering: killed by a signal (usually the kernel, out of memory)."""


def death_reason(exitcode: int | None, hint: str) -> str:
    """Why a worker ended, from its exit code: 'signal 9: probably out of memory; try ...'."""
    if exitcode is None:
        return "it vanished"
    if exitcode < 0:
        number = -exitcode
        if number == signal.SIGKILL:
            return f"signal {number}: probably out of memory; {hint}"
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        return f"signal {number}, {name}"
    return f"exit status {exitcode}"


def default_start_method() -> str:
    """fork where the platform has it (fast, nothing to re-import), else spawn."""
    import multiprocess

    return "fork" if "fork" in multiprocess.get_all_start_methods() else "spawn"


def get_context(start_method: str | None = None):
    """multiprocess's context for start_method (default: default_start_method()), once no thread of
    this process loads numba kernels (jit.preload): a fork copies a lock a thread holds as held."""
    import multiprocess

    jit.settle()
    return multiprocess.get_context(start_method or default_start_method())


def die_with_parent(parent_pid: int | None = None) -> None:
    """In a worker: be killed when the parent dies (SIGKILL included, which runs no cleanup in the
    parent), instead of going on as an orphan holding memory and files. On Linux the kernel sends
    SIGKILL on the parent's death (prctl PR_SET_PDEATHSIG); if the parent died before that was
    set, exit now. Elsewhere nothing is set: workers then notice a closed pipe when they next read.
    parent_pid: the parent's, for a process multiprocess did not start (else multiprocess's)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    import multiprocess

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is None:
        parent = multiprocess.parent_process()
        parent_pid = parent.pid if parent is not None else None
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # orphaned already: the parent is gone


def ignore_sigint() -> None:
    """In a worker, first thing: die with the parent (die_with_parent), leave Ctrl-C to the parent
    (which stops the workers), then let signals in. Every kind of worker starts with this."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """While workers that run parbpe's code alone are spawned: hide the main module from
    multiprocessing, which would have each child import it again (as `__mp_main__`). A caller's
    script without an `if __name__ == "__main__":` guard would then run its whole program again in
    every child; with it hidden, a child imports only what its target needs."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__spec__ = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def start_workers(context, target: Callable, args_of: Callable[[int], tuple], workers: int,
                  hide_main: bool = False) -> list:
    """Start `workers` daemon processes running target(*args_of(k)), with SIGINT blocked until each
    has set it aside (ignore_sigint), so Ctrl-C during the start never reaches a worker. hide_main:
    the target is parbpe's and needs nothing of the main module (main_module_hidden)."""
    procs = []
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with main_module_hidden() if hide_main else contextlib.nullcontext():
            for k in range(workers):
                proc = context.Process(target=target, args=args_of(k), daemon=True)
                proc.start()
                procs.append(proc)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return procs


def _with_own_end_only(inherited: list, target: Callable, *args) -> None:
    """In a worker: close the parent's ends of its own and the earlier workers' pipes (forked), then
    run target. A pipe to the parent that breaks (the parent stopped listening: a sibling died and
    the run is ending with that error) ends the worker quietly, with no traceback of its own."""
    for conn in inherited:
        conn.close()
    try:
        target(*args)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        os._exit(0)


def start_piped_workers(context, target: Callable, args_of: Callable[[int, object], tuple], workers: int,
                        hide_main: bool = False) -> tuple[list, list]:
    """Start `workers` processes running target(*args_of(k, conn)), each with a pipe of its own:
    (procs, the parent's ends). Each pipe is made just before its worker forks and the worker's end
    is closed in the parent right after, so no worker inherits a sibling's end: a worker that dies
    half-way through a message leaves a pipe at EOF (recv raises) rather than one a sibling keeps open
    (recv would wait for the rest forever)."""
    procs, conns = [], []
    try:
        for k in range(workers):
            ours, theirs = context.Pipe()
            conns.append(ours)
            try:
                inherited = list(conns) if context.get_start_method() == "fork" else []
                procs += start_workers(context, _with_own_end_only,
                                       lambda _, end=theirs, k=k: (inherited, target, *args_of(k, end)), 1, hide_main)
            finally:
                theirs.close()
    except BaseException:
        for conn in conns:
            conn.close()
        stop_workers(procs)
        raise
    return procs, conns


def send_message(conn, message: Any) -> None:
    """conn.send with the standard library's C pickler. multiprocess pickles with dill, in Python:
    slow for a round's tuple of arrays, paid per worker and per message every merge round. The
    per-round messages of merge and scoring workers are plain data (tuples, arrays, strings)."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def receive_message(conn) -> Any:
    """What send_message sent (EOFError or OSError if the pipe broke; RuntimeError for bytes that
    do not unpickle, which only a bug in a worker sends)."""
    data = conn.recv_bytes()
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise RuntimeError(f"a worker's message of {len(data)} bytes could not be read: "
                           f"{type(exc).__name__}: {exc}") from None


def stop_workers(procs: list) -> None:
    """Stop worker processes and wait for them (SIGTERM, then SIGKILL after a second)."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=1)
        if proc.is_alive():
            proc.kill()
            proc.join()


FINISH = "finish"  # parallel's last message to a worker with a finish(): run it and answer with its result
_rank = threading.local()


def worker_rank() -> int:
    """This worker's index in its pool (parallel's worker k), in the worker's process or thread."""
    return _rank.value


def _serve(conn, func: Callable, stage: str | None, initializer, initargs: tuple, finish: Callable | None = None,
           rank: int = 0, in_thread: bool = False) -> None:
    """A worker's loop: run func on each (index, task) received, answer, until None comes; on FINISH,
    answer finish()'s result. in_thread: a thread of the parent (parallel's local worker), which
    keeps the parent's signals and is never the test hook's to kill."""
    _rank.value = rank
    if not in_thread:
        ignore_sigint()
    if initializer is not None:
        initializer(*initargs)
    done = 0
    while True:
        message = conn.recv()
        if message is None:
            return
        if message == FINISH:
            index, work = -1, finish
        else:
            index, task = message
            if stage is not None and not in_thread:
                fault_point(stage, done)
            work = functools.partial(func, task)
        try:
            answer = ("ok", index, work())
        except Exception as exc:
            answer = ("error", index, exc, traceback.format_exc(limit=8))
        try:
            conn.send(answer)
        except Exception:  # an exception that does not pickle travels as text
            conn.send(("error", index, RuntimeError(f"{answer[2]!r}"), answer[-1]))
        done += 1


class _LocalWorker:
    """Worker 0 of a pool as a thread of this process, served through a pipe like the others
    (parallel's local=True: work that must fit in one process fewer). It looks like a Process to
    parallel: sentinel (readable once the thread ends), exitcode, is_alive, join; a thread cannot be
    stopped, so terminate and kill do nothing: closing its pipe ends it after the task at hand."""

    def __init__(self, conn, args: tuple) -> None:
        self._ended, self._end = os.pipe()
        self.exitcode: int | None = None
        self._thread = threading.Thread(target=self._run, args=(conn, args), name="parbpe-local-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self, conn, args: tuple) -> None:
        try:
            _serve(conn, *args, rank=0, in_thread=True)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pass  # the parent closed the pipe: the pool is ending
        finally:
            conn.close()
            self.exitcode = 0
            os.write(self._end, b"x")

    @property
    def sentinel(self) -> int:
        return self._ended

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
        if not self._thread.is_alive() and self._end >= 0:
            os.close(self._end)
            os.close(self._ended)
            self._end = self._ended = -1

    def terminate(self) -> None:
        pass

    def kill(self) -> None:
        pass


def parallel(func: Callable, tasks: list, workers: int, context, tick: Callable[[], object] | None = None,
             initializer=None, initargs: tuple = (), poll: float = 0.5, stage: str | None = None,
             describe: Callable[[int, int], str] | None = None,
             hint: str = "try a smaller --memory-budget or fewer --workers",
             finish: Callable[[], Any] | None = None, local: bool = False) -> Iterator:
    """Yield func(task) for every task, in order, computed on `workers` processes.

    Tasks go out one at a time to whichever worker is free. tick() is called every `poll` seconds
    while waiting, whether or not answers came in between. stage names the tasks for the test hook
    (fault_point). A worker's exception is re-raised here (its traceback as a note); a worker that
    dies raises WorkerDied naming
    describe(worker, task index) (default "worker k (task i)", and "(finishing)" for finish) and why.
    The workers are stopped on every exit path. finish: once every task is done, each worker runs
    finish() (state its tasks built up, e.g. a counter: worker_rank() tells them apart), and its
    results follow the tasks', one per worker in worker order. local: worker 0 is a thread of this
    process rather than a process of its own (one process fewer; it starts once the others have
    forked).
    """
    from multiprocess.connection import wait

    workers = max(1, min(workers, len(tasks)))
    procs, conns = _start_pool(context, (func, stage, initializer, initargs, finish), workers, local)
    holding: dict[int, int] = {}  # worker -> index of the task it is working on (-1: its finish)
    finished: dict[int, object] = {}
    next_task = 0
    last_tick = [time.monotonic()]

    def hand_out(k: int) -> None:
        nonlocal next_task
        if next_task < len(tasks):
            holding[k] = next_task
            try:
                conns[k].send((next_task, tasks[next_task]))
            except OSError:  # its end closed: it died between tasks
                raise died(k) from None
            next_task += 1

    def died(k: int) -> WorkerDied:
        procs[k].join(timeout=3)  # its pipe closed: it is exiting; wait for its exit code
        index = holding.get(k)
        if index == -1:
            who = f"{describe(k, index) if describe is not None else f'worker {k}'} (finishing)"
        else:
            who = describe(k, index) if describe is not None and index is not None else f"worker {k} (task {index})"
        return WorkerDied(f"{who} died ({death_reason(procs[k].exitcode, hint)})")

    def receive(wanted: int) -> None:
        """Answers (handing out more tasks) until finished holds `wanted`."""
        while wanted not in finished:
            by_object = {conns[k]: k for k in holding} | {procs[k].sentinel: k for k in holding}
            ready = wait(list(by_object), timeout=poll)
            if tick is not None and (not ready or time.monotonic() - last_tick[0] >= poll):
                tick()  # every poll seconds, however often the workers answer (a busy pool's bar moves too)
                last_tick[0] = time.monotonic()
            for obj in ready:
                k = by_object[obj]
                if k not in holding:
                    continue
                if not conns[k].poll():
                    raise died(k)
                try:
                    status, index, *payload = conns[k].recv()
                except (EOFError, OSError):
                    raise died(k) from None
                if status != "ok":
                    exc, remote = payload
                    exc.add_note(f"in the worker process:\n{remote}")
                    raise exc
                finished[index if index >= 0 else -1 - k] = payload[0]
                del holding[k]
                if index >= 0:
                    hand_out(k)

    try:
        for k in range(workers):
            hand_out(k)
        for wanted in range(len(tasks)):
            receive(wanted)
            yield finished.pop(wanted)
        if finish is not None:
            for k in range(workers):
                holding[k] = -1
                conns[k].send(FINISH)
            for k in range(workers):
                receive(-1 - k)
                yield finished.pop(-1 - k)
        for conn in conns:
            conn.send(None)
    finally:
        for conn in conns:
            conn.close()
        stop_workers(procs)


def _start_pool(context, serve_args: tuple, workers: int, local: bool) -> tuple[list, list]:
    """parallel's workers, each with its pipe: processes, or with local worker 0 a thread of this
    process, started after the others have forked (no thread of ours runs while they fork)."""
    if not local:
        return start_piped_workers(context, _serve, lambda k, end: (end, *serve_args, k), workers)
    procs, conns = start_piped_workers(context, _serve, lambda k, end: (end, *serve_args, k + 1), workers - 1)
    try:
        ours, theirs = context.Pipe()  # made after the forks: no process but this one holds its ends
        worker = _LocalWorker(theirs, serve_args)
        worker.start()
    except BaseException:
        for conn in conns:
            conn.close()
        stop_workers(procs)
        raise
    return [worker, *procs], [ours, *conns]


def gather_answers(conns: Sequence, procs: Sequence, died: Callable[[int], BaseException], poll: float = 0.2
                   ) -> dict[int, Any]:
    """One message (send_message's) from each worker's pipe (conns[k] of procs[k]), by worker. Waits on every pipe and
    every worker's exit at once, so a death is seen at once whichever worker it is: died(k) is raised
    for a worker gone without its answer."""
    from multiprocess.connection import wait

    answers: dict[int, Any] = {}
    while len(answers) < len(conns):
        waiting = {conns[k]: k for k in range(len(conns)) if k not in answers}
        waiting |= {procs[k].sentinel: k for k in waiting.values()}
        for ready in wait(list(waiting), timeout=poll):
            k = waiting[ready]
            if k in answers:
                continue
            if not conns[k].poll():
                raise died(k)
            try:
                answers[k] = receive_message(conns[k])
            except (EOFError, OSError):  # the pipe broke: the worker is gone
                raise died(k) from None
    return answers

"""Process pools for the data-parallel stages: ordered results, and no hang when a worker dies."""

from __future__ import annotations

from collections.abc import Callable, Iterator


def default_start_method() -> str:
    """fork where the platform has it (fast, nothing to re-import), else spawn."""
    import multiprocess

    return "fork" if "fork" in multiprocess.get_all_start_methods() else "spawn"


def get_context(start_method: str | None = None):
    import multiprocess

    return multiprocess.get_context(start_method or default_start_method())


def parallel(func, tasks: list, workers: int, context, tick: Callable[[], object] | None = None,
             initializer=None, initargs=(), poll: float = 0.5) -> Iterator:
    """Yield func(task) for every task, in order, computed on a pool of `workers` processes.

    A worker killed by the kernel becomes a clear error, not a hang: the pool silently replaces a
    dead worker (and its task is lost), so a change in the set of worker pids is the sign, since
    workers never exit on their own. The pool is terminated on every exit path.
    """
    import multiprocess

    with context.Pool(workers, initializer=initializer, initargs=initargs) as pool:
        try:
            pids = {p.pid for p in pool._pool}
            results = pool.imap(func, tasks)
            for _ in range(len(tasks)):
                while True:
                    try:
                        item = results.next(timeout=poll)
                        break
                    except multiprocess.TimeoutError:
                        pass
                    if tick is not None:
                        tick()
                    procs = list(pool._pool)
                    dead = [p for p in procs if p.exitcode is not None]
                    if dead or {p.pid for p in procs} != pids:
                        codes = ", ".join(f"pid {p.pid} exit {p.exitcode}" for p in dead) or "a worker vanished"
                        raise RuntimeError(
                            f"a worker process died ({codes}); it was probably killed for running out of "
                            "memory: lower --workers or --memory-budget, or free memory"
                        )
                yield item
        finally:
            pool.terminate()

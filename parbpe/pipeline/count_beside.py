"""SuperBPE's superword count in a process of its own, at low priority, beside stage 1's merge.

Stage 1's merge rounds keep one core busy and the second only in their large rounds, and stage 2
needs its superword counts only after them. So the count (count and reduce: pipeline/count.py's
count_stage, its workers included) runs in a new process of nice 19,
started once stage 1's table is built: the merge keeps its cores, the count takes what the merge
leaves, and after the merge only the rest of the count is waited for.

The process is a new Python running `child(JOB)` (a fork would bring the merge stage's
pages into the process tree's RSS). It saves the reduced counts in stage 2's run directory (or a
temporary one) as counting there always does, so the parent loads them as a resumed run would; its
progress comes as JSON lines, its error as one line, which the parent raises. Like a worker, it
ignores SIGINT (the run stops it) and is killed when its parent dies (run/pool.py's
die_with_parent; its own workers die with it in turn); the parent kills it and its workers on any
error of its own.

Where the budget does not hold the count beside the merge stage's peak with every counting worker
its room (room_beside), stage 2 counts after stage 1 as before. The counts are the same either way:
they never depend on the layout.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from typing import Any

import psutil

from .. import jit
from ..config import RunOptions, TrainConfig
from ..io.units import WorkUnit
from ..run.memory import CALLER_FLOOR, count_layout
from ..run.pool import WorkerDied, death_reason, die_with_parent
from ..run.progress import Progress
from ..run.run_dir import RunDirectory, read_json, write_json
from ..run.temp_dirs import temp_work_dir
from .context import RunContext, run_context
from .count import Counted, count_stage, counted_from_saved

NICENESS = 19  # the count's priority: the merge's threads take a core whenever they want one
_POLL = 0.5  # seconds between the parent's looks at the count (its progress, its end)
_JOB, _PROGRESS, _ERROR, _DONE, _STDERR = "job.pickle", "progress.jsonl", "error.json", "done.json", "stderr.txt"
_HINT = "try a smaller --memory-budget or fewer --workers"
# The child imports this parbpe, wherever it runs from: -P keeps the working directory off its path (a
# checkout there, or a module named like one it imports, would be imported instead), and the directory
# holding this parbpe comes first.
_CHILD = ("import sys; sys.path.insert(0, sys.argv[2]); "
          "from parbpe.pipeline.count_beside import child; child(sys.argv[1])")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def room_beside(budget: int, merge_peak: int, workers: int, unit_bytes: int) -> int | None:
    """The budget of a count beside a merge stage whose process tree peaks at merge_peak: what that
    leaves of budget, if it gives each of `workers` counting processes its room (count_layout's
    roomy layout, from a start of CALLER_FLOOR and numba); else None (stage 2 counts afterwards)."""
    left = budget - merge_peak
    try:
        layout = count_layout(left, workers, CALLER_FLOOR + jit.NUMBA_RSS, unit_bytes)
    except ValueError:
        return None
    roomy = layout.shards == workers and (workers == 1 or not layout.parent_counts)
    return left if roomy else None


class CountBeside:
    """The superword count of `units` under `config` (the stage-2 settings, memory_budget its share)
    started in its own process; wait() gives its Counted, close() stops it if it still runs."""

    def __init__(self, ctx: RunContext, units: list[WorkUnit], config: TrainConfig, run: RunDirectory | None) -> None:
        self._stack = contextlib.ExitStack()
        self._work = self._stack.enter_context(temp_work_dir(config.tmp_dir))
        self.run = run or RunDirectory(self._path("run"))  # no run directory: a temporary one
        os.makedirs(self.run.path, exist_ok=True)
        open(self._path(_PROGRESS), "w").close()
        options = {"start_method": ctx.options.start_method, "data_limit": ctx.options.data_limit}
        with open(self._path(_JOB), "wb") as job:
            pickle.dump({"units": units, "config": config, "options": options, "run": self.run,
                         "parent": os.getpid(), "work": self._work}, job)
        self.started = time.perf_counter()
        with open(self._path(_STDERR), "wb") as stderr:  # kept for a death without a word (error.json)
            self._proc = subprocess.Popen([sys.executable, "-P", "-c", _CHILD, self._path(_JOB), _ROOT],
                                          stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=stderr)
        self.pid = self._proc.pid
        self._seen = 0  # bytes of the progress file read so far

    def _path(self, name: str) -> str:
        return os.path.join(self._work, name)

    def wait(self, ctx: RunContext) -> Counted:
        """Wait for the count (its progress shown as the count stage's) and load what it saved; its
        error, if it failed, raised here. The process is gone when this returns or raises."""
        try:
            status = None
            while status is None:
                try:
                    status = self._proc.wait(timeout=_POLL)
                except subprocess.TimeoutExpired:
                    pass
                self._forward(ctx)
            if status != 0:
                raise self._failure(status)
            counted = counted_from_saved(self.run.load_reduced())
            counted.stats["beside"] = read_json(self._path(_DONE))
            return counted
        finally:
            self.close()

    def _forward(self, ctx: RunContext) -> None:
        """The count's new progress lines, as this run's: its latest progress, every warning."""
        with open(self._path(_PROGRESS), "rb") as stream:
            stream.seek(self._seen)
            text = stream.read()
        text = text[:text.rfind(b"\n") + 1]  # whole lines only
        self._seen += len(text)
        forward_progress(text, ctx.reporter)

    def _failure(self, status: int) -> BaseException:
        """The count's error as the parent raises it: the same kind and line where it wrote one."""
        try:
            error = read_json(self._path(_ERROR))
        except (OSError, ValueError):
            said = self._last_words()
            return WorkerDied(f"SuperBPE's superword count (process {self.pid}) died ({death_reason(status, _HINT)})"
                              + (f": {said}" if said else ""))
        kind, message = error["kind"], error["message"]
        if kind == "KeyboardInterrupt":
            return KeyboardInterrupt()
        if kind == "ValueError":
            return ValueError(message)
        if error.get("errno") is not None:
            return OSError(error["errno"], error["strerror"] or message)
        if kind == "WorkerDied":
            return WorkerDied(message)
        return RuntimeError(f"SuperBPE's superword count failed: {kind}: {message}")

    def _last_words(self) -> str:
        """The last line the process wrote to its stderr (a Python that failed before main: its error)."""
        with contextlib.suppress(OSError):
            with open(self._path(_STDERR), "rb") as stream:
                lines = stream.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
                return lines[-1].strip() if lines else ""
        return ""

    def close(self) -> None:
        """Kill the count and its workers if it still runs; remove its work directory."""
        if self._proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                for proc in [*psutil.Process(self.pid).children(recursive=True), psutil.Process(self.pid)]:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
            self._proc.wait()
        self._stack.close()


def main(job_path: str) -> int:
    """The count's process: count and reduce as the job says, into its run directory; 0, or 1 with
    its error written (one line) beside the job."""
    with open(job_path, "rb") as source:
        job = pickle.load(source)
    started = time.perf_counter()
    die_with_parent(job["parent"])  # (its workers die with it in turn)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as workers do: on Ctrl-C the run stops it
    with contextlib.suppress(OSError, AttributeError):  # (no os.nice on Windows)
        os.nice(NICENESS)
    try:
        peak = _count(job)
    except BaseException as exc:  # noqa: BLE001 (written for the parent, which raises it)
        write_json(os.path.join(job["work"], _ERROR), _described(exc))
        return 1
    write_json(os.path.join(job["work"], _DONE), {"seconds": round(time.perf_counter() - started, 3),
                                                  "peak_rss_bytes": peak, "niceness": NICENESS})
    return 0


def _count(job: dict[str, Any]) -> int:
    """count_stage in a run context of this process, its progress as JSON lines; the tree's peak RSS."""
    with open(os.path.join(job["work"], _PROGRESS), "a", buffering=1) as stream:
        options = RunOptions(progress=Progress("jsonl", stream=stream), **job["options"])
        with run_context(job["config"], options) as ctx:
            count_stage(ctx, job["units"], run=job["run"], nested=True, by_partition=True, wanted=False)
            return ctx.sampler.peak


def _described(exc: BaseException) -> dict[str, Any]:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return {"kind": type(exc).__name__, "message": message, "errno": getattr(exc, "errno", None),
            "strerror": getattr(exc, "strerror", None)}


def child(job_path: str) -> None:
    """The process's whole life: main, then its end without the interpreter's teardown (numba's LLVM
    shutdown is slow, and everything is written and closed by then)."""
    status = main(job_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def forward_progress(text: bytes, reporter: Any) -> None:
    """The count's progress lines (JSON) as the parent's progress: warnings and notes as they come; for
    each stage, its last report, forced when the stage is done (done == total), so that every stage's
    bar reaches its end and is closed (the last lines of a stage come with the next stage's, or with the
    process's end, between two looks)."""
    last: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        event = json.loads(line)
        if event["event"] == "progress":
            last.pop(event["stage"], None)
            last[event["stage"]] = event  # in the order of their last reports
        elif event["event"] in ("warning", "note"):
            reporter.event(event["event"], message=event.get("message", ""))
    for event in last.values():
        fields = {k: v for k, v in event.items() if k not in ("event", "time", "stage", "done", "total")}
        done, total = event["done"], event["total"]
        reporter.update(event["stage"], done, total, force=total is not None and done >= total, **fields)

"""The run context: made once per run, it resolves what every stage would otherwise recompute (the
memory budget, the executor, the reporter, the peak-memory sampler, the run directory) and times
each stage: `with ctx.stage("count"):` records its seconds and peak RSS and reports its end."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import jit
from ..config import RunOptions, TrainConfig
from ..run.memory import CALLER_FLOOR, PeakSampler, default_budget, process_rss
from ..run.progress import Progress
from ..run.run_dir import RunDirectory
from ..warnings import ResultChangedWarning


@dataclass
class RunContext:
    """One run's resolved resources and its bookkeeping.

    config carries the resolved memory budget (so the counting workers never read the machine
    again); cluster is the Ray executor or None; run the run directory, once the inputs stage has
    opened one; times and the sampler's by_stage hold each stage's seconds and peak RSS."""

    config: TrainConfig
    options: RunOptions
    reporter: Progress
    sampler: PeakSampler
    given: TrainConfig  # the settings as given (memory_budget None: "half the available RAM"), for stats.json
    cluster: Any = None  # the Ray executor, while executor() is open
    cluster_stats: dict[str, Any] | None = None  # what it reported when it closed
    run: RunDirectory | None = None
    times: dict[str, float] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)  # what changed the result (result_changed)
    caller_held: int = 0  # bytes the calling process held beyond CALLER_FLOOR when the run started
    numba_held: bool = False  # numba was loaded when the run started: its RSS is the caller's (caller_held)
    kernels_mark: tuple[int, int, float] = (0, 0, 0.0)  # jit.compiles.mark() when the run started
    kernels_ahead: Any = None  # the process compiling later stages' kernels (kernels_ahead.py), while it runs
    merges_follow: bool = False  # the count is followed by BPE's merge stage in this process (its numba stays)
    kernels_ahead_record: dict | None = None  # what it did, for stats.json
    reserved: int = 0  # bytes the memory models count beside the tree's RSS (the compiling process's room)
    closers: list[Callable[[], None]] = field(default_factory=list)  # called as the run ends (on_close)

    def on_close(self, close: Callable[[], None]) -> None:
        """close() when the run ends, however it ends."""
        self.closers.append(close)

    def kernels(self) -> dict[str, Any]:
        """stats.json's "kernels": the mode, and the kernels this run loaded in this process (compiled or
        from numba's cache)."""
        ahead = {"ahead": self.kernels_ahead_record} if self.kernels_ahead_record else {}
        return {"mode": self.config.jit, **jit.compiles.summary(self.kernels_mark), **ahead}

    def loaded_numba(self) -> bool:
        """Whether this run loaded numba in this process (not the caller before it)."""
        return jit.loaded() and not self.numba_held

    @contextlib.contextmanager
    def executor(self) -> Iterator[None]:
        """The Ray executor, for the data-parallel stages (count, reduce) only: it is shut down before
        the merge stage so that its memory is free. Local processes need nothing."""
        if self.options.executor == "local":
            yield
            return
        from ..run.ray_executor import RayExecutor

        with RayExecutor(self.options.ray_address, task_memory=self.budget // self.config.workers,
                         local_cpus=self.config.workers) as cluster:
            self.cluster = cluster
            try:
                yield
            finally:
                self.cluster = None
        self.cluster_stats = cluster.stats.to_dict()

    @property
    def budget(self) -> int:
        return self.config.memory_budget

    @property
    def start_method(self) -> str | None:
        """The start method asked for; None leaves each stage its own default (counting forks where
        it can, merge workers spawn: merge/workers.py)."""
        return self.options.start_method

    @contextlib.contextmanager
    def stage(self, name: str, *, report: bool = True) -> Iterator[None]:
        """Time the stage, label the memory samples with it, and report its end (time and peak RSS)."""
        started = time.perf_counter()
        self.sampler.stage(name)
        yield
        self.times[name] = time.perf_counter() - started
        if report:
            self.report_stage(name)

    def report_stage(self, name: str) -> None:
        """The progress line that closes a stage: its time and its peak RSS of the process tree."""
        self.reporter.event("stage", message=name, seconds=round(self.times[name], 2),
                            peak_rss_MB=round(self.sampler.by_stage.get(name, 0) / 1e6, 1))

    def in_use(self) -> int:
        """The process tree's RSS now (a fresh sample), less what the caller held when the run started:
        what the stages' memory models start from, so that a caller's own data (train_from_iterator's
        texts) does not change a decision that train on the same documents makes."""
        return max(self.sampler.sample() - self.caller_held, 0) + self.reserved

    def rss_MB(self) -> float:
        """The process tree's RSS as last sampled (free to read: for progress lines)."""
        return self.sampler.latest / 1e6

    def progress(self, stage: str, offset: int = 0) -> Callable[[int, int], None]:
        """A merge-rounds callback reporting done/total of `stage` (shifted by offset); it costs a
        comparison per round when progress is off."""
        reporter = self.reporter
        if reporter.mode == "none":
            return lambda done, total: None

        def report(done: int, total: int) -> None:
            reporter.update(stage, offset + done, offset + total, force=done == total, rss_MB=self.rss_MB())

        return report

    def note(self, message: str) -> None:
        self.reporter.event("note", message=message)

    def warn(self, message: str) -> None:
        self.reporter.event("warning", message=message)

    def result_changed(self, category: type[ResultChangedWarning], message: str, **facts: Any) -> None:
        """Something changed the result: with strict the run fails here (before anything is written);
        otherwise a Python warning of that category, a progress warning, and a record that stats.json
        ("result_changes") and the command's summary line show."""
        if self.options.strict:
            kept = (f" (the run directory {self.run.path} is kept: the same command with --resume continues from "
                    "its last checkpoint)") if self.run is not None else ""
            raise ValueError(f"{message}; failing as --strict (strict=True) asks{kept}")
        warnings.warn(message, category, stacklevel=3)
        self.warn(message)
        self.changes.append({"kind": category.__name__, "message": message, **facts})


def reporter_of(progress: Progress | str) -> Progress:
    return progress if isinstance(progress, Progress) else Progress(progress)


@contextlib.contextmanager
def run_context(config: TrainConfig, options: RunOptions) -> Iterator[RunContext]:
    """The context of one run: the memory budget read once (half the available RAM unless given) and
    the peak sampler running; the executor starts when the counting stages open it (ctx.executor())."""
    budget = config.memory_budget or default_budget()
    mode = config.jit or jit.mode()  # PARBPE_JIT unless the run names a mode; then fixed, for Ray's tasks too
    reporter = reporter_of(options.progress)
    with PeakSampler() as sampler, jit.using(mode), jit.compiles.reporting_to(_compile_note(reporter)):
        ctx = RunContext(config=dataclasses.replace(config, memory_budget=budget, jit=mode), options=options,
                         reporter=reporter, sampler=sampler, given=config,
                         caller_held=max(process_rss() - CALLER_FLOOR, 0), numba_held=jit.loaded(),
                         kernels_mark=jit.compiles.mark())
        fallback = jit.numpy_fallback_line()
        if fallback:
            ctx.note(fallback)
        try:
            yield ctx
        finally:
            for close in reversed(ctx.closers):
                close()
            jit.settle()  # a kernel load started in a thread (a run that failed before its merge) ends with the run


def _compile_note(reporter: Progress) -> Callable[[str], None]:
    return lambda line: reporter.event("note", message=line)

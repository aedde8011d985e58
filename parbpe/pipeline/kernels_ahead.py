"""A first run's kernels compiled in processes of their own, several at a time.

numba compiles a kernel on its first call, in the process that calls it, one kernel at a time: a
first run would compile the counting kernels while the other cores wait, then the reduce's sort,
then the merge's kernels as the merge stage starts. Where they are not in numba's cache yet (cold:
a probe kernel a family had to be compiled), processes of their own compile those families into
numba's cache instead, one process a core (at most PROCESSES, as the budget allows): each records
what the run will compile (jit.signatures_of: the warm-ups run as plain Python, in milliseconds),
takes its share of the same deal (jit.deal) and compiles it. The counting kernels come first, dealt
to the processes and to this one; the count waits for them (wait_count), then loads them all from
the cache. The reduce's and merge's kernels follow while the count runs; the merge stage waits for
them (wait_merge), SuperBPE's stage 2 for its own (wait). The processes write nothing but numba's
cache (numba replaces its files whole); if one fails, is killed or sends garbage, each stage
compiles what it lacks as before, with the same result.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .. import jit
from ..merge.selection import PairQueue
from ..patterns import SUPERWORD_PATTERN
from ..run.pool import die_with_parent
from .context import RunContext

RSS = 400 * 10**6  # what one compiling process may hold (numba, its compiler, the kernels)
MIN_BUDGET = 4 * RSS  # the budget a compiling process needs (a smaller one is left to the stages)
PROCESSES = 4  # the most compiling processes (each holds numba and its compiler: RSS a process)
WAIT = 120.0  # the longest the merge stage waits for them (then they are stopped, and it compiles)
COUNT_WAIT = 60.0  # the longest the count waits for their counting kernels (then it compiles what it lacks)
COUNT_READY = b"count\n"  # a process's line once its hand of the counting kernels is in the cache
MERGE_READY = b"merge\n"  # ... of the reduce's and merge's (where SuperBPE's stage-2 kernels follow)
DONE = b"compiled"  # its last line: "compiled <kernels> <seconds>" (stats.json's kernels.ahead)
_CHILD = ("import sys; sys.path.insert(0, sys.argv[2]); from parbpe.pipeline.kernels_ahead import child; "
          "sys.exit(child(sys.argv[1].split(','), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], "
          "int(sys.argv[6]), int(sys.argv[7])))")
TABLE_TOKENS_PER_BYTE = 0.07  # a text's table tokens per byte (realmix: 11.05 M of 152.8 MB), for the merge's choice
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class KernelsAhead:
    """The compiling processes, started at once; wait_count() and wait() let them finish (or stop
    them), close() stops them."""

    def __init__(self, ctx: RunContext, families: list[str], vocab_size: int, pattern: str, processes: int) -> None:
        self.families = families
        self.pattern = pattern
        self._procs: list[subprocess.Popen] = []
        self._elsewhere: list[jit.Kernel] = []
        self._ended: set[subprocess.Popen] = set()  # processes that ended (or sent garbage) before a line
        self.record: dict = {"families": families, "processes": processes}
        ctx.kernels_ahead_record = self.record
        self._ctx: RunContext | None = ctx
        ctx.reserved += RSS * processes  # the stages' memory models count them while they run
        for hand in range(1, processes + 1):  # (hand 0: this process's share of the counting kernels)
            # -P and this parbpe's directory first: the child imports this parbpe whatever its working directory holds
            self._procs.append(subprocess.Popen(
                [sys.executable, "-P", "-c", _CHILD, ",".join(families), _ROOT, str(vocab_size), str(os.getpid()),
                 pattern, str(hand), str(processes + 1)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        self.pids = [proc.pid for proc in self._procs]
        if "reduce" in families:  # (the reduce's sort takes numpy meanwhile, and leaves the kernel to later runs)
            from ..count.byte_order import radix_sort

            self._elsewhere.append(radix_sort)
        for kernel in self._elsewhere:
            kernel.elsewhere = True
        jit.compiles.say_compiling(f" in {processes + ('count' in families)} processes")

    def wait_count(self) -> None:
        """This process's hand of the counting kernels compiled, then each process's: every counting
        kernel is in numba's cache after it (a process that failed left its hand to the count)."""
        if "count" not in self.families:
            return
        start = time.perf_counter()
        with contextlib.suppress(Exception):  # (an error here is the count's to raise, where it belongs)
            _compile_share(count_calls(self.pattern), 0, len(self._procs) + 1)
        self._read_line(COUNT_READY, start + COUNT_WAIT)
        self.record["count_waited_seconds"] = round(time.perf_counter() - start, 2)

    def wait_merge(self) -> None:
        """The merge's kernels in the cache (the processes then compile SuperBPE's stage-2 kernels, where
        the run has a stage 2, and stage 2 waits for them: wait), or every process ended."""
        start = time.perf_counter()
        if "superbpe" in self.families:
            self._read_line(MERGE_READY, start + WAIT)
        else:
            self.wait()
        self.record["merge_waited_seconds"] = round(time.perf_counter() - start, 2)

    def _read_line(self, line: bytes, deadline: float) -> None:
        """Read `line` from each process that has not ended, until deadline (an earlier line not read,
        COUNT_READY where the count ran numpy, is passed over). One that ended is not read again; one
        that sent anything else is stopped (its kernels are left to the stages)."""
        waiting = {proc.stdout: proc for proc in self._procs if proc not in self._ended}
        while waiting and time.perf_counter() < deadline:
            ready, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.perf_counter()))
            for pipe in ready:
                said = os.read(pipe.fileno(), len(line))
                if said == COUNT_READY != line:
                    continue
                proc = waiting.pop(pipe)
                if said != line:  # (b"": it ended)
                    self._ended.add(proc)
                    with contextlib.suppress(OSError):
                        proc.kill()

    def wait(self, timeout: float = WAIT) -> None:
        """Wait for every process to finish (stopped after timeout); stats.json's kernels.ahead says how it went."""
        start = time.perf_counter()
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, timeout - (time.perf_counter() - start)))
        waited = time.perf_counter() - start
        self.close()
        self.record["waited_seconds"] = round(waited, 2)

    def running(self) -> bool:
        return any(proc.poll() is None for proc in self._procs)

    def close(self) -> None:
        statuses, compiled, seconds = [], 0, 0.0
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.kill()
            statuses.append(proc.wait())
            if proc.stdout is not None and not proc.stdout.closed:
                for line in proc.stdout.read().split(b"\n"):  # (it ended: what is left, to its end)
                    words = line.split()
                    if len(words) == 3 and words[0] == DONE:
                        with contextlib.suppress(ValueError):
                            compiled, seconds = compiled + int(words[1]), seconds + float(words[2])
                proc.stdout.close()
        if self._procs and "compiled" not in self.record:
            self.record.update(compiled=compiled, compile_seconds=round(seconds, 2))
        # (the first that is not 0; negative: killed by that signal. The stages compiled what they needed.)
        self.record["exit"] = next((status for status in statuses if status), 0)
        for kernel in self._elsewhere:
            kernel.elsewhere = False
        if self._ctx is not None:
            self._ctx.reserved -= RSS * len(self._procs)
            self._ctx = None


def start(ctx: RunContext, text_bytes: int | None) -> KernelsAhead | None:
    """Start the compiling processes, before the count, where the budget has room for them and the
    kernels are not in numba's cache (cold): the counting kernels where the text's size makes the
    count use them, the reduce's sort, and the merge's kernels where a text of text_bytes (None: not
    known) makes a table they merge. None where none is started; the run context stops them at the
    run's end."""
    from ..count.chunking import uses_jit

    config = ctx.config
    if ctx.budget < MIN_BUDGET or not jit.enabled() or ctx.cluster is not None:
        return None
    families = ["reduce"]
    if (text_bytes is not None and config.pair_count != "nonoverlap"
            and jit.merge_kernels(int(text_bytes * TABLE_TOKENS_PER_BYTE))):
        families.append("merge")
    elif text_bytes is not None and not jit.worth(text_bytes, jit.COUNT_MIN_BYTES):
        return None  # a small run that loads no kernel: neither numba nor the probe for it
    if text_bytes is not None and jit.worth(text_bytes, jit.COUNT_MIN_BYTES) and uses_jit(config.pattern):
        families.insert(0, "count")
    if "merge" in families and config.superbpe_transition is not None:
        families.append("superbpe")  # (the superword count beside the merge; stage 2's encoding and cut)
    families = cold(families)
    if not families:
        return None
    processes = max(1, min(os.cpu_count() or 1, PROCESSES, ctx.budget // MIN_BUDGET))
    ahead = KernelsAhead(ctx, families, config.vocab_size, config.pattern, processes)
    ctx.on_close(ahead.close)
    return ahead


def cold(families: list[str]) -> list[str]:
    """The families whose kernels are not in numba's cache (a first run's, or a run after one that was
    stopped while it compiled): a probe each, a small kernel the run loads anyway that had to be
    compiled, not loaded. The counting stage's partition hash for count; the merge's distinct_pairs for
    the others (compiled together, after the count's)."""
    from ..count.partitions import partition_ids
    from ..merge.linked import distinct_pairs

    def compiled(probe: Callable[[], Any]) -> bool:
        before = jit.compiles.mark()
        with jit.using("on"):
            probe()
        return len(jit.compiles.compiled) > before[1]

    # (pa.array() of a list would import pandas where it is installed)
    strings = pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, 5], np.int32)), pa.py_buffer(b"probe"))
    count_cold = "count" not in families or compiled(lambda: partition_ids(strings))
    others_cold = families != ["count"] and compiled(lambda: distinct_pairs(np.zeros(1, np.uint64)))
    return [family for family in families if (count_cold if family == "count" else others_cold)]


def child(families: list[str], vocab_size: int, parent: int, pattern: str, hand: int, hands: int) -> int:
    """A compiling process: its hand of the deal of the counting kernels (of hands: the parent holds
    hand 0), the line COUNT_READY, then its hand of the other families' kernels (of hands - 1)."""
    die_with_parent(parent)  # (at the run's priority: niced, it waited for the counting workers, and the
    jit.set_mode("on")      # merge stage waited for it)
    if "count" in families:
        _compile_share(count_calls(pattern), hand, hands)
        os.write(sys.stdout.fileno(), COUNT_READY)
    _compile_share(later_calls(families, vocab_size), hand - 1, hands - 1)
    if "superbpe" in families:
        os.write(sys.stdout.fileno(), MERGE_READY)
        _compile_share(jit.signatures_of(lambda: _warm_superbpe(vocab_size)), hand - 1, hands - 1)
    done = jit.compiles.summary()
    os.write(sys.stdout.fileno(), b"%s %d %.2f\n" % (DONE, len(done["compiled"]), done["compile_seconds"]))
    return 0


def later_calls(families: list[str], vocab_size: int) -> list[tuple[str, tuple]]:
    """The calls of the reduce's and merge's kernels among families (vocab_size: the table's token
    type), and SuperBPE's superword count's (which starts beside the merge)."""
    calls = []
    if "reduce" in families:
        calls += jit.signatures_of(_warm_reduce)
    if "merge" in families:
        calls += jit.signatures_of(lambda: _warm_merge(vocab_size))
    if "superbpe" in families:
        calls += [call for call in count_calls(SUPERWORD_PATTERN) if call not in calls]
    return calls


def count_calls(pattern: str) -> list[tuple[str, tuple]]:
    """The counting kernels' calls for pattern (what count.chunking.prepare loads)."""
    from ..count.chunking import load_kernels

    return jit.signatures_of(lambda: load_kernels(pattern))


def _compile_share(calls: list[tuple[str, tuple]], hand: int, hands: int) -> None:
    for name, types in jit.deal(calls, hands)[hand]:
        jit.KERNELS[name].load_for(types)


def _warm_reduce() -> None:
    from ..count.byte_order import radix_order

    data = np.frombuffer(b"abcabdab", dtype=np.uint8).copy()
    radix_order(np.array([0, 3, 6, 8], dtype=np.int64), data)


def _warm_merge(vocab_size: int) -> None:
    from ..merge.engines import _warm_linked
    from ..merge.table import token_dtype

    _warm_linked(np.dtype(token_dtype(vocab_size)))
    keys = np.array([(97 << 32) | 97, (97 << 32) | 98, (98 << 32) | 97], dtype=np.int64)
    queue = PairQueue(keys, np.array([5, 3, 2], dtype=np.int64), [bytes([b]) for b in range(256)] + [b"aa"],
                      use_kernels=True)
    queue.update(np.array([(97 << 32) | 98, (256 << 32) | 97], dtype=np.int64), np.array([-1, 2], dtype=np.int64))
    queue.ranked(2)


def _warm_superbpe(vocab_size: int) -> None:
    from ..merge.cold_pairs import cut_table, pair_sums
    from ..merge.encode import encode_chunk_arrays
    from ..merge.table import token_dtype

    data = np.frombuffer(b"ababcababc", dtype=np.uint8).copy()
    table = encode_chunk_arrays(data, np.array([0, 4, 7, 10], dtype=np.int64), np.array([3, 2, 1], dtype=np.int64),
                                [(97, 98)], np.dtype(token_dtype(vocab_size)))
    keys, _, _ = pair_sums(table, use_jit=True)
    cut_table(table, keys[:1], use_jit=True)

"""The later stages' kernels compiled beside the count, on a first run after an install.

numba compiles a kernel on its first call, in the process that calls it, one kernel at a time: a
first run compiles the counting kernels while its second core waits, then the reduce's sort, then
the merge's kernels as the merge stage starts. Where the kernels are not in numba's cache yet (the
first kernel this run loads had to be compiled), a process of its own compiles the reduce's and the
merge's kernels into numba's cache while this one compiles and runs the count; those stages then
load them. It writes nothing but numba's cache (numba replaces its files whole); if it fails or is
killed, each stage compiles what it needs as before, with the same result.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from .. import jit
from ..merge.selection import PairQueue
from ..run.pool import die_with_parent
from .context import RunContext

RSS = 400 * 10**6  # what the compiling process may hold (numba, its compiler, the kernels)
MIN_BUDGET = 4 * RSS  # a smaller budget is left to the stages themselves
WAIT = 120.0  # the longest the merge stage waits for it (then it is stopped, and the stage compiles)
_CHILD = ("import sys; sys.path.insert(0, sys.argv[2]); from parbpe.pipeline.kernels_ahead import child; "
          "sys.exit(child(sys.argv[1].split(','), int(sys.argv[3]), int(sys.argv[4])))")
TABLE_TOKENS_PER_BYTE = 0.07  # a text's table tokens per byte (realmix: 11.05 M of 152.8 MB), for the merge's choice
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class KernelsAhead:
    """The compiling process, started by start(); wait() lets it finish (or stops it), close() stops it."""

    def __init__(self, ctx: RunContext, families: list[str], vocab_size: int) -> None:
        # -P and this parbpe's directory first: the child imports this parbpe whatever its working directory holds
        self._proc = subprocess.Popen([sys.executable, "-P", "-c", _CHILD, ",".join(families), _ROOT, str(vocab_size),
                                       str(os.getpid())],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self._proc.pid
        self.families = families
        self.status: int | None = None
        self.record: dict = {"families": families}
        ctx.kernels_ahead_record = self.record
        self._ctx = ctx
        ctx.reserved += RSS  # the stages' memory models count it while it runs

    def wait(self, timeout: float = WAIT) -> None:
        """Wait for it to finish (stopped after timeout); stats.json's kernels.ahead says how it went."""
        start = time.perf_counter()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=timeout)
        waited = time.perf_counter() - start
        self.close()
        self.record["waited_seconds"] = round(waited, 2)

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._proc.kill()
        self.status = self._proc.wait()
        self.record["exit"] = self.status  # (negative: killed by that signal; the stages compiled what they needed)
        if self._ctx is not None:
            self._ctx.reserved -= RSS
            self._ctx = None


def start(ctx: RunContext, text_bytes: int | None) -> KernelsAhead | None:
    """Start the compiling process, before the count, where the budget has room for it and the kernels
    are not in numba's cache (a probe: one of the merge's smallest kernels, loaded here, had to be
    compiled): the reduce's sort, and the merge's kernels where a text of text_bytes (None: not known)
    makes a table they merge. None where it is not started; the run context stops it at the run's end."""
    config = ctx.config
    if ctx.budget < MIN_BUDGET or not jit.enabled() or ctx.cluster is not None:
        return None
    families = ["reduce"]
    if (text_bytes is not None and config.pair_count != "nonoverlap"
            and jit.merge_kernels(int(text_bytes * TABLE_TOKENS_PER_BYTE))):
        families.append("merge")
    elif text_bytes is not None and not jit.worth(text_bytes, jit.COUNT_MIN_BYTES):
        return None  # a small run that loads no kernel: neither numba nor the probe for it
    if not cold():
        return None
    ahead = KernelsAhead(ctx, families, config.vocab_size)
    ctx.on_close(ahead.close)
    return ahead


def cold() -> bool:
    """Whether numba's cache lacks parbpe's kernels: a probe, the counting stage's smallest kernel (which
    the count loads next anyway), had to be compiled, not loaded."""
    from ..count.partitions import partition_ids

    before = jit.compiles.mark()
    with jit.using("on"):
        partition_ids(pa.array(["probe"]))
    return len(jit.compiles.compiled) > before[1]


def child(families: list[str], vocab_size: int, parent: int) -> int:
    """The compiling process: the families' kernels (the merge's for a table of vocab_size's token
    type) loaded, so compiled and written to numba's cache, in the order the run calls them."""
    die_with_parent(parent)  # (at the run's priority: niced, it waited for the counting workers, and the
    jit.set_mode("on")      # merge stage waited for it)
    if "reduce" in families:
        _warm_reduce()
    if "merge" in families:
        _warm_merge(vocab_size)
    return 0


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

"""PathPiece scoring spread over worker processes: each scores a contiguous slice of the chunk table.

The table (flat arrays as merge's: every chunk's bytes one after another, offsets, counts) is placed
once in a shared-memory block (run/shared_arrays.py); each worker maps it and copies its own slice
(cut so that every slice has about the same number of bytes), and the parent removes the block's
name as soon as all have mapped it. An iteration sends the vocabulary only (its tokens joined, and
their lengths: a message the size of the vocabulary, never of the corpus) to every worker; each
scores its slice (SliceScorer: the kernels of kernels/pathpiece.py, or numpy's score.token_scores) and answers
with its int64 sums, which the parent adds up: the result is exactly that of one process, whatever
the number of workers and whichever of the two scored.

Kernel or numpy is decided once, in the parent, by jit.score_kernels on the whole table's bytes; the
workers receive that decision as their kernel mode ("on" or "off", a value: jit.set_mode).

Workers are spawned by default, with the main module hidden, like the merge workers
(merge/workers.py): they need nothing of the parent but the block. A worker's exception is a
one-line RuntimeError in the parent (its traceback as a note), a worker's death a one-line
WorkerDied naming it and its signal, seen at once through its sentinel: never a hang. PARBPE_TEST_KILL
=pathpiece:n (run/faults.py) kills the workers at their start (0) or at their n-th scoring.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Sequence

import numpy as np

from .. import jit
from ..run.pool import (
    WorkerDied,
    death_reason,
    fault_point,
    gather_answers,
    get_context,
    ignore_sigint,
    receive_message,
    send_message,
    start_piped_workers,
    stop_workers,
)
from ..run.shared_arrays import BlockHandle, SharedBlock, attach
from ..tokenizer.segment import VocabIndex, check_vocabulary
from .score import IRREPLACEABLE, KernelScorer, token_scores

DEFAULT_START_METHOD = "spawn"  # see the module's docstring; an explicit start_method is followed
FAULT_STAGE = "pathpiece"
_POLL = 0.2  # seconds of one wait for answers (a death ends the wait at once)
_HINT = "try fewer workers (each holds its slice of the chunks beside its score arrays)"


def chunk_arrays(chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of a list of chunks: their bytes one after another (uint8) and where each starts
    (int64, one more than chunks: the last is the end)."""
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    return data, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def chunk_list(data: np.ndarray, offsets: np.ndarray, c0: int, c1: int) -> list[bytes]:
    """Chunks c0..c1-1 of the flat arrays as bytes (what score.token_scores takes)."""
    raw = data[offsets[c0]:offsets[c1]].tobytes()
    ends = (offsets[c0:c1 + 1] - offsets[c0]).tolist()
    return [raw[a:b] for a, b in zip(ends[:-1], ends[1:])]


class SliceScorer:
    """The scores of one table (a worker's slice: data[offsets[c]:offsets[c + 1]] seen counts[c] times)
    for a vocabulary at a time, by the kernels (score.KernelScorer, which keeps the first
    vocabulary's windows) or by numpy (score.token_scores)."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, kernel: bool) -> None:
        self._table = data, offsets, counts
        self._kernel = KernelScorer(data, offsets, counts) if kernel else None

    def scores(self, tokens: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(scores, usage) of every token, int64 per token id, as score.token_scores gives them."""
        check_vocabulary(tokens)
        if self._kernel is not None:
            return self._kernel.scores(tokens)
        data, offsets, counts = self._table
        chunks = chunk_list(data, offsets, 0, len(offsets) - 1)
        return token_scores(VocabIndex(tokens), chunks, counts, len(tokens))


def slice_bounds(offsets: np.ndarray, workers: int) -> list[int]:
    """Chunk indices cutting the table into at most `workers` non-empty runs of about equal bytes."""
    total, n_chunks = int(offsets[-1]), len(offsets) - 1
    cuts = np.searchsorted(offsets, [total * k // workers for k in range(1, workers)])
    return sorted({0, n_chunks, *cuts.tolist()})


def add_scores(answers: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The slices' (scores, usage) added up: IRREPLACEABLE in any slice stays IRREPLACEABLE (it is a
    mark, not a number to add), every other score and all usage are int64 sums."""
    scores = np.stack([s for s, _ in answers])
    marked = scores == IRREPLACEABLE
    total = np.where(marked, 0, scores).sum(axis=0)
    total[marked.any(axis=0)] = IRREPLACEABLE
    return total, np.stack([u for _, u in answers]).sum(axis=0)


def _split(joined: bytes, lengths: np.ndarray) -> list[bytes]:
    ends = np.cumsum(lengths).tolist()
    return [joined[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _worker(conn, handle: BlockHandle, c0: int, c1: int, jit_mode: str) -> None:
    """A worker's loop: map the table and copy its slice, then score each vocabulary received until None.
    jit_mode: the parent's choice of kernel or numpy ("on" or "off"; a spawned worker inherits none)."""
    ignore_sigint()
    jit.set_mode(jit_mode)
    fault_point(FAULT_STAGE, 0)
    try:
        data, offsets, counts = _own_slice(attach(handle), c0, c1)
        kernel = jit.score_kernels(len(data))
        scorer = SliceScorer(data, offsets, counts, kernel)
        send_message(conn, ("ok", "kernel" if kernel else "numpy"))
    except Exception as exc:
        send_message(conn, ("error", _one_line(exc), traceback.format_exc(limit=6)))
        return
    for step in itertools.count(1):
        message = receive_message(conn)
        if message is None:
            return
        fault_point(FAULT_STAGE, step)
        try:
            tokens = _split(*message)
            answer = ("ok", scorer.scores(tokens))
        except Exception as exc:  # the parent raises it; this worker stays ready for the next vocabulary
            answer = ("error", _one_line(exc), traceback.format_exc(limit=6))
        send_message(conn, answer)


def _own_slice(arrays: dict[str, np.ndarray], c0: int, c1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunks c0..c1-1 of the mapped table as arrays of this process (offsets from 0)."""
    offsets = arrays["offsets"][c0:c1 + 1]
    lo, hi = int(offsets[0]), int(offsets[-1])
    return arrays["data"][lo:hi].copy(), offsets - lo, arrays["counts"][c0:c1].copy()


class ScoringPool:
    """score.token_scores over a chunk table, by `workers` processes each holding a slice of it.

    Use as a context manager (or call close()): the workers start and map the table on creation;
    scores(tokens) is one iteration. With one worker, or a table too small to cut in two, the scoring
    runs in this process and no process or shared memory is made. Kernel or numpy: jit.score_kernels
    on the table's bytes, in this process's mode when the pool is made (the workers' mode: "on" or
    "off"); `scoring` says which ran ("kernel" or "numpy", as the workers answered)."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, workers: int,
                 start_method: str | None = None) -> None:
        data, offsets, counts = _checked_table(data, offsets, counts)
        if workers < 1:
            raise ValueError(f"workers={workers}: give 1 or more")
        self.bounds = slice_bounds(offsets, workers)
        self._kernel = jit.score_kernels(len(data))
        self.scoring = "kernel" if self._kernel else "numpy"
        self._conns: list = []
        self._procs: list = []
        self._block: SharedBlock | None = None
        if len(self.bounds) < 3:
            self._scorer = SliceScorer(data, offsets, counts, self._kernel)
            return
        self._block = SharedBlock({"data": (np.uint8, len(data)), "offsets": (np.int64, len(offsets)),
                                   "counts": (np.int64, len(counts))})
        try:
            for name, values in (("data", data), ("offsets", offsets), ("counts", counts)):
                self._block.arrays[name][:] = values
            context = get_context(start_method or DEFAULT_START_METHOD)
            self._procs, self._conns = start_piped_workers(
                context, _worker,
                lambda k, end: (end, self._block.handle, self.bounds[k], self.bounds[k + 1],
                                "on" if self._kernel else "off"),
                len(self.bounds) - 1, hide_main=True)
            answered = self._gather()  # every worker has mapped the block: its name can go
            self.scoring = ",".join(sorted(set(answered)))
            self._block.unlink()
            self._block.drop_pages()  # the workers hold the slices; this process reads the block no more
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        """Processes scoring (0: scoring runs in this process)."""
        return len(self._procs)

    def scores(self, tokens: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(scores, usage) of every token over the whole table, int64 per token id, exactly as
        score.token_scores(VocabIndex(tokens), chunks, counts, len(tokens)) gives them."""
        if self._block is not None and not self._procs:
            raise RuntimeError("this ScoringPool is closed: its workers are stopped")
        if not self._procs:
            return self._scorer.scores(tokens)
        message = (b"".join(tokens), np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens)))
        for k, conn in enumerate(self._conns):
            try:
                send_message(conn, message)
            except OSError:  # a broken pipe: the worker is gone
                raise self._died(k) from None
        return add_scores(self._gather())

    def _describe(self, k: int) -> str:
        c0, c1 = self.bounds[k], self.bounds[k + 1]
        return f"pathpiece scoring worker {k} (chunks {c0}-{c1 - 1}, pid {self._procs[k].pid})"

    def _died(self, k: int) -> WorkerDied:
        self._procs[k].join(timeout=3)  # its pipe closed: it is exiting; wait for its exit code
        return WorkerDied(f"{self._describe(k)} died ({death_reason(self._procs[k].exitcode, _HINT)})")

    def _gather(self) -> list:
        """One answer from every worker. Waits on every pipe and every worker's exit at once, so a
        death is seen at once whichever worker it is (WorkerDied); a worker's exception becomes a
        one-line RuntimeError (the lowest-numbered worker's, when several fail)."""
        answers = gather_answers(self._conns, self._procs, self._died, _POLL)
        for k, (status, *payload) in sorted(answers.items()):
            if status != "ok":
                error = RuntimeError(f"{self._describe(k)} failed: {payload[0]}")
                error.add_note(f"in the worker process:\n{payload[1]}")
                raise error
        return [answers[k][1] for k in range(len(self._conns))]

    def close(self) -> None:
        """Stop every worker and wait for them; the block's name goes (on success and error alike)."""
        if self._block is not None:
            self._block.unlink()
        for conn in self._conns:
            conn.close()
        stop_workers(self._procs)
        self._conns, self._procs = [], []

    def __enter__(self) -> ScoringPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _checked_table(data: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """The table's arrays as uint8, int64, int64, or a one-line ValueError saying what does not fit."""
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    offsets, counts = np.asarray(offsets, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    if offsets.ndim != 1 or len(offsets) != len(counts) + 1:
        raise ValueError(f"{len(counts)} counts need {len(counts) + 1} offsets, not {offsets.shape}: one a chunk, "
                         "then the end")
    if offsets[0] != 0 or offsets[-1] != len(data) or np.any(np.diff(offsets) < 0):
        raise ValueError(f"offsets must rise from 0 to len(data)={len(data)}: chunk c is data[offsets[c]:offsets[c+1]]")
    return data, offsets, counts

"""The merge engine spread over worker processes: each owns a slice of the chunk table.

The table is cut into contiguous slices of chunks with about the same number of tokens (not of
chunks). A worker builds an engine (engines.py) on its slice once: its first message is the pair
counts of the slice. Every round, the coordinator (learn_merges) sends the batch, each worker
applies it in place and answers with only the count changes it caused; the coordinator adds
them up (int64). Nothing but these small arrays crosses between processes, and nothing is copied
per round. Slices are handed over when the workers start (inherited with fork, pickled once with
spawn): the table's tokens are small next to the engines' own links and indexes, which each worker
builds for its slice alone. At the end each worker compacts its slice and sends its tokens back.

A worker that fails or dies stops the run with an error naming the worker and its slice, never a
hang; the workers are stopped on every exit path (close()).
"""

from __future__ import annotations

import itertools
import time
import traceback
from collections.abc import Callable

import numpy as np

from ..run.pool import WorkerDied, death_reason, fault_point, get_context, ignore_sigint, start_workers, stop_workers
from .engines import ChunkEngine, LinkedEngine
from .exact import boundary_events, prefix_stop
from .pairs import aggregate
from .table import ChunkTable

_POLL = 0.2  # seconds of one wait for answers (a death ends the wait at once)


def slice_bounds(table: ChunkTable, workers: int) -> list[int]:
    """Chunk indices cutting the table into `workers` runs of chunks with about equal tokens."""
    total = int(table.starts[-1])
    cuts = np.searchsorted(table.starts, [total * k // workers for k in range(1, workers)])
    return sorted({0, *cuts.tolist(), table.n_chunks})


def _slice(table: ChunkTable, c0: int, c1: int) -> ChunkTable:
    a, b = int(table.starts[c0]), int(table.starts[c1])
    return ChunkTable(tokens=table.tokens[a:b], starts=table.starts[c0:c1 + 1] - a,
                      lengths=table.lengths[c0:c1], counts=table.counts[c0:c1])


def _worker(conn, part: ChunkTable, use_chunk: bool, nonoverlap: bool) -> None:
    """A worker's loop: build the engine, then answer the coordinator's messages until "finish"."""
    ignore_sigint()
    fault_point("merge", 0)
    try:
        engine = ChunkEngine(part, nonoverlap=nonoverlap) if use_chunk else LinkedEngine(part)
        conn.send(("ok", engine.initial_pair_counts(), 0.0))
        hits = which = None
        for step in itertools.count(1):
            command, *args = conn.recv()
            fault_point("merge", step)
            clock = time.perf_counter()  # each answer says how long the work took (the rest is communication)
            if command == "apply":
                answer = engine.apply(*args)
            elif command == "events":
                first, second, first_id = args
                hits, which = engine.find_hits(first, second)
                answer = boundary_events(engine, first, second, first_id, hits, which)
            elif command == "apply_prefix":
                n, first_id = args
                keep = which < n
                answer = engine.apply_hits(hits[keep], which[keep], np.arange(first_id, first_id + n, dtype=np.int64))
            elif command == "finish":
                if isinstance(engine, LinkedEngine):
                    engine.compact()
                conn.send(("ok", (part.tokens, part.lengths), 0.0))
                return
            else:
                raise ValueError(f"unknown command {command!r}")
            conn.send(("ok", answer, time.perf_counter() - clock))
    except Exception:
        conn.send(("error", traceback.format_exc(limit=6), 0.0))


class SlicedEngine:
    """An engine with the interface of merge.LinkedEngine, run by one worker process per slice."""

    def __init__(self, table: ChunkTable, workers: int, use_chunk: bool = False, nonoverlap: bool = False,
                 start_method: str | None = None) -> None:
        self.table = table
        self.bounds = slice_bounds(table, workers)
        context = get_context(start_method)
        self._conns, self._procs = [], []
        self._sent_at, self.communication = time.perf_counter(), 0.0
        try:
            pipes = [context.Pipe() for _ in self.bounds[1:]]
            self._conns = [ours for ours, _ in pipes]
            self._procs = start_workers(
                context, _worker, lambda k: (pipes[k][1], _slice(table, self.bounds[k], self.bounds[k + 1]),
                                             use_chunk, nonoverlap), len(pipes))
            for _, theirs in pipes:
                theirs.close()
            self._initial = self._gather()
            self.communication = 0.0  # seconds of the rounds' messages (starting the workers is not counted)
        except BaseException:
            self.close()
            raise

    def _describe(self, k: int) -> str:
        c0, c1 = self.bounds[k], self.bounds[k + 1]
        return f"merge worker {k} (chunks {c0}-{c1 - 1}, pid {self._procs[k].pid})"

    def _died(self, k: int) -> WorkerDied:
        self._procs[k].join(timeout=3)  # its pipe closed: it is exiting; wait for its exit code
        reason = death_reason(self._procs[k].exitcode, "try --workers 1 (merging in one process needs less memory)")
        return WorkerDied(f"{self._describe(k)} died ({reason})")

    def _gather(self) -> list:
        """One answer from every worker; a worker's error becomes a RuntimeError (the lowest-numbered
        worker's, when several fail), its death WorkerDied.

        Waits on every pipe and every worker's exit at once, so a death is seen at once whichever
        worker it is. Adds to `communication` the time since the message went out beyond the
        slowest worker's work.
        """
        from multiprocess.connection import wait

        answers: dict[int, object] = {}
        busy = 0.0
        while len(answers) < len(self._conns):
            waiting = {self._conns[k]: k for k in range(len(self._conns)) if k not in answers}
            waiting |= {self._procs[k].sentinel: k for k in waiting.values()}
            for ready in wait(list(waiting), timeout=_POLL):
                k = waiting[ready]
                if k in answers:
                    continue
                if not self._conns[k].poll():
                    raise self._died(k)
                try:
                    status, payload, seconds = self._conns[k].recv()
                except (EOFError, OSError):  # the pipe broke: the worker is gone
                    raise self._died(k) from None
                answers[k] = (status, payload)
                busy = max(busy, seconds)
        for k, (status, payload) in sorted(answers.items()):  # the first failed worker, whichever answered first
            if status != "ok":
                raise RuntimeError(f"{self._describe(k)} failed:\n{payload}")
        self.communication += time.perf_counter() - self._sent_at - busy
        return [answers[k][1] for k in range(len(self._conns))]

    def _send(self, message: tuple) -> None:
        self._sent_at = time.perf_counter()
        for k, conn in enumerate(self._conns):
            try:
                conn.send(message)
            except OSError:  # a broken pipe: the worker is gone
                raise self._died(k) from None

    @staticmethod
    def _sum(answers: list) -> tuple[np.ndarray, np.ndarray]:
        return aggregate(np.concatenate([k for k, _ in answers]), np.concatenate([v for _, v in answers]))

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        return self._sum(self._initial)

    def apply(self, first: np.ndarray, second: np.ndarray, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._send(("apply", first, second, new_ids))
        return self._sum(self._gather())

    def exact_round(self, first: np.ndarray, second: np.ndarray, counts: np.ndarray, first_id: int,
                    rank_key: Callable[[int], tuple]) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
        self._send(("events", first, second, first_id))
        events = self._gather()
        n = prefix_stop(*(np.concatenate(parts) for parts in zip(*events)), first, second, counts, rank_key)
        self._send(("apply_prefix", n, first_id))
        return n, self._sum(self._gather())

    def finish(self) -> ChunkTable:
        """Compacted final tokens of every slice, written back into the table; the workers exit."""
        self._send(("finish",))
        for (c0, c1), (tokens, lengths) in zip(zip(self.bounds, self.bounds[1:]), self._gather()):
            a = int(self.table.starts[c0])
            self.table.tokens[a:a + len(tokens)] = tokens
            self.table.lengths[c0:c1] = lengths
        return self.table

    def close(self) -> None:
        """Stop every worker (on success and on error alike)."""
        for conn in self._conns:
            conn.close()
        stop_workers(self._procs)
        self._conns, self._procs = [], []

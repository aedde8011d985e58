"""The merge engine spread over worker processes: each owns a slice of the chunk table.

The table is cut into contiguous slices of chunks with about the same number of tokens (not of
chunks), and moved into one shared-memory block (run/shared_arrays.py): every worker maps the
block and works on its slice in place, so the tokens are in RAM once whatever the number of
workers, and nothing is copied back at the end. The workers are spawned (fresh interpreters) by
default: they need nothing of the coordinator but the block, and a forked worker would map (and
count in its RSS) every page of the coordinator's heap. They are started with the main module
hidden (run/pool.py main_module_hidden): a caller's script needs no `__main__` guard.

A worker first maps the block (the coordinator then removes its name: the memory goes with the
last process that maps it, however it ends). Then, on command:
- "encode" (SuperBPE's stage 2: a table of bytes): encode its slice with earlier merges
  (merge/encode.py) and say how many tokens it has; "place": write them into the compact table
  the coordinator made for them, in a second block. The slices encode at once, each in its own
  process.
- "build": build an engine (engines.py) on its slice; its answer is the pair counts of the slice.
- Every round after that, the coordinator (learn_merges) sends the batch, each worker applies it
  in place and answers with only the count changes it caused; the coordinator adds them up
  (int64). Nothing but these small arrays crosses between processes.
- "finish": compact its slice in place; the worker exits.

A worker that fails or dies stops the run with an error naming the worker and its slice, never a
hang; the workers are stopped on every exit path (close()).
"""

from __future__ import annotations

import itertools
import time
import traceback
from collections.abc import Callable

import numpy as np

from .. import jit
from ..run.memory import trim_heap
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
from .encode import encode_byte_table
from .engines import ChunkEngine, LinkedEngine
from .exact import boundary_events, prefix_stop
from .pairs import add_sorted, aggregate
from .table import ChunkTable

# A merge worker's slice must hold this many table tokens: tables of fewer than twice as many merge
# in one process. Merge workers are spawned and share the table (workers.py); two of them gain a
# little speed on realmix's ordinary table for much more memory (the workers' own interpreters and
# the coordinator's queue beside the engines): not worth it there; larger tables, such as SuperBPE's
# stage 2, gain more (docs/DECISIONS.md, "Merging").
MIN_TOKENS_PER_WORKER = 8_000_000
KERNELS_MERGE_ALONE = True  # merge_workers: a table the kernels merge (or encode) stays in one process


def kernels_alone(n_tokens: int, workers: int) -> bool:
    """Whether a table of n_tokens that the kernels take stays in this process, at most two workers
    asked for (merge_workers; encode_for_merging encodes it here for the same reason)."""
    return KERNELS_MERGE_ALONE and workers <= 2 and jit.merge_kernels(n_tokens)


def merge_workers(n_tokens: int, workers: int, linked: bool, min_tokens_per_worker: int | None = None) -> int:
    """The processes that merge a table of n_tokens (1: the coordinator's alone). Where the kernels
    merge it (the linked engine: linked, and jit.merge_kernels) and at most two workers
    could, one process, its engine in two threads, beats them on any table: faster, at a lower peak,
    even on SuperBPE's stage-2 table; more workers (more cores) were not measured against it. Else
    `workers`, each given at least MIN_TOKENS_PER_WORKER tokens.
    min_tokens_per_worker: that threshold, given (tests), and merge workers even for the kernels;
    KERNELS_MERGE_ALONE = False (tests) keeps the threshold alone too."""
    if min_tokens_per_worker is None:
        if linked and kernels_alone(n_tokens, workers):
            return 1
        min_tokens_per_worker = MIN_TOKENS_PER_WORKER
    return max(1, min(workers, n_tokens // max(min_tokens_per_worker, 1)))

_POLL = 0.2  # seconds of one wait for answers (a death ends the wait at once)
DEFAULT_START_METHOD = "spawn"  # see the module's docstring; an explicit start_method is followed
_FIELDS = ("tokens", "starts", "lengths", "counts")


def slice_bounds(table: ChunkTable, workers: int) -> list[int]:
    """Chunk indices cutting the table into `workers` runs of chunks with about equal tokens."""
    total = int(table.starts[-1])
    cuts = np.searchsorted(table.starts, [total * k // workers for k in range(1, workers)])
    return sorted({0, *cuts.tolist(), table.n_chunks})


def shared_table_block(n_tokens: int, n_chunks: int, token_dtype: np.dtype) -> SharedBlock:
    """A block laid out for a ChunkTable of n_tokens tokens and n_chunks chunks."""
    return SharedBlock({"tokens": (token_dtype, n_tokens), "starts": (np.int64, n_chunks + 1),
                        "lengths": (np.int64, n_chunks), "counts": (np.int64, n_chunks)})


def share_table(table: ChunkTable, token_dtype: np.dtype | None = None) -> SharedBlock:
    """Move the table's arrays into a new shared-memory block, in place: the table's fields view the
    block afterwards (tokens as token_dtype, default theirs), and its own arrays are let go."""
    block = shared_table_block(len(table.tokens), table.n_chunks, token_dtype or table.tokens.dtype)
    for name in _FIELDS:
        block.arrays[name][:] = getattr(table, name)
        setattr(table, name, block.arrays[name])
    return block


def _slice(arrays: dict[str, np.ndarray], c0: int, c1: int) -> ChunkTable:
    """Chunks c0..c1-1 of a table as a table of their own; tokens and lengths are views (edited in place)."""
    a, b = int(arrays["starts"][c0]), int(arrays["starts"][c1])
    return ChunkTable(tokens=arrays["tokens"][a:b], starts=arrays["starts"][c0:c1 + 1] - a,
                      lengths=arrays["lengths"][c0:c1], counts=arrays["counts"][c0:c1])


def _worker(conn, handle: BlockHandle, c0: int, c1: int, fault_stage: str, jit_mode: str) -> None:
    """A worker's loop: map the table, then answer the coordinator's messages until "finish".
    jit_mode: the coordinator's kernel mode (a spawned worker inherits none of its state)."""
    ignore_sigint()
    jit.set_mode(jit_mode)
    fault_point(fault_stage, 0)
    try:
        arrays = attach(handle)
        send_message(conn, ("ok", None, 0.0))
        engine = encoded = hits = which = None
        for step in itertools.count(1):
            command, *args = receive_message(conn)
            fault_point(fault_stage, step)
            clock = time.perf_counter()  # each answer says how long the work took (the rest is communication)
            if command == "encode":
                merges, batch_sizes, dtype = args
                encoded = encode_byte_table(_slice(arrays, c0, c1), merges, batch_sizes, dtype=dtype)
                arrays = None  # the table of bytes is let go: the compact table replaces it
                answer = len(encoded.tokens)
            elif command == "place":
                out_handle, offset = args
                arrays = attach(out_handle)
                end = offset + len(encoded.tokens)
                arrays["tokens"][offset:end] = encoded.tokens
                arrays["lengths"][c0:c1] = encoded.lengths
                arrays["starts"][c0 + 1:c1 + 1] = offset + encoded.starts[1:]
                encoded, answer = None, None
                trim_heap()  # the encoding's temporaries: give their pages back before the engine is built
            elif command == "build":
                use_chunk, nonoverlap = args
                part = _slice(arrays, c0, c1)
                engine = ChunkEngine(part, nonoverlap=nonoverlap) if use_chunk else LinkedEngine(part)
                answer = engine.initial_pair_counts()
                trim_heap()  # the count's temporaries, while the coordinator builds its queue from the answers
            elif command == "apply":
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
                send_message(conn, ("ok", None, 0.0))
                return
            else:
                raise ValueError(f"unknown command {command!r}")
            send_message(conn, ("ok", answer, time.perf_counter() - clock))
    except Exception:
        send_message(conn, ("error", traceback.format_exc(limit=6), 0.0))


class SlicedEngine:
    """An engine with the interface of merge.LinkedEngine, run by one worker process per slice.

    Made in phases: the workers start on the table (moved into shared memory); encode() optionally
    encodes a table of bytes with earlier merges; build() makes the engines (learn_merges calls
    it); then rounds; finish() leaves the final tokens in `table`. fault_stage names the workers'
    steps for the test hook (run/pool.py fault_point): 0 the start, then one per command."""

    def __init__(self, table: ChunkTable, workers: int, start_method: str | None = None,
                 token_dtype: np.dtype | None = None, fault_stage: str = "merge") -> None:
        self.bounds = slice_bounds(table, workers)
        self._block = share_table(table, token_dtype)
        self.table = table  # its arrays are the block's
        context = get_context(start_method or DEFAULT_START_METHOD)
        self._conns, self._procs = [], []
        self._sent_at, self.communication = time.perf_counter(), 0.0
        self._initial = None
        try:
            self._procs, self._conns = start_piped_workers(
                context, _worker, lambda k, end: (end, self._block.handle, self.bounds[k], self.bounds[k + 1],
                                                  fault_stage, jit.mode()), len(self.bounds) - 1, hide_main=True)
            self._gather()  # every worker has mapped the block: its name can go
            self._block.unlink()
            self._block.drop_pages()  # the workers hold the slices they use
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        return len(self._procs)

    def encode(self, merges: list[tuple[int, int]], batch_sizes: list[int], token_dtype: np.dtype) -> None:
        """Encode the table (of bytes) with merges, applied in batch_sizes (merge/encode.py), every
        slice in its worker; `table` becomes the compact encoded table, in a new shared block."""
        self._send(("encode", merges, batch_sizes, np.dtype(token_dtype)))
        sizes = self._gather()
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        block = shared_table_block(int(offsets[-1]), self.table.n_chunks, token_dtype)
        self._block.unlink()
        self._block = block
        try:
            block.arrays["counts"][:] = self.table.counts
            block.arrays["starts"][0] = 0
            self._send_each([("place", block.handle, int(offsets[k])) for k in range(len(self._conns))])
            self._gather()
        finally:
            block.unlink()
        block.drop_pages()
        self.table = ChunkTable(**{name: block.arrays[name] for name in _FIELDS})
        self.communication = 0.0  # encoding is not a round: its messages are not the rounds' time

    def build(self, use_chunk: bool = False, nonoverlap: bool = False) -> None:
        """Have every worker build its engine on its slice (their pair counts: initial_pair_counts)."""
        self._send(("build", use_chunk, nonoverlap))
        self._block.drop_pages()  # what this process read of the table since (learn_merges looks at it)
        self._initial = self._gather()
        self.communication = 0.0  # seconds of the rounds' messages (starting the workers is not counted)

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
        received = gather_answers(self._conns, self._procs, self._died, _POLL)
        answers = {k: (status, payload) for k, (status, payload, _) in received.items()}
        busy = max(seconds for _, _, seconds in received.values())
        for k, (status, payload) in sorted(answers.items()):  # the first failed worker, whichever answered first
            if status != "ok":
                raise RuntimeError(f"{self._describe(k)} failed:\n{payload}")
        self.communication += time.perf_counter() - self._sent_at - busy
        return [answers[k][1] for k in range(len(self._conns))]

    def _send(self, message: tuple) -> None:
        self._send_each([message] * len(self._conns))

    def _send_each(self, messages: list[tuple]) -> None:
        self._sent_at = time.perf_counter()
        for k, (conn, message) in enumerate(zip(self._conns, messages)):
            try:
                send_message(conn, message)
            except OSError:  # a broken pipe: the worker is gone
                raise self._died(k) from None

    @staticmethod
    def _sum(answers: list) -> tuple[np.ndarray, np.ndarray]:
        return aggregate(np.concatenate([k for k, _ in answers]), np.concatenate([v for _, v in answers]))

    def initial_pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Every worker's pair counts (sorted keys), added up a worker at a time (add_sorted)."""
        keys, counts = self._initial[0]
        for more_keys, more_counts in self._initial[1:]:
            keys, counts = add_sorted(keys, counts, more_keys, more_counts)
        self._initial = None
        trim_heap()  # the answers' pages: the coordinator's queue is built next
        nz = counts != 0
        return keys[nz], counts[nz]

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
        """The table with every slice compacted in place (chunk_tokens(c) as with one engine); the workers exit."""
        self._send(("finish",))
        self._gather()
        return self.table

    def close(self) -> None:
        """Stop every worker (on success and on error alike); the block's name goes, the table stays."""
        self._block.unlink()
        for conn in self._conns:
            conn.close()
        stop_workers(self._procs)
        self._conns, self._procs = [], []

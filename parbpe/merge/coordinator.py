"""Stage 5, merge: the coordinator loop that ranks pairs, picks safe batches and drives an engine.

learn_merges builds the engine (one in this process, or one per table slice in merge workers),
then each round ranks the top pairs (selection.py), keeps BatchBPE's safe batch (or the exact
prefix), has the engine apply it and adds up the count changes, until the vocabulary is full.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .. import jit
from .engines import ChunkEngine, LinkedEngine, preload_linked_kernels
from .runs import RunEngine, prefers_runs
from .selection import Descending, PairQueue, safe_batch, search_width
from .table import ChunkTable, token_dtype
from .workers import SlicedEngine, merge_workers

# progress(done, total) is called at most once per this many seconds, and after the last round: the
# caller's callback may read /proc of the whole machine (tree_rss), and a serial run makes one round
# per merge.
PROGRESS_INTERVAL = 0.1


def _round_rank_key(queue: PairQueue, vocab: list[bytes], first: np.ndarray, second: np.ndarray, first_id: int):
    """The tie-rule key of a pair whose tokens may be made in this round (id first_id + k for member k)."""

    def token_key(t: int) -> Descending:
        if t < first_id:
            return queue.tie_key(t)
        k = t - first_id
        return Descending(vocab[int(first[k])] + vocab[int(second[k])])

    def rank_key(pair: int) -> tuple:
        a, b = pair >> 32, pair & 0xFFFFFFFF
        return (token_key(a), -a, token_key(b), -b)

    return rank_key


@dataclass
class MergeResult:
    merges: list[tuple[int, int]]  # in rank order; merge k makes token first_id + k
    batch_sizes: list[int]
    stopped_early: bool  # no pair was left before the vocabulary was full
    engine: ChunkEngine | LinkedEngine | RunEngine | ChunkTable  # final tokens of every chunk (chunk_tokens)
    seconds: dict[str, float] = field(default_factory=dict)  # counting, selection, applying, updating, communication
    skipped: int = 0  # pairs never merged because allow() refused their token
    workers: int = 1  # processes that held the engine (merge workers, or this process)


def learn_merges(
    table: ChunkTable,
    vocab: list[bytes],
    n_merges: int,
    *,
    max_batch_size: int = 0,
    cap_divisor: int = 2,
    nonoverlap: bool = False,
    engine: str = "auto",
    batching: str = "batchbpe",
    workers: int = 1,
    start_method: str | None = None,
    min_tokens_per_worker: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    progress_interval: float = PROGRESS_INTERVAL,
    replay: tuple[list[tuple[int, int]], list[int]] | None = None,
    on_round: Callable[[list[tuple[int, int]], list[int], bool], None] | None = None,
    allow: Callable[[bytes], bool] | None = None,
    sliced: SlicedEngine | None = None,
    min_pair_count: int = 1,
    max_token_bytes: int = 0,
    threads: int | None = None,
    guard: int = 0,
) -> MergeResult:
    """Run merge rounds on the table until n_merges merges are made or no pair is left (none seen
    min_pair_count times, when that is over 1).

    `vocab` holds the bytes of every token that exists before merging (the 256 bytes, then the
    stop-list tokens); it is extended in place with the new tokens. Each round ranks the top pairs,
    keeps BatchBPE's safe batch of them, applies it to the table and updates the pair counts.
    engine: "linked" (overlap counting only), "chunk", "runs" (chunks as runs of one token, runs.py),
    or "auto": runs when they shrink the table RUNS_FACTOR times (hostile text: long runs of one
    token), else linked where it applies. The run engine runs in this process (its table is small)
    and, like the chunk engine, makes exact batching serial.
    batching: "batchbpe" (skip conflicting pairs, BatchBPE's rule) or "exact" (the longest ranked
    prefix that serial BPE would merge in the same order: the same merges as max_batch_size=1).
    Exact batching needs the linked engine; with nonoverlap counting it runs serially.
    workers > 1 spreads the engine over processes, one per slice of the table (workers.py),
    each given at least min_tokens_per_worker tokens (fewer workers, or none, on smaller tables;
    none where the kernels merge, unless min_tokens_per_worker is given: merge_workers);
    the merges are the same for any number of workers.
    replay = (merges, batch_sizes) of an earlier run with the same table and settings (a
    checkpoint): those rounds are applied as recorded, without ranking, which leaves the engine and
    the pair counts as that run had them, and the rounds go on from there. on_round(merges,
    batch_sizes, final) is called after every round and once at the end (to write checkpoints);
    progress(done, total) at most once per progress_interval seconds and at the end.
    allow(token_bytes) -> False keeps a pair from ever being merged (SuperBPE's rules, merge/superword.py):
    the pair leaves the ranking for good, as in the SuperBPE authors' trainer, whose skipped pairs are
    not put back; replayed merges are not checked. MergeResult.skipped counts the pairs left out.
    max_token_bytes > 0: a pair whose token would be longer is left out the same way (a length is a
    sum of two numbers: checked with numpy, for the ranked pairs and every count change).
    threads: of a linked or chunk engine merging in this process (None: THREADS, and numpy's index
    sorted by radix passes; 1 where memory is tight, as two threads hold their temporaries at once,
    and sorts in place).
    guard > 0: the table was cut at its pairs counted fewer than guard times (cold_pairs.py); a round
    whose width-th ranked pair counts fewer (or that ranks fewer pairs than its width) could rank
    otherwise on the whole table, and raises ColdPairReached with the merges made before it instead.
    sliced: merge workers started on this table already (SlicedEngine, e.g. having encoded it; its
    `table`): they merge it whatever `workers` says, unless the run engine is picked, which merges
    here; they are stopped in the end either way.
    """
    try:
        use_runs = _uses_runs(table, engine, nonoverlap, batching)
    except BaseException:
        if sliced is not None:
            sliced.close()  # stopped on every path, as the docstring says
        raise
    use_chunk = nonoverlap or engine == "chunk" or use_runs
    exact = batching == "exact" and not use_chunk
    if batching == "exact" and use_chunk:
        max_batch_size = 1  # serial BPE is exact by definition
    clock = time.perf_counter()
    workers = merge_workers(len(table.tokens), workers, not use_chunk, min_tokens_per_worker)
    if sliced is not None:
        if use_runs:
            sliced.close()
            sliced = None
        else:
            workers = sliced.workers
    if use_runs:
        workers = 1
    throttled = _Throttled(progress, progress_interval) if progress is not None else None
    if sliced is None and (workers <= 1 or table.n_chunks < 2 * workers):
        if use_runs:
            runner = RunEngine(table, nonoverlap=nonoverlap)
        elif use_chunk:
            runner = ChunkEngine(table, nonoverlap=nonoverlap, threads=THREADS if threads is None else threads)
        else:
            runner = LinkedEngine(table, threads=THREADS if threads is None else threads, roomy=threads is None)
        return _merge_rounds(runner, vocab, n_merges, max_batch_size, cap_divisor, exact, throttled, clock,
                             replay, on_round, allow, min_pair_count, max_token_bytes, guard)
    try:
        if sliced is None:
            sliced = SlicedEngine(table, workers, start_method=start_method)
        sliced.build(use_chunk=use_chunk, nonoverlap=nonoverlap)
        result = _merge_rounds(sliced, vocab, n_merges, max_batch_size, cap_divisor, exact, throttled, clock,
                               replay, on_round, allow, min_pair_count, max_token_bytes, guard)
        result.engine = sliced.finish()  # the compacted table: chunk_tokens(c) as with one engine
        result.workers = sliced.workers
        return result
    finally:
        if sliced is not None:
            sliced.close()


class ColdPairReached(Exception):
    """learn_merges(guard=T) reached a round that may rank a pair the cut left out (cold_pairs.py);
    merges and batch_sizes: the rounds before it, the same as on the whole table; count: that round's
    width-th ranked pair's count (0: it ranked fewer pairs than its width)."""

    def __init__(self, merges: list[tuple[int, int]], batch_sizes: list[int], count: int) -> None:
        super().__init__(f"a round ranks pairs counted fewer times than the cut kept, after {len(merges)} merges")
        self.merges, self.batch_sizes, self.count = merges, batch_sizes, count


# The threads of an engine merging in the coordinator's process (no merge workers): two where the
# process may run on two cores (LinkedEngine's large rounds), else one.
THREADS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def preload_kernels(n_tokens: int, vocab_size: int, workers: int = 1, nonoverlap: bool = False) -> None:
    """Start loading the numba kernels learn_merges will call in this process on a table of n_tokens
    (its linked engine's, when it merges here: overlap counting, no merge workers), in a background
    thread, so that numba's import and loading overlap the table's building."""
    if not nonoverlap and merge_workers(n_tokens, workers, linked=True) <= 1:
        preload_linked_kernels(n_tokens, token_dtype(vocab_size))


def _uses_runs(table: ChunkTable, engine: str, nonoverlap: bool, batching: str) -> bool:
    """learn_merges' settings checked (a ValueError names a bad one); whether the run engine merges."""
    if engine not in ("auto", "linked", "chunk", "runs"):
        raise ValueError(f"engine must be 'auto', 'linked', 'chunk' or 'runs', got {engine!r}")
    if engine == "linked" and nonoverlap:
        raise ValueError("the linked engine counts overlapping pairs only; use engine='chunk'")
    if batching not in ("batchbpe", "exact"):
        raise ValueError(f"batching must be 'batchbpe' or 'exact', got {batching!r}")
    return engine == "runs" or (engine == "auto" and prefers_runs(table))


# Exact batching ranks only as many pairs as its prefixes use: the first round this many, then
# EXACT_GROWTH times the last round's prefix. A prefix cut short by the width is merged whole and
# the rest follows next round (serial BPE's merges, whatever the rounds); ranking the BatchBPE width
# (thousands of pairs) for prefixes of some 40 was most of a round (FineWeb counts: 1,215 rounds).
EXACT_FIRST_WIDTH = 64
EXACT_GROWTH = 4


@contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """The merge rounds with every object made before them out of the cyclic collector's walks
    (gc.freeze), let back in after (gc.unfreeze). A merge adds a tuple and a token, which start
    collections, and a full one walked every object of the process, several times longer than with
    the older objects frozen. The collector keeps
    running, for the program's other threads too. Nothing is frozen where the program froze objects
    itself: gc.unfreeze would let its objects back in too."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@_older_objects_frozen()
def _merge_rounds(runner, vocab: list[bytes], n_merges: int, max_batch_size: int, cap_divisor: int,
                  exact: bool, progress: _Throttled | None, clock: float, replay=None, on_round=None,
                  allow=None, min_pair_count: int = 1, max_token_bytes: int = 0, guard: int = 0) -> MergeResult:
    """The rounds of learn_merges on a ready engine; merging stops early when no pair is seen
    min_pair_count times (pairs rank by count: a round keeps the ranked pairs above it)."""
    # The queue's searches by kernel where the table is large enough for the engine's kernels and numba is
    # loaded here (a chunk engine's or merge workers' table does not import it for them alone)
    counts = runner.initial_pair_counts()
    queue = PairQueue(*counts, vocab, use_kernels=jit.merge_kernels(len(runner.table.tokens)) and jit.loaded())
    rule = _Rule(allow, vocab) if allow is not None else None
    cap = _LengthCap(vocab, max_token_bytes) if max_token_bytes else None
    seconds = {"counting": time.perf_counter() - clock, "selection": 0.0, "applying": 0.0, "updating": 0.0,
               "replaying": 0.0}
    merges: list[tuple[int, int]] = []
    batch_sizes: list[int] = []
    if replay is not None:
        clock = time.perf_counter()
        _replay(runner, queue, vocab, merges, batch_sizes, *replay)
        seconds["replaying"] = time.perf_counter() - clock
    exact_width = EXACT_FIRST_WIDTH
    while len(merges) < n_merges:
        clock = time.perf_counter()
        width = search_width(n_merges - len(merges), len(vocab), cap_divisor, max_batch_size)
        if exact:
            width = min(width, exact_width)
        ranked, counts = queue.ranked(width)
        while (cap is not None and cap.remove_long(queue, ranked, counts)) or (
                rule is not None and rule.remove_refused(queue, ranked, counts)):
            ranked, counts = queue.ranked(width)
        if guard and (len(counts) < width or counts[-1] < guard):
            if isinstance(runner, LinkedEngine):
                runner.settle()
            raise ColdPairReached(merges, batch_sizes, int(counts[-1]) if len(counts) == width else 0)
        if min_pair_count > 1 and len(counts) and counts[-1] < min_pair_count:
            frequent = int(np.count_nonzero(counts >= min_pair_count))  # counts descend: a prefix
            ranked, counts = ranked[:frequent], counts[:frequent]
        if len(ranked) == 0:
            break
        safe = safe_batch(ranked)
        first_id = len(vocab)
        seconds["selection"] += time.perf_counter() - clock
        clock = time.perf_counter()
        if exact:
            n = len(safe) if safe.all() else int(np.argmin(safe))  # stop at the first conflict
            first, second = ranked[:n] >> 32, ranked[:n] & 0xFFFFFFFF
            n, changes = runner.exact_round(first, second, counts[:n], first_id,
                                            _round_rank_key(queue, vocab, first, second, first_id))
            accepted = ranked[:n]
        else:
            accepted = ranked[safe]
        first, second = accepted >> 32, accepted & 0xFFFFFFFF
        made = len(vocab)
        for a, b in zip(first.tolist(), second.tolist()):
            vocab.append(vocab[a] + vocab[b])
            merges.append((a, b))
        queue.add_tokens(vocab[made:])
        batch_sizes.append(len(accepted))
        if exact:
            exact_width = max(EXACT_FIRST_WIDTH, EXACT_GROWTH * len(accepted))
        if not exact:
            changes = runner.apply(first, second, np.arange(first_id, first_id + len(accepted), dtype=np.int64))
        seconds["applying"] += time.perf_counter() - clock  # exact: finding the prefix counts here
        clock = time.perf_counter()
        if cap is not None:
            cap.add_tokens(vocab)
            changes = cap.without_long(*changes)
        queue.update(*(rule.without_refused(*changes) if rule is not None else changes))
        seconds["updating"] += time.perf_counter() - clock
        if progress is not None:
            progress(len(merges), n_merges)
        if on_round is not None:
            on_round(merges, batch_sizes, False)
    if isinstance(runner, LinkedEngine):
        runner.settle()  # its last round's index work (a thread's error raised here)
    if on_round is not None:
        on_round(merges, batch_sizes, True)
    if progress is not None:
        progress.flush()
    # With merge workers, the messages' time is inside "applying": report it apart.
    seconds["communication"] = getattr(runner, "communication", 0.0)
    seconds["applying"] -= seconds["communication"]
    return MergeResult(merges=merges, batch_sizes=batch_sizes, stopped_early=len(merges) < n_merges,
                       engine=runner, seconds={k: round(v, 3) for k, v in seconds.items()},
                       skipped=(len(rule.refused) if rule is not None else 0) + (cap.skipped if cap is not None else 0))


class _Throttled:
    """progress(done, total) at most once per `interval` seconds (or 20 times its own cost) and always
    at done == total; flush() sends a round held back (a run that stops early)."""

    def __init__(self, progress: Callable[[int, int], None], interval: float):
        self.progress, self.interval = progress, interval
        self.next = 0.0
        self.pending: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done >= total or now >= self.next:
            self.progress(done, total)
            spent = time.perf_counter() - now  # a slow callback is called less often: at most 5% of the time
            self.next, self.pending = now + max(self.interval, 20 * spent), None
        else:
            self.pending = (done, total)

    def flush(self) -> None:
        if self.pending is not None:
            self.progress(*self.pending)
            self.pending = None


class _LengthCap:
    """Pairs whose token would be over max_bytes long: taken out of the queue when they reach the
    top, and never let in by a count change (a pair's length is fixed by its two tokens)."""

    def __init__(self, vocab: list[bytes], max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lengths = np.zeros(0, dtype=np.int64)
        self.skipped = 0
        self.add_tokens(vocab)

    def add_tokens(self, vocab: list[bytes]) -> None:
        """Take the lengths of the tokens added to vocab since the last call."""
        new = vocab[len(self.lengths):]
        if new:
            self.lengths = np.concatenate([self.lengths, np.fromiter(map(len, new), dtype=np.int64, count=len(new))])

    def _long(self, keys: np.ndarray) -> np.ndarray:
        return self.lengths[keys >> 32] + self.lengths[keys & 0xFFFFFFFF] > self.max_bytes

    def remove_long(self, queue: PairQueue, ranked: np.ndarray, counts: np.ndarray) -> bool:
        """Take the ranked pairs that are too long out of the queue (True if any)."""
        long = self._long(ranked)
        if not long.any():
            return False
        self.skipped += int(np.count_nonzero(long))
        queue.update(ranked[long], -counts[long])
        return True

    def without_long(self, keys: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The count changes of pairs short enough to be merged."""
        if not len(keys):
            return keys, deltas
        keep = ~self._long(keys)
        return keys[keep], deltas[keep]


class _Rule:
    """Pairs whose token allow() refuses: taken out of the queue when they reach the top, and their
    later count changes dropped (a pair's count only falls once it exists, so it never comes back)."""

    def __init__(self, allow: Callable[[bytes], bool], vocab: list[bytes]) -> None:
        self.allow = allow
        self.vocab = vocab
        self.checked: set[int] = set()  # allowed pairs seen at the top
        self.refused: set[int] = set()
        self._refused_sorted = np.zeros(0, dtype=np.int64)

    def remove_refused(self, queue: PairQueue, ranked: np.ndarray, counts: np.ndarray) -> bool:
        """Check the ranked pairs not seen before; take the refused ones out of the queue (True if any)."""
        out_keys, out_counts = [], []
        for key, count in zip(ranked.tolist(), counts.tolist()):
            if key in self.checked:
                continue
            if self.allow(self.vocab[key >> 32] + self.vocab[key & 0xFFFFFFFF]):
                self.checked.add(key)
            else:
                self.refused.add(key)
                out_keys.append(key)
                out_counts.append(-count)
        if not out_keys:
            return False
        self._refused_sorted = np.array(sorted(self.refused), dtype=np.int64)
        queue.update(np.array(out_keys, dtype=np.int64), np.array(out_counts, dtype=np.int64))
        return True

    def without_refused(self, keys: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The count changes of pairs still in the running. Each key is looked up in the sorted refused
        ones by a binary search: np.isin sorts the round's keys with them past some 90 refused pairs
        (SuperBPE's stage 2 refuses about a hundred and more, so the search is the faster there)."""
        refused = self._refused_sorted
        if not len(refused) or not len(keys):
            return keys, deltas
        at = np.searchsorted(refused, keys)
        at[at == len(refused)] = 0
        keep = refused[at] != keys
        return keys[keep], deltas[keep]


def _replay(runner, queue: PairQueue, vocab: list[bytes], merges: list[tuple[int, int]], batch_sizes: list[int],
            done: list[tuple[int, int]], sizes: list[int]) -> None:
    """Apply the recorded rounds (merges in rank order, cut by batch sizes) as those rounds did.

    A round of exact batching applied its accepted prefix, which is a safe batch, so apply() gives
    the same table and count changes as exact_round() did.
    """
    if sum(sizes) != len(done):
        raise ValueError(f"a merge checkpoint of {len(done)} merges in rounds of {sum(sizes)}: it is damaged")
    start = 0
    for size in sizes:
        batch = done[start:start + size]
        start += size
        first = np.array([a for a, _ in batch], dtype=np.int64)
        second = np.array([b for _, b in batch], dtype=np.int64)
        first_id = len(vocab)
        for a, b in batch:
            vocab.append(vocab[a] + vocab[b])
            merges.append((a, b))
        queue.add_tokens(vocab[first_id:])
        batch_sizes.append(size)
        queue.update(*runner.apply(first, second, np.arange(first_id, first_id + size, dtype=np.int64)))

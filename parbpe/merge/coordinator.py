"""Stage 5, merge: the coordinator loop that ranks pairs, picks safe batches and drives an engine.

learn_merges builds the engine (one in this process, or one per table slice in merge workers),
then each round ranks the top pairs (selection.py), keeps BatchBPE's safe batch (or the exact
prefix), has the engine apply it and adds up the count changes, until the vocabulary is full.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..run.memory import format_size, trim_heap
from .encode import encode_byte_table
from .engines import ChunkEngine, LinkedEngine
from .runs import MIN_RUN_TOKENS, RUNS_FACTOR, RunEngine, prefers_runs, runs_per_chunk
from .selection import Descending, PairQueue, safe_batch, search_width
from .table import ChunkTable, sum_by_cutoff, token_dtype, tokens_by_cutoff
from .workers import SlicedEngine

# A merge worker's slice must hold this many table tokens: tables of fewer than twice as many merge
# in one process. Merge workers are spawned and share the table (workers.py); on 2 cores
# (2026-11-23, realmix, 32,768 tokens, interleaved): stage 1's table, 11.8M tokens, merged 1.08x
# faster with two workers at 1.45x the stage's peak RSS (the workers' own interpreters and the
# coordinator's queue beside the engines): not worth it; SuperBPE's stage-2 table, 30.7M tokens,
# merged 1.15x faster at 1.24x, and encoded and merged 1.18x faster at 1.21x (docs/BENCHMARKS.md, 14).
MIN_TOKENS_PER_WORKER = 8_000_000
# A worker encoding a slice of SuperBPE's stage-2 table (encode_for_merging) must get this many
# bytes: a spawned worker costs about half a second, encoding 16 MB about 1.3 s.
MIN_BYTES_PER_ENCODE_WORKER = 16_000_000


# The merge stage's peak above the process that starts it, per table token and per table chunk:
# the table (2 bytes a token, 24 a chunk), the linked engine's links and weights (13), the pair
# index (8 a live pair, rebuilt when stale), the pair counts and the temporaries of the initial
# count and of the first, widest rounds (applied in groups). Measured with a trace of the stage
# (2026-11-23, one process, realmix counts: 11.8M tokens, 1.0M chunks, 32,768 tokens): 34 bytes a
# token above the process at the peak, in the first rounds (47 before the index was built a slice
# at a time, batches applied in groups and the index rebuilt when stale); the initial count 27.
MERGE_BYTES_PER_TOKEN = 38
MERGE_BYTES_PER_CHUNK = 24
SLICED_FACTOR = 2  # merge workers: engines in slices, an interpreter each, the coordinator's queue beside
# them (measured 1.2-1.3x one process's peak on SuperBPE's stage 2): counted twice, on the safe side
# SuperBPE's stage 2 encodes a table of bytes before merging it (encode_for_merging): per table byte,
# the table (2 bytes), its bytes as uint8 (1) and the encoding's temporaries, measured 7.8 (2026-11-23,
# realmix's stage 2, 113M bytes, one process: 0.88 GB above the process). The merge then works on the
# encoded table, fewer tokens than bytes (fit_merge_stage's tokens_per_byte).
ENCODE_BYTES_PER_BYTE = 11
# The run engine (runs.py, hostile text) per table token (the table and the runs' scratch; a chunk of
# 50M one letter also makes tokens of 2^k bytes that the vocabulary holds: 11.5 a token, 13 counted)
# and per run (the run log, its pair index, a round's temporaries), measured 2026-11-23 in one
# process: 50M tokens as 1 run, 575 MB above the process; as 6.0M runs (runs of 8), 2,084 MB;
# 20M tokens as 1.35-2.40M runs, 503-877 MB.
RUN_BYTES_PER_TOKEN = 13
RUN_BYTES_PER_RUN = 400
# progress(done, total) is called at most once per this many seconds, and after the last round: the
# caller's callback may read /proc of the whole machine (tree_rss), and a serial run makes one round
# per merge (FineWeb counts -> 50,304, docs/BENCHMARKS.md).
PROGRESS_INTERVAL = 0.1
AUTO_CUTOFF_LIMIT = 1 << 16  # the automatic cutoff never goes beyond this count
MAX_AUTO_DROP = 0.05  # the automatic cutoff may leave out at most this share of chunk occurrences


def merge_estimate(tokens: int, chunks: int) -> int:
    """Bytes the merge stage adds to the process at its peak (one process, the linked engine)."""
    return MERGE_BYTES_PER_TOKEN * tokens + MERGE_BYTES_PER_CHUNK * chunks


@dataclass
class MergeFit:
    """How the merge stage fits a memory budget: the table it keeps and what it leaves out."""

    min_count: int  # chunks seen fewer times stay out of the table (freq_cutoff or the automatic one)
    auto_cutoff: bool  # min_count was raised above freq_cutoff to fit the budget
    chunks: int  # in the table
    tokens: int
    estimate: int  # bytes of the whole process tree at the merge stage's peak: base + merge_estimate
    dropped_chunks: int  # left out by the automatic cutoff
    dropped_occurrences: int
    workers: int  # merge workers the budget allows
    tokens_per_byte: float | None = None  # a table of bytes encoded before merging: tokens it will have per byte
    runs: int | None = None  # the table is merged by the run engine (runs.py): its runs

    def to_dict(self) -> dict:
        return {"min_count": self.min_count, "auto_cutoff": self.auto_cutoff, "table_chunks": self.chunks,
                "table_tokens": self.tokens, "estimate_bytes": self.estimate,
                "dropped_chunks": self.dropped_chunks, "dropped_occurrences": self.dropped_occurrences,
                "workers": self.workers,
                **({"tokens_per_byte": round(self.tokens_per_byte, 4)} if self.tokens_per_byte is not None else {}),
                **({"engine": "runs", "table_runs": self.runs} if self.runs is not None else {})}


def fit_merge_stage(offsets: np.ndarray, counts: np.ndarray, budget: int, base_rss: int, freq_cutoff: int = 1,
                    workers: int = 1, tokens_per_byte: float | None = None, data: np.ndarray | None = None
                    ) -> MergeFit:
    """The smallest min_count >= freq_cutoff whose table merges under budget, given the process
    tree's RSS now (base_rss); chunk k is offsets[k]:offsets[k + 1] of the chunk bytes, seen
    counts[k] times. Raising it leaves the rarest chunks out (an automatic freq_cutoff), at most
    MAX_AUTO_DROP of all occurrences of chunks longer than one byte; past that, or if nothing fits,
    a ValueError names the budget that would do. tokens_per_byte: the table is first encoded with
    earlier merges (SuperBPE's stage 2), which leaves this many tokens per byte (sampled_tokens_per_byte):
    the peak is the encoding's or the merging of the encoded table's, whichever is larger. data: the
    chunk bytes of a table merged as it is (no encoding first); where runs of one byte shrink it
    enough for learn_merges to pick the run engine (prefers_runs), that engine's cost is estimated,
    in one process."""
    largest = min(int(counts.max()) + 1 if len(counts) else 2, AUTO_CUTOFF_LIMIT)
    by_chunks, by_tokens = tokens_by_cutoff(offsets, counts, largest)
    merged = by_tokens if tokens_per_byte is None else np.ceil(by_tokens * tokens_per_byte).astype(np.int64)
    need = base_rss + MERGE_BYTES_PER_TOKEN * merged + MERGE_BYTES_PER_CHUNK * by_chunks
    if tokens_per_byte is not None:
        need = np.maximum(need, base_rss + ENCODE_BYTES_PER_BYTE * by_tokens + MERGE_BYTES_PER_CHUNK * by_chunks)
    by_runs = None
    if data is not None:
        by_runs = sum_by_cutoff(offsets, counts, largest, runs_per_chunk(data, offsets))
        use_runs = (by_tokens >= MIN_RUN_TOKENS) & (RUNS_FACTOR * by_runs <= by_tokens)
        need = np.where(use_runs, base_rss + RUN_BYTES_PER_TOKEN * by_tokens + RUN_BYTES_PER_RUN * by_runs
                        + MERGE_BYTES_PER_CHUNK * by_chunks, need)
    start = max(freq_cutoff, 1)
    fits = np.flatnonzero(need[start:] <= budget)
    multi = counts[np.diff(offsets) > 1]
    occurrences = np.bincount(np.minimum(multi, largest), weights=multi, minlength=largest + 1)[::-1].cumsum()[::-1]
    min_count = start + int(fits[0]) if len(fits) else largest
    dropped = int(occurrences[start] - occurrences[min_count])
    most = MAX_AUTO_DROP * max(int(occurrences[1]), 1)
    if not len(fits) or dropped > most:
        allowed = np.flatnonzero(occurrences[start] - occurrences[start:] <= most)
        least = int(need[start + int(allowed[-1])])
        table = (f"{int(by_tokens[start]):,} tokens" if tokens_per_byte is None else
                 f"{int(by_tokens[start]):,} bytes (about {int(merged[start]):,} tokens once encoded)")
        raise ValueError(
            f"memory budget {format_size(budget)} is too small for the merge stage: its table of "
            f"{table} needs about {format_size(int(need[start]))} with the "
            f"{format_size(base_rss)} in use, and leaving out the rarest chunks to fit would drop more than "
            f"{MAX_AUTO_DROP:.0%} of the corpus; use at least {format_size(-(-least // 10**8) * 10**8)} "
            "(--memory-budget), or a larger --freq-cutoff"
        )
    merge_peak = merge_estimate(int(merged[min_count]), int(by_chunks[min_count]))
    merge_workers = workers if base_rss + SLICED_FACTOR * merge_peak <= budget else 1
    runs = int(by_runs[min_count]) if by_runs is not None and use_runs[min_count] else None
    if runs is not None:
        merge_workers = 1  # the run engine merges in one process
    return MergeFit(min_count=min_count, auto_cutoff=min_count > start, chunks=int(by_chunks[min_count]),
                    tokens=int(by_tokens[min_count]), estimate=int(need[min_count]),
                    dropped_chunks=int(by_chunks[start] - by_chunks[min_count]), dropped_occurrences=dropped,
                    workers=merge_workers, tokens_per_byte=tokens_per_byte, runs=runs)


def encode_for_merging(table: ChunkTable, merges: list[tuple[int, int]], batch_sizes: list[int], vocab_size: int,
                       workers: int = 1, start_method: str | None = None, *,
                       min_bytes_per_worker: int | None = None, min_tokens_per_worker: int | None = None
                       ) -> tuple[ChunkTable, SlicedEngine | None, int]:
    """A table of bytes encoded with merges (merge/encode.py), ready for learn_merges: (the encoded
    table, the merge workers that hold it or None, the processes that encoded it). With workers > 1 and at least
    MIN_BYTES_PER_ENCODE_WORKER bytes each, the slices encode in merge workers at once, and those
    workers go on to merge the table if its slices are worth it (MIN_TOKENS_PER_WORKER tokens each;
    else they stop and the table, in shared memory, merges in this process). The caller lets go of
    `table` (the workers' copy is then the only one) and passes the result to learn_merges(sliced=...).
    min_bytes_per_worker and min_tokens_per_worker override those two thresholds (None: the defaults)."""
    dtype = token_dtype(vocab_size)
    per_worker = MIN_BYTES_PER_ENCODE_WORKER if min_bytes_per_worker is None else min_bytes_per_worker
    workers = min(workers, len(table.tokens) // max(per_worker, 1))
    if workers <= 1 or table.n_chunks < 2 * workers:
        return encode_byte_table(table, merges, batch_sizes, dtype=dtype), None, 1
    trim_heap()  # what this process freed (the counts the table was made of) goes back before the workers start
    sliced = SlicedEngine(table, workers, start_method=start_method, token_dtype=np.dtype(np.uint8),
                          fault_stage="encode")  # PARBPE_TEST_KILL=encode:1 kills it while encoding
    try:
        sliced.encode(merges, batch_sizes, dtype)
    except BaseException:
        sliced.close()
        raise
    per_worker = MIN_TOKENS_PER_WORKER if min_tokens_per_worker is None else min_tokens_per_worker
    if len(sliced.table.tokens) < sliced.workers * per_worker:
        sliced.close()
        return sliced.table, None, workers
    return sliced.table, sliced, workers


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
) -> MergeResult:
    """Run merge rounds on the table until n_merges merges are made or no pair is left.

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
    each given at least min_tokens_per_worker tokens (fewer workers, or none, on smaller tables);
    the merges are the same for any number of workers.
    replay = (merges, batch_sizes) of an earlier run with the same table and settings (a
    checkpoint): those rounds are applied as recorded, without ranking, which leaves the engine and
    the pair counts as that run had them, and the rounds go on from there. on_round(merges,
    batch_sizes, final) is called after every round and once at the end (to write checkpoints);
    progress(done, total) at most once per progress_interval seconds and at the end.
    allow(token_bytes) -> False keeps a pair from ever being merged (SuperBPE's rules, merge/superword.py):
    the pair leaves the ranking for good, as in the SuperBPE authors' trainer, whose skipped pairs are
    not put back; replayed merges are not checked. MergeResult.skipped counts the pairs left out.
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
    per_worker = MIN_TOKENS_PER_WORKER if min_tokens_per_worker is None else min_tokens_per_worker
    workers = min(workers, len(table.tokens) // max(per_worker, 1))
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
        else:
            runner = ChunkEngine(table, nonoverlap=nonoverlap) if use_chunk else LinkedEngine(table)
        return _merge_rounds(runner, vocab, n_merges, max_batch_size, cap_divisor, exact, throttled, clock,
                             replay, on_round, allow)
    try:
        if sliced is None:
            sliced = SlicedEngine(table, workers, start_method=start_method)
        sliced.build(use_chunk=use_chunk, nonoverlap=nonoverlap)
        result = _merge_rounds(sliced, vocab, n_merges, max_batch_size, cap_divisor, exact, throttled, clock,
                               replay, on_round, allow)
        result.engine = sliced.finish()  # the compacted table: chunk_tokens(c) as with one engine
        result.workers = sliced.workers
        return result
    finally:
        if sliced is not None:
            sliced.close()


def _uses_runs(table: ChunkTable, engine: str, nonoverlap: bool, batching: str) -> bool:
    """learn_merges' settings checked (a ValueError names a bad one); whether the run engine merges."""
    if engine not in ("auto", "linked", "chunk", "runs"):
        raise ValueError(f"engine must be 'auto', 'linked', 'chunk' or 'runs', got {engine!r}")
    if engine == "linked" and nonoverlap:
        raise ValueError("the linked engine counts overlapping pairs only; use engine='chunk'")
    if batching not in ("batchbpe", "exact"):
        raise ValueError(f"batching must be 'batchbpe' or 'exact', got {batching!r}")
    return engine == "runs" or (engine == "auto" and prefers_runs(table))


def _merge_rounds(runner, vocab: list[bytes], n_merges: int, max_batch_size: int, cap_divisor: int,
                  exact: bool, progress: _Throttled | None, clock: float, replay=None, on_round=None,
                  allow=None) -> MergeResult:
    """The rounds of learn_merges on a ready engine."""
    queue = PairQueue(*runner.initial_pair_counts(), vocab)
    rule = _Rule(allow, vocab) if allow is not None else None
    seconds = {"counting": time.perf_counter() - clock, "selection": 0.0, "applying": 0.0, "updating": 0.0,
               "replaying": 0.0}
    merges: list[tuple[int, int]] = []
    batch_sizes: list[int] = []
    if replay is not None:
        clock = time.perf_counter()
        _replay(runner, queue, vocab, merges, batch_sizes, *replay)
        seconds["replaying"] = time.perf_counter() - clock
    while len(merges) < n_merges:
        clock = time.perf_counter()
        width = search_width(n_merges - len(merges), len(vocab), cap_divisor, max_batch_size)
        ranked, counts = queue.ranked(width)
        while rule is not None and rule.remove_refused(queue, ranked, counts):
            ranked, counts = queue.ranked(width)
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
        for a, b in zip(first.tolist(), second.tolist()):
            vocab.append(vocab[a] + vocab[b])
            queue.add_token(vocab[-1])
            merges.append((a, b))
        batch_sizes.append(len(accepted))
        if not exact:
            changes = runner.apply(first, second, np.arange(first_id, first_id + len(accepted), dtype=np.int64))
        seconds["applying"] += time.perf_counter() - clock  # exact: finding the prefix counts here
        clock = time.perf_counter()
        queue.update(*(rule.without_refused(*changes) if rule is not None else changes))
        seconds["updating"] += time.perf_counter() - clock
        if progress is not None:
            progress(len(merges), n_merges)
        if on_round is not None:
            on_round(merges, batch_sizes, False)
    if on_round is not None:
        on_round(merges, batch_sizes, True)
    if progress is not None:
        progress.flush()
    # With merge workers, the messages' time is inside "applying": report it apart.
    seconds["communication"] = getattr(runner, "communication", 0.0)
    seconds["applying"] -= seconds["communication"]
    return MergeResult(merges=merges, batch_sizes=batch_sizes, stopped_early=len(merges) < n_merges,
                       engine=runner, seconds={k: round(v, 3) for k, v in seconds.items()},
                       skipped=len(rule.refused) if rule is not None else 0)


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
        """The count changes of pairs still in the running."""
        if not len(self._refused_sorted) or not len(keys):
            return keys, deltas
        keep = ~np.isin(keys, self._refused_sorted, assume_unique=False)
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
            queue.add_token(vocab[-1])
            merges.append((a, b))
        batch_sizes.append(size)
        queue.update(*runner.apply(first, second, np.arange(first_id, first_id + size, dtype=np.int64)))

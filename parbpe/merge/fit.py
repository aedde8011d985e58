"""The merge stage's memory model: what a table costs to merge (and to encode first), and the table
that fits a memory budget (fit_merge_stage: an automatic frequency cutoff when the whole does not).
The numbers are measured (each constant says where); learn_merges does not read them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import jit
from ..run.memory import format_size
from .runs import MIN_RUN_TOKENS, RUNS_FACTOR, runs_per_chunk
from .table import sum_by_cutoff, tokens_by_cutoff

# The merge stage's peak above the process that starts it, per table token and per table chunk:
# the table (2 bytes a token, 24 a chunk), the linked engine's links and weights (13), the pair
# index (8 a live pair, rebuilt when stale), the pair counts and the temporaries of the initial
# count and of the first, widest rounds (applied in groups). Measured with a trace of the stage
# (one process, realmix counts: 11.8M tokens, 1.0M chunks, 32,768 tokens): 34 bytes a token above
# the process at the peak, in the first rounds (47 before the index was built a slice
# at a time, batches applied in groups and the index rebuilt when stale); the initial count 27.
MERGE_BYTES_PER_TOKEN = 40  # (38 measured; realmix at 500 MB peaked 2 MB over 38's estimate)
MERGE_BYTES_PER_CHUNK = 24
SLICED_FACTOR = 2  # merge workers: engines in slices, an interpreter each, the coordinator's queue beside
# them (measured 1.2-1.3x one process's peak on SuperBPE's stage 2): counted twice, on the safe side
# SuperBPE's stage 2 encodes a table of bytes before merging it (encode_for_merging): per table byte,
# the table (2 bytes), its bytes as uint8 (1) and the encoding's temporaries, measured 7.8 (realmix's
# stage 2, 113M bytes, one process: 0.88 GB above the process). The merge then works on the
# encoded table, fewer tokens than bytes (fit_merge_stage's tokens_per_byte).
ENCODE_BYTES_PER_BYTE = 11
# The run engine (runs.py, hostile text) per table token (the table and the runs' scratch; a chunk of
# 50M one letter also makes tokens of 2^k bytes that the vocabulary holds: 11.5 a token, 13 counted)
# and per run (the run log, its pair index, a round's temporaries), measured in one process: 50M
# tokens as 1 run, 575 MB above the process; as 6.0M runs (runs of 8), 2,084 MB; 20M tokens as
# 1.35-2.40M runs, 503-877 MB.
RUN_BYTES_PER_TOKEN = 13
RUN_BYTES_PER_RUN = 400
# A pair at more positions than a group holds (GROUP_ENTRIES, or GROUP_SHARE of the table) is applied
# alone: with the kernels its candidates are looked up and put in table order at once (several int64
# a candidate while the index is gathered), then swept a group's worth at a time
# (LinkedEngine._sweep_in_parts); numpy's find_hits and apply_hits hold several int64 a candidate for
# the whole of it. Bytes a position beyond a group, measured in one process on 20 MB of random bytes
# as text (3.06M positions of one pair, 13.3M tokens) and 50 MB of one two-byte character (25M
# positions): under 20 above the linked model with the kernels (48 counted: the lookup's gather),
# 320 with numpy.
HIT_BYTES_KERNELS = 48
HIT_BYTES_NUMPY = 320
GROUP_ENTRIES = 1 << 18  # as LinkedEngine.GROUP_ENTRIES and GROUP_SHARE
GROUP_SHARE = 32
# The chunk engine (engines.py::ChunkEngine: no links, a (pair, chunk) index whose first block is held as
# lists, 4 bytes an entry, rebuilt at 1.5 times the pair positions (8 bytes an entry while it is built),
# whole chunks gathered a group of CHUNK_GROUP_TOKENS at a time, or one longer chunk) per table token,
# and per token of its largest group (the temporaries of counting and merging it), measured in one
# process (bench/merge_engines.py, the table included, its chunks' 24 bytes and a group's cost taken
# out): 9.1 bytes a token on realmix's counts (11.05M tokens), 8.5 on the generated 1 GB corpus's
# (12.69M); the group's on 3M tokens of random words (64 MB; 85 MB counting nonoverlapping pairs,
# which recounts every pair of a group).
CHUNK_BYTES_PER_TOKEN = 11
CHUNK_GROUP_BYTES_PER_TOKEN = 150
CHUNK_GROUP_BYTES_NONOVERLAP = 230  # ... where nonoverlap counting recounts every pair of a group (80 more)
CHUNK_GROUP_TOKENS = 1 << 18  # as ChunkEngine.GROUP_TOKENS
# What the process holds as the merge stage starts beyond CALLER_FLOOR, its numba and its chunk arrays:
# heap left by counting and reducing, above every residue measured on realmix and on the generated
# 1 GB corpus under tight budgets (docs/DECISIONS.md, "Counting").
MERGE_START_RESIDUE = 50 * 10**6
AUTO_CUTOFF_LIMIT = 1 << 16  # the automatic cutoff never goes beyond this count
MAX_AUTO_DROP = 0.05  # the automatic cutoff may leave out at most this share of chunk occurrences


def max_pair_positions(data: np.ndarray, offsets: np.ndarray, slice_bytes: int = 1 << 22) -> int:
    """The most table positions one pair of bytes holds (each chunk of two bytes or more counted once,
    whatever its count): a bound on the occurrences of any pair in any round, since each occurrence
    of (A, B) stands where the last byte of A met the first byte of B in the table as built. A
    round applies one merge's occurrences at once (LinkedEngine.apply), so this bounds its
    temporaries. Counted a slice of bytes at a time, so its own temporaries stay small."""
    data = np.asarray(data, dtype=np.uint8)
    offsets = np.asarray(offsets)
    counts = np.zeros(1 << 16, dtype=np.int64)
    for lo in range(0, max(len(data) - 1, 0), slice_bytes):
        hi = min(lo + slice_bytes, len(data) - 1)
        keys = data[lo:hi].astype(np.uint16) << 8
        keys |= data[lo + 1:hi + 1]
        counts += np.bincount(keys, minlength=1 << 16)
        starts = offsets[np.searchsorted(offsets, lo + 1, side="left"):np.searchsorted(offsets, hi + 1)]
        starts = starts[np.diff(starts, prepend=-1) > 0]  # (an empty chunk repeats an offset)
        counts -= np.bincount(keys[starts - 1 - lo], minlength=1 << 16)  # pairs across two chunks are none
    return int(counts.max(initial=0))


def wide_pairs_fit(need: int, tokens: int, budget: int) -> bool:
    """Whether a table of `tokens` whose merge stage needs `need` (the linked model) fits the budget
    whatever pair fills it (the widest round of every position holding one pair, with numpy): then
    max_pair_positions need not be counted."""
    return need + jit.NUMBA_RSS + HIT_BYTES_NUMPY * tokens <= budget


def merge_estimate(tokens: int, chunks: int) -> int:
    """Bytes the merge stage adds to the process at its peak (one process, the linked engine)."""
    return MERGE_BYTES_PER_TOKEN * tokens + MERGE_BYTES_PER_CHUNK * chunks


def whole_table_engine(budget: int, base_rss: int, tokens: int, chunks: int) -> str | None:
    """The engine that merges a whole table (no cutoff) of this size beside base_rss under budget:
    "linked" (the faster) where it fits, else "chunk" where that fits, else None."""
    if base_rss + merge_estimate(tokens, chunks) <= budget:
        return "linked"
    return "chunk" if base_rss + chunk_engine_estimate(tokens, chunks) <= budget else None


def chunk_engine_estimate(tokens, chunks, longest: int = 0, nonoverlap: bool = False):
    """merge_estimate for the chunk engine (tokens and chunks: ints, or arrays by cutoff), whose table's
    longest chunk has `longest` tokens (a group holds one chunk at least), one group at a time."""
    return CHUNK_BYTES_PER_TOKEN * tokens + MERGE_BYTES_PER_CHUNK * chunks + chunk_group_bytes(longest, nonoverlap)


def chunk_group_bytes(longest: int, nonoverlap: bool = False) -> int:
    """What the chunk engine's largest group holds while it is applied: a second thread holds as much."""
    return max(CHUNK_GROUP_TOKENS, longest) * (CHUNK_GROUP_BYTES_NONOVERLAP if nonoverlap else
                                               CHUNK_GROUP_BYTES_PER_TOKEN)


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
    numba_counted: bool = False  # estimate holds numba's RSS: the kernels must merge (a pair's wide round)
    engine: str = "auto"  # "chunk": the chunk engine merges it (nonoverlap, or every chunk kept in less memory)
    group_bytes: int = 0  # the chunk engine: what a group holds, which its second thread adds (chunk_group_bytes)

    def to_dict(self) -> dict:
        return {"min_count": self.min_count, "auto_cutoff": self.auto_cutoff, "table_chunks": self.chunks,
                "table_tokens": self.tokens, "estimate_bytes": self.estimate,
                "dropped_chunks": self.dropped_chunks, "dropped_occurrences": self.dropped_occurrences,
                "workers": self.workers,
                **({"tokens_per_byte": round(self.tokens_per_byte, 4)} if self.tokens_per_byte is not None else {}),
                **({"engine": "runs", "table_runs": self.runs} if self.runs is not None else {}),
                **({"engine": "chunk"} if self.engine == "chunk" and self.runs is None else {})}


def fit_merge_stage(offsets: np.ndarray, counts: np.ndarray, budget: int, base_rss: int, freq_cutoff: int = 1,
                    workers: int = 1, tokens_per_byte: float | None = None, data: np.ndarray | None = None,
                    keep: int = 1, pair_positions: int = 0, chunk_engine: str = "never") -> MergeFit:
    """The smallest min_count >= freq_cutoff whose table merges under budget, given the process
    tree's RSS now (base_rss); chunk k is offsets[k]:offsets[k + 1] of the chunk bytes, seen
    counts[k] times. Raising it leaves the rarest chunks out (an automatic freq_cutoff), at most
    MAX_AUTO_DROP of all occurrences of chunks longer than one byte; past that, or if nothing fits,
    a ValueError names the budget that would do. tokens_per_byte: the table is first encoded with
    earlier merges (SuperBPE's stage 2), which leaves this many tokens per byte (sampled_tokens_per_byte):
    the peak is the encoding's or the merging of the encoded table's, whichever is larger. data: the
    chunk bytes of a table merged as it is (no encoding first); where runs of one byte shrink it
    enough for learn_merges to pick the run engine (prefers_runs), that engine's cost is estimated,
    in one process. keep: a min_count chosen before (a resumed run's), kept where it fits and is not
    below the one found. pair_positions: max_pair_positions of the whole table (a bound for every
    cutoff), whose round costs beyond a group's are added (HIT_BYTES_KERNELS, with numba's RSS, where
    the kernels merge the table; else HIT_BYTES_NUMPY); counted from data where the budget could
    not hold the worst (wide_pairs_fit). chunk_engine: "always" where the chunk engine merges whatever the
    budget (--pair-count nonoverlap: its own model); "fallback" where it merges a table of bytes as it
    is that the linked engine would merge only with an automatic cutoff (or not at all), and fits whole:
    the same merges, slower, in about half the memory; "never" (the default; exact batching, which is
    serial on it)."""
    largest = min(int(counts.max()) + 1 if len(counts) else 2, AUTO_CUTOFF_LIMIT)
    by_chunks, by_tokens = tokens_by_cutoff(offsets, counts, largest)
    start = max(freq_cutoff, 1)
    merged = by_tokens if tokens_per_byte is None else np.ceil(by_tokens * tokens_per_byte).astype(np.int64)
    longest = int(np.diff(offsets).max()) if len(offsets) > 1 else 0
    if chunk_engine == "always":
        need = base_rss + chunk_engine_estimate(by_tokens, by_chunks, longest, nonoverlap=True)
        pair_positions = 0  # (no round of one pair costs it more than a group)
    else:
        need = base_rss + MERGE_BYTES_PER_TOKEN * merged + MERGE_BYTES_PER_CHUNK * by_chunks
    if tokens_per_byte is not None:
        need = np.maximum(need, base_rss + ENCODE_BYTES_PER_BYTE * by_tokens + MERGE_BYTES_PER_CHUNK * by_chunks)
    first = min(start, len(need) - 1)
    if data is not None and chunk_engine != "always" and not wide_pairs_fit(int(need[first]), int(by_tokens[first]),
                                                                           budget):
        pair_positions = max(pair_positions, max_pair_positions(data, offsets))
    wide = np.maximum(pair_positions - np.maximum(GROUP_ENTRIES, merged // GROUP_SHARE), 0)
    kernels, wide_cost = np.zeros(len(wide), dtype=bool), np.zeros(len(wide), dtype=np.int64)
    if wide.any():
        kernels = np.array([jit.merge_kernels(int(t)) for t in merged]) & (wide > 0)
        wide_cost = np.where(kernels, jit.NUMBA_RSS + HIT_BYTES_KERNELS * wide, HIT_BYTES_NUMPY * wide)
        need = need + wide_cost
    by_runs = None
    if data is not None:
        by_runs = sum_by_cutoff(offsets, counts, largest, runs_per_chunk(data, offsets))
        use_runs = (by_tokens >= MIN_RUN_TOKENS) & (RUNS_FACTOR * by_runs <= by_tokens)
        need = np.where(use_runs, base_rss + RUN_BYTES_PER_TOKEN * by_tokens + RUN_BYTES_PER_RUN * by_runs
                        + MERGE_BYTES_PER_CHUNK * by_chunks, need)
    fits = np.flatnonzero(need[start:] <= budget)
    multi = counts[np.diff(offsets) > 1]
    occurrences = np.bincount(np.minimum(multi, largest), weights=multi, minlength=largest + 1)[::-1].cumsum()[::-1]
    min_count = start + int(fits[0]) if len(fits) else largest
    if min_count < keep <= largest and need[keep] <= budget:
        min_count = keep
    dropped = int(occurrences[start] - occurrences[min_count])
    most = MAX_AUTO_DROP * max(int(occurrences[1]), 1)
    whole = start if start < len(need) else len(need) - 1
    if (chunk_engine == "fallback" and tokens_per_byte is None and (not len(fits) or min_count > start)
            and not (by_runs is not None and use_runs[whole])
            and base_rss + chunk_engine_estimate(int(by_tokens[whole]), int(by_chunks[whole]), longest) <= budget):
        return MergeFit(min_count=start, auto_cutoff=False, chunks=int(by_chunks[whole]), tokens=int(by_tokens[whole]),
                        estimate=base_rss + chunk_engine_estimate(int(by_tokens[whole]), int(by_chunks[whole]), longest),
                        dropped_chunks=0, dropped_occurrences=0, workers=1, engine="chunk",
                        group_bytes=chunk_group_bytes(longest))
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
    merge_peak = (int(need[min_count]) - base_rss if chunk_engine == "always" else
                  merge_estimate(int(merged[min_count]), int(by_chunks[min_count])) + int(wide_cost[min_count]))
    merge_workers = workers if base_rss + SLICED_FACTOR * merge_peak <= budget else 1
    runs = int(by_runs[min_count]) if by_runs is not None and use_runs[min_count] else None
    if runs is not None or wide[min_count]:
        merge_workers = 1  # the run engine merges in one process; a wide pair's round is reckoned in one
    return MergeFit(min_count=min_count, auto_cutoff=min_count > start, chunks=int(by_chunks[min_count]),
                    tokens=int(by_tokens[min_count]), estimate=int(need[min_count]),
                    dropped_chunks=int(by_chunks[start] - by_chunks[min_count]), dropped_occurrences=dropped,
                    workers=merge_workers, tokens_per_byte=tokens_per_byte, runs=runs,
                    numba_counted=bool(kernels[min_count]) and runs is None,
                    engine="chunk" if chunk_engine == "always" and runs is None else "auto",
                    group_bytes=chunk_group_bytes(longest, nonoverlap=True) if chunk_engine == "always" else 0)



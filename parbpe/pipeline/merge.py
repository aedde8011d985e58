"""Stages 4-5, merge: chunk counts -> a table that fits the memory budget -> (encoded with earlier
merges, if any) -> merge rounds until the vocabulary is full.

merge_stage is the one function for every run that merges a chunk table: the ordinary run, a run
continuing a tokenizer (--init) and SuperBPE's stage 2 differ only in the MergeJob they pass (the
tokens they start from, the merges the chunks are first encoded with, the rule on new tokens). A
later algorithm over the same chunk table takes the same Counted and ctx.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import jit
from ..count.reduce import TrainingChunks
from ..io.iterables import TextStream
from ..io.plan import unit_text_bytes
from ..io.units import WorkUnit
from ..merge.cold_pairs import cut_cold_pairs
from ..merge.coordinator import THREADS, ColdPairReached, MergeResult, learn_merges, preload_kernels
from ..merge.encode import encode_chunk_arrays, sampled_tokens_per_byte
from ..merge.fit import MERGE_START_RESIDUE, MergeFit, fit_merge_stage, merge_estimate
from ..merge.prepare import encode_for_merging
from ..merge.table import ChunkTable, table_from_arrays, token_dtype
from ..merge.workers import kernels_alone
from ..run.memory import CALLER_FLOOR, format_size, trim_heap
from ..run.run_dir import RunDirectory
from ..warnings import AutoCutoffWarning
from .context import RunContext
from .count import release_arrow_memory

Pairs = list[tuple[int, int]]


@dataclass
class MergeJob:
    """What one merge stage makes.

    vocab: the tokens that exist before merging (bytes, stop-list or inherited tokens); n_merges: the
    merges to make; encode: (merges, batch sizes) the chunks are encoded with first, or None;
    sampled: the encoded table's size is estimated from a sample (else from the bytes, or not at all
    when encoding); allow: which new tokens may be made (SuperBPE's rule); names: the stages' names
    (table, encode, merge); offset: merges made before, for progress; label: the stage in warnings;
    run: the run directory whose merge checkpoint is taken and rewritten (default: the run's);
    beside: called with the fit once the table is built, before the rounds (SuperBPE starts its
    superword count there: pipeline/count_beside.py)."""

    vocab: list[bytes]
    n_merges: int
    encode: tuple[Pairs, list[int]] | None = None
    sampled: bool = False
    allow: Callable[[bytes], bool] | None = None
    names: tuple[str, str, str] = ("table", "init", "merge")
    offset: int = 0
    label: str = "the merge stage"
    run: RunDirectory | None = None  # where checkpoints go, when not the run's directory (SuperBPE's stage 2)
    beside: Callable[[MergeFit], None] | None = None


@dataclass
class Merged:
    """The merge stage's output: the merges and what stats.json reports of the stage."""

    result: MergeResult
    fit: MergeFit
    training_chunks: int
    table_tokens: int
    encoded_table_tokens: int | None = None
    encode_workers: int = 0
    cold_cut: dict | None = None  # the table cut at its cold pairs (merge/cold_pairs.py), if it was


# Table tokens a counts file's byte makes, at most as far as is known: a BatchBPE CSV holds each chunk
# once, quoted, with its count (FineWeb-Edu's, 3.04 MB: 1.83 M tokens, 0.6 a byte); a parquet counts
# file is compressed, so it makes more, and an early load waits for a larger one.
COUNTS_TOKENS_PER_BYTE = 0.6


def preload_before_counting(ctx: RunContext, units: list[WorkUnit] | TextStream) -> None:
    """Start numba's import and the merge kernels' loading (jit.preload, a thread) as the count stage
    starts, in a run that reads counts files only (no text: no lexer loads numba there), where their
    bytes make a table the kernels merge (jit.MERGE_MIN_TOKENS) and the budget holds numba and the engine's
    second thread beside the merge stage as _room reckons it. Else numba loads at the table stage,
    and the merge stage waits for most of that load: building a table of counts files is too short
    to hide it."""
    if not isinstance(units, list) or not units or not all(unit.kind.startswith("counts") for unit in units):
        return  # (a TextStream: texts from an iterable)
    tokens = int(COUNTS_TOKENS_PER_BYTE * sum(unit_text_bytes(unit) for unit in units))
    chunks, config = tokens // 4, ctx.config
    if _room_for(ctx.in_use() + merge_estimate(tokens, chunks), tokens, chunks, ctx.budget) == "speed":
        preload_kernels(tokens, config.vocab_size, config.workers, config.pair_count == "nonoverlap")


def merge_stage(ctx: RunContext, chunks: TrainingChunks, job: MergeJob) -> Merged:
    """Fit, table, encoding (if job.encode), rounds. The chunk arrays are handed to the table and let go;
    under --jit auto the stage merges with numpy where the budget has no room for numba (_room).
    SuperBPE's stage 2, where the budget holds its table of bytes merged as it is (more than its
    encoded table needs), encodes its chunks straight from the arrays (_encode_straight): no table of
    bytes, no sampled estimate; its fit is then of the tokens the encoding left."""
    table_name, encode_name, _ = job.names
    encoded = None
    with ctx.stage(table_name):
        release_arrow_memory()
        straight = _straight_base(ctx, chunks, job)
        if straight is None:
            fit, table, room = _table(ctx, chunks, job)
    if straight is not None:
        with ctx.stage(encode_name):
            fit, table, room = _encode_straight(ctx, chunks, job, *straight)
            encoded = fit.tokens
    if job.beside is not None:
        job.beside(fit)
    training_chunks = len(chunks)
    chunks.data = chunks.offsets = chunks.counts = None  # the table holds them; merge workers fork without them
    numpy_only = room == "numpy" and jit.mode() == "auto"
    if numpy_only and jit.merge_kernels(fit.tokens) and fit.engine != "chunk":
        ctx.note(f"merging with numpy: the {format_size(ctx.budget)} budget leaves no room for the kernels' "
                 f"{format_size(jit.merge_load_rss())} beside the merge stage's {format_size(fit.estimate)}")
    holder, table = [table], None  # handed over: the encoding replaces it, and nothing here keeps it
    with jit.using("off") if numpy_only else contextlib.nullcontext():
        return _encode_and_merge(ctx, holder, fit, job, room == "speed", training_chunks, encoded)


def _encode_and_merge(ctx: RunContext, holder: list[ChunkTable], fit: MergeFit, job: MergeJob, roomy: bool,
                      training_chunks: int, encoded_from: int | None = None) -> Merged:
    """merge_stage after the table (holder's one item, taken out: only this function holds it, and lets
    go of it before the write): the encoding (if job.encode, and the table is not encoded yet: else
    encoded_from is the bytes it was encoded from) and the rounds."""
    config = ctx.config
    _, encode_name, merge_name = job.names
    table = holder.pop()
    table_tokens = len(table.tokens) if encoded_from is None else encoded_from
    release_arrow_memory()
    sliced, encode_workers, encoded_tokens = None, 0, None
    if encoded_from is not None:
        encode_workers, encoded_tokens = 1, len(table.tokens)
    elif job.encode is not None:  # the chunks as the earlier merges leave them (in merge workers if large)
        with ctx.stage(encode_name):
            table, sliced, encode_workers = encode_for_merging(table, job.encode[0], job.encode[1], config.vocab_size,
                                                               fit.workers, ctx.start_method,
                                                               threads=THREADS if roomy else 1)
            encoded_tokens = len(table.tokens)
    run = job.run or ctx.run
    replay = run.load_merges() if run is not None else None
    if replay is not None:
        ctx.note(f"replaying {len(replay[0])} merges from the checkpoint")
    threads = None if roomy else 1
    if fit.engine == "chunk":  # two groups at once where the budget holds the second's temporaries, twice
        threads = THREADS if fit.estimate + 2 * fit.group_bytes <= ctx.budget else 1
    with ctx.stage(merge_name):
        settings = dict(max_batch_size=config.max_batch_size, cap_divisor=config.cap_divisor,
                        nonoverlap=config.pair_count == "nonoverlap", batching=config.batching, workers=fit.workers,
                        start_method=ctx.start_method, progress=ctx.progress(merge_name, job.offset),
                        on_round=run.merge_checkpointer() if run is not None else None, allow=job.allow,
                        min_pair_count=config.min_pair_count, max_token_bytes=config.max_token_bytes,
                        threads=threads, engine="chunk" if fit.engine == "chunk" else "auto")
        result, cut_stats = None, None
        if job.encode is not None and sliced is None and config.batching == "batchbpe" and not settings["nonoverlap"]:
            result, replay, cut_stats = _merge_cut(ctx, table, job, replay, settings, THREADS if roomy else 1)
        if result is None:
            result = learn_merges(  # (it stops the workers in sliced, if any, on every path)
                table, job.vocab, job.n_merges, replay=replay, sliced=sliced, **settings)
        ctx.reporter.event("merged", merges=len(result.merges), rounds=len(result.batch_sizes),
                           merge_workers=result.workers)
        job.vocab = []  # the tokenizer makes its own: tokens can be megabytes each (hostile text), never hold both
        result.engine = table = None  # nor the table and engine (the chunks' final tokens are not used)
    return Merged(result=result, fit=fit, training_chunks=training_chunks, table_tokens=table_tokens,
                  encoded_table_tokens=encoded_tokens, encode_workers=encode_workers, cold_cut=cut_stats)


def _merge_cut(ctx: RunContext, table: ChunkTable, job: MergeJob, replay: tuple[Pairs, list[int]] | None,
               settings: dict, threads: int) -> tuple[MergeResult | None, tuple[Pairs, list[int]] | None, dict | None]:
    """The rounds on the encoded table cut at its cold pairs (merge/cold_pairs.py), cut lower each time a
    round reaches below the cut, with the merges so far replayed: (their result, or None where no cut
    was made or is left, then the whole table merges on from the merges to replay; those merges; the
    cuts' stats for stats.json, None without a cut)."""
    cut = cut_cold_pairs(table, job.n_merges, threads=threads)
    if cut is None:
        return None, replay, None
    stats: dict = {"cuts": [], "held": False}
    while cut is not None:
        stats["cuts"].append(cut.stats())
        try:
            result = learn_merges(cut.table, list(job.vocab), job.n_merges, replay=replay, guard=cut.threshold,
                                  **settings)
            stats["held"] = True
            return result, replay, stats
        except ColdPairReached as reached:
            replay, cut = (reached.merges, reached.batch_sizes), cut.lower(table, reached.count)
            ctx.note(f"{job.label}: after {len(reached.merges):,} merges a round ranks pairs seen fewer than "
                     f"{stats['cuts'][-1]['threshold']:,} times, which its table cut there does not hold: "
                     + (f"cut at {cut.threshold:,} now" if cut is not None else "merging the whole table")
                     + " (the merges so far replayed)")
    return None, replay, stats


def _table(ctx: RunContext, chunks: TrainingChunks, job: MergeJob) -> tuple[MergeFit, ChunkTable, str]:
    """The chunk table, no larger than the merge stage can hold in the budget (an automatic cutoff), and
    what else the budget holds beside the fit's estimate (_room)."""
    config = ctx.config
    tokens_per_byte = None
    if job.sampled:  # the table is encoded before it merges: the estimate needs the tokens it will have
        tokens_per_byte = sampled_tokens_per_byte(chunks.data, chunks.offsets, *job.encode,
                                                  dtype=token_dtype(config.vocab_size))
    else:
        trim_heap()  # the reduce stage's freed heap: the merge stage's room is measured next
    fit, room = _fit(ctx, chunks, job, _base(ctx, chunks), tokens_per_byte)
    dtype = np.dtype(np.uint8) if job.encode is not None else None  # a table of bytes to encode
    return fit, table_from_arrays(chunks.data, chunks.offsets, chunks.counts, config.vocab_size, fit.min_count,
                                  dtype), room


def _base(ctx: RunContext, chunks: TrainingChunks) -> tuple[int, int]:
    """What the process holds as the merge stage starts: (as the fit takes it, as reckoned_in_use reckons it)."""
    jit.settle()  # a load started before counting (preload_before_counting): reckoned loaded whatever its progress
    reckoned, held = reckoned_in_use(chunks, ctx.loaded_numba()), ctx.in_use()
    return max(reckoned, held), reckoned  # the budget holds first


def _straight_base(ctx: RunContext, chunks: TrainingChunks, job: MergeJob) -> tuple[tuple[int, int], int] | None:
    """(_base, the table's bytes), where a table of bytes sampled for its estimate (SuperBPE's stage 2)
    is better encoded straight from the chunk arrays (_encode_straight): the kernels encode it in this
    process, and the budget holds every chunk and the kernels' second thread with the table merged
    unencoded, a token a byte (encoding only shortens it; the sampled estimate then tells nothing the
    encoding does not). None: the table is built and sampled first (_table)."""
    if not (job.sampled and job.encode is not None):
        return None
    config = ctx.config
    run = job.run or ctx.run
    kept = run.load_table_cutoff() if run is not None else None
    lengths = np.diff(chunks.offsets)
    table_bytes = int(lengths[lengths > 1].sum())  # the table of bytes leaves out chunks of one byte
    if (config.freq_cutoff > 1 or kept not in (None, 1) or not jit.merge_kernels(table_bytes)
            or not kernels_alone(table_bytes, config.workers)):
        return None
    base = _base(ctx, chunks)
    try:
        unencoded = fit_merge_stage(chunks.offsets, chunks.counts, ctx.budget, base[0], tokens_per_byte=1.0)
    except ValueError:  # not even cut: the table of bytes is built and sampled (its fit says what fits)
        return None
    fits = unencoded.min_count == 1 and _room(unencoded, ctx.budget) == "speed"
    return (base, table_bytes) if fits else None


def _encode_straight(ctx: RunContext, chunks: TrainingChunks, job: MergeJob, base: tuple[int, int],
                     table_bytes: int) -> tuple[MergeFit, ChunkTable, str]:
    """The table encoded straight from the chunk arrays (_straight_base), in two threads, and its fit:
    the tokens per byte the encoding left, base measured before it (so it keeps every chunk, as the
    fit at a token a byte did: encoding never adds tokens)."""
    _finish_kernels_ahead(ctx)  # (a first run's stage-2 kernels: compiled beside stage 1's merge)
    table = encode_chunk_arrays(chunks.data, chunks.offsets, chunks.counts, job.encode[0],
                                token_dtype(ctx.config.vocab_size), threads=THREADS)
    fit, room = _fit(ctx, chunks, job, base, len(table.tokens) / max(table_bytes, 1))
    return fit, table, room


def _chunk_engine(config) -> str:
    """fit_merge_stage's chunk_engine for this run: "always" for nonoverlap counting (its engine),
    "never" for exact batching (serial on it), else "fallback" (every chunk kept where it fits)."""
    if config.pair_count == "nonoverlap":
        return "always"
    return "never" if config.batching == "exact" else "fallback"


def _settle_kernels_ahead(ctx: RunContext, merges_with_kernels: bool) -> None:
    """The processes compiling a first run's kernels (kernels_ahead.py), if they run: waited for where
    this merge runs kernels (until the merge's are in numba's cache; SuperBPE's stage 2 waits for the
    rest: _finish_kernels_ahead), else stopped."""
    ahead = ctx.kernels_ahead
    if ahead is None:
        return
    if not merges_with_kernels:
        ahead.record["not_needed"] = True  # (the text's table came out too small for the merge's kernels)
        _finish_kernels_ahead(ctx, stop=True)
        return
    ahead.wait_merge()
    if not ("superbpe" in ahead.families and ahead.running()):
        _finish_kernels_ahead(ctx)


def _finish_kernels_ahead(ctx: RunContext, stop: bool = False) -> None:
    """The compiling processes, if they run, waited for (stopped past their time: KernelsAhead.wait), or
    stopped at once."""
    ahead, ctx.kernels_ahead = ctx.kernels_ahead, None
    if ahead is not None:
        ahead.close() if stop else ahead.wait()


def _fit(ctx: RunContext, chunks: TrainingChunks, job: MergeJob, base: tuple[int, int],
         tokens_per_byte: float | None) -> tuple[MergeFit, str]:
    """The merge stage's fit (fit_merge_stage, its cutoff kept in the run directory) and its room
    (_room, the kernels preloaded where it is "speed"), with its event, notes and warning."""
    config = ctx.config
    fitted_to, reckoned = base
    run = job.run or ctx.run
    kept = run.load_table_cutoff() if run is not None else None
    try:
        fit = fit_merge_stage(chunks.offsets, chunks.counts, ctx.budget, fitted_to, config.freq_cutoff,
                              config.workers, tokens_per_byte=tokens_per_byte,
                              data=chunks.data if job.encode is None else None, keep=kept or 1,
                              chunk_engine=_chunk_engine(config))
    except ValueError as exc:
        if ctx.run is None:
            raise
        raise ValueError(f"{exc}. The reduced counts are kept in {ctx.run.path}: the same command with a larger "
                         f"--memory-budget and --resume skips counting (or remove it: rm -r '{ctx.run.path}')"
                         ) from None
    ctx.reporter.event("merge_plan", table_tokens=fit.tokens, table_chunks=fit.chunks, estimate_MB=fit.estimate / 1e6,
                       budget_MB=ctx.budget / 1e6, min_count=fit.min_count, auto_cutoff=fit.auto_cutoff,
                       dropped_chunks=fit.dropped_chunks)  # the merge workers that run: the "merged" event
    if run is not None and kept != fit.min_count:
        if kept is not None:
            ctx.note(f"the table's min_count is {fit.min_count} now, {kept} in the run resumed: its merge "
                     "checkpoint is not replayed")
            run.drop_merges()
        run.save_table_cutoff(fit.min_count)
    if fit.auto_cutoff and fitted_to > reckoned:
        ctx.note(f"the automatic cutoff was fitted to the {format_size(fitted_to)} this process holds, more than the "
                 f"{format_size(reckoned)} reckoned: another run of the same command may hold less and keep more "
                 "chunks (a --freq-cutoff fixes the table)")
    room = "numpy" if fit.engine == "chunk" else _room(fit, ctx.budget)  # (the chunk engine has no kernels)
    if fit.engine == "chunk" and config.pair_count != "nonoverlap":
        ctx.note(f"{job.label}: every chunk kept by the chunk engine, in about {format_size(fit.estimate)}, where "
                 f"the linked engine would leave the rarest out (the same merges, slower)")
    _settle_kernels_ahead(ctx, room != "numpy" and jit.merge_kernels(fit.tokens))
    if room == "speed":
        preload_kernels(fit.tokens, config.vocab_size, fit.workers, config.pair_count == "nonoverlap")
    if fit.auto_cutoff:
        ctx.result_changed(
            AutoCutoffWarning,
            f"{job.label} fits {format_size(ctx.budget)} only without the rarest chunks: chunks seen fewer than "
            f"{fit.min_count} times ({fit.dropped_chunks:,} chunks, {fit.dropped_occurrences:,} occurrences) are "
            "left out of training (an automatic --freq-cutoff; a larger --memory-budget keeps them)",
            min_count=fit.min_count, dropped_chunks=fit.dropped_chunks, dropped_occurrences=fit.dropped_occurrences)
    return fit, room


def reckoned_in_use(chunks: TrainingChunks, numba: bool) -> int:
    """What the process holds as the merge stage starts, as its fit (the automatic cutoff) reckons it:
    CALLER_FLOOR, the chunk arrays, numba's jit.NUMBA_RSS if the run loaded it (numba), MERGE_START_RESIDUE. The
    same for every run of one command, where a measured RSS differs by tens of MB (133-177 MB over
    five realmix runs), and the cutoff with it: the same command made other tokenizers. The caller
    takes the measured RSS where it is the larger (the budget holds first)."""
    arrays = chunks.data.nbytes + chunks.offsets.nbytes + chunks.counts.nbytes
    return CALLER_FLOOR + arrays + (jit.NUMBA_RSS if numba else 0) + MERGE_START_RESIDUE


def _room(fit: MergeFit, budget: int) -> str:
    """What the budget holds beside the fit's estimate (which counts no merge kernels): "speed", their
    load (jit.merge_load_rss: numba with them, or them alone where the count loaded numba) and the
    engine's second thread (second_thread), so they load while the table is
    built and large rounds take two threads; "numba", their load only: it comes when the engine
    starts, one thread; "numpy", not even that: under --jit auto the stage merges with numpy (with
    the kernels, a tight budget whose table passed jit.MERGE_MIN_TOKENS was overrun). A fit whose estimate holds numba already (numba_counted: a pair's wide round, which the
    kernels merge in less) never merges with numpy."""
    encoded = fit.tokens_per_byte is not None
    if fit.numba_counted:
        return "speed" if fit.estimate + second_thread(fit.tokens, fit.chunks, encoded) <= budget else "numba"
    return _room_for(fit.estimate, fit.tokens, fit.chunks, budget, encoded)


def _room_for(estimate: int, tokens: int, chunks: int, budget: int, encoded: bool = False) -> str:
    """_room of a merge stage whose process tree holds `estimate` bytes at its peak, on a table of
    tokens and chunks (encoded: encoded with earlier merges first)."""
    if fast_peak(estimate, tokens, chunks, encoded) <= budget:
        return "speed"
    return "numba" if estimate + jit.merge_load_rss() <= budget else "numpy"


def fast_peak(estimate: int, tokens: int, chunks: int, encoded: bool = False) -> int:
    """The process tree's peak in a merge stage of "speed" room (_room): the fit's estimate, the merge
    kernels' load, and the engine's second thread."""
    return estimate + jit.merge_load_rss() + second_thread(tokens, chunks, encoded)


# The linked engine's second thread where its kernels merge a table as it is: at most 20 MB over one
# thread's peak, measured in one process (the 1 GB corpus's 12.69M table tokens: 490-519 MB above
# the process with one thread, 493 with two; realmix's 11.05M: 388 and 408), reckoned as a 16th of
# the merge's own need. Elsewhere a quarter: an encoding in two threads first (SuperBPE's stage 2,
# --init), or numpy's index sorted by radix passes (two arrays of the index beside it).
SECOND_THREAD_SHARE = 16


def second_thread(tokens: int, chunks: int, encoded: bool = False) -> int:
    """What the merge stage's second thread adds to its peak (fast_peak)."""
    share = SECOND_THREAD_SHARE if jit.merge_kernels(tokens) and not encoded else 4
    return merge_estimate(tokens, chunks) // share


def vocab_of(merges: Pairs) -> list[bytes]:
    """The bytes of every token: the 256 bytes, then one per merge."""
    vocab = [bytes([b]) for b in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    return vocab

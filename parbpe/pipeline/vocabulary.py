"""Vocabulary construction, one class per algorithm: what it counts (count) and how it makes the
vocabulary from the counts (build). train() calls `algorithm_for(config)` and knows no algorithm.

- Bpe: merges bottom-up from the 256 bytes (and the stop list), or from an inherited tokenizer's
  merges (--init, the chunks encoded with them first);
- SuperBpe: Bpe up to the transition, then the text re-counted with the superword split, its chunks
  encoded with stage 1's merges and merged on under SuperBPE's rule (merge/superword.py).

A new algorithm (a top-down one over the same chunk table) is a class with the same two methods,
registered in algorithm_for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import TrainConfig
from ..count.reduce import TrainingChunks
from ..io.plan import text_size, unit_text_bytes
from ..merge.coordinator import MergeResult
from ..merge.encode import rank_order_batches
from ..merge.fit import MergeFit
from ..merge.superword import superword_allowed
from ..patterns import SUPERWORD_PATTERN
from ..run.memory import format_size
from ..run.pages import small_pages
from ..run.run_dir import RunDirectory
from ..tokenizer.inherit import Inherited, continued
from ..tokenizer.model import Tokenizer
from ..warnings import EarlyStopWarning
from .context import RunContext
from .count import Counted, count_stage, superword_config, superword_count_stage
from .corpus_eval import count_text_in
from .count_beside import CountBeside, room_beside
from . import kernels_ahead
from .inputs import Inputs
from .merge import Merged, MergeJob, fast_peak, merge_stage, preload_before_counting, vocab_of
from .prune import prune_stage, scoring_workers


@dataclass
class Built:
    """A vocabulary: the run's new merges (result.merges, in rank order) and how to make the
    tokenizer of any prefix of them; merged is the (first) merge stage's report for stats.json."""

    result: MergeResult
    merged: Merged | None  # None: PathPiece resumed after its BPE start
    pattern: str
    stop_words: list[bytes]
    inherited: Inherited | None = None
    stats: dict[str, Any] = field(default_factory=dict)  # the algorithm's own entries of stats.json

    @property
    def first_new(self) -> int:
        """Merges that came before the run's (the inherited tokenizer's)."""
        return len(self.inherited.merges) if self.inherited is not None else 0

    def tokenizer(self, config: TrainConfig, n_merges: int | None = None) -> Tokenizer:
        """The tokenizer of the run's first n_merges new merges (default: all)."""
        merges = self.result.merges if n_merges is None else self.result.merges[:n_merges]
        if self.inherited is not None:
            return continued(self.inherited, merges, config.special_tokens, self.pattern)
        first_merge_id = 256 + len(self.stop_words)
        return Tokenizer(
            pattern=self.pattern,
            merges=[(a, b, first_merge_id + r) for r, (a, b) in enumerate(merges)],
            stop_words={w: 256 + k for k, w in enumerate(self.stop_words)},
            special_tokens={s: first_merge_id + len(merges) + k for k, s in enumerate(config.special_tokens)},
            normalize=config.normalize,
        )


def _text_bytes(units: Any) -> int | None:
    """The bytes of text a plan's units hold (None: texts from an iterable, or counts files)."""
    if not isinstance(units, list) or any(unit.kind.startswith("counts") for unit in units):
        return None
    return text_size(units)


class Bpe:
    """Byte-level BPE: count the chunks once, merge them (after the inherited merges, with --init)."""

    def count(self, ctx: RunContext, job: Inputs) -> Counted:
        """Stages 2-3: the chunk counts (resumed from the run directory when it has them)."""
        ctx.merges_follow = True  # (the count's choice of numba reckons the merge stage's room: count_units)
        if job.inherited is None:  # (with --init the table is encoded first: its size is another)
            preload_before_counting(ctx, job.units)
        if ctx.run is None or not ctx.run.has_reduced():  # a first run after an install: the later stages'
            ctx.kernels_ahead = kernels_ahead.start(ctx, _text_bytes(job.units))  # kernels compiled beside
        return count_stage(ctx, job.units, run=ctx.run)

    def build(self, ctx: RunContext, job: Inputs, counted: Counted, n_merges: int | None = None,
              beside: Callable[[MergeFit], None] | None = None) -> Built:
        """Stages 4-5: the merges, n_merges of them (default: the vocabulary's; with --init, the
        vocabulary's less the inherited ones); beside(fit) once the table is built (MergeJob.beside)."""
        config, inherited = ctx.config, job.inherited
        chunks = counted.chunks
        if inherited is None:
            merge_job = MergeJob(vocab=[bytes([b]) for b in range(256)] + list(chunks.stop_words),
                                 n_merges=(config.merges_for(config.vocab_size, stop_words=len(chunks.stop_words))
                                           if n_merges is None else n_merges))
        else:
            merge_job = MergeJob(vocab=inherited.vocab(),
                                 n_merges=config.merges_for(config.vocab_size, len(inherited.merges)),
                                 encode=(inherited.merges, rank_order_batches(inherited.merges)),
                                 allow=superword_allowed if config.pattern == SUPERWORD_PATTERN else None)
        merge_job.beside = beside
        merged = merge_stage(ctx, chunks, merge_job)
        built = Built(result=merged.result, merged=merged, pattern=config.pattern, stop_words=chunks.stop_words,
                      inherited=inherited)
        if inherited is not None:
            built.stats["init"] = {"source": config.init, "inherited_merges": built.first_new,
                                   "inherited_tokens": len(inherited.tokenizer.vocab),
                                   "encode_workers": merged.encode_workers, "cold_cut": merged.cold_cut}
            reserved = inherited.tokenizer.reserved_ids
            if reserved:
                built.stats["init"]["reserved_ids"] = list(reserved)
                first = max([*inherited.tokenizer.vocab, *reserved]) + 1
                ctx.warn(f"--init {config.init}: id(s) {', '.join(map(str, reserved))} hold no token there (an empty "
                         f"token, tiktoken's '= N' line): kept reserved, never another token's; the new tokens "
                         f"take ids from {first}")
        return built


class SuperBpe(Bpe):
    """SuperBPE: ordinary BPE for the transition's merges, then superword tokens (stage 2). With a run
    directory, stage 2 keeps its counts and merge checkpoints in one of its own inside it (stage2_run)."""

    stage2_run: RunDirectory | None = None

    def count(self, ctx: RunContext, job: Inputs) -> Counted:
        """The chunks of the run's split, then those of the superword split (counted.superword), unless
        that count can run beside stage 1's merge (build): local processes, work units (not a stream
        consumed once), stage 2 not counted by an earlier attempt."""
        counted = super().count(ctx, job)
        self.stage2_run = ctx.run.stage2() if ctx.run is not None else None
        saved = self.stage2_run is not None and self.stage2_run.has_reduced()
        if ctx.cluster is not None or not isinstance(job.units, list) or saved:
            counted.superword = superword_count_stage(ctx, job.units, self.stage2_run)
        return counted

    def build(self, ctx: RunContext, job: Inputs, counted: Counted, n_merges: int | None = None,
              beside: Callable[[MergeFit], None] | None = None) -> Built:
        """Stage 1 to the transition and the superword count (_stage1), then stage 2: the superword table
        encoded with stage 1's merges (in its rounds' batches) and merged on to the full vocabulary
        under SuperBPE's rule."""
        stage1 = self._stage1(ctx, job, counted)
        with small_pages():  # stage 2's arrays come after a wait (run/pages.py)
            return self._stage2(ctx, stage1, counted)

    def _stage2(self, ctx: RunContext, stage1: Built, counted: Counted) -> Built:
        """The superword table encoded with stage 1's merges and merged on (build)."""
        chunks: TrainingChunks = counted.superword.chunks
        stats = {"transition_merges": ctx.config.transition_merges, "chunks": chunks.total_chunks,
                 "unique_chunks": chunks.unique_chunks, "training_chunks": len(chunks),
                 "dropped_by_freq_cutoff": chunks.dropped_by_cutoff,
                 "count_beside": counted.superword.stats.get("beside")}  # its process's seconds, peak RSS
        first = stage1.result
        done = len(first.merges)
        names = ("superbpe_table", "superbpe_encode", "superbpe_merge")
        merged = merge_stage(ctx, chunks, MergeJob(
            vocab=vocab_of(first.merges),
            n_merges=ctx.config.merges_for(ctx.config.vocab_size, done, len(stage1.stop_words)),
            encode=(first.merges, first.batch_sizes),
            sampled=True, allow=superword_allowed, names=names, offset=done, label="SuperBPE stage 2",
            run=self.stage2_run))
        second = merged.result
        stages = ("superbpe_count", *names)
        stats.update(table_tokens=merged.table_tokens, merge_fit=merged.fit.to_dict(),
                     encoded_table_tokens=merged.encoded_table_tokens, encode_workers=merged.encode_workers,
                     cold_cut=merged.cold_cut,
                     stage1_merges=done, stage2_merges=len(second.merges), skipped_tokens=second.skipped,
                     merge_workers=second.workers, merge_seconds=second.seconds,
                     seconds={k: round(ctx.times[k], 3) for k in stages},
                     peak_rss_bytes=max(ctx.sampler.by_stage.get(k, 0) for k in stages))
        second.merges = first.merges + second.merges
        second.batch_sizes = first.batch_sizes + second.batch_sizes
        return Built(result=second, merged=stage1.merged, pattern=SUPERWORD_PATTERN, stop_words=stage1.stop_words,
                     stats={"superbpe": stats})

    def _stage1(self, ctx: RunContext, job: Inputs, counted: Counted) -> Built:
        """Stage 1's merges to the transition; the superword counts (counted.superword) counted beside
        its merge where count left them and the budget holds both (pipeline/count_beside.py), else
        after it. A count beside that is still running when stage 1 fails is stopped."""
        started: list[CountBeside] = []

        def start_count(fit: MergeFit) -> None:
            config = ctx.config
            room = room_beside(ctx.budget, fast_peak(fit.estimate, fit.tokens, fit.chunks, fit.tokens_per_byte is not None), config.workers,
                               max(unit_text_bytes(u) for u in job.units))
            if room is not None:
                stage2 = dataclasses.replace(superword_config(config), memory_budget=room)
                started.append(CountBeside(ctx, job.units, stage2, self.stage2_run))
                ctx.note(f"SuperBPE stage 2: counting the superword chunks beside stage 1's merge (process "
                         f"{started[0].pid}, at low priority, in {format_size(room)})")

        try:
            stage1 = super().build(ctx, job, counted, ctx.config.transition_merges,
                                   beside=start_count if counted.superword is None else None)
            with small_pages():  # the counts' arrays come after a wait (run/pages.py)
                if started:
                    with ctx.stage("superbpe_count"):
                        counted.superword = started[0].wait(ctx)
                elif counted.superword is None:
                    counted.superword = superword_count_stage(ctx, job.units, self.stage2_run)
        finally:
            for count in started:
                count.close()
        return stage1


@dataclass
class PathPieceBuilt(Built):
    """PathPiece's vocabulary: its tokens (single bytes first), segmented into the fewest tokens."""

    tokens: list[bytes] = field(default_factory=list)

    def tokenizer(self, config: TrainConfig, n_merges: int | None = None) -> Tokenizer:
        return Tokenizer.from_vocabulary(self.tokens, pattern=self.pattern, special_tokens=config.special_tokens,
                                         segmentation="shortest", normalize=config.normalize)


class PathPiece(Bpe):
    """PathPieceL (Schmidt et al. 2024): a BPE vocabulary of --initial-vocab-size tokens of at most
    max_token_bytes (or --init's tokens), pruned top-down to vocab_size: each iteration segments the
    chunk table into the fewest tokens, scores every token by the least increase in the corpus token
    count if an occurrence could not use it, and drops the lowest (pipeline/prune.py)."""

    def build(self, ctx: RunContext, job: Inputs, counted: Counted, n_merges: int | None = None) -> Built:
        config, chunks = ctx.config, counted.chunks
        data, offsets, counts = chunks.data, chunks.offsets, chunks.counts  # the merge stage lets go of them
        saved = ctx.run.load_pruned() if ctx.run is not None else None
        if saved is not None:
            iteration, vocab, facts = saved
            ctx.note(f"resuming PathPiece after iteration {iteration}: {len(vocab):,} tokens")
            merged = None
        else:
            scoring_workers(ctx, data, offsets, config.pathpiece_initial)  # fails now, not after the BPE start
            iteration, (vocab, facts, merged) = 0, self._initial(ctx, job, counted)
        target = config.vocab_size - len(config.special_tokens)
        if len(vocab) <= target:
            ctx.result_changed(EarlyStopWarning, f"PathPiece's initial vocabulary has {len(vocab):,} tokens, not more "
                               f"than the {target:,} asked for: nothing is pruned", vocab_size=len(vocab))
        with ctx.stage("prune"):
            heldout = count_text_in(ctx, job.heldout, config.pattern, config.normalize) if job.heldout else None
            vocab, iteration = prune_stage(ctx, data, offsets, counts, vocab, target, iteration, facts, heldout)
        facts["iterations"] = iteration
        result = MergeResult(merges=[], batch_sizes=[], stopped_early=False, engine=None)
        return PathPieceBuilt(result=result, merged=merged, pattern=config.pattern, stop_words=[],
                              stats={"pathpiece": facts}, tokens=vocab)

    def _initial(self, ctx: RunContext, job: Inputs, counted: Counted) -> tuple[list[bytes], dict[str, Any], Any]:
        """The vocabulary to prune (bytes first) and its facts: --init's tokens of at most max_token_bytes,
        or a BPE run of this corpus to initial_vocab_size under the same cap."""
        config = ctx.config
        cap = config.max_token_bytes
        if job.inherited is not None:
            old = job.inherited.tokenizer
            specials = set(old.special_tokens.values())
            tokens = [old.vocab[i] for i in sorted(old.vocab) if i not in specials]
            kept = [bytes([b]) for b in range(256)] + [t for t in tokens if 1 < len(t) <= cap]
            facts = {"initial": "init", "source": config.init, "initial_tokens": len(kept),
                     "dropped_over_cap": sum(len(t) > cap for t in tokens)}
            return list(dict.fromkeys(kept)), facts, None
        initial = config.pathpiece_initial
        given = ctx.config
        ctx.config = dataclasses.replace(given, algorithm="bpe", initial_vocab_size=None, vocab_size=initial,
                                         special_tokens=(), eos_token=None, bos_token=None, pad_token=None)
        try:
            built = super().build(ctx, job, counted, n_merges=initial - 256)
        finally:
            ctx.config = given
        vocab = list(dict.fromkeys(vocab_of(built.result.merges)))  # two merges can make the same bytes
        facts = {"initial": "bpe", "initial_tokens": len(vocab), "initial_merges": len(built.result.merges),
                 "initial_rounds": len(built.result.batch_sizes), "initial_stopped_early": built.result.stopped_early}
        return vocab, facts, built.merged


def algorithm_for(config: TrainConfig) -> Bpe:
    """The vocabulary algorithm the settings ask for."""
    if config.algorithm == "pathpiece":
        return PathPiece()
    return SuperBpe() if config.superbpe_transition is not None else Bpe()

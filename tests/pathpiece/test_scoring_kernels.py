"""PathPiece's scoring kernels (kernels/pathpiece.py, through score.KernelScorer) against numpy's
score.token_scores: the same int64 sums and the same pruned vocabulary for 1, 2 and 3 workers; the
choice made once, in the parent (jit.score_kernels), and carried to spawned workers as their mode."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parbpe import jit
from parbpe.pathpiece.prune import prune
from parbpe.pathpiece.score import IRREPLACEABLE, token_scores
from parbpe.pathpiece.workers import ScoringPool, chunk_arrays
from parbpe.tokenizer.segment import VocabIndex

pytestmark = pytest.mark.skipif(not jit.installed(), reason="numba is not installed: no kernel to compare")
BYTES = [bytes([b]) for b in range(256)]


def _corpus(seed: int, n: int = 200) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """(vocabulary in shuffled id order, chunks, counts): chunks of a small alphabet with bytes 0 and 255,
    empty and long ones among them; tokens of 2 to 16 bytes cut from them; counts up to a million."""
    rng = random.Random(seed)
    chunks = [bytes(rng.choice(b"abcd\x00\xff") for _ in range(rng.randint(0, 24))) for _ in range(n)]
    chunks += [b"ab" * 30, b"", bytes(range(200, 216)), b"\xff" * 17]
    pieces = {c[i:i + rng.randint(2, 16)] for c in chunks for i in range(0, len(c) - 1, 2)}
    vocab = BYTES + sorted(p for p in pieces if len(p) > 1)
    rng.shuffle(vocab)
    counts = np.array([rng.randint(1, 1_000_000) for _ in chunks], dtype=np.int64)
    return vocab, chunks, counts


def _scores(chunks, counts, vocabs, workers, mode, start_method="fork"):
    with jit.using(mode), ScoringPool(*chunk_arrays(chunks), counts, workers, start_method) as pool:
        assert pool.scoring == ("kernel" if mode == "on" else "numpy")
        return [pool.scores(v) for v in vocabs]


@pytest.mark.parametrize("seed", range(3))
def test_kernel_sums_equal_numpy_for_one_two_three_workers(seed) -> None:
    vocab, chunks, counts = _corpus(seed)
    smaller = vocab[::2] + [t for t in vocab[1::2] if len(t) == 1]  # a second iteration: fewer tokens, new ids
    expected = [token_scores(VocabIndex(v), chunks, counts, len(v)) for v in (vocab, smaller)]
    assert (expected[0][0] == IRREPLACEABLE).sum() > 1
    for workers in (1, 2, 3):
        for mode in ("on", "off"):
            for (scores, usage), (want_scores, want_usage) in zip(
                    _scores(chunks, counts, (vocab, smaller), workers, mode), expected):
                assert scores.dtype == np.int64 and np.array_equal(scores, want_scores), (workers, mode)
                assert np.array_equal(usage, want_usage), (workers, mode)


def test_pruned_vocabularies_equal_with_kernels_and_numpy_for_one_two_three_workers() -> None:
    vocab, chunks, counts = _corpus(7, n=120)
    target = 256 + 30
    with jit.using("off"):
        expected = prune(vocab, chunks, counts, target, share=0.3)
    assert len(expected) == target
    for workers in (1, 2, 3):
        for mode in ("on", "off"):
            with jit.using(mode):
                assert prune(vocab, chunks, counts, target, share=0.3, workers=workers,
                             start_method="spawn" if workers == 2 else "fork") == expected, (workers, mode)


@pytest.mark.parametrize(("parent", "environment"), [("on", "off"), ("off", "on")])
def test_spawned_workers_take_the_parents_choice_not_their_environment(parent, environment, monkeypatch) -> None:
    """A spawned worker inherits the environment (PARBPE_JIT) but none of the parent's mode: it scores
    as the parent chose, which it receives as a value."""
    vocab, chunks, counts = _corpus(3)
    monkeypatch.setenv(jit.ENV, environment)
    with jit.using(parent), ScoringPool(*chunk_arrays(chunks), counts, 2, start_method="spawn") as pool:
        assert pool.workers == 2
        assert pool.scoring == ("kernel" if parent == "on" else "numpy")
        scores, usage = pool.scores(vocab)
    want_scores, want_usage = token_scores(VocabIndex(vocab), chunks, counts, len(vocab))
    assert np.array_equal(scores, want_scores) and np.array_equal(usage, want_usage)


def test_under_auto_the_threshold_in_jit_decides(monkeypatch) -> None:
    vocab, chunks, counts = _corpus(4)
    table = chunk_arrays(chunks)
    with jit.using("auto"):
        monkeypatch.setattr(jit, "SCORE_MIN_BYTES", len(table[0]) + 1)
        with ScoringPool(*table, counts, 1) as pool:
            assert pool.scoring == "numpy"
        monkeypatch.setattr(jit, "SCORE_MIN_BYTES", len(table[0]))
        with ScoringPool(*table, counts, 2, start_method="fork") as pool:
            assert pool.scoring == "kernel"
            scores, _ = pool.scores(vocab)
    assert np.array_equal(scores, token_scores(VocabIndex(vocab), chunks, counts, len(vocab))[0])


def test_the_kernel_refuses_what_numpy_refuses() -> None:
    vocab, chunks, counts = _corpus(5)
    with jit.using("on"), ScoringPool(*chunk_arrays(chunks), counts, 1) as pool:
        with pytest.raises(ValueError, match=r"lacks single bytes \[0\]"):
            pool.scores([t for t in vocab if t != b"\x00"])
        with pytest.raises(ValueError, match="longer than 16 bytes"):
            pool.scores(vocab + [b"a" * 17])
        with pytest.raises(ValueError, match="repeated tokens"):
            pool.scores(vocab + [vocab[-1]])


def test_the_budget_counts_numba_and_the_windows_of_kernel_workers() -> None:
    """Two scoring workers that fit the budget with numpy are one with the kernel (numba's memory and
    the windows kept), and the budget's error names the need with the kernel."""
    from types import SimpleNamespace

    from parbpe.pipeline import prune as stage

    data, offsets = chunk_arrays([b"abc" * 100] * 1000)
    tokens = 1000
    budget = 2 * stage.WORKER_FIXED + jit.NUMBA_RSS  # two numpy workers fit, one kernel worker fits, not two
    ctx = SimpleNamespace(config=SimpleNamespace(workers=2), in_use=lambda: 0, budget=budget)
    with jit.using("off"):
        assert stage.scoring_workers(ctx, data, offsets, tokens) == 2
    with jit.using("on"):
        assert stage.scoring_workers(ctx, data, offsets, tokens) == 1
        ctx.budget = stage.WORKER_FIXED
        with pytest.raises(ValueError, match="needs about"):
            stage.scoring_workers(ctx, data, offsets, tokens)


def test_the_windows_arrays_grow_when_a_table_has_more_windows_than_room(monkeypatch) -> None:
    """With no room a byte up front (only one chunk's worth), the window kernel stops and resumes as its
    arrays grow: the same sums as numpy's, for the first vocabulary and one scored from the windows kept."""
    from parbpe.pathpiece import score

    monkeypatch.setattr(score, "ROOM", 0)
    vocab, chunks, counts = _corpus(8)
    smaller = [t for k, t in enumerate(vocab) if len(t) == 1 or k % 2]
    scorer = score.KernelScorer(*chunk_arrays(chunks), counts)
    for tokens in (vocab, smaller):
        with jit.using("on"):
            scores, usage = scorer.scores(tokens)
        want_scores, want_usage = token_scores(VocabIndex(tokens), chunks, counts, len(tokens))
        assert np.array_equal(scores, want_scores) and np.array_equal(usage, want_usage)
    assert len(scorer._windows[1]) > 16 * scorer.longest  # more than the first arrays held

"""The budget bounds the merge stage on hostile text: one chunk of one two-byte character makes one pair
at every other position, whose round the fit reckons; a budget too small for it is one line naming
the budget that fits, and that budget holds (the run's own sampler of its process tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from parbpe.run.memory import parse_size

ROOT = Path(__file__).resolve().parents[2]


def _train(text: Path, out: Path, budget: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "parbpe", "train", str(text), "--vocab-size", "300", "--workers", "2",
                           "--memory-budget", budget, "--progress", "none", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)


def test_a_wide_pair_names_the_budget_that_fits_and_it_holds(tmp_path):
    text = tmp_path / "e.txt"
    text.write_text("é" * 1_200_000, encoding="utf-8")  # one chunk of 2.4 MB: (C3, A9) at 1.2M positions
    refused = _train(text, tmp_path / "small", "400MB")
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "too small for the merge stage" in lines[0], refused.stderr[-2000:]
    named = lines[0].split("use at least ")[1].split(" (--memory-budget)")[0]
    assert parse_size(named) > parse_size("400MB")
    done = _train(text, tmp_path / "named", named.replace(" ", ""))
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads((tmp_path / "named" / "stats.json").read_text())
    assert stats["peak_rss_bytes"] <= parse_size(named) and not stats["merge_fit"]["auto_cutoff"]
    vocab = json.loads((tmp_path / "named" / "vocab.json").read_text(encoding="utf-8"))
    merges = (tmp_path / "named" / "merges.txt").read_text(encoding="utf-8").splitlines()[1:]
    for line in merges:  # every token past the bytes is the join of two earlier ones
        left, right = line.split(" ")
        assert max(vocab[left], vocab[right]) < vocab[left + right]
    assert len(vocab) == 256 + len(merges)


def test_each_budget_named_is_followed_until_one_holds(tmp_path):
    """8 MB of one two-byte character at 400 MB: the count refuses its piece (one line naming a budget),
    then, counted, the merge may refuse its table (one line naming a larger one); the budget named last
    holds the whole run."""
    text = tmp_path / "e.txt"
    text.write_text("é" * 4_000_000, encoding="utf-8")
    budget, refusals = "400MB", []
    for attempt in range(3):
        done = _train(text, tmp_path / f"out{attempt}", budget)
        if done.returncode == 0:
            break
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
        refusals.append(lines[0])
        budget = lines[0].split("use at least ")[1].split(" (--memory-budget)")[0].replace(" ", "")
    assert done.returncode == 0 and "too small for a piece of 8.0 MB" in refusals[0]
    stats = json.loads((tmp_path / f"out{attempt}" / "stats.json").read_text())
    assert stats["peak_rss_bytes"] <= parse_size(budget)


def test_the_budget_a_long_piece_asks_for_is_the_smallest_that_counts_it():
    """piece_budget walks the layout count_units takes, 100 MB at a time: at the budget it names a counting
    process has room for the piece (with numba's lexer where that budget loads it), 100 MB less has not."""
    from parbpe.pipeline.count import _layout_or_none, jit_fits, piece_budget
    from parbpe.patterns import PATTERNS
    from parbpe.jit import NUMBA_COUNT_RSS
    from parbpe.run.memory import WORKER_OVERHEAD, LongPiece, format_size

    pattern, unit, in_use = PATTERNS["gpt2"], 60 * 10**6, 150 * 10**6
    for piece_mb, ascii_only, text in ((8, False, unit), (30, False, unit), (30, True, unit), (120, False, 10**9)):
        piece = LongPiece("too small; use at least 9.9 GB (--memory-budget)", piece_mb * 10**6, 0, ascii_only,
                          4 * unit + WORKER_OVERHEAD)
        least, kernels = piece_budget(piece, 400 * 10**6, 2, unit, pattern, text, in_use)

        def room(budget):
            lexes = jit_fits(budget, 2, unit, pattern, text)
            layout = _layout_or_none(budget, 2, in_use + (NUMBA_COUNT_RSS if lexes else 0), unit)
            return layout is not None and piece.fits(layout.data_limit, lexes)

        assert least is not None and least % 10**8 == 0 and room(least) and not room(least - 10**8), piece_mb
        message = str(piece.with_budget(least, kernels))
        assert len(message.splitlines()) == 1 and message.count("use at least") == 1
        assert f"use at least {format_size(least)}" in message
    huge = LongPiece("too small; use at least 9.9 GB", 10**9, 0, False, 4 * unit + WORKER_OVERHEAD)
    assert piece_budget(huge, 400 * 10**6, 2, unit, pattern, 10**10, in_use)[0] is None  # counts are capped
    assert "no memory budget" in str(huge.with_budget(None))


def test_the_count_takes_numpy_where_numba_would_move_the_merge_off_its_engine(monkeypatch):
    """numba loaded by the count stays for the merge: where its weight would move a realmix-sized table
    (152.8 MB of text) from the chunk engine to a cutoff (500 MB), or from the linked engine to the chunk
    engine (700 MB), the count takes numpy; not where either way the same engine merges, nor once numba
    is loaded, nor with --jit on."""
    from parbpe import jit
    from parbpe.pipeline.count import numba_moves_the_merge

    monkeypatch.setattr(jit, "loaded", lambda: False)
    monkeypatch.setattr(jit, "_mode", "auto")
    text = 152_800_000
    assert numba_moves_the_merge(500 * 10**6, text) and numba_moves_the_merge(700 * 10**6, text)
    assert not numba_moves_the_merge(12 * 10**9, text)  # the linked engine either way
    assert not numba_moves_the_merge(300 * 10**6, text)  # a cutoff either way
    monkeypatch.setattr(jit, "loaded", lambda: True)
    assert not numba_moves_the_merge(500 * 10**6, text)
    monkeypatch.setattr(jit, "loaded", lambda: False)
    monkeypatch.setattr(jit, "_mode", "on")
    assert not numba_moves_the_merge(500 * 10**6, text)

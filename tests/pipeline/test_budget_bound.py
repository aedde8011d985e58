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

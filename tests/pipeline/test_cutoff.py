"""The automatic cutoff is the same for every run of one command: it reckons what the process holds as
the merge stage starts (pipeline/merge.py reckoned_in_use), not the RSS measured then, which differs
between runs by tens of MB; a resumed run keeps the cutoff its checkpoint's merges were made with."""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest

from parbpe import jit
from parbpe.cli import main
from parbpe.merge import fit as fit_module
from parbpe.merge.fit import fit_merge_stage
from parbpe.pipeline import context
from parbpe.run.run_dir import RunDirectory

MB = 10**6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Common words, 8,000 rare words seen once and 12,000 seen twice (8 letters each): their table
    tokens are what a cutoff of 2 or 3 leaves out (64,000 and 96,000 more)."""
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    rare = ["".join(rng.choice(letters) for _ in range(8)) for _ in range(20_000)]
    words = [rng.choice(["the", "cat", "sat", "on", "a", "mat"]) for _ in range(800_000)]
    words += rare[:8_000] + rare[8_000:] * 2
    rng.shuffle(words)
    path = tmp_path_factory.mktemp("cutoff") / "c.txt"
    path.write_text(" ".join(words))
    return path


def _train(corpus, out, monkeypatch, held: int, *options: str) -> int:
    """A run whose merge fit measures `held` bytes in use (what a run's heap leaves varies), at 2 KB a
    table token (a small table then needs a cutoff under 400 MB): the min_count it chose."""
    real = context.RunContext.in_use

    def in_use(self):  # only the merge fit's measure; counting's layout measures as it does
        return held if sys._getframe(1).f_code.co_name == "_base" else real(self)

    monkeypatch.setattr(context.RunContext, "in_use", in_use)
    monkeypatch.setattr(fit_module, "MERGE_BYTES_PER_TOKEN", 2000)
    monkeypatch.setattr(fit_module, "CHUNK_BYTES_PER_TOKEN", 2000)  # (nor does the chunk engine keep them all)
    assert main(["train", str(corpus), "--out", str(out), "--vocab-size", "300", "--workers", "1",
                 "--memory-budget", "400MB", "--jit", "off", "--progress", "jsonl", *options]) == 0
    return json.loads((out / "stats.json").read_text())["merge_fit"]["min_count"]


def test_the_cutoff_does_not_follow_the_rss_measured(corpus, tmp_path, monkeypatch, capsys):
    # Fitted to what it measured, 20 MB would keep every chunk (160,000 rare tokens fit 380 MB at 2 KB)
    # and 140 MB would not: the same command made two tokenizers.
    low = _train(corpus, tmp_path / "low", monkeypatch, 20 * MB)
    high = _train(corpus, tmp_path / "high", monkeypatch, 140 * MB)
    capsys.readouterr()
    assert low == high == 2
    assert (tmp_path / "low" / "merges.txt").read_bytes() == (tmp_path / "high" / "merges.txt").read_bytes()
    # numba loaded by the caller before the run (a notebook's earlier run) is the caller's: not reckoned.
    monkeypatch.setattr(jit, "loaded", lambda: True)
    assert _train(corpus, tmp_path / "numba", monkeypatch, 20 * MB) == 2
    monkeypatch.undo()
    # Holding more than reckoned, the measure decides (the budget holds first), and the run says so.
    more = _train(corpus, tmp_path / "more", monkeypatch, 260 * MB)
    notes = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines() if '"note"' in line]
    assert more == 3
    assert any("the automatic cutoff was fitted to the 260.0 MB this process holds, more than the" in n
               and "(a --freq-cutoff fixes the table)" in n for n in notes), notes


def test_a_kept_cutoff_holds_where_it_fits():
    offsets = np.arange(0, 8 * 9, 8, dtype=np.int64)  # eight chunks of 8 bytes
    counts = np.array([1, 1, 1, 2, 2, 500, 900, 900], dtype=np.int64)
    found = fit_merge_stage(offsets, counts, budget=10**9, base_rss=MB)
    assert found.min_count == 1 and not found.auto_cutoff
    kept = fit_merge_stage(offsets, counts, budget=10**9, base_rss=MB, keep=3)
    assert (kept.min_count, kept.auto_cutoff, kept.chunks, kept.dropped_chunks) == (3, True, 3, 5)
    # Room for the three frequent chunks only: min_count 3; a kept one below it is not kept, one above is.
    tight = MB + fit_module.MERGE_BYTES_PER_TOKEN * 24 + fit_module.MERGE_BYTES_PER_CHUNK * 3
    assert fit_merge_stage(offsets, counts, budget=tight, base_rss=MB).min_count == 3
    assert fit_merge_stage(offsets, counts, budget=tight, base_rss=MB, keep=2).min_count == 3
    assert fit_merge_stage(offsets, counts, budget=tight, base_rss=MB, keep=7).min_count == 7


def test_the_run_directory_keeps_the_cutoff_and_drops_merges_made_on_another_table(tmp_path):
    run = RunDirectory(str(tmp_path / "run"))
    assert run.load_table_cutoff() is None
    run.save_table_cutoff(4)
    assert run.load_table_cutoff() == 4
    run.merge_checkpointer()([(97, 98)], [1], True)
    assert run.load_merges() == ([(97, 98)], [1])
    run.drop_merges()
    assert run.load_merges() is None
    run.drop_merges()  # nothing to drop: no error


def test_a_resumed_run_keeps_its_cutoff_and_replays_only_merges_of_its_table(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    # The first run holds more than reckoned: its measure decides, min_count 3.
    assert _train(corpus, out, monkeypatch, 260 * MB, "--keep-run-dir") == 3
    first = (out / "merges.txt").read_bytes()
    assert json.loads((out / ".parbpe-run" / "table.json").read_text()) == {"min_count": 3}
    capsys.readouterr()
    # Resumed holding less (2 would fit): the recorded 3 is kept and the checkpoint's merges replayed.
    assert _train(corpus, out, monkeypatch, 20 * MB, "--keep-run-dir", "--resume") == 3
    notes = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines() if '"note"' in line]
    assert any(n.startswith("replaying") for n in notes), notes
    assert (out / "merges.txt").read_bytes() == first
    # A record of a cutoff the budget no longer allows: the merges made on that table are not replayed.
    (out / ".parbpe-run" / "table.json").write_text(json.dumps({"min_count": 1}))
    assert _train(corpus, out, monkeypatch, 20 * MB, "--keep-run-dir", "--resume") == 2
    notes = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines() if '"note"' in line]
    assert "the table's min_count is 2 now, 1 in the run resumed: its merge checkpoint is not replayed" in notes
    assert not any(n.startswith("replaying") for n in notes), notes
    assert json.loads((out / ".parbpe-run" / "table.json").read_text()) == {"min_count": 2}

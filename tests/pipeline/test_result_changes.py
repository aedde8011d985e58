"""What changes the result without failing the run (the automatic cutoff, an early stop, --also-save
sizes taken as BatchBPE prefixes) is said where the user looks: a Python warning of parbpe's own
category, the summary line, stats.json; --strict (strict=True) fails instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import parbpe
from parbpe.cli import main
from parbpe.pipeline import inputs as inputs_module
from parbpe.warnings import AutoCutoffWarning, EarlyStopWarning, PrefixSizesWarning, ResultChangedWarning


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("abab abab cdcd\n" * 20)  # a handful of pairs: no vocabulary of 400 can be filled
    return path


def test_an_early_stop_is_a_warning_a_summary_and_a_stats_entry(tiny, tmp_path, capsys):
    with pytest.warns(EarlyStopWarning, match="no pair left after"):
        result = parbpe.train(tiny, vocab_size=400, progress="none")
    assert result.stats["result_changes"][0]["kind"] == "EarlyStopWarning"
    assert result.stats["result_changes"][0]["vocab_size"] == result.tokenizer.n_vocab < 400
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the command says it in its summary, not as a Python warning
        assert main(["train", str(tiny), "--vocab-size", "400", "--out", str(tmp_path / "o"), "--progress",
                     "none"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("Trained") and "No pair left after" in first
    assert json.loads((tmp_path / "o" / "stats.json").read_text())["result_changes"][0]["kind"] == "EarlyStopWarning"


def test_strict_fails_instead_of_stopping_early_and_writes_nothing(tiny, tmp_path, capsys):
    with pytest.raises(ValueError, match="no pair left .* failing as --strict"):
        parbpe.train(tiny, vocab_size=400, strict=True)
    assert main(["train", str(tiny), "--vocab-size", "400", "--out", str(tmp_path / "o"), "--strict"]) == 2
    assert "failing as --strict" in capsys.readouterr().err
    assert not (tmp_path / "o" / "parbpe.json").exists()


def test_also_save_prefixes_are_said_and_strict_refuses_them_before_work(tiny, tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"line {i}: the cat sat on the mat, and the dog sat on the log.\n" for i in range(300)))
    with pytest.warns(PrefixSizesWarning, match="first merges, not a run of its own"):
        parbpe.train(corpus, vocab_size=320, out_dir=tmp_path / "o", also_save=[300])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultChangedWarning)  # serial merges: a prefix is the smaller run
        parbpe.train(corpus, vocab_size=320, out_dir=tmp_path / "s", also_save=[300], max_batch_size=1)
    monkeypatch.setattr(inputs_module, "plan", lambda *a, **k: pytest.fail("planning began"))
    with pytest.raises(ValueError, match="--also-save 300: .*--strict"):
        parbpe.train(corpus, vocab_size=320, out_dir=tmp_path / "t", also_save=[300], strict=True)


@pytest.mark.shared_data
def test_realmix_at_350MB_names_the_cutoff_and_strict_exits_2(shared_data, tmp_path, capsys):
    files = sorted(str(p) for p in (shared_data / "realmix").glob("train-*.parquet"))
    # The cutoff is decided before merging, from the table's size alone: a small vocabulary tests it as well.
    assert main(["train", *files, "--memory-budget", "350MB", "--vocab-size", "2048", "--out", str(tmp_path / "o"),
                 "--progress", "none"]) == 0
    summary = capsys.readouterr().out.splitlines()[0]
    # 703,051 chunks seen fewer than 3 times on this machine (2026-11-29); the cutoff follows the RSS measured
    assert re.search(r"Automatic cutoff: [\d,]+ chunks seen fewer than \d+ times left out", summary), summary
    assert main(["train", *files, "--memory-budget", "350MB", "--vocab-size", "2048", "--out", str(tmp_path / "s"),
                 "--progress", "none", "--strict"]) == 2
    assert "failing as --strict" in capsys.readouterr().err
    with pytest.warns(AutoCutoffWarning, match="only without the rarest chunks"):
        parbpe.train(files[:8], memory_budget="350MB", vocab_size=2048, workers=2)


def test_realmix_at_450MB_keeps_every_chunk_with_the_chunk_engine(shared_data, tmp_path):
    """Where the linked engine would leave out realmix's rarest chunks, the chunk engine merges them all
    within the budget: the merges of the run without one. (Runs of their own: a tree forked from this
    test process would count its pages in every worker.)"""
    files = sorted(str(p) for p in (shared_data / "realmix").glob("train-*.parquet"))
    root = Path(__file__).resolve().parents[2]

    def train(out: Path, *budget: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "parbpe", "train", *files, "--vocab-size", "2048", "--workers",
                               "2", "--progress", "none", "--out", str(out), *budget], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads((out / "stats.json").read_text())

    held = train(tmp_path / "held", "--memory-budget", "450MB")
    free = train(tmp_path / "free")
    fit = held["merge_fit"]
    assert fit["engine"] == "chunk" and not fit["auto_cutoff"]
    assert fit["table_chunks"] == free["merge_fit"]["table_chunks"]
    assert held["peak_rss_bytes"] <= 450 * 10**6, held["peak_rss_by_stage"]
    assert (tmp_path / "held" / "merges.txt").read_bytes() == (tmp_path / "free" / "merges.txt").read_bytes()


def test_a_run_reports_as_jsonl_with_times_numbers_and_the_real_merge_workers(tmp_path, capsys):
    corpus = tmp_path / "c"
    corpus.mkdir()
    for k in range(4):
        (corpus / f"{k}.txt").write_text("".join(f"line {i}: the cat sat on the mat {k}.\n" for i in range(300)))
    assert main(["train", str(corpus), "--vocab-size", "300", "--workers", "2", "--out", str(tmp_path / "o"),
                 "--progress", "jsonl"]) == 0
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.err.splitlines()]
    assert all(isinstance(e["time"], float) for e in events)
    config = next(e for e in events if e["event"] == "config")
    assert isinstance(config["memory_budget"], int) and config["memory_budget"] > 0  # the budget that applies
    finals = [e for e in events if e["event"] == "progress" and e["stage"] == "count" and e["done"] == e["total"]]
    assert len(finals) == 1
    merged = next(e for e in events if e["event"] == "merged")
    assert merged["merge_workers"] == 1  # a small table merges in this process, whatever --workers says
    done = events[-1]
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert done["event"] == "done" and isinstance(done["peak_rss_MB"], float)
    assert done["seconds"] == round(sum(stats["seconds"].values()), 2) and stats["merge_workers"] == 1
    assert f"in {sum(stats['seconds'].values()):.1f} s" in captured.out  # one source: the stats' stage times

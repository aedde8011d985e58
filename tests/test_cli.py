"""The command line, end to end on small files."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parbpe.cli import main


def _text(seed: int) -> str:
    import random

    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(300)]
    return " ".join(rng.choice(words) for _ in range(3000)) + "."


TEXT = _text(0)


@pytest.fixture
def corpus(tmp_path):
    pq.write_table(pa.table({"text": [TEXT, TEXT[::-1], "<|endoftext|>" + TEXT]}), tmp_path / "c.parquet")
    return tmp_path / "c.parquet"


def test_train_writes_all_files_and_reports(corpus, tmp_path, capsys):
    out = tmp_path / "tok"
    code = main(["train", str(corpus), "--vocab-size", "300", "--out", str(out), "--workers", "1",
                 "--special-tokens", "<|endoftext|>", "--progress", "jsonl"])
    assert code == 0
    captured = capsys.readouterr()
    assert "Trained 300 tokens" in captured.out
    events = [json.loads(line) for line in captured.err.splitlines()]
    assert events[0]["event"] == "config" and events[0]["vocab_size"] == 300
    assert any(e["event"] == "progress" and e["stage"] == "merge" for e in events)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["vocab_size"] == 300 and stats["peak_rss_bytes"] > 0
    assert set(stats["seconds"]) >= {"plan", "count", "reduce", "table", "merge", "write"}
    assert set(stats["merge_seconds"]) == {"counting", "selection", "applying", "updating", "replaying",
                                           "communication"}
    assert stats["files"]["tokenizer.json"] == "written"


def test_count_then_train_then_encode_and_eval(corpus, tmp_path, capsys):
    counts = tmp_path / "counts.parquet"
    spill_dir = tmp_path / "spills"
    spill_dir.mkdir()
    assert main(["count", str(corpus), "--out", str(counts), "--workers", "2", "--progress", "none",
                 "--stats", str(tmp_path / "count.json"), "--tmp-dir", str(spill_dir)]) == 0
    assert "chunk counts" in capsys.readouterr().out and list(spill_dir.iterdir()) == []
    count_stats = json.loads((tmp_path / "count.json").read_text())
    assert count_stats["bytes_read"] > 0 and count_stats["spills"] == 0 and count_stats["peak_rss_bytes"] > 0
    assert set(count_stats["seconds"]) == {"plan", "count", "reduce"}
    out = tmp_path / "tok"
    assert main(["train", str(counts), "--vocab-size", "290", "--out", str(out), "--progress", "none"]) == 0
    capsys.readouterr()
    assert main(["encode", "--tokenizer", str(out), "The cat sat"]) == 0
    ids = [int(x) for x in capsys.readouterr().out.split()]
    assert ids and all(0 <= i < 290 for i in ids)
    assert main(["eval", "--tokenizer", str(out), str(corpus), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)[0]  # one row: the tokenizer by its merges
    assert report["documents"] == 3 and report["bytes_per_token"] > 1.0
    assert 0.0 <= report["vocab_unused_share"] < 1.0


def test_bad_input_is_an_error_message_not_a_traceback(tmp_path, capsys):
    assert main(["train", str(tmp_path / "missing.parquet"), "--vocab-size", "300", "--out", str(tmp_path / "o")]) == 2
    assert "error: no such file" in capsys.readouterr().err
    assert main(["train", "--vocab-size", "100", "--out", str(tmp_path / "o")]) == 2
    assert "--vocab-size 100 is too small" in capsys.readouterr().err


def test_train_with_no_input_is_an_error_unless_the_sample_corpus_is_asked_for(tmp_path, monkeypatch, capsys):
    import sys

    from parbpe.io.plan import default_corpus_files

    assert main(["train", "--vocab-size", "300", "--out", str(tmp_path / "o"), "--progress", "none"]) == 2
    assert "error: no input given" in capsys.readouterr().err and not (tmp_path / "o").exists()
    few = default_corpus_files()[:20]  # a few standard-library files stand in for all, to keep it quick
    monkeypatch.setattr(sys.modules["parbpe.pipeline.inputs"], "default_corpus_files", lambda: few)
    assert main(["train", "--sample-corpus", "--vocab-size", "300", "--out", str(tmp_path / "o"), "--workers", "1",
                 "--progress", "none"]) == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["default_corpus"] is True and stats["work_units"] == 20 and stats["vocab_size"] == 300


def test_a_ctrl_c_after_the_command_ended_leaves_its_status():
    """Once main() has returned, cli.console ignores Ctrl-C: one that came as the interpreter exited
    ended a finished run by SIGINT (status -2) instead of its own. Here the Ctrl-C comes right after."""
    import signal
    import subprocess
    import sys

    code = ("import os, signal, sys; from parbpe import cli; cli.main = lambda: 7; status = cli.console(); "
            "os.kill(os.getpid(), signal.SIGINT); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, (done.returncode, done.stderr)
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # (this process's own handler untouched)

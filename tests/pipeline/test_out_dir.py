"""One run per output directory: a new run replaces every file of an earlier one (vocab-SIZE/
folders included), refuses a directory holding files parbpe did not write, never reads its own
outputs as input, and leaves --out as it was when it fails."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import parbpe
from parbpe.cli import main
from parbpe.pipeline import inputs as inputs_module
from parbpe.pipeline.out_dir import earlier_outputs


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "text.txt").write_text("".join(f"line {i}: the cat sat on the mat, and the dog sat on the log.\n"
                                             for i in range(300)))
    return folder


def _tree(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files)


def test_a_stop_list_run_after_an_also_save_run_leaves_no_file_of_the_earlier_run(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train", str(corpus), "--vocab-size", "320", "--also-save", "280,300", "--out", str(out),
                 "--progress", "none"]) == 0
    assert "vocab-280/tokenizer.json" in _tree(out) and "tokenizer.json" in _tree(out)
    capsys.readouterr()
    assert main(["train", str(corpus), "--vocab-size", "300", "--stop-list-size", "5", "--out", str(out),
                 "--progress", "none"]) == 0
    assert _tree(out) == ["parbpe.json", "stats.json"]  # the stop list writes these only
    printed = capsys.readouterr().out
    assert "tokenizer.json" in printed and "earlier run's file removed" in printed
    assert "vocab-280/  " in printed and "vocab-300/  " in printed  # the summary lists the folders removed too
    stats = json.loads((out / "stats.json").read_text())
    assert "removed" in stats["files"]["vocab-280/tokenizer.json"]
    assert json.loads((out / "parbpe.json").read_text())["vocab_size"] == 300


def test_files_a_run_did_not_write_are_refused_before_work(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(inputs_module, "plan", lambda *a, **k: pytest.fail("planning began"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["train", str(corpus), "--vocab-size", "300", "--out", str(out), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert "holds files parbpe did not write (notes.txt)" in err and err.count("\n") == 1
    assert _tree(out) == ["notes.txt"]


def test_earlier_outputs_know_recorded_names_and_leave_hidden_entries_alone(tmp_path):
    (tmp_path / "stats.json").write_text(json.dumps({"files": {"tokenizer.hexvocab": "written"}, "file_digests": {
        "tokenizer.hexvocab": "sha256:" + hashlib.sha256(b"61\n").hexdigest(),
        "vocab-512/merges.txt": "sha256:" + hashlib.sha256(b"").hexdigest()}}))
    (tmp_path / "tokenizer.hexvocab").write_text("61\n")
    (tmp_path / ".parbpe-run").mkdir()
    (tmp_path / "vocab-512").mkdir()
    (tmp_path / "vocab-512" / "merges.txt").write_text("")
    (tmp_path / "vocab-512" / "mine.txt").write_text("")
    assert earlier_outputs(str(tmp_path)) == (["stats.json", "tokenizer.hexvocab", "vocab-512/merges.txt"],
                                              ["vocab-512/mine.txt"])


def test_a_run_does_not_read_its_own_output_directory_or_another_runs(corpus, tmp_path):
    out = corpus / "tok"
    first = parbpe.train(corpus, vocab_size=300, out_dir=out, progress="none")
    again = parbpe.train(corpus, vocab_size=300, out_dir=out, progress="none")  # would read tok/*.json
    assert again.tokenizer.merges == first.tokenizer.merges
    skipped = {s["path"]: s["reason"] for s in again.stats["inputs"]["skipped"]}
    assert skipped[str(out / "parbpe.json")] == "this run's output directory"
    other = parbpe.train(corpus, vocab_size=300, out_dir=tmp_path / "elsewhere", progress="none")
    assert other.tokenizer.merges == first.tokenizer.merges
    assert {s["reason"] for s in other.stats["inputs"]["skipped"]} == {"a parbpe output directory"}


@pytest.mark.parametrize("case", ["empty", "pattern", "column", "budget"])
def test_an_error_after_the_start_leaves_no_output_directory(tmp_path, case, capsys):
    corpus = tmp_path / "c"
    corpus.mkdir()
    if case == "empty":
        (corpus / "a.txt").write_text("")
    elif case in ("pattern", "budget"):
        (corpus / "a.txt").write_text("some text here\n" * 100)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"body": ["some text"] * 10}), corpus / "a.parquet")
    extra = {"empty": [], "pattern": ["--pattern", "(?:zzzq)"], "column": ["--text-column", "text"],
             "budget": ["--memory-budget", "10MB"]}[case]
    out = tmp_path / "out"
    assert main(["train", str(corpus), "--vocab-size", "300", "--out", str(out), "--progress", "none", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert {"empty": "the corpus is empty", "pattern": "the split pattern '(?:zzzq)' matched nothing in",
            "column": "has no column 'text'", "budget": "too small"}[case] in err
    assert not out.exists()


def test_a_wrong_text_column_is_found_when_planning(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parbpe.pipeline import count

    pq.write_table(pa.table({"body": ["some text"] * 10}), tmp_path / "a.parquet")
    monkeypatch.setattr(count, "count_to_runs", lambda *a, **k: pytest.fail("counting began"))
    with pytest.raises(ValueError, match="has no column 'text'; its columns are \\['body'\\]"):
        parbpe.train(tmp_path / "a.parquet", vocab_size=300, progress="none")


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under folder, links not followed, with its bytes."""
    return {os.path.relpath(os.path.join(d, f), folder): Path(d, f).read_bytes()
            for d, _, names in os.walk(folder) for f in names}


def _refused_and_untouched(corpus, out, *watched, extra=()) -> str:
    """A run into out is refused in one line, before work, and every file under out and watched keeps its bytes."""
    before = [_files(out), *(_files(w) for w in watched)]
    status = main(["train", str(corpus), "--vocab-size", "300", "--out", str(out), "--progress", "none", *extra])
    assert status == 2
    assert [_files(out), *(_files(w) for w in watched)] == before
    return out


def test_a_forged_stats_json_does_not_make_a_users_file_ours(corpus, tmp_path, capsys):
    """Issue 55 item 11: stats.json's files list is not proof: thesis.tex stays, the run is refused."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("\\documentclass{article} years of work")
    (out / "stats.json").write_text(json.dumps({"files": {"thesis.tex": "written"}}))
    _refused_and_untouched(corpus, out)
    err = capsys.readouterr().err
    assert "holds files parbpe did not write" in err and "thesis.tex" in err and err.count("\n") == 1


@pytest.mark.parametrize("algorithm", ["bpe", "pathpiece"])
def test_another_tools_files_under_export_names_are_not_ours(corpus, tmp_path, capsys, algorithm):
    """vocab.json, merges.txt and tokenizer.tiktoken another tool wrote are neither replaced nor removed."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "vocab.json").write_text('{"a": 0}')
    (out / "merges.txt").write_text("#version: 0.2\n")
    (out / "tokenizer.tiktoken").write_text("YQ== 0\n")
    extra = ["--algorithm", "pathpiece", "--initial-vocab-size", "400"] if algorithm == "pathpiece" else []
    _refused_and_untouched(corpus, out, extra=extra)
    assert "holds files parbpe did not write" in capsys.readouterr().err


def test_links_in_out_are_not_followed_and_edited_files_are_not_ours(corpus, tmp_path, capsys):
    """Issue 55 item 10: a vocab-1024 link to a folder elsewhere, a tokenizer.json link to a file elsewhere:
    nothing there is removed or overwritten. A file parbpe wrote and the user changed since is the user's."""
    out = tmp_path / "out"
    assert main(["train", str(corpus), "--vocab-size", "300", "--out", str(out), "--progress", "none"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "parbpe.json"):
        (elsewhere / name).write_text(f"another tokenizer's {name}")
    (out / "vocab-1024").symlink_to(elsewhere)
    _refused_and_untouched(corpus, out, elsewhere)
    (out / "vocab-1024").unlink()
    (out / "tokenizer.json").unlink()
    (out / "tokenizer.json").symlink_to(elsewhere / "tokenizer.json")
    _refused_and_untouched(corpus, out, elsewhere, extra=["--stop-list-size", "5"])  # which writes no tokenizer.json
    (out / "tokenizer.json").unlink()
    (out / "merges.txt").write_text((out / "merges.txt").read_text() + "my own edit\n")
    _refused_and_untouched(corpus, out, extra=["--stop-list-size", "5"])  # which writes no merges.txt
    (out / "merges.txt").unlink()
    assert main(["train", str(corpus), "--vocab-size", "300", "--stop-list-size", "5", "--out", str(out),
                 "--progress", "none"]) == 0  # what parbpe wrote, unchanged, is replaced as before
    assert sorted(_files(out)) == ["parbpe.json", "stats.json"]

"""Every bad input or full disk is one clear line and exit status 2, found before the work where it
can be, and --out never holds a half-written file."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parbpe.cli import main

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def _text(seed: int, n_lines: int = 400) -> str:
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(30))
                     for _ in range(n_lines))


@pytest.fixture
def corpus(tmp_path) -> str:
    path = tmp_path / "corpus.txt"
    path.write_text(_text(0))
    return str(path)


def _train(capsys, *args: str) -> tuple[int, str]:
    status = main(["train", *args, "--vocab-size", "300", "--workers", "2", "--progress", "none"])
    err = capsys.readouterr().err.strip()
    return status, err


def _one_line(status: int, err: str, *pieces: str) -> None:
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("parbpe train: error: "), err
    assert "Traceback" not in err and "[Errno" not in err, err
    for piece in pieces:
        assert piece in err, err


def _no_output(out: Path) -> None:
    """--out holds no file (no half-written one, no temporary one): at most the run directory
    .parbpe-run, kept for --resume."""
    assert not out.exists() or {p.name for p in out.iterdir()} <= {".parbpe-run"}, list(out.iterdir())


def test_out_naming_an_existing_file_is_refused_before_counting(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.write_text("my notes")
    monkeypatch.setattr(sys.modules["parbpe.pipeline.inputs"], "plan", lambda *a: pytest.fail("counting began"))
    status, err = _train(capsys, corpus, "--out", str(out))
    _one_line(status, err, f"--out {out} is an existing file")
    assert out.read_text() == "my notes"


def test_unwritable_out_is_refused_before_counting(corpus, tmp_path, capsys, monkeypatch):
    parent = tmp_path / "ro"
    parent.mkdir()
    _mount(parent, "ro,size=64k")
    monkeypatch.setattr(sys.modules["parbpe.pipeline.inputs"], "plan", lambda *a: pytest.fail("counting began"))
    status, err = _train(capsys, corpus, "--out", str(parent / "out"))
    _one_line(status, err, f"--out {parent / 'out'} is not writable", "Read-only file system")
    _no_output(parent / "out")


def test_run_dir_unwritable_is_refused(corpus, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    _mount(ro, "ro,size=64k")
    status, err = _train(capsys, corpus, "--out", str(tmp_path / "out"), "--run-dir", str(ro / "run"))
    _one_line(status, err, f"--run-dir {ro / 'run'} is not writable")
    _no_output(tmp_path / "out")


def test_tmp_dir_missing_or_unwritable_is_refused(corpus, tmp_path, capsys):
    status, err = _train(capsys, corpus, "--out", str(tmp_path / "out"), "--tmp-dir", str(tmp_path / "nope"))
    _one_line(status, err, f"--tmp-dir {tmp_path / 'nope'} does not exist")
    ro = tmp_path / "ro"
    ro.mkdir()
    _mount(ro, "ro,size=64k")
    status, err = _train(capsys, corpus, "--out", str(tmp_path / "out"), "--tmp-dir", str(ro))
    _one_line(status, err, f"--tmp-dir {ro} is not writable")
    _no_output(tmp_path / "out")


def test_count_out_naming_a_directory_is_refused(corpus, tmp_path, capsys):
    status = main(["count", corpus, "--out", str(tmp_path), "--progress", "none"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err == f"parbpe count: error: --out {tmp_path} is a directory; give the name of the " \
                                  "file to write"


@pytest.mark.parametrize("name", ["corpus.txt.gz", "corpus.jsonl.gz", "corpus.jsonl.zst"])
def test_truncated_compressed_input_names_the_file(name, tmp_path, capsys):
    text = _text(1, 3000)
    if ".jsonl" in name:
        text = "\n".join(json.dumps({"text": line}) for line in text.splitlines())
    path = tmp_path / name
    if name.endswith(".gz"):
        data = gzip.compress(text.encode())
    else:
        with pa.CompressedOutputStream(str(path), "zstd") as f:
            f.write(text.encode())
        data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    status, err = _train(capsys, str(path), "--out", str(out))
    kind = "gzip" if name.endswith(".gz") else "zstd"
    _one_line(status, err, f"{path}: truncated or corrupt {kind} data")
    _no_output(out)


def test_corrupt_parquet_names_the_file_and_row_group(tmp_path, capsys):
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": _text(2, 3000).splitlines()}), path, row_group_size=1000)
    data = bytearray(path.read_bytes())
    first_group = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = first_group.data_page_offset
    data[start + 40:start + 400] = b"\xab" * 360  # inside row group 0's data, the footer intact
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    status, err = _train(capsys, str(path), "--out", str(out))
    _one_line(status, err, f"{path} (row group 0): corrupt or unreadable parquet data")
    _no_output(out)


@pytest.mark.parametrize("pattern", ["a*", r"\w*|\s+", r"\b"])
def test_a_pattern_that_matches_the_empty_string_is_refused(pattern, corpus, tmp_path, capsys):
    status, err = _train(capsys, corpus, "--out", str(tmp_path / "out"), "--pattern", pattern)
    _one_line(status, err, f"pattern {pattern!r} can match the empty string")
    _no_output(tmp_path / "out")


def test_overlapping_special_tokens_match_longest_first(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text(("hello<|a|><|b|>world " * 50 + "<|a|> alone ") * 4)
    out = tmp_path / "out"
    assert main(["train", str(corpus), "--out", str(out), "--vocab-size", "300", "--progress", "none",
                 "--special-tokens", "<|a|>,<|a|><|b|>"]) == 0
    from parbpe.tokenizer.model import Tokenizer

    tok = Tokenizer.load(str(out))
    ids = tok.encode("x<|a|><|b|>y<|a|>", allowed_special="all")
    assert tok.special_tokens["<|a|><|b|>"] in ids and ids[-1] == tok.special_tokens["<|a|>"]
    assert ids.count(tok.special_tokens["<|a|>"]) == 1


# -- full disks: a small tmpfs ------------------------------------------------------------------

def _mount(directory: Path, options: str) -> None:
    """Mount a tmpfs on directory (unmounted at the end of the test session's use of it)."""
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
    _MOUNTED.append(directory)


_MOUNTED: list[Path] = []


@pytest.fixture(autouse=True)
def _unmount():
    yield
    while _MOUNTED:
        subprocess.run(["umount", str(_MOUNTED.pop())], check=False)


def test_a_full_disk_while_spilling_names_the_path_and_the_size(tmp_path, capsys):
    rng = random.Random(3)
    corpus = tmp_path / "unique.txt"  # many distinct chunks: a run file of several MB
    corpus.write_text(" ".join("".join(rng.choice("abcdefghijklmnop") for _ in range(12)) for _ in range(300_000)))
    small, out = tmp_path / "small", tmp_path / "out"
    small.mkdir()
    _mount(small, "size=1m")
    status, err = _train(capsys, str(corpus), "--out", str(out), "--run-dir", str(small / "run"))
    _one_line(status, err, "no space left on device writing", str(small), "it needs", "MB", "free",
              "--run-dir")
    assert not list((small / "run").rglob("*.arrow"))  # no half-written run file
    _no_output(out)
    status = main(["count", str(corpus), "--out", str(out / "counts.parquet"), "--tmp-dir", str(small),
                   "--progress", "none"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"parbpe count: error: no space left on device writing {small}") and "it needs" in err
    assert not (out / "counts.parquet").exists()


def test_a_full_disk_while_writing_the_outputs_leaves_no_file(corpus, tmp_path, capsys):
    small = tmp_path / "small"
    small.mkdir()
    _mount(small, "size=256k")
    filler = small / "filler"
    with open(filler, "wb") as f:  # leave about 12 KB: smaller than the tokenizer's files together
        try:
            f.write(b"\0" * (256 * 1024 - 12 * 1024))
        except OSError:
            pass
    out = small / "out"
    status, err = _train(capsys, corpus, "--out", str(out), "--run-dir", str(tmp_path / "run"))
    _one_line(status, err, "no space left on device writing", str(out), "it needs", "free")
    _no_output(out)
    assert sorted(os.listdir(small)) in (["filler"], ["filler", "out"])


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under folder (symlinks not followed) with its bytes."""
    return {os.path.relpath(os.path.join(d, f), folder): Path(d, f).read_bytes()
            for d, _, names in os.walk(folder) for f in names}


def _users_run_dir_names(folder: Path) -> None:
    """A user's files under the names a parbpe run directory uses (issue 55 item 9)."""
    for sub in ("count", "superword", "reduced-parts"):
        (folder / sub / "inner").mkdir(parents=True)
        (folder / sub / "inner" / "data.bin").write_bytes(b"mine " + sub.encode())
    for name in ("plan.json", "merges.json", "table.json", "reduced.arrow", "pathpiece.json", "notes.txt"):
        (folder / name).write_text(f"my {name}")


def test_a_run_dir_that_is_not_a_parbpe_run_is_refused_and_left_as_it_was(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.modules["parbpe.pipeline.inputs"], "plan", lambda *a, **k: pytest.fail("planning began"))
    run_dir = tmp_path / "mine"
    _users_run_dir_names(run_dir)
    before = _files(run_dir)
    status, err = _train(capsys, corpus, "--out", str(tmp_path / "out"), "--run-dir", str(run_dir))
    _one_line(status, err, f"--run-dir {run_dir}", "not a parbpe run directory")
    assert _files(run_dir) == before
    _no_output(tmp_path / "out")
    monkeypatch.undo()
    empty = tmp_path / "empty"  # an empty one is used, and left empty
    empty.mkdir()
    status, err = _train(capsys, corpus, "--out", str(tmp_path / "out"), "--run-dir", str(empty))
    assert status == 0, err
    assert not empty.exists() or list(empty.iterdir()) == []


def test_a_symlinked_run_directory_is_not_cleaned_through(corpus, tmp_path, capsys):
    """OUT/.parbpe-run linked to a folder of the user's: nothing in that folder is removed."""
    elsewhere = tmp_path / "elsewhere"
    _users_run_dir_names(elsewhere)
    before = _files(elsewhere)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".parbpe-run").symlink_to(elsewhere)
    status, err = _train(capsys, corpus, "--out", str(out))
    _one_line(status, err, str(out / ".parbpe-run"), "not a parbpe run directory")
    assert _files(elsewhere) == before


def _counts_parquet(path: Path, rows: list[tuple[str, int]]) -> str:
    """A parbpe counts file (the GPT-4 split, no special tokens) holding exactly these rows."""
    from parbpe.config import TrainConfig
    from parbpe.io.counts_files import COUNTS_MAGIC

    meta = {"pattern": TrainConfig().pattern, "special_tokens": [], "freq_cutoff": 0, "format": 1}
    schema = pa.schema([("chunk", pa.binary()), ("count", pa.int64())]).with_metadata(
        {COUNTS_MAGIC: json.dumps(meta).encode()})
    pq.write_table(pa.table({"chunk": [c.encode() for c, _ in rows], "count": [n for _, n in rows]}, schema=schema),
                   path)
    return str(path)


@pytest.mark.parametrize("jit", ["on", "off"])
def test_counts_past_int64_are_refused_in_one_line_never_a_wrong_merge(tmp_path, capsys, monkeypatch, jit):
    """Issue 55 item 7: a chunk counted 2**62 whose pairs add past int64, a count of 2**63-1, two counts
    files whose sum passes int64, a negative count: one line, exit 2, the limit named. 2**62 on a chunk
    of one pair is within the limit and gives the right merges."""
    monkeypatch.setenv("PARBPE_JIT", jit)
    limit = "4,611,686,018,427,387,904"
    cases = {
        "pairs": [_counts_parquet(tmp_path / "pairs.parquet", [(" eeeee", 2**62), (" ab", 5)])],
        "max": [_counts_parquet(tmp_path / "max.parquet", [(" ab", 2**63 - 1), (" cd", 5)])],
        "sum": [_counts_parquet(tmp_path / "s1.parquet", [(" ab", 2**62), (" cd", 5)]),
                _counts_parquet(tmp_path / "s2.parquet", [(" ab", 2**62), (" ef", 5)])],
        "negative": [_counts_parquet(tmp_path / "neg.parquet", [(" ab", -3), (" cd", 5)])],
    }
    for case, files in cases.items():
        status = main(["train", *files, "--vocab-size", "260", "--workers", "1", "--progress", "none", "--out",
                       str(tmp_path / f"out-{case}")])
        err = capsys.readouterr().err.strip()
        _one_line(status, err, *(["negative count", "neg.parquet"] if case == "negative" else [limit]))
        _no_output(tmp_path / f"out-{case}")
    status = main(["count", *cases["sum"], "--out", str(tmp_path / "c.parquet"), "--progress", "none"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and limit in err and not (tmp_path / "c.parquet").exists()
    fine = _counts_parquet(tmp_path / "fine.parquet", [(" a", 2**62), (" cd", 5), (" cde", 3)])
    assert main(["train", fine, "--vocab-size", "259", "--workers", "1", "--progress", "none",
                 "--out", str(tmp_path / "tok")]) == 0
    assert json.loads((tmp_path / "tok" / "parbpe.json").read_text())["merges"] == [
        [32, 97, 256], [99, 100, 257], [32, 257, 258]]  # " a" (2**62 times), then "cd" and " cd" (8 times each)


@pytest.mark.parametrize("bad", [10**30, 1e30, -1, 2**32, "seven", 1 << 40])
def test_init_token_ids_out_of_range_are_refused(corpus, tmp_path, capsys, bad):
    """Issue 55 item 8: --init of a vocab.json whose ids are not integers from 0 to 2**31-1 (or so sparse
    that tables over them would not fit) is one line, exit 2, naming the file; never a tokenizer.json that
    HF tokenizers refuses or negative ids from parbpe encode."""
    base = tmp_path / "base"
    status, err = _train(capsys, corpus, "--out", str(base))
    assert status == 0, err
    vocab = json.loads((base / "vocab.json").read_text())
    vocab[max(vocab, key=vocab.get)] = bad  # the last merge's token
    (base / "vocab.json").write_text(json.dumps(vocab))
    (base / "parbpe.json").unlink()  # read as GPT-2's files
    (base / "tokenizer.json").unlink()
    status = main(["train", corpus, "--init", str(base), "--vocab-size", "320", "--workers", "1", "--progress",
                   "none", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    _one_line(status, err, str(base / "vocab.json"), "token id")
    _no_output(tmp_path / "out")
    status = main(["encode", "--tokenizer", str(base), "hello"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "token id" in err, err


def _malformed_tokenizers(base: Path, tmp_path: Path) -> dict[str, Path]:
    """Tokenizer files broken the ways issue 55 item 12 lists, from a run's good files in base."""
    from parbpe.tokenizer.byte_level import token_to_unicode

    out = {}
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    out["nested 100,000 deep"] = deep
    good = json.loads((base / "tokenizer.json").read_text())
    for name, change in (("huge id", lambda d: d["model"]["vocab"].update({"Ġzz": 10**400})),
                         ("float id", lambda d: d["model"]["vocab"].update({"Ġzz": 1e300})),
                         ("sparse ids", lambda d: d["added_tokens"].append({"content": "<s>", "id": 2**31 - 1,
                                                                            "special": True})),
                         ("vocab as a list", lambda d: d["model"].update(vocab=list(d["model"]["vocab"].items()))),
                         ("merges not a list", lambda d: d["model"].update(merges=7)),
                         ("added token without id", lambda d: d["added_tokens"].append({"content": "<t>"}))):
        data = json.loads(json.dumps(good))
        change(data)
        path = tmp_path / f"{name.replace(' ', '-')}.json"
        path.write_text(json.dumps(data))
        out[name] = path
    unigram = {"model": {"type": "Unigram", "vocab": [[token_to_unicode(bytes([b])), 0.0] for b in range(255)]},
               "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}
    (tmp_path / "unigram.json").write_text(json.dumps(unigram))
    out["Unigram missing a byte"] = tmp_path / "unigram.json"
    parbpe_json = json.loads((base / "parbpe.json").read_text())
    del parbpe_json["pattern"]
    (tmp_path / "nopattern").mkdir()
    (tmp_path / "nopattern" / "parbpe.json").write_text(json.dumps(parbpe_json))
    out["parbpe.json without a pattern"] = tmp_path / "nopattern"
    merges_as_text = json.loads((base / "parbpe.json").read_text())
    merges_as_text["merges"] = "abc"
    (tmp_path / "badmerges").mkdir()
    (tmp_path / "badmerges" / "parbpe.json").write_text(json.dumps(merges_as_text))
    out["parbpe.json merges as text"] = tmp_path / "badmerges"
    return out


def test_malformed_tokenizer_files_are_one_line_exit_2(corpus, tmp_path, capsys):
    """Issue 55 item 12: malformed tokenizer files are bad input (exit 2, one line naming the file), never
    "internal error, please report" (exit 3), for encode, eval and train --init."""
    base = tmp_path / "base"
    status, err = _train(capsys, corpus, "--out", str(base))
    assert status == 0, err
    for name, path in _malformed_tokenizers(base, tmp_path).items():
        for command in (["encode", "--tokenizer", str(path), "hello"], ["eval", "--tokenizer", str(path), corpus],
                        ["train", corpus, "--init", str(path), "--vocab-size", "600", "--out", str(tmp_path / "o"),
                         "--progress", "none"]):
            status = main(command)
            err = capsys.readouterr().err.strip()
            assert status == 2 and len(err.splitlines()) == 1 and str(path) in err, (name, command[0], err)
            assert "internal error" not in err and "Traceback" not in err, (name, err)

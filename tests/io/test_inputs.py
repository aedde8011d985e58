"""Which files are read: any extension as UTF-8 text, binary files refused by name (or skipped in a
directory or glob, with the reason recorded), JSON arrays and `datasets.save_to_disk` directories explained."""

from __future__ import annotations

import gzip
import json

import pytest

import parbpe
from parbpe.cli import main
from parbpe.io.plan import expand_inputs, plan
from parbpe.io.units import WorkUnit

TEXT = "The quick brown fox jumps over the lazy dog. " * 40


@pytest.mark.parametrize("name", ["corpus.en", "data.raw", "CORPUS"])
def test_a_file_of_any_extension_is_read_as_text(tmp_path, name):
    (tmp_path / "same.txt").write_bytes(TEXT.encode() + b"\xff\xfe end")
    (tmp_path / name).write_bytes(TEXT.encode() + b"\xff\xfe end")
    assert [u.kind for u in plan([str(tmp_path / name)])] == ["text"]
    a = parbpe.train(tmp_path / name, vocab_size=300, workers=1)
    b = parbpe.train(tmp_path / "same.txt", vocab_size=300, workers=1)
    assert a.tokenizer.merges == b.tokenizer.merges
    assert a.stats["replaced_utf8_sequences"] == b.stats["replaced_utf8_sequences"] == 2


def test_the_cli_trains_on_a_dot_en_file(tmp_path, capsys):
    (tmp_path / "corpus.en").write_text(TEXT)
    assert main(["train", str(tmp_path / "corpus.en"), "--vocab-size", "280", "--out", str(tmp_path / "o"),
                 "--workers", "1", "--progress", "none"]) == 0
    assert "Trained 280 tokens" in capsys.readouterr().out


BINARIES = {
    "nul.raw": (b"text\x00\x01\x02 and more", "binary data (NUL bytes"),
    "archive": (gzip.compress(TEXT.encode()), "gzip-compressed data"),
    "picture.dat": (b"\x89PNG\r\n\x1a\n" + bytes(100), "a PNG image"),
    "program": (b"\x7fELF\x02\x01\x01" + bytes(100), "an ELF executable"),
    "bundle.zip": (b"PK\x03\x04" + bytes(100), "a zip archive"),
    "frames.txt": (b"\x28\xb5\x2f\xfd" + bytes(100), "zstd-compressed data"),  # a text suffix does not hide it
}


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_a_binary_file_is_refused_by_name_before_any_work(tmp_path, capsys, name):
    data, reason = BINARIES[name]
    (tmp_path / name).write_bytes(data)
    out = tmp_path / "out"
    assert main(["train", str(tmp_path / name), "--vocab-size", "280", "--out", str(out), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parbpe train: error: {tmp_path / name}: {reason}") and err.count("\n") == 1
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_nul_bytes_in_a_txt_file_are_text(tmp_path):
    (tmp_path / "odd.txt").write_bytes(b"a\x00b " * 100)
    assert [u.kind for u in plan([str(tmp_path / "odd.txt")])] == ["text"]


def test_directories_and_globs_follow_one_rule_and_stats_record_what_was_skipped(tmp_path):
    mixed = tmp_path / "mixed"
    (mixed / ".git").mkdir(parents=True)
    (mixed / "a.txt").write_text(TEXT)
    (mixed / "README").write_text("A readme is text too.\n")
    (mixed / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(10))
    (mixed / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    by_dir: list = []
    by_glob: list = []
    assert expand_inputs([str(mixed)], by_dir) == expand_inputs([str(mixed / "*")], by_glob) == [
        str(mixed / "README"), str(mixed / "a.txt")]
    assert (str(mixed / "logo.png"), "a PNG image") in by_dir and (str(mixed / "logo.png"), "a PNG image") in by_glob
    assert (str(mixed / ".git" / "HEAD"), "hidden") in by_dir
    result = parbpe.train(str(mixed / "*"), vocab_size=280, workers=1, out_dir=tmp_path / "o")
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["inputs"]["files_read"] == [str(mixed / "README"), str(mixed / "a.txt")]
    assert stats["inputs"]["skipped"] == [{"path": str(mixed / "logo.png"), "reason": "a PNG image"}]
    assert result.stats["inputs"] == stats["inputs"]


def test_the_run_prints_the_files_it_skipped(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text(TEXT)
    (tmp_path / "d" / "blob.bin").write_bytes(bytes(64))
    assert main(["train", str(tmp_path / "d"), "--vocab-size", "280", "--out", str(tmp_path / "o"), "--workers", "1",
                 "--progress", "bar"]) == 0
    err = " ".join(capsys.readouterr().err.split())  # messages are wrapped at 80 columns
    assert f"skipped 1 file(s): {tmp_path / 'd' / 'blob.bin'} (binary data (NUL bytes" in err


def test_a_json_array_file_says_what_it_is_and_how_to_pass_it(tmp_path, capsys):
    (tmp_path / "docs.json").write_text(json.dumps([{"text": TEXT}, {"text": TEXT}]))
    assert main(["train", str(tmp_path / "docs.json"), "--vocab-size", "280", "--out", str(tmp_path / "o"),
                 "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert "a JSON array, not JSON lines" in err and "jq -c '.[]'" in err and "train_from_iterator" in err


def test_a_saved_datasets_directory_says_how_to_load_it(tmp_path, capsys):
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("dataset_info.json", "state.json"):
        (saved / name).write_text("{}")
    (saved / "data-00000-of-00001.arrow").write_bytes(b"\xff\xff\xff\xff")
    assert main(["train", str(saved), "--vocab-size", "280", "--out", str(tmp_path / "o"), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert "Hugging Face datasets directory (made by save_to_disk)" in err
    assert f"datasets.load_from_disk({str(saved)!r})" in err


def test_text_size_is_the_text_the_units_hold_not_their_reading_floor(tmp_path):
    """text_size judges a job's size (whether kernels repay numba's start): a small text file is its
    bytes (unit_text_bytes, a reading floor, says 2 read blocks), a file split into ranges is counted
    once, a compressed one at COMPRESSED_TEXT_RATIO times its bytes, a parquet row group its size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parbpe.io.plan import COMPRESSED_TEXT_RATIO, text_size, unit_text_bytes

    small = tmp_path / "small.txt"
    small.write_text("a few words\n" * 100)
    units = plan([str(small)])
    assert text_size(units) == small.stat().st_size < unit_text_bytes(units[0])
    packed = tmp_path / "packed.txt.gz"
    packed.write_bytes(gzip.compress(b"x y z\n" * 1000))
    assert text_size(plan([str(packed)])) == COMPRESSED_TEXT_RATIO * packed.stat().st_size
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["one document"] * 50}), table, row_group_size=10)
    groups = plan([str(table)])
    assert len(groups) == 5 and text_size(groups) == sum(unit_text_bytes(u) for u in groups)
    big = tmp_path / "big.txt"
    big.write_text("0123456789" * 10_000)
    ranges = [WorkUnit(str(big), "text", start=a, end=a + 30_000 if a + 30_000 < 100_000 else -1)
              for a in range(0, 100_000, 30_000)]
    assert text_size(plan([str(big)])) == text_size(ranges) == 100_000


def test_a_parquet_units_size_is_read_once_with_the_plan(tmp_path, monkeypatch):
    """plan reads each row group's uncompressed size with the footer; unit_text_bytes answers from it
    without opening the file again (it was opened for every unit, several times a run: 1.3 s of a
    1 GB count of 585 row groups), and a unit made without it (size 0) still opens the file. The size
    is not part of what the unit is: its key and order are a unit's without it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parbpe.count.counter import unit_key
    from parbpe.io import plan as planning

    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [f"document {i} " * (i + 1) for i in range(40)]}), table, row_group_size=10)
    units = plan([str(table)])
    footer = pq.ParquetFile(table).metadata
    assert [u.size for u in units] == [footer.row_group(k).total_byte_size for k in range(4)]
    opened = []
    original = planning.open_parquet
    monkeypatch.setattr(planning, "open_parquet", lambda path: opened.append(path) or original(path))
    assert [planning.unit_text_bytes(u) for u in units] == [u.size for u in units] and not opened
    bare = WorkUnit(str(table), "parquet", 2)
    assert planning.unit_text_bytes(bare) == units[2].size and opened == [str(table)]
    assert bare == units[2] and unit_key(bare) == unit_key(units[2]) and sorted([units[3], bare])[0] is bare

"""parbpe encode (issue 23, item 8): a special token in the text is refused as by the Python API unless
--allow-special; a reader that goes away (`| head`) ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parbpe.cli import main

TEXT = "the quick brown fox jumps over the lazy dog, again and again. " * 40


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("enc")
    pq.write_table(pa.table({"text": [TEXT, TEXT[::-1]]}), root / "c.parquet")
    assert main(["train", str(root / "c.parquet"), "--vocab-size", "300", "--out", str(root / "tok"),
                 "--workers", "1", "--special-tokens", "<|endoftext|>", "--progress", "none"]) == 0
    return root / "tok"


def test_encode_refuses_a_special_token_without_allow_special(tokenizer, capsys) -> None:
    assert main(["encode", "--tokenizer", str(tokenizer), "Hello<|endoftext|>"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "<|endoftext|>" in err[0]
    assert main(["encode", "--tokenizer", str(tokenizer), "--allow-special", "Hello<|endoftext|>"]) == 0


def test_encode_into_a_closed_pipe_ends_quietly(tokenizer, tmp_path) -> None:
    (tmp_path / "big.txt").write_text(TEXT * 50)
    shell = (f"{sys.executable} -m parbpe.cli encode --tokenizer {tokenizer} --show < {tmp_path / 'big.txt'} "
             "| head -1 > /dev/null")
    done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stderr == ""

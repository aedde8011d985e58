"""eval, encode and decode take every tokenizer format --init reads: a parbpe directory, a
tokenizer.json, GPT-2's vocab.json beside merges.txt, a .tiktoken rank file (with --pattern)."""

from __future__ import annotations

import json

import pytest

import parbpe
from parbpe.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("any")
    corpus = root / "c.txt"
    corpus.write_text("".join(f"line {i}: the cat sat on the mat, and the dog sat on the log.\n" for i in range(300)))
    parbpe.train(corpus, vocab_size=320, pattern="gpt2", special_tokens=["<|endoftext|>"], out_dir=root / "tok")
    return root, corpus


def test_every_format_encodes_and_evaluates_alike(trained, capsys):
    root, corpus = trained
    tok = root / "tok"
    paths = [tok, tok / "tokenizer.json", tok / "vocab.json", tok / "tokenizer.tiktoken"]
    encoded = []
    for path in paths:
        extra = ["--pattern", "gpt2"] if path.suffix == ".tiktoken" else []
        assert main(["encode", "--tokenizer", str(path), *extra, "the cat sat on the log"]) == 0
        encoded.append(capsys.readouterr().out)
    assert len(set(encoded)) == 1
    args = [a for p in paths for a in ("--tokenizer", str(p))]
    assert main(["eval", *args, "--pattern", "gpt2", str(corpus), "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert len(reports) == 4 and len({r["tokens"] for r in reports}) == 1


def test_a_rank_file_without_its_pattern_splits_with_gpt4(trained, capsys):
    root, _ = trained
    assert main(["encode", "--tokenizer", str(root / "tok" / "tokenizer.tiktoken"), "abc  123456"]) == 0
    gpt4 = capsys.readouterr().out
    assert main(["encode", "--tokenizer", str(root / "tok" / "tokenizer.tiktoken"), "--pattern", "gpt2",
                 "abc  123456"]) == 0
    assert capsys.readouterr().out != gpt4  # gpt2 splits digits in any number, gpt4 in threes

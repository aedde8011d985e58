"""Tokenizers of a vocabulary alone (PathPiece's kind): from a list of byte strings or a hex file (one
token a line), segmented by shortest (default) or greedy, saved to parbpe.json and vocab.hex, loaded
back, evaluated; formats that need merges are refused with the reason."""

from __future__ import annotations

import json

import pytest

import parbpe
from parbpe.cli import main

TEXT = "the cat sat on the mat, and the dog sat on the log. " * 30


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    path = tmp_path_factory.mktemp("v") / "c.txt"
    path.write_text(TEXT)
    return parbpe.train(path, vocab_size=300).tokenizer, path


def test_a_vocabulary_segments_like_the_same_tokens_by_shortest(bpe):
    tok, _ = bpe
    tokens = [tok.vocab[i] for i in sorted(tok.vocab)]
    vocab_only = parbpe.Tokenizer.from_vocabulary(tokens, pattern="gpt4", special_tokens=["<|x|>"])
    assert vocab_only.segmentation == "shortest" and vocab_only.n_vocab == len(tokens) + 1
    ours = [vocab_only.vocab[i] for i in vocab_only.encode(TEXT)]
    theirs = [tok.vocab[i] for i in tok.encode(TEXT, method="shortest")]
    assert ours == theirs and vocab_only.decode(vocab_only.encode(TEXT)) == TEXT
    assert vocab_only.encode_ordinary(TEXT) == vocab_only.encode(TEXT)
    assert len(vocab_only.encode(TEXT, method="greedy")) >= len(vocab_only.encode(TEXT))
    with pytest.raises(ValueError, match="without merges: segment it with greedy or shortest"):
        vocab_only.encode(TEXT, method="merges")
    with pytest.raises(ValueError, match="lacks single bytes"):
        parbpe.Tokenizer.from_vocabulary([b"ab", b"a"])


def test_saved_as_parbpe_json_and_vocab_hex_and_loaded_back(bpe, tmp_path, capsys):
    tok, corpus = bpe
    tokens = [tok.vocab[i] for i in sorted(tok.vocab)][::-1]  # any order: ids follow it
    vocab_only = parbpe.Tokenizer.from_vocabulary(tokens)
    files = vocab_only.save(str(tmp_path / "v"))
    assert files["parbpe.json"] == files["vocab.hex"] == "written"
    assert files["tokenizer.json"] == "written"  # a Unigram model of equal scores: the fewest tokens
    assert files["merges.txt"].startswith("not written: a vocabulary without merges")
    assert parbpe.Tokenizer.load(str(tmp_path / "v" / "tokenizer.json")).encode(TEXT) == vocab_only.encode(TEXT)
    greedy = parbpe.Tokenizer.from_vocabulary(tokens, segmentation="greedy").save(str(tmp_path / "g"))
    assert greedy["tokenizer.json"].startswith("not written: a vocabulary without merges (segmented by greedy)")
    assert (tmp_path / "v" / "vocab.hex").read_text().splitlines() == [t.hex() for t in tokens]
    for path in (tmp_path / "v", tmp_path / "v" / "vocab.hex"):
        loaded = parbpe.Tokenizer.load(str(path))
        assert loaded.encode(TEXT) == vocab_only.encode(TEXT) and loaded.segmentation == "shortest"
    assert json.loads((tmp_path / "v" / "parbpe.json").read_text())["segmentation"] == "shortest"
    assert main(["eval", "--tokenizer", str(tmp_path / "v" / "vocab.hex"), str(corpus), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in rows] == ["shortest"] and rows[0]["tokens"] == len(vocab_only.encode(TEXT))
    assert main(["eval", "--tokenizer", str(tmp_path / "v"), str(corpus), "--method", "merges"]) == 2
    assert "vocabulary without merges" in capsys.readouterr().err
    assert main(["encode", "--tokenizer", str(tmp_path / "v"), "the cat"]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in vocab_only.encode("the cat")]


@pytest.mark.parametrize("text, message", [
    ("6\n", "not hex bytes"),
    ("6162\n", "lacks single bytes"),
])
def test_bad_hex_files_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "bad.hex"
    path.write_text(text)
    assert main(["encode", "--tokenizer", str(path), "abc"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and str(path) in err

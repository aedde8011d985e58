"""BPE-dropout: p = 0 is plain encoding, p = 1 gives bytes, and a tokenizer.json trained with --dropout
makes `tokenizers` drop merges as parbpe does: token counts within 1% at p = 0.1 over several seeds."""

from __future__ import annotations

import json

import pytest

import parbpe
from parbpe.cli import main

pytestmark = pytest.mark.peers


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shared_data_dir):
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("dropout")
    docs = pq.read_table(shared_data_dir / "realmix" / "heldout.parquet", columns=["text"]).column("text")
    docs = docs.to_pylist()[:60]
    corpus = root / "c.txt"
    corpus.write_text("\n".join(docs))
    parbpe.train(corpus, vocab_size=2000, dropout=0.1, out_dir=root / "tok", progress="none")
    return root, docs


@pytest.fixture(scope="module")
def shared_data_dir():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if not path.exists():
        pytest.skip("../shared/data is absent")
    return path


def test_dropout_ends(trained):
    root, docs = trained
    tok = parbpe.Tokenizer.load(str(root / "tok"))
    text = docs[0]
    assert tok.encode(text, dropout=0.0, seed=1) == tok.encode(text)
    assert tok.decode(tok.encode(text, dropout=1.0, seed=1)) == text
    assert len(tok.encode(text, dropout=1.0, seed=1)) == len(text.encode())


def test_tokenizers_applies_the_recorded_dropout_as_parbpe_does(trained):
    tokenizers = pytest.importorskip("tokenizers")
    root, docs = trained
    assert json.loads((root / "tok" / "tokenizer.json").read_text())["model"]["dropout"] == 0.1
    hf = tokenizers.Tokenizer.from_file(str(root / "tok" / "tokenizer.json"))
    tok = parbpe.Tokenizer.load(str(root / "tok"))
    plain = sum(len(tok.encode(d)) for d in docs)
    for seed in range(3):
        ours = sum(len(tok.encode(d, dropout=0.1, seed=seed * 100 + k)) for k, d in enumerate(docs))
        theirs = sum(len(e.ids) for e in hf.encode_batch(docs))
        assert ours > 1.02 * plain and theirs > 1.02 * plain  # dropout happened on both sides
        assert abs(ours - theirs) / theirs < 0.01, (seed, ours, theirs)


def test_the_encode_command_takes_method_dropout_and_seed(trained, capsys):
    root, docs = trained
    args = ["encode", "--tokenizer", str(root / "tok"), docs[1][:400]]
    assert main([*args, "--dropout", "0.5", "--seed", "7"]) == 0
    first = capsys.readouterr().out
    assert main([*args, "--dropout", "0.5", "--seed", "7"]) == 0
    assert capsys.readouterr().out == first
    assert main([*args]) == 0
    assert len(capsys.readouterr().out.split()) < len(first.split())
    assert main([*args, "--method", "shortest"]) == 0
    assert main([*args, "--dropout", "2"]) == 2
    assert "dropout must be a probability" in capsys.readouterr().err

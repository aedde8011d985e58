"""--normalize nfc|nfkc|nfd|nfkd: the text between special tokens is put in that normal form before it
is split, in counting (workers), encode and eval; tokenizer.json carries the matching normalizer, so
HF tokenizers and transformers encode as parbpe; formats without a normalizer say so; --init keeps it."""

from __future__ import annotations

import json
import random
import re
import unicodedata

import pytest

import parbpe
from parbpe.cli import main
from parbpe.tokenizer.exports import NO_NORMALIZER

WORDS = ["café", "naïve", "Ångström", "über", "ﬁne", "①", "x²", "São", "Zoë", "résumé", "the", "and"]


def _text(seed: int, n: int = 3000) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tokenizer trained with --normalize nfc on text written in NFD."""
    d = tmp_path_factory.mktemp("norm")
    (d / "nfd.txt").write_text(unicodedata.normalize("NFD", _text(0)))
    result = parbpe.train([str(d / "nfd.txt")], vocab_size=300, normalize="nfc", workers=2,
                          special_tokens=["<|endoftext|>"], out_dir=str(d / "out"))
    return d, result


def test_nfc_and_nfd_inputs_give_the_same_tokens(trained, tmp_path):
    d, from_nfd = trained
    (tmp_path / "nfc.txt").write_text(unicodedata.normalize("NFC", _text(0)))
    from_nfc = parbpe.train([str(tmp_path / "nfc.txt")], vocab_size=300, normalize="nfc", workers=1,
                            special_tokens=["<|endoftext|>"])
    assert from_nfc.tokenizer.merges == from_nfd.tokenizer.merges
    plain = parbpe.train([str(d / "nfd.txt")], vocab_size=300, workers=1, special_tokens=["<|endoftext|>"])
    assert plain.tokenizer.merges != from_nfd.tokenizer.merges  # the normal form mattered
    tok = from_nfd.tokenizer
    text = _text(1, 200)
    for form in ("NFC", "NFD", "NFKD"):
        assert tok.encode_ordinary(unicodedata.normalize(form, text)) == tok.encode_ordinary(
            unicodedata.normalize("NFC", unicodedata.normalize(form, text)))
    assert tok.encode_ordinary(unicodedata.normalize("NFD", text)) == tok.encode_ordinary(text)


def test_exports_encode_as_parbpe_in_tokenizers_and_transformers(trained):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    d, result = trained
    out = d / "out"
    assert json.loads((out / "tokenizer.json").read_text())["normalizer"] == {"type": "NFC"}
    assert json.loads((out / "parbpe.json").read_text())["normalize"] == "nfc"
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
    tok = result.tokenizer
    for text in [unicodedata.normalize("NFD", _text(s, 300)) for s in range(3)] + [
            "e\u0301<|endoftext|>\u0301a ﬁ", "Å\u030a"]:
        ours = tok.encode(text, allowed_special="all")
        assert hf.encode(text, add_special_tokens=False).ids == ours
        assert fast.encode(text, add_special_tokens=False) == ours
    assert parbpe.Tokenizer.load(str(out)).encode_ordinary("cafe\u0301") == tok.encode_ordinary("café")
    assert parbpe.Tokenizer.load(str(out / "tokenizer.json")).normalize == "nfc"


def test_formats_without_a_normalizer_are_written_and_say_so(trained, capsys, tmp_path):
    d, result = trained
    for name in NO_NORMALIZER:
        assert result.files[name].startswith("written, without the NFC normalizer")
        assert (d / "out" / name).exists()
    stats = json.loads((d / "out" / "stats.json").read_text())
    assert stats["files"]["tokenizer.tiktoken"].startswith("written, without the NFC normalizer")
    assert main(["train", str(d / "nfd.txt"), "--vocab-size", "280", "--normalize", "NFKC", "--out",
                 str(tmp_path / "o"), "--progress", "none"]) == 0
    assert re.search(r"merges\.txt +written, without the NFKC normalizer", capsys.readouterr().out)


def test_init_keeps_the_normalizer_and_refuses_another(trained, tmp_path, capsys):
    d, _ = trained
    grown = parbpe.train([str(d / "nfd.txt")], vocab_size=305, init=str(d / "out"), workers=1)
    assert grown.tokenizer.normalize == grown.stats["config"]["normalize"] == "nfc"
    assert main(["train", str(d / "nfd.txt"), "--vocab-size", "320", "--init", str(d / "out"), "--normalize",
                 "nfkc", "--out", str(tmp_path / "o")]) == 2
    assert "differs from" in capsys.readouterr().err


def test_eval_counts_in_the_tokenizers_normal_form(trained, tmp_path):
    d, result = trained
    (tmp_path / "nfd.txt").write_text(unicodedata.normalize("NFD", _text(5, 500)))
    (tmp_path / "nfc.txt").write_text(unicodedata.normalize("NFC", _text(5, 500)))
    nfd = parbpe.evaluate([result.tokenizer], [str(tmp_path / "nfd.txt")])[0]
    nfc = parbpe.evaluate([result.tokenizer], [str(tmp_path / "nfc.txt")])[0]
    assert nfd["tokens"] == nfc["tokens"] == len(result.tokenizer.encode_ordinary(_text(5, 500)))


def test_counting_workers_normalize_like_the_reference(tmp_path):
    import regex

    from parbpe.config import TrainConfig
    from parbpe.patterns import PATTERNS

    docs = [unicodedata.normalize("NFD", _text(s, 100)) for s in range(20)] + ["<|endoftext|>\u0301x ﬁ"]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    out = tmp_path / "c.parquet"
    parbpe.count_to_file([str(tmp_path / "d.jsonl")], str(out),
                         TrainConfig(workers=2, normalize="nfkc", special_tokens=("<|endoftext|>",)))
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    got = dict(zip(table.column("chunk").to_pylist(), table.column("count").to_pylist()))
    expected: dict[bytes, int] = {}
    for doc in docs:
        for piece in regex.split(r"<\|endoftext\|>", doc):
            for chunk in regex.findall(PATTERNS["gpt4"], unicodedata.normalize("NFKC", piece)):
                expected[chunk.encode()] = expected.get(chunk.encode(), 0) + 1
    assert got == expected

"""The output directory loads in transformers (AutoTokenizer) with its special tokens' roles, and
encodes exactly as parbpe. transformers is used for real (without torch)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import parbpe

pytestmark = pytest.mark.heavy_imports  # run last (conftest.py): importing transformers grows this process

SPECIALS = ("<|endoftext|>", "<|pad|>", "<|bos|>")
TEXT = ("Hello world, hello tokenizers! Numbers 12345 and symbols: -> <= {}. Ünïcödé 中文字符 😀\n" * 30)


def _load(out):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(out))


def test_auto_tokenizer_gets_the_first_special_as_eos_and_encodes_as_parbpe(tmp_path):
    (tmp_path / "c.txt").write_text(TEXT)
    result = parbpe.train(tmp_path / "c.txt", vocab_size=400, special_tokens=SPECIALS, workers=1,
                          out_dir=tmp_path / "tok")
    hf = _load(tmp_path / "tok")
    assert hf.is_fast and hf.eos_token == "<|endoftext|>" and hf.pad_token is None and hf.bos_token is None
    assert hf.eos_token_id == result.tokenizer.special_tokens["<|endoftext|>"]
    doc = TEXT + "<|endoftext|>next"
    assert hf(doc)["input_ids"] == result.tokenizer.encode(doc, allowed_special="all")
    assert hf.decode(hf(TEXT)["input_ids"]) == TEXT
    assert json.loads((tmp_path / "tok" / "special_tokens_map.json").read_text()) == {"eos_token": "<|endoftext|>"}


def test_eos_bos_pad_are_settable_and_must_be_special_tokens(tmp_path):
    from parbpe.cli import main

    (tmp_path / "c.txt").write_text(TEXT)
    args = ["train", str(tmp_path / "c.txt"), "--vocab-size", "400", "--special-tokens", ",".join(SPECIALS),
            "--workers", "1", "--progress", "none"]
    assert main(args + ["--out", str(tmp_path / "tok"), "--eos-token", "<|endoftext|>", "--bos-token", "<|bos|>",
                        "--pad-token", "<|pad|>"]) == 0
    hf = _load(tmp_path / "tok")
    assert (hf.eos_token, hf.bos_token, hf.pad_token) == ("<|endoftext|>", "<|bos|>", "<|pad|>")
    assert hf("ab")["input_ids"] == parbpe.Tokenizer.load(str(tmp_path / "tok")).encode("ab")  # nothing added
    with pytest.raises(ValueError, match=r"pad_token '<\|p\|>' is not one of the special tokens"):
        parbpe.TrainConfig(special_tokens=SPECIALS, pad_token="<|p|>")


@pytest.mark.shared_data
def test_auto_tokenizer_encodes_heldout_exactly_as_parbpe(realmix_run, shared_data):
    files, settings, result, out = realmix_run
    hf = _load(out)
    assert hf.eos_token == "<|endoftext|>"
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    assert hf(docs)["input_ids"] == [result.tokenizer.encode_ordinary(d) for d in docs]

"""Rank files load as tiktoken loads them (issue 23, item 7): a "= N" line (base64 of the empty string)
is accepted, and a file named after a published encoding brings all its special tokens."""

from __future__ import annotations

import base64
import json

import pytest

import parbpe
from parbpe.cli import main
from parbpe.tokenizer.load import read_tiktoken


def _write(path, extra: list[str]) -> None:
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    lines.append(f"{base64.b64encode(b'ab').decode()} 256")
    path.write_text("\n".join(lines + extra) + "\n")


def test_an_empty_token_line_is_accepted_and_its_id_unused(tmp_path) -> None:
    _write(tmp_path / "mine.tiktoken", ["= 257", f"{base64.b64encode(b'abc').decode()} 258"])
    data = read_tiktoken(str(tmp_path / "mine.tiktoken"))
    assert data["merges"] == [(ord("a"), ord("b"), 256), (256, ord("c"), 258)]
    assert data["special_tokens"] == {}


def _write_ranks(path, n: int) -> None:
    """A rank file of n ranks, each token made by merging two lower-ranked ones: the bytes, then pairs of
    bytes, then byte triples (tokens of a size a published encoding has)."""
    tokens = [bytes([b]) for b in range(256)]
    tokens += [bytes([a, b]) for a in range(256) for b in range(256)][: n - len(tokens)]
    k = 0
    while len(tokens) < n:
        tokens.append(bytes([k // 65536 % 256, k // 256 % 256, k % 256]))
        k += 1
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens)))


def test_published_encodings_bring_all_their_special_tokens(tmp_path) -> None:
    _write_ranks(tmp_path / "cl100k_base.tiktoken", 100256)
    assert read_tiktoken(str(tmp_path / "cl100k_base.tiktoken"))["special_tokens"] == {
        "<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276}
    _write_ranks(tmp_path / "o200k_base.tiktoken", 199998)
    assert read_tiktoken(str(tmp_path / "o200k_base.tiktoken"))["special_tokens"] == {
        "<|endoftext|>": 199999, "<|endofprompt|>": 200018}


def test_a_file_named_after_a_published_encoding_that_is_not_it_is_refused(tmp_path) -> None:
    """Issue 55 item 6: gpt2.tiktoken of 257 ranks is not GPT-2's: not given GPT-2's pattern and id 50256."""
    _write(tmp_path / "gpt2.tiktoken", [])
    with pytest.raises(ValueError, match=r"gpt2.tiktoken is named after the gpt2 encoding but holds 257 ranks, "
                                         r"not its 50,256"):
        read_tiktoken(str(tmp_path / "gpt2.tiktoken"))


def test_an_empty_tokens_id_stays_reserved_when_continued(tmp_path, capsys) -> None:
    """Issue 55 item 6: Whisper's multilingual rank file ends with "= 50256" (an empty token): continued with
    --init, that id stays reserved (never another token's), the new tokens take the ids after it, and the
    run says so; the written files keep it reserved and load in HF tokenizers."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"the cat {k} sat on the mat, and the dog {k % 7} sat on the log\n" for k in range(300)))
    base = tmp_path / "base"
    assert main(["train", str(corpus), "--vocab-size", "300", "--out", str(base), "--workers", "1",
                 "--progress", "none"]) == 0
    ranks = (base / "tokenizer.tiktoken").read_text()
    top = max(int(line.split()[1]) for line in ranks.splitlines())
    whisper = tmp_path / "multilingual.tiktoken"
    whisper.write_text(ranks + f"= {top + 1}\n")
    out = tmp_path / "grown"
    assert main(["train", str(corpus), "--init", str(whisper), "--vocab-size", str(top + 1 + 20), "--out", str(out),
                 "--workers", "1", "--progress", "none"]) == 0
    assert f"Kept id(s) {top + 1} reserved" in capsys.readouterr().out
    tok = parbpe.Tokenizer.load(str(out))
    assert top + 1 not in tok.vocab and tok.reserved_ids == (top + 1,)
    assert min(i for i in tok.vocab if i > top) == top + 2
    stats = json.loads((out / "stats.json").read_text())
    assert stats["init"]["reserved_ids"] == [top + 1]
    assert f"= {top + 1}\n" in (out / "tokenizer.tiktoken").read_text()
    assert parbpe.Tokenizer.load(str(out / "tokenizer.tiktoken")).reserved_ids == (top + 1,)
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    text = corpus.read_text()[:2000]
    assert hf.encode(text, add_special_tokens=False).ids == tok.encode_ordinary(text)

"""Rank files load as tiktoken loads them (issue 23, item 7): a "= N" line (base64 of the empty string)
is accepted, and a file named after a published encoding brings all its special tokens."""

from __future__ import annotations

import base64

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


def test_published_encodings_bring_all_their_special_tokens(tmp_path) -> None:
    _write(tmp_path / "cl100k_base.tiktoken", [])
    assert read_tiktoken(str(tmp_path / "cl100k_base.tiktoken"))["special_tokens"] == {
        "<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276}
    _write(tmp_path / "o200k_base.tiktoken", [])
    assert read_tiktoken(str(tmp_path / "o200k_base.tiktoken"))["special_tokens"] == {
        "<|endoftext|>": 199999, "<|endofprompt|>": 200018}

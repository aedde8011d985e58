"""Reading tokenizer files back: parbpe.json, or GPT-2's vocab.json + merges.txt.

Each reader returns the keyword arguments of model.Tokenizer (not a Tokenizer), so this module
needs nothing of the model; Tokenizer.load and Tokenizer.from_gpt2_files build from them.
A reader of a new format goes here, beside its writer in exports.py.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Collection
from typing import Any

from ..io.filesystems import exists, open_text
from ..patterns import resolve_pattern
from .byte_level import unicode_to_token
from .exports import FORMAT_VERSION


def read_directory(directory: str) -> dict[str, Any]:
    """A directory (or a URI: s3://, gs://, hf://) with parbpe.json, or with GPT-2's vocab.json + merges.txt."""
    path = os.path.join(directory, "parbpe.json")
    if exists(path):
        return read_parbpe_json(path)
    vocab_path, merges_path = os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt")
    if exists(vocab_path) and exists(merges_path):
        return read_gpt2_files(vocab_path, merges_path)
    raise FileNotFoundError(f"{directory} holds neither parbpe.json nor vocab.json + merges.txt")


def read_parbpe_json(path: str) -> dict[str, Any]:
    with open_text(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if data.get("format") != "parbpe" or data.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path}: not a parbpe tokenizer file of a version this parbpe reads")
    return {
        "pattern": data["pattern"],
        "merges": [tuple(m) for m in data["merges"]],
        "byte_ids": data.get("byte_ids") or list(range(256)),
        "stop_words": {base64.b64decode(t): i for t, i in data.get("stop_words", [])},
        "special_tokens": data.get("special_tokens", {}),
    }


def read_gpt2_files(vocab_path: str, merges_path: str, pattern: str = "gpt2",
                    special_tokens: Collection[str] = ("<|endoftext|>",)) -> dict[str, Any]:
    """GPT-2's release format. Tokens of vocab.json that are not byte-level strings and are listed
    in special_tokens become special tokens."""
    with open_text(vocab_path) as f:
        vocab = json.load(f)
    specials = {s: vocab[s] for s in special_tokens if s in vocab}
    by_bytes: dict[bytes, int] = {}
    for text, i in vocab.items():
        if text not in specials:
            by_bytes[unicode_to_token(text)] = i
    try:
        byte_ids = [by_bytes[bytes([b])] for b in range(256)]
    except KeyError as exc:
        raise ValueError(f"{vocab_path}: byte {exc} has no token") from None
    merges = []
    with open_text(merges_path) as f:
        for line_no, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line or (line_no == 1 and line.startswith("#version")):
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{merges_path}:{line_no}: expected two tokens separated by a space")
            a, b = (unicode_to_token(p) for p in parts)
            try:
                merges.append((by_bytes[a], by_bytes[b], by_bytes[a + b]))
            except KeyError as exc:
                raise ValueError(f"{merges_path}:{line_no}: token {exc} is not in {vocab_path}") from None
    return {"pattern": resolve_pattern(pattern), "merges": merges, "byte_ids": byte_ids,
            "special_tokens": specials}

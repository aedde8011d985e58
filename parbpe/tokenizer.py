"""The trained tokenizer: encode and decode, save and load, and exports for the rest of the ecosystem.

Training returns merges; this class only encodes. A chunk is encoded by applying merges in rank
order (the lowest-ranked pair present first, all its occurrences left to right), which reproduces
exactly what training did to that chunk, batched or not: a safe batch's merges never overlap.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Literal

from .patterns import Splitter, pattern_name
from .read import replace_surrogates
from .reduce import write_atomically

FORMAT_VERSION = 1
_CACHE_LIMIT = 200_000


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (used by vocab.json and HF)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_TO_CHAR = bytes_to_unicode()
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_TO_CHAR.items()}


def token_to_unicode(token: bytes) -> str:
    return "".join(_BYTE_TO_CHAR[b] for b in token)


def unicode_to_token(text: str) -> bytes:
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in text)
    except KeyError as exc:
        raise ValueError(f"{text!r} is not a byte-level token string (character {exc} is not in the map)") from None


class Tokenizer:
    """A byte-level BPE tokenizer: split pattern, merges, optional stop list and special tokens.

    Ids: byte_ids[b] is the token of byte b (b for parbpe's own); merges[r] = (a, b, new) makes
    token `new` at rank r; stop_words map whole chunks to tokens; special tokens come last.
    """

    def __init__(
        self,
        *,
        pattern: str,
        merges: Sequence[tuple[int, int, int]],
        byte_ids: Sequence[int] = tuple(range(256)),
        stop_words: dict[bytes, int] | None = None,
        special_tokens: dict[str, int] | None = None,
    ) -> None:
        if len(byte_ids) != 256 or len(set(byte_ids)) != 256:
            raise ValueError("byte_ids must give 256 distinct ids, one per byte")
        self.pattern = pattern
        self.byte_ids = list(byte_ids)
        self.merges = [tuple(m) for m in merges]
        self.stop_words = dict(stop_words or {})
        self.special_tokens = dict(special_tokens or {})
        self.vocab: dict[int, bytes] = {i: bytes([b]) for b, i in enumerate(self.byte_ids)}
        for token, i in self.stop_words.items():
            self.vocab[i] = token
        for a, b, new in self.merges:
            if a not in self.vocab or b not in self.vocab:
                raise ValueError(f"merge ({a}, {b}) -> {new} uses a token defined later or never")
            self.vocab[new] = self.vocab[a] + self.vocab[b]
        for s, i in self.special_tokens.items():
            if i in self.vocab:
                raise ValueError(f"special token {s!r} reuses id {i}")
            self.vocab[i] = s.encode("utf-8")
        if len(self.vocab) != len(self.byte_ids) + len(self.stop_words) + len(self.merges) + len(self.special_tokens):
            raise ValueError("token ids overlap: every byte, stop word, merge and special token needs its own id")
        self._ranks = {(a, b): (r, new) for r, (a, b, new) in enumerate(self.merges)}
        self._stop_by_text = {t.decode("utf-8", errors="replace"): i for t, i in self.stop_words.items()}
        self._splitter = Splitter(pattern, tuple(self.special_tokens))
        self._cache: dict[str, list[int]] = {}

    # -- basic facts ---------------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        """Number of tokens, special tokens included."""
        return len(self.vocab)

    def token_bytes(self, token: int) -> bytes:
        return self.vocab[token]

    # -- encoding ------------------------------------------------------------------------------

    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        stop = self._stop_by_text.get(chunk)
        if stop is not None:
            return [stop]
        byte_ids = self.byte_ids
        ids = [byte_ids[b] for b in chunk.encode("utf-8")]
        ranks = self._ranks
        while len(ids) >= 2:
            best = None
            for pair in zip(ids, ids[1:]):
                found = ranks.get(pair)
                if found is not None and (best is None or found[0] < best[0]):
                    best = found
                    best_pair = pair
            if best is None:
                break
            a, b = best_pair
            new = best[1]
            out = []
            i = 0
            n = len(ids)
            while i < n:
                if i + 1 < n and ids[i] == a and ids[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[chunk] = ids
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode text, treating special-token strings as ordinary text."""
        out: list[int] = []
        for chunk in self._splitter.chunks(replace_surrogates(text)):
            out.extend(self._encode_chunk(chunk))
        return out

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """Encode text; special tokens as in tiktoken.

        Specials in allowed_special become their ids. Any other special in disallowed_special
        ("all" = every special not allowed) raises ValueError; the rest are encoded as text.
        """
        text = replace_surrogates(text)
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise ValueError(f"allowed_special names tokens this tokenizer does not have: {sorted(unknown)}")
        disallowed = (set(self.special_tokens) - allowed) if disallowed_special == "all" else set(disallowed_special)
        out: list[int] = []
        for piece, is_special in self._splitter.segments(text):
            if is_special and piece in allowed:
                out.append(self.special_tokens[piece])
                continue
            if is_special and piece in disallowed:
                raise ValueError(
                    f"the text contains the special token {piece!r}, which is not allowed. To encode "
                    f"it as a special token pass allowed_special={{{piece!r}}} (or 'all'); to encode it "
                    "as plain text pass disallowed_special=() or use encode_ordinary"
                )
            for chunk in self._splitter.chunks(piece):
                out.extend(self._encode_chunk(chunk))
        return out

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        try:
            return b"".join(self.vocab[i] for i in ids)
        except KeyError as exc:
            raise ValueError(f"token id {exc} is not in the vocabulary (0..{self.n_vocab - 1})") from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # -- export formats ------------------------------------------------------------------------

    def export_problems(self) -> dict[str, str]:
        """Formats this tokenizer cannot be written in, with the reason."""
        problems = {}
        if self.stop_words:
            reason = ("a stop list maps whole chunks to tokens, which merges-only formats cannot "
                      "express (they would encode differently); use parbpe.json")
            problems.update(dict.fromkeys(("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken"), reason))
            return problems
        regular = [t for i, t in self.vocab.items() if i not in self.special_tokens.values()]
        if len(set(regular)) != len(regular):
            reason = "two tokens have the same bytes, which a string-keyed vocabulary cannot hold"
            problems.update(dict.fromkeys(("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken"), reason))
            return problems
        new_ids = [new for _, _, new in self.merges]
        if new_ids != sorted(new_ids) or (new_ids and min(new_ids) < max(self.byte_ids)):
            problems["tokenizer.tiktoken"] = "tiktoken ranks are token ids, but here ids do not follow merge order"
        return problems

    def to_hf_json(self) -> dict[str, Any]:
        """The `tokenizers` library's tokenizer.json (BPE model, Split + ByteLevel pre-tokenizer)."""
        specials = self.special_tokens
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [
                {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
                for s, i in sorted(specials.items(), key=lambda kv: kv[1])
            ],
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": self.pattern}, "behavior": "Isolated", "invert": False},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
                ],
            },
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {
                "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                "vocab": self._unicode_vocab(),
                "merges": self._merge_lines(),
            },
        }

    def _unicode_vocab(self) -> dict[str, int]:
        """Token strings in GPT-2's byte-to-unicode form (specials as they are) -> ids."""
        specials = set(self.special_tokens.values())
        vocab = {token_to_unicode(t): i for i, t in sorted(self.vocab.items()) if i not in specials}
        vocab.update(self.special_tokens)
        return vocab

    def _merge_lines(self) -> list[str]:
        """Merges in rank order as "first second" in GPT-2's byte-to-unicode form."""
        return [f"{token_to_unicode(self.vocab[a])} {token_to_unicode(self.vocab[b])}" for a, b, _ in self.merges]

    def to_gpt2_files(self) -> tuple[str, str]:
        """(vocab.json text, merges.txt text) in the GPT-2 release format."""
        merges = ["#version: 0.2", *self._merge_lines()]
        return json.dumps(self._unicode_vocab(), ensure_ascii=False), "\n".join(merges) + "\n"

    def to_tiktoken(self) -> str:
        """tiktoken's rank file: base64 of each token's bytes and its rank (= id), specials excluded."""
        specials = set(self.special_tokens.values())
        return "".join(
            f"{base64.b64encode(t).decode()} {i}\n" for i, t in sorted(self.vocab.items()) if i not in specials
        )

    def to_parbpe_json(self, config: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "format": "parbpe",
            "version": FORMAT_VERSION,
            "pattern": self.pattern,
            "pattern_name": pattern_name(self.pattern),
            "byte_ids": None if self.byte_ids == list(range(256)) else self.byte_ids,
            "stop_words": [[base64.b64encode(t).decode(), i]
                           for t, i in sorted(self.stop_words.items(), key=lambda x: x[1])],
            "special_tokens": self.special_tokens,
            "merges": [list(m) for m in self.merges],
            "vocab_size": self.n_vocab,
            "config": config,
        }

    # -- files ---------------------------------------------------------------------------------

    def save(self, directory: str, *, config: dict[str, Any] | None = None) -> dict[str, str]:
        """Write every format to directory (each atomically); returns {file: "written" | reason}."""
        os.makedirs(directory, exist_ok=True)
        problems = self.export_problems()
        outcome: dict[str, str] = {}
        gpt2_files = functools.cache(self.to_gpt2_files)  # vocab.json and merges.txt come from one call
        writers = {
            "parbpe.json": lambda: json.dumps(self.to_parbpe_json(config), indent=1),
            "tokenizer.json": lambda: json.dumps(self.to_hf_json(), ensure_ascii=False),
            "vocab.json": lambda: gpt2_files()[0],
            "merges.txt": lambda: gpt2_files()[1],
            "tokenizer.tiktoken": self.to_tiktoken,
        }
        for name, make_text in writers.items():
            if name in problems:
                outcome[name] = f"not written: {problems[name]}"
                continue
            write_text_atomically(os.path.join(directory, name), make_text())
            outcome[name] = "written"
        return outcome

    @classmethod
    def load(cls, directory: str) -> Tokenizer:
        """Load from a directory with parbpe.json, or with GPT-2's vocab.json + merges.txt."""
        path = os.path.join(directory, "parbpe.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                try:
                    data = json.load(f)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
            if data.get("format") != "parbpe" or data.get("version", 0) > FORMAT_VERSION:
                raise ValueError(f"{path}: not a parbpe tokenizer file of a version this parbpe reads")
            return cls(
                pattern=data["pattern"],
                merges=[tuple(m) for m in data["merges"]],
                byte_ids=data.get("byte_ids") or list(range(256)),
                stop_words={base64.b64decode(t): i for t, i in data.get("stop_words", [])},
                special_tokens=data.get("special_tokens", {}),
            )
        vocab_path, merges_path = os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt")
        if os.path.exists(vocab_path) and os.path.exists(merges_path):
            return cls.from_gpt2_files(vocab_path, merges_path)
        raise FileNotFoundError(f"{directory} holds neither parbpe.json nor vocab.json + merges.txt")

    @classmethod
    def from_gpt2_files(cls, vocab_path: str, merges_path: str, pattern: str = "gpt2",
                        special_tokens: Collection[str] = ("<|endoftext|>",)) -> Tokenizer:
        """Load GPT-2's release format. Tokens of vocab.json that are not byte-level strings and
        are listed in special_tokens become special tokens."""
        from .patterns import resolve_pattern

        with open(vocab_path, encoding="utf-8") as f:
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
        with open(merges_path, encoding="utf-8") as f:
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
        return cls(pattern=resolve_pattern(pattern), merges=merges, byte_ids=byte_ids, special_tokens=specials)


def write_text_atomically(path: str, text: str) -> None:
    """Write text to a temporary name beside path, then rename it into place."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomically(path, write)

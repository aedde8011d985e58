"""Reading tokenizer files back: parbpe.json, GPT-2's vocab.json + merges.txt, HF tokenizer.json
(byte-level BPE) and tiktoken's rank files; read_any finds which a path holds (train --init).

Each reader returns the keyword arguments of model.Tokenizer (not a Tokenizer), so this module
needs nothing of the model; Tokenizer.load and Tokenizer.from_gpt2_files build from them.
A reader of a new format goes here, beside its writer in exports.py.
"""

from __future__ import annotations

import base64
import functools
import json
import numbers
import os
import re
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from ..io.filesystems import exists, is_remote, open_text
from ..patterns import GPT2_PATTERN, NORMAL_FORMS, resolve_pattern
from .byte_level import unicode_to_token
from .exports import FORMAT_VERSION

# Token ids are int32 in parbpe's tables and u32 in HF tokenizers' files: at most this. And at most
# SPARSE_IDS more than there are tokens: tables indexed by id (the evaluation's counts, the kernels')
# must stay small however the ids are spread.
MAX_TOKEN_ID = 2**31 - 1
SPARSE_IDS = 1 << 24


def token_id(value: Any, where: str) -> int:
    """value as a token id (an integer from 0 to MAX_TOKEN_ID), or a one-line ValueError saying where."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= MAX_TOKEN_ID:
        raise ValueError(f"{where}: token id {value!r} is not an integer from 0 to {MAX_TOKEN_ID:,}")
    return int(value)


def check_token_ids(found: dict[str, Any], where: str) -> None:
    """Every id of a reader's result (or Tokenizer's arguments) in range (token_id), and not so sparse
    that tables indexed by id would be huge."""
    ids = [*found.get("byte_ids", ()), *(m[2] for m in found.get("merges", ()) if len(m) == 3),
           *found.get("stop_words", {}).values(), *found.get("tokens", {}).values(),
           *found.get("special_tokens", {}).values(), *found.get("reserved_ids", ())]
    for i in ids:
        token_id(i, where)
    if ids and max(ids) >= len(ids) + SPARSE_IDS:
        raise ValueError(f"{where}: token id {max(ids):,} for {len(ids):,} tokens: ids this sparse would make "
                         f"tables of {max(ids) + 1:,} entries (at most {SPARSE_IDS:,} ids may be unused)")


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
    if not isinstance(data, dict) or data.get("format") != "parbpe" or data.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path}: not a parbpe tokenizer file of a version this parbpe reads")
    if not isinstance(data.get("pattern"), str):
        raise ValueError(f"{path}: no split pattern (\"pattern\"): a parbpe.json names the regex it splits text with")
    return {
        "pattern": data["pattern"],
        "merges": _parbpe_merges(data["merges"], path),
        "byte_ids": data.get("byte_ids") or list(range(256)),
        "stop_words": {base64.b64decode(t): i for t, i in data.get("stop_words", [])},
        "special_tokens": data.get("special_tokens", {}),
        **({"tokens": {base64.b64decode(t): i for t, i in data["tokens"]}, "segmentation": data.get("segmentation")}
           if data.get("tokens") else {}),
        **({"normalize": data["normalize"]} if data.get("normalize") else {}),
        **({"reserved_ids": [token_id(i, path) for i in data["reserved_ids"]]} if data.get("reserved_ids") else {}),
    }


def _parbpe_merges(merges: Any, path: str) -> list[tuple[int, int, int]]:
    """parbpe.json's merges: a list of [a, b, new] token ids."""
    if not isinstance(merges, list):
        raise ValueError(f"{path}: its merges are a {type(merges).__name__}, not a list of [a, b, new] token ids")
    out = []
    for k, m in enumerate(merges):
        if not isinstance(m, list) or len(m) != 3:
            raise ValueError(f"{path}: merge {k} is {m!r}, not [a, b, new] (three token ids)")
        out.append(tuple(token_id(i, f"{path}: merge {k}") for i in m))
    return out


def read_gpt2_files(vocab_path: str, merges_path: str, pattern: str = "gpt2",
                    special_tokens: Collection[str] = ("<|endoftext|>",)) -> dict[str, Any]:
    """GPT-2's release format. Tokens of vocab.json that are not byte-level strings and are listed
    in special_tokens become special tokens."""
    with open_text(vocab_path) as f:
        vocab = json.load(f)
    if not isinstance(vocab, dict):
        raise ValueError(f"{vocab_path}: the vocabulary is a {type(vocab).__name__}, not an object of tokens and ids")
    specials = {s: token_id(vocab[s], vocab_path) for s in special_tokens if s in vocab}

    def pairs() -> Iterator[tuple[str, list[str]]]:
        with open_text(merges_path) as f:
            for line_no, line in enumerate(f, start=1):
                line = line.rstrip("\n")
                if line and not (line_no == 1 and line.startswith("#version")):
                    yield f"{merges_path}:{line_no}", line.split(" ")

    byte_ids, merges = _byte_level(vocab, specials, pairs(), vocab_path)
    return {"pattern": resolve_pattern(pattern), "merges": merges, "byte_ids": byte_ids,
            "special_tokens": specials}


def read_any(path: str, pattern: str | None = None) -> dict[str, Any]:
    """The tokenizer at path, whatever the format: a directory with parbpe.json, vocab.json +
    merges.txt or tokenizer.json; a tokenizer.json (or any JSON with a BPE "model"); a vocab.json
    beside its merges.txt; a tiktoken rank file. pattern, if given, replaces the file's pattern
    (a tiktoken file has none: the GPT-4 pattern unless given)."""
    stamp = _stamp(path)
    found = dict(_read_cached(path, stamp) if stamp is not None else _read(path))
    if pattern is not None:
        found["pattern"] = resolve_pattern(pattern)
    return found


def _stamp(path: str) -> tuple | None:
    """What tells a local tokenizer's files apart over time (names, sizes, mtimes); None: not local."""
    if is_remote(path) or not os.path.exists(path):
        return None
    if os.path.isdir(path) or os.path.basename(path) == "vocab.json":  # its merges.txt is beside it
        path = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        return tuple(sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(path) if e.is_file()))
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, stamp: tuple) -> dict[str, Any]:
    """_read, once per version of the files: a run reads its --init tokenizer in its settings and
    again to train (GPT-2's rank file takes about half a second). Callers must not change what it
    returns (model.Tokenizer copies what it keeps)."""
    return _read(path)


def is_rank_file(path: str) -> bool:
    """Whether read_any reads path as a tiktoken rank file or a hex vocabulary (the formats without a
    split pattern)."""
    return not _is_directory(path) and not path.endswith(".json")


def carries_no_pattern(path: str) -> bool:
    """Whether read_any reads path from a format without a split pattern: a rank file, a hex vocabulary,
    or GPT-2's vocab.json + merges.txt (a directory holding them and neither parbpe.json nor
    tokenizer.json): a pattern given by the user applies to these."""
    if is_rank_file(path):
        return True
    if os.path.basename(path) == "vocab.json":
        return True
    return _is_directory(path) and not exists(os.path.join(path, "parbpe.json")) and \
        not exists(os.path.join(path, "tokenizer.json")) and exists(os.path.join(path, "vocab.json"))


def read_hex_vocab(path: str, pattern: str = "gpt4") -> dict[str, Any]:
    """A vocabulary file of hex tokens one a line (PathPiece's): a tokenizer without merges that
    segments into the fewest tokens; ids in line order; every single byte must be there."""
    from .segment import VocabIndex, parse_hex_vocab

    with open_text(path) as f:
        try:
            tokens = parse_hex_vocab(f.read(), max_len=1 << 16)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    VocabIndex(tokens, max(map(len, tokens)))
    ids = {t: i for i, t in enumerate(tokens)}
    return {"pattern": resolve_pattern(pattern), "byte_ids": [ids[bytes([b])] for b in range(256)],
            "tokens": {t: i for t, i in ids.items() if len(t) > 1}, "segmentation": "shortest"}


_HEX_LINE = re.compile(r"(?:[0-9a-fA-F]{2})+")


def _holds_hex_lines(path: str, sniff: int = 1 << 16) -> bool:
    """Whether a file's first lines are hex tokens one a line (PathPiece's vocabularies, whatever their
    name: vdump_32768.vocab), not a tiktoken file's "base64 rank" lines: known by content, not name."""
    with open_text(path) as f:
        head = f.read(sniff)
    lines = head.splitlines()
    if len(head) == sniff and lines:
        lines = lines[:-1]  # the last may be cut
    lines = [line.strip() for line in lines if line.strip()]
    return bool(lines) and all(_HEX_LINE.fullmatch(line) for line in lines)


def _is_directory(path: str) -> bool:
    """A local directory, or a remote prefix holding a tokenizer's files (object stores have no folders)."""
    if not is_remote(path):
        return os.path.isdir(path)
    return any(exists(os.path.join(path, name)) for name in ("parbpe.json", "vocab.json", "tokenizer.json"))


def _read(path: str) -> dict[str, Any]:
    """read_any's work: which format path holds, read. A file whose structure is not the format's (a
    key missing, a list for an object, JSON nested too deep for Python) is a one-line ValueError."""
    if not exists(path) and not _is_directory(path):
        raise FileNotFoundError(f"no tokenizer at {path}")
    try:
        found = _read_format(path)
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a tokenizer file") from None
    except KeyError as exc:
        raise ValueError(f"{path}: not a tokenizer file parbpe reads (no {exc} where the format has one)") from None
    except (TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"{path}: not a tokenizer file parbpe reads (a value of the wrong kind: {exc})") from None
    check_token_ids(found, path)
    return found


def _read_format(path: str) -> dict[str, Any]:
    """_read's dispatch on the format."""
    if _is_directory(path):
        if not exists(os.path.join(path, "parbpe.json")) and not exists(os.path.join(path, "vocab.json")) \
                and exists(os.path.join(path, "tokenizer.json")):
            found = read_tokenizer_json(os.path.join(path, "tokenizer.json"))
        else:
            found = read_directory(path)
    elif os.path.basename(path) == "vocab.json":
        merges = os.path.join(os.path.dirname(path), "merges.txt")
        if not exists(merges):
            raise FileNotFoundError(f"{path} is GPT-2's vocab.json, but its merges.txt is not beside it ({merges})")
        found = read_gpt2_files(path, merges)
    elif path.endswith(".json"):
        found = read_tokenizer_json(path)
    elif path.endswith(".hex") or _holds_hex_lines(path):
        found = read_hex_vocab(path)
    else:
        found = read_tiktoken(path)
    return found


def read_tokenizer_json(path: str) -> dict[str, Any]:
    """HF `tokenizers`' tokenizer.json of a byte-level BPE model (GPT-2, Llama 3, parbpe's own):
    its vocabulary, merges in rank order, added special tokens and the split pattern of its
    pre-tokenizer (a Split regex, or ByteLevel's own regex: GPT-2's)."""
    with open_text(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    model = data.get("model") if isinstance(data, dict) else None
    if isinstance(model, dict) and model.get("type") == "Unigram" and _is_byte_level(data):
        return _fewest_tokens_unigram(data, model, path)
    if not isinstance(model, dict) or model.get("type", "BPE") != "BPE" or "merges" not in model:
        raise ValueError(f"{path}: not a BPE tokenizer.json (no BPE model with merges)")
    for option in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(option):
            raise ValueError(f"{path}: its BPE model sets {option}={model[option]!r}, which byte-level BPE "
                             "does not use")
    if not _is_byte_level(data):
        raise ValueError(f"{path}: not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer or decoder); "
                         "parbpe continues byte-level BPE only")
    specials = {t["content"]: token_id(t["id"], path) for t in data.get("added_tokens", []) if t.get("special", True)}
    pairs = ((f"{path}: merge {k}", m.split(" ") if isinstance(m, str) else m) for k, m in enumerate(model["merges"]))
    byte_ids, merges = _byte_level(model["vocab"], specials, pairs, path)
    return {"pattern": _split_pattern(data.get("pre_tokenizer"), path), "merges": merges, "byte_ids": byte_ids,
            "special_tokens": specials, **_normal_form(data.get("normalizer"), path)}


def _fewest_tokens_unigram(data: dict[str, Any], model: dict[str, Any], path: str) -> dict[str, Any]:
    """A byte-level Unigram model whose tokens all score the same (parbpe's export of a vocabulary
    segmented into the fewest tokens): its vocabulary, segmented by shortest."""
    specials = {t["content"]: int(t["id"]) for t in data.get("added_tokens", []) if t.get("special", True)}
    scores = {score for piece, score in model["vocab"] if piece not in specials}
    if len(scores) > 1:
        raise ValueError(f"{path}: a Unigram model with different token scores segments by likelihood, which "
                         "parbpe does not; it reads the fewest-token Unigram models it writes (equal scores)")
    tokens = {unicode_to_token(piece): i for i, (piece, _) in enumerate(model["vocab"]) if piece not in specials}
    missing = [b for b in range(256) if bytes([b]) not in tokens]
    if missing:
        raise ValueError(f"{path}: byte {missing[0]} has no token (a byte-level vocabulary holds all 256 bytes)")
    byte_ids = [tokens[bytes([b])] for b in range(256)]
    return {"pattern": _split_pattern(data.get("pre_tokenizer"), path), "byte_ids": byte_ids,
            "tokens": {t: i for t, i in tokens.items() if len(t) > 1}, "special_tokens": specials,
            "segmentation": "shortest", **_normal_form(data.get("normalizer"), path)}


def _normal_form(normalizer: Any, path: str) -> dict[str, str]:
    """{"normalize": form} for a Unicode normalizer (NFC, NFD, NFKC, NFKD), {} for none; any other
    normalizer is refused (parbpe would encode differently from the file)."""
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        inner = normalizer.get("normalizers") or []
        if len(inner) > 1:
            raise ValueError(f"{path}: its normalizer is a sequence of {len(inner)}; parbpe applies one Unicode "
                             "normal form (NFC, NFD, NFKC, NFKD) or none")
        normalizer = inner[0] if inner else None
    if normalizer is None:
        return {}
    kind = normalizer.get("type") if isinstance(normalizer, dict) else None
    if isinstance(kind, str) and kind.lower() in NORMAL_FORMS:
        return {"normalize": kind.lower()}
    raise ValueError(f"{path}: its normalizer ({kind or normalizer!r}) is not one parbpe applies: parbpe applies "
                     f"the Unicode normal forms {', '.join(f.upper() for f in NORMAL_FORMS)} only")


def _byte_level(vocab: dict[str, int], specials: dict[str, int], pairs: Iterable[tuple[str, list[str]]],
                source: str) -> tuple[list[int], list[tuple[int, int, int]]]:
    """The byte ids and merges (a, b, new) of a byte-level vocabulary (GPT-2's unicode strings ->
    ids) and its merges as pairs of strings, each given with where it stands (for messages)."""
    if not isinstance(vocab, dict):
        raise ValueError(f"{source}: the vocabulary is a {type(vocab).__name__}, not an object of tokens and ids")
    by_bytes = {unicode_to_token(text): token_id(i, source) for text, i in vocab.items() if text not in specials}
    try:
        byte_ids = [by_bytes[bytes([b])] for b in range(256)]
    except KeyError as exc:
        raise ValueError(f"{source}: byte {exc} has no token") from None
    merges = []
    for where, parts in pairs:
        if len(parts) != 2:
            raise ValueError(f"{where}: expected two tokens separated by a space")
        a, b = (unicode_to_token(p) for p in parts)
        try:
            merges.append((by_bytes[a], by_bytes[b], by_bytes[a + b]))
        except KeyError as exc:
            raise ValueError(f"{where}: token {exc} is not in the vocabulary of {source}") from None
    return byte_ids, merges


def _is_byte_level(data: dict[str, Any]) -> bool:
    def types(node: Any) -> list[str]:
        if not isinstance(node, dict):
            return []
        inner = node.get("pretokenizers") or node.get("decoders") or []
        return [node.get("type", "")] + [t for n in inner for t in types(n)]

    return "ByteLevel" in types(data.get("pre_tokenizer")) + types(data.get("decoder"))


def _split_pattern(pre: Any, path: str) -> str:
    """The regex a pre-tokenizer splits with: its Split's, else ByteLevel's built-in (GPT-2's)."""
    nodes = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    for node in nodes:
        if node.get("type") == "Split" and isinstance(node.get("pattern"), dict) and "Regex" in node["pattern"]:
            return node["pattern"]["Regex"]
    for node in nodes:
        if node.get("type") == "ByteLevel" and node.get("use_regex", True):
            return GPT2_PATTERN
    raise ValueError(f"{path}: its pre-tokenizer gives no split pattern parbpe can read; pass --pattern")


# tiktoken's published encodings: their rank files hold neither the split pattern nor the special
# tokens. A file named after one (gpt2.tiktoken, as openai-whisper ships it; cl100k_base.tiktoken)
# gets its pattern and all its special tokens at their published ids (tiktoken_ext/openai_public.py).
_ENDOFTEXT_50K = {"<|endoftext|>": 50256}
TIKTOKEN_ENCODINGS = {
    "gpt2": ("gpt2", _ENDOFTEXT_50K), "r50k_base": ("gpt2", _ENDOFTEXT_50K), "p50k_base": ("gpt2", _ENDOFTEXT_50K),
    "cl100k_base": ("gpt4", {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                             "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}),
    "o200k_base": ("gpt4o", {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}


# How many ranks each published encoding's file holds: a file named after one must be it.
TIKTOKEN_RANKS = {"gpt2": 50256, "r50k_base": 50256, "p50k_base": 50280, "cl100k_base": 100256,
                  "o200k_base": 199998}


def read_tiktoken(path: str, pattern: str | None = None) -> dict[str, Any]:
    """A tiktoken rank file (one "base64-token rank" a line; the rank is the id). The merges are
    rebuilt as tiktoken encodes: a token of rank r is what its bytes become when merged by the
    tokens ranked below r, which must leave exactly two parts. Special tokens and the pattern
    are not in the file: one named after a published encoding (TIKTOKEN_ENCODINGS) gets its
    pattern and all its special tokens; any other, GPT-4's pattern and no special token unless given
    (--pattern, --special-tokens). A "= N" line (an empty token, which tiktoken accepts) is skipped."""
    name = os.path.basename(path).rsplit(".", 1)[0].lower()
    known = TIKTOKEN_ENCODINGS.get(name)
    ranks: dict[bytes, int] = {}
    reserved: list[int] = []
    with open_text(path) as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) == 1:  # " N": an empty token, as tiktoken reads it
                parts = ["", *parts]
            try:
                token = b"" if parts[0] == "=" else base64.b64decode(parts[0], validate=True)
                rank = int(parts[1])
                if len(parts) != 2:
                    raise ValueError
                if not token:  # "= N" (base64 of nothing): tiktoken keeps the id, never produces it
                    reserved.append(token_id(rank, f"{path}:{line_no}"))
                    continue
            except (ValueError, IndexError):
                raise ValueError(f"{path}:{line_no}: expected a base64 token and its rank (a tiktoken file)") from None
            ranks[token] = token_id(rank, f"{path}:{line_no}")
    if known is not None and len(ranks) != TIKTOKEN_RANKS[name]:
        raise ValueError(f"{path} is named after the {name} encoding but holds {len(ranks):,} ranks, not its "
                         f"{TIKTOKEN_RANKS[name]:,}: it would get that encoding's pattern and special tokens; "
                         "rename it (any other name is read as a rank file of its own: --pattern, --special-tokens)")
    try:
        byte_ids = [ranks[bytes([b])] for b in range(256)]
    except KeyError as exc:
        raise ValueError(f"{path}: byte {exc} has no rank") from None
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = _tiktoken_parts(token, rank, ranks)
        if len(parts) != 2:
            raise ValueError(f"{path}: token {token!r} (rank {rank}) is not made by merging two lower-ranked tokens")
        merges.append((ranks[parts[0]], ranks[parts[1]], rank))
    taken = set(ranks.values())
    specials = {name: id_ for name, id_ in (known[1] if known is not None else {}).items() if id_ not in taken}
    pattern = pattern or (known[0] if known is not None else "gpt4")
    specials = {name: id_ for name, id_ in specials.items() if id_ not in reserved}
    return {"pattern": resolve_pattern(pattern), "merges": merges, "byte_ids": byte_ids, "special_tokens": specials,
            **({"reserved_ids": sorted(set(reserved))} if reserved else {})}


def _tiktoken_parts(token: bytes, rank: int, ranks: dict[bytes, int]) -> list[bytes]:
    """token's bytes merged, lowest rank first, by the tokens ranked below `rank`."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], rank)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts

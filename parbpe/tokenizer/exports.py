"""The export formats: HF tokenizer.json, GPT-2's vocab.json + merges.txt, tiktoken's rank file,
parbpe.json, transformers' tokenizer_config.json + special_tokens_map.json (so that
AutoTokenizer.from_pretrained loads the directory with its special tokens' roles); and save(),
which writes every format a tokenizer can express, each atomically.

A new format is a function here and one line in save()'s table; its reader goes in load.py.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..io.atomic import write_files_atomically
from ..patterns import GPT2_PATTERN, pattern_name
from .byte_level import json_quoted, token_to_unicode, unicode_to_token

FORMAT_VERSION = 1
# Every file name file_makers can write: an output directory's earlier files are recognized by them
# (pipeline/out_dir.py), so a new run into the same --out leaves none of an earlier run behind.
EXPORT_NAMES = ("parbpe.json", "tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken",
                "tokenizer_config.json", "special_tokens_map.json", "vocab.hex")


class Tokenizer(Protocol):
    """What an export reads of a tokenizer (model.Tokenizer has it; model.py imports this module)."""

    pattern: str
    byte_ids: list[int]
    merges: list[tuple[int, int, int]]
    stop_words: dict[bytes, int]
    special_tokens: dict[str, int]
    vocab: dict[int, bytes]

    @property
    def n_vocab(self) -> int: ...


def export_problems(tok: Tokenizer) -> dict[str, str]:
    """Formats this tokenizer cannot be written in, with the reason."""
    problems = {}
    if tok.tokens:
        reason = (f"a vocabulary without merges (segmented by {tok.segmentation}) has no merges for this format; "
                  "use parbpe.json or vocab.hex")
        needs_merges = ("vocab.json", "merges.txt", "tokenizer.tiktoken")
        if tok.segmentation != "shortest":  # the fewest tokens is a Unigram model of equal scores; greedy is not
            needs_merges += ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
        problems.update(dict.fromkeys(needs_merges, reason))
        return problems
    if tok.stop_words:
        reason = ("a stop list maps whole chunks to tokens, which merges-only formats cannot "
                  "express (they would encode differently); use parbpe.json")
        problems.update(dict.fromkeys(("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken",
                                       "tokenizer_config.json", "special_tokens_map.json"), reason))
        return problems
    regular = [t for i, t in tok.vocab.items() if i not in tok.special_tokens.values()]
    if len(set(regular)) != len(regular):
        reason = "two tokens have the same bytes, which a string-keyed vocabulary cannot hold"
        problems.update(dict.fromkeys(("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken",
                                       "tokenizer_config.json", "special_tokens_map.json"), reason))
        return problems
    new_ids = [new for _, _, new in tok.merges]
    if new_ids != sorted(new_ids) or (new_ids and min(new_ids) < max(tok.byte_ids)):
        problems["tokenizer.tiktoken"] = "tiktoken ranks are token ids, but here ids do not follow merge order"
    return problems


def hf_json(tok: Tokenizer, vocab: Any = None, merges: Any = None, dropout: float | None = None) -> dict[str, Any]:
    """The `tokenizers` library's tokenizer.json (BPE model, Split + ByteLevel pre-tokenizer);
    vocab and merges, if given, stand in for the model's vocabulary and merges (hf_json_pieces);
    dropout: BPE-dropout's probability, which `tokenizers` applies when it encodes (None: off)."""
    specials = tok.special_tokens
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for s, i in sorted(specials.items(), key=lambda kv: kv[1])
        ],
        "normalizer": {"type": tok.normalize.upper()} if tok.normalize else None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": tok.pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE", "dropout": dropout or None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": unicode_vocab(tok) if vocab is None else vocab,
            "merges": merge_lines(tok) if merges is None else merges,
        },
    }


def unicode_vocab(tok: Tokenizer) -> dict[str, int]:
    """Token strings in GPT-2's byte-to-unicode form (specials as they are) -> ids."""
    return dict(_vocab_items(tok))


def _vocab_items(tok: Tokenizer) -> Iterator[tuple[str, int]]:
    """unicode_vocab's items in its order, made one at a time (a special token whose text equals a
    regular token's takes that entry's place, as a dict update would)."""
    specials = set(tok.special_tokens.values())
    seen = set()
    for i, t in sorted(tok.vocab.items()):
        if i not in specials:
            text = token_to_unicode(t)
            if text in tok.special_tokens:
                seen.add(text)
            yield text, tok.special_tokens.get(text, i)
    yield from ((s, i) for s, i in tok.special_tokens.items() if s not in seen)


def merge_lines(tok: Tokenizer) -> list[str]:
    """Merges in rank order as "first second" in GPT-2's byte-to-unicode form."""
    return list(_merge_lines(tok))


def _merge_lines(tok: Tokenizer) -> Iterator[str]:
    return (f"{token_to_unicode(tok.vocab[a])} {token_to_unicode(tok.vocab[b])}" for a, b, _ in tok.merges)


# The large files are made a token at a time (pieces, written as they come): a vocabulary of
# multi-megabyte tokens (hostile text: 50 MB of one letter makes tokens of up to 50 MB, 570 MB in all)
# is then held once, by the tokenizer, never again as whole file texts, and a token is copied as
# little as can be (a token of plain ASCII is its own UTF-8 text: its bytes are written as they are).
# The pieces join to exactly what json.dumps writes (default separators, ensure_ascii=False).
_PLAIN = bytes(b for b in range(0x21, 0x7F) if b not in b'"\\')  # bytes written as they are


def _token_text(token: bytes) -> Iterator[str | bytes]:
    """token_to_unicode(token) as pieces."""
    yield token if not token.translate(None, _PLAIN) else token_to_unicode(token)


def _token_json(token: bytes) -> Iterator[str | bytes]:
    """json.dumps(token_to_unicode(token), ensure_ascii=False) as pieces."""
    if not token.translate(None, _PLAIN):
        yield from (b'"', token, b'"')
    else:
        yield json_quoted(token_to_unicode(token))


_LONG = 1 << 12  # a token longer than this is written in pieces of its own; shorter ones' entries ...
_BATCH = 2048  # ... are joined this many at a time into one piece (a generator step per token was most of a write)


def _batched(entries: Iterable[str | tuple]) -> Iterator[str | bytes]:
    """Entries' texts joined _BATCH at a time; an entry given as a tuple of pieces (a long token's) is
    passed on as those pieces, after the entries before it."""
    batch: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            batch.append(entry)
            if len(batch) < _BATCH:
                continue
        if batch:
            yield "".join(batch)
            batch = []
        if not isinstance(entry, str):
            yield from entry
    if batch:
        yield "".join(batch)


class Spelling:
    """Each token of at most _LONG bytes in GPT-2's byte-to-unicode form, as it is and escaped for a
    JSON string, made once for every file of a save: vocab.json, merges.txt and tokenizer.json write
    each token two to four times, and those conversions were most of the files' making. Longer tokens
    are written in pieces, never held as one string."""

    def __init__(self, tok: Tokenizer) -> None:
        self._vocab = tok.vocab

    @functools.cached_property
    def text(self) -> dict[int, str]:
        """token_to_unicode of each short token, by id."""
        return {i: token_to_unicode(t) for i, t in self._vocab.items() if len(t) <= _LONG}

    @functools.cached_property
    def escaped(self) -> dict[int, str]:
        """The same texts as inside a JSON string (json_quoted without its quotes), by id."""
        return {i: json_quoted(text)[1:-1] for i, text in self.text.items()}


def vocab_json_pieces(tok: Tokenizer, spelling: Spelling | None = None) -> Iterator[str | bytes]:
    """vocab.json: json.dumps(unicode_vocab(tok), ensure_ascii=False), in pieces (spelling: the
    tokens' texts, if another file of the save made them)."""
    spelling = spelling or Spelling(tok)
    specials = set(tok.special_tokens.values())
    as_bytes = {}  # special tokens written like a regular token's bytes: they take its entry (dict.update)
    for text in tok.special_tokens:
        with contextlib.suppress(ValueError):
            as_bytes[unicode_to_token(text)] = text
    yield "{"
    seen: set[str] = set()
    regular = [(i, t) for i, t in sorted(tok.vocab.items()) if i not in specials]

    def entries() -> Iterator[str | tuple]:
        escaped = spelling.escaped
        for k, (i, t) in enumerate(regular):
            written = i
            if t in as_bytes:
                seen.add(as_bytes[t])
                written = tok.special_tokens[as_bytes[t]]
            comma = ", " if k else ""
            yield f'{comma}"{escaped[i]}": {written}' if len(t) <= _LONG else (comma, *_token_json(t), f": {written}")

    yield from _batched(entries())
    k = len(regular) - 1
    for s, i in tok.special_tokens.items():
        if s not in seen:
            k += 1
            yield f"{', ' if k else ''}{json.dumps(s, ensure_ascii=False)}: {i}"
    yield "}"


def _merge_pieces(tok: Tokenizer, quoted: bool, spelling: Spelling | None = None) -> Iterator[str | bytes]:
    """Each merge as "first second" in GPT-2's byte-to-unicode form (JSON strings if quoted), then
    a separator: pieces of merges.txt's lines or of tokenizer.json's merges list."""
    spelling = spelling or Spelling(tok)
    vocab = tok.vocab
    texts = spelling.escaped if quoted else spelling.text

    def entries() -> Iterator[str | tuple]:
        for k, (a, b, _) in enumerate(tok.merges):
            first, second = vocab[a], vocab[b]
            if len(first) + len(second) > _LONG:
                yield _long_merge(k, first, second, quoted)
            elif quoted:
                yield f'{", " if k else ""}"{texts[a]} {texts[b]}"'
            else:
                yield f"{texts[a]} {texts[b]}\n"

    yield from _batched(entries())


def _long_merge(k: int, first: bytes, second: bytes, quoted: bool) -> tuple:
    """Merge k's text in _merge_pieces when its tokens are more than _LONG bytes together: pieces."""
    plain = not first.translate(None, _PLAIN) and not second.translate(None, _PLAIN)
    if quoted:
        comma = ", " if k else ""
        return (comma, b'"', first, b" ", second, b'"') if plain else \
            (comma, json_quoted(f"{token_to_unicode(first)} {token_to_unicode(second)}"))
    return (*_token_text(first), " ", *_token_text(second), "\n")


def merges_txt_pieces(tok: Tokenizer, spelling: Spelling | None = None) -> Iterator[str | bytes]:
    """merges.txt: "#version: 0.2", then a line per merge, in pieces."""
    yield "#version: 0.2\n"
    yield from _merge_pieces(tok, quoted=False, spelling=spelling)


def hf_unigram_json(tok: Tokenizer) -> dict[str, Any]:
    """tokenizer.json of a vocabulary segmented into the fewest tokens: a Unigram model whose tokens all
    score the same, so that its best path (the greatest sum of scores) is the one of fewest tokens, over
    the same Split + ByteLevel pre-tokenization (a token is its bytes in GPT-2's byte-to-unicode form).
    Among segmentations of equal count `tokenizers` may choose another than parbpe's longest-last rule:
    the count is the same (tests/pathpiece/test_pipeline.py)."""
    ids = sorted(tok.vocab)
    if ids != list(range(len(ids))):
        raise ValueError("a Unigram tokenizer.json needs the ids 0..n-1 without gaps")
    specials = {i: s for s, i in tok.special_tokens.items()}
    skeleton = hf_json(tok, vocab={}, merges=[])
    skeleton["model"] = {
        "type": "Unigram", "unk_id": None, "byte_fallback": False,
        "vocab": [[specials[i], 0.0] if i in specials else [token_to_unicode(tok.vocab[i]), -1.0] for i in ids],
    }
    return skeleton


def hf_json_pieces(tok: Tokenizer, dropout: float | None = None, spelling: Spelling | None = None
                   ) -> Iterator[str | bytes]:
    """tokenizer.json: json.dumps(hf_json(tok), ensure_ascii=False), in pieces (the vocabulary and
    the merges are put in place of two markers of the rest)."""
    vocab_marker, merges_marker = "\0parbpe vocab\0", "\0parbpe merges\0"
    skeleton = hf_json(tok, vocab=vocab_marker, merges=merges_marker, dropout=dropout)
    text = json.dumps(skeleton, ensure_ascii=False)
    before, rest = text.split(json.dumps(vocab_marker), 1)
    middle, after = rest.split(json.dumps(merges_marker), 1)
    spelling = spelling or Spelling(tok)
    yield before
    yield from vocab_json_pieces(tok, spelling)
    yield middle + "["
    yield from _merge_pieces(tok, quoted=True, spelling=spelling)
    yield "]" + after


def gpt2_files(tok: Tokenizer) -> tuple[str, str]:
    """(vocab.json text, merges.txt text) in the GPT-2 release format."""
    return joined(vocab_json_pieces(tok)), joined(merges_txt_pieces(tok))


def tiktoken_pieces(tok: Tokenizer) -> Iterator[str | bytes]:
    """tiktoken's rank file in pieces: base64 of each token's bytes and its rank (= id) on a line,
    specials excluded."""
    specials = set(tok.special_tokens.values())
    reserved = [(i, b"") for i in tok.reserved_ids]  # "= N": the id kept, no token (as tiktoken reads it)
    for i, t in sorted([*tok.vocab.items(), *reserved]):
        if i not in specials:
            yield base64.b64encode(t) if t else b"="
            yield f" {i}\n"


def hex_vocab_pieces(tok: Tokenizer) -> Iterator[str]:
    """The vocabulary as hex bytes of each non-special token, one a line, in id order."""
    specials = set(tok.special_tokens.values())
    for i, t in sorted(tok.vocab.items()):
        if i not in specials:
            yield t.hex() + "\n"


def joined(pieces: Iterator[str | bytes]) -> str:
    """Pieces of text (bytes pieces are UTF-8) as one text."""
    return "".join(p if isinstance(p, str) else p.decode("utf-8") for p in pieces)


def tiktoken_ranks(tok: Tokenizer) -> str:
    """tiktoken's rank file (tiktoken_pieces) as one text."""
    return joined(tiktoken_pieces(tok))


def parbpe_json(tok: Tokenizer, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """parbpe's own file: everything needed to load the tokenizer back, and the config that trained it."""
    return {
        "format": "parbpe",
        "version": FORMAT_VERSION,
        "pattern": tok.pattern,
        "pattern_name": pattern_name(tok.pattern),
        "byte_ids": None if tok.byte_ids == list(range(256)) else tok.byte_ids,
        "stop_words": [[base64.b64encode(t).decode(), i]
                       for t, i in sorted(tok.stop_words.items(), key=lambda x: x[1])],
        "special_tokens": tok.special_tokens,
        "merges": [list(m) for m in tok.merges],
        **({"tokens": [[base64.b64encode(t).decode(), i] for t, i in sorted(tok.tokens.items(), key=lambda x: x[1])],
            "segmentation": tok.segmentation} if tok.tokens else {}),
        **({"normalize": tok.normalize} if tok.normalize else {}),
        **({"reserved_ids": list(tok.reserved_ids)} if tok.reserved_ids else {}),
        "vocab_size": tok.n_vocab,
        "config": config,
    }


def parbpe_json_text(tok: Tokenizer, config: dict[str, Any] | None = None) -> str:
    """json.dumps(parbpe_json(tok, config), indent=1), with the merges' lists written here: with an
    indent, json encodes in Python, and the merges were most of the time."""
    marker = "\0parbpe merges\0"
    text = json.dumps({**parbpe_json(tok, config), "merges": marker}, indent=1)
    merges = ",\n".join("  [\n" + ",\n".join(f"   {x}" for x in m) + "\n  ]" if len(m) else "  []"
                         for m in tok.merges)
    return text.replace(json.dumps(marker), "[\n" + merges + "\n ]" if merges else "[]", 1)


ROLES = ("bos_token", "eos_token", "pad_token")


def special_token_roles(tok: Tokenizer, config: dict[str, Any] | None) -> dict[str, str]:
    """{role: token} for transformers: as the config sets them, else the first special token as eos."""
    if config is not None and any(config.get(role) for role in ROLES):
        return {role: config[role] for role in ROLES if config.get(role)}
    first = min(tok.special_tokens.items(), key=lambda kv: kv[1], default=None)
    return {"eos_token": first[0]} if first else {}


def transformers_files(tok: Tokenizer, roles: dict[str, str]) -> tuple[str, str]:
    """(tokenizer_config.json text, special_tokens_map.json text): what transformers' AutoTokenizer
    reads beside tokenizer.json to give a PreTrainedTokenizerFast with these special-token roles.
    Nothing is added around encoded text (no BOS/EOS post-processing), so it encodes as parbpe does."""
    added = {
        str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True}
        for s, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        **{role: roles.get(role) for role in ROLES},
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    return json.dumps(config, indent=1, ensure_ascii=False), json.dumps(roles, indent=1, ensure_ascii=False)


NO_NORMALIZER = ("vocab.json", "merges.txt", "tokenizer.tiktoken")


def file_makers(tok: Tokenizer, config: dict[str, Any] | None = None
                ) -> tuple[dict[str, Callable[[], str | Iterator[str]]], dict[str, str]]:
    """What save writes: ({file: a function making its text, or its text in pieces}, {file:
    "written" | why not}). config (the training settings) is recorded in parbpe.json and sets the
    special tokens' roles."""
    problems = export_problems(tok)
    hf_texts = functools.cache(lambda: transformers_files(tok, special_token_roles(tok, config)))
    spelling = Spelling(tok)  # the tokens' texts, made by the first file that writes them
    writers = {
        "parbpe.json": lambda: parbpe_json_text(tok, config),
        "tokenizer.json": (lambda: json.dumps(hf_unigram_json(tok), ensure_ascii=False)) if tok.tokens else (
            lambda: hf_json_pieces(tok, (config or {}).get("dropout"), spelling)),
        "vocab.json": lambda: vocab_json_pieces(tok, spelling),
        "merges.txt": lambda: merges_txt_pieces(tok, spelling),
        "tokenizer.tiktoken": lambda: tiktoken_pieces(tok),
        "tokenizer_config.json": lambda: hf_texts()[0],
        "special_tokens_map.json": lambda: hf_texts()[1],
    }
    if tok.tokens:  # PathPiece's format: hex bytes of each non-special token, one a line, by id
        writers["vocab.hex"] = lambda: hex_vocab_pieces(tok)
    outcome = {name: f"not written: {problems[name]}" if name in problems else "written" for name in writers}
    if tok.normalize:  # formats with no place for a normalizer: still useful, said aloud
        for name in NO_NORMALIZER:
            if outcome[name] == "written":
                outcome[name] = (f"written, without the {tok.normalize.upper()} normalizer (the format has none): "
                                 f"put text in {tok.normalize.upper()} before encoding with it")
    if tok.pattern != GPT2_PATTERN:  # GPT-2's files carry no pattern: read alone, they split with GPT-2's
        said = pattern_name(tok.pattern)
        for name in ("vocab.json", "merges.txt"):
            if outcome[name].startswith("written"):
                outcome[name] += ("; " if outcome[name] != "written" else ", ") + (
                    f"without the split pattern ({said or 'a custom regex'}; the format has none): loaded alone "
                    "they split with GPT-2's pattern, so give the pattern when loading them "
                    f"({'--pattern ' + said if said else '--pattern REGEX'}, or HF's pre-tokenizer), or use "
                    "tokenizer.json or parbpe.json")
    return {name: make for name, make in writers.items() if name not in problems}, outcome


def save(tok: Tokenizer, directory: str, *, config: dict[str, Any] | None = None) -> dict[str, str]:
    """Write every format to directory, all or none (a full disk leaves no file); returns
    {file: "written" | reason}."""
    makers, outcome = file_makers(tok, config)
    write_files_atomically(directory, makers)
    return outcome

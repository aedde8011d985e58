"""Tokenizer: round trips, special tokens, save/load, GPT-2 files, exports loaded by peers."""

from __future__ import annotations

import base64
import json
import os
import random

import pytest

import parbpe
from parbpe.patterns import GPT4_PATTERN
from parbpe.tokenizer.byte_level import bytes_to_unicode, token_to_unicode
from parbpe.tokenizer.model import Tokenizer

CORPUS = (
    "The quick brown fox jumps over the lazy dog. It's 2024, isn't it? Numbers: 1234567 3.14159\n"
    "    def function(self, x):\n        return x ** 2  # comment\n\n"
    "Ünïcödé: naïve café; 中文文本测试; 日本語のテキスト; русский язык; العربية 😀🎉 ✓✓✓\n"
    "aaaaaaa bbbbbb ab ab ab abab!!! ??? ... --- ___ \t\t\r\n<|endoftext|>next document here\n"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "corpus.txt").write_text(CORPUS * 20, encoding="utf-8")
    result = parbpe.train([str(d / "corpus.txt")], vocab_size=600, special_tokens=("<|endoftext|>",), workers=1)
    out = d / "out"
    result.tokenizer.save(str(out))
    return result.tokenizer, out


def random_unicode(rng: random.Random, n: int) -> str:
    pools = [
        (0x20, 0x7E), (0x00, 0x1F), (0x80, 0x2FF), (0x400, 0x4FF), (0x4E00, 0x4FFF), (0x3040, 0x30FF),
        (0xD7F0, 0xD7FF), (0xE000, 0xE010), (0xFFF0, 0xFFFF), (0x1F600, 0x1F64F), (0x10FFF0, 0x10FFFF),
    ]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(pools)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def test_round_trip_random_unicode(trained):
    tok, _ = trained
    rng = random.Random(0)
    for _ in range(200):
        text = random_unicode(rng, rng.randint(0, 200))
        assert tok.decode(tok.encode_ordinary(text)) == text
        assert tok.decode_bytes(tok.encode(text, disallowed_special=())) == text.encode("utf-8")


def test_lone_surrogates_become_replacement_characters(trained):
    tok, _ = trained
    assert tok.decode(tok.encode_ordinary("a\ud800b")) == "a\ufffdb"


def test_special_tokens_like_tiktoken(trained):
    tok, _ = trained
    eot = tok.special_tokens["<|endoftext|>"]
    text = "hello<|endoftext|>world"
    with pytest.raises(ValueError, match="allowed_special"):
        tok.encode(text)
    ids = tok.encode(text, allowed_special="all")
    assert eot in ids and tok.decode(ids) == text
    assert tok.encode(text, allowed_special={"<|endoftext|>"}) == ids
    as_text = tok.encode(text, disallowed_special=())
    assert eot not in as_text and as_text == tok.encode_ordinary(text)
    with pytest.raises(ValueError, match="does not have"):
        tok.encode(text, allowed_special={"<|nope|>"})


def test_save_load_round_trip(trained):
    tok, out = trained
    loaded = Tokenizer.load(str(out))
    assert loaded.merges == tok.merges and loaded.special_tokens == tok.special_tokens
    assert loaded.encode(CORPUS, allowed_special="all") == tok.encode(CORPUS, allowed_special="all")
    assert sorted(p.name for p in out.iterdir()) == [
        "merges.txt", "parbpe.json", "special_tokens_map.json", "tokenizer.json", "tokenizer.tiktoken",
        "tokenizer_config.json", "vocab.json"
    ]
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]
    umask = os.umask(0)
    os.umask(umask)
    assert all((p.stat().st_mode & 0o777) == (0o666 & ~umask) for p in out.iterdir())


def test_gpt2_files_load_back(trained, tmp_path):
    tok, out = trained
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((out / name).read_bytes())
    loaded = Tokenizer.load(str(tmp_path))  # no parbpe.json: falls back to the GPT-2 files
    loaded = Tokenizer.from_gpt2_files(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"),
                                       pattern=tok.pattern, special_tokens=["<|endoftext|>"])
    assert loaded.encode(CORPUS, allowed_special="all") == tok.encode(CORPUS, allowed_special="all")


def test_gpt2_files_with_gpt2_byte_order(trained, tmp_path):
    # The real GPT-2 release numbers byte tokens in bytes_to_unicode order, not byte order.
    tok, _ = trained
    order = list(bytes_to_unicode())  # byte values in GPT-2 id order
    new_id = {b: i for i, b in enumerate(order)}
    remap = lambda t: new_id[t] if t < 256 else t  # noqa: E731
    vocab = {token_to_unicode(bytes([b])): new_id[b] for b in range(256)}
    merges_txt = ["#version: 0.2"]
    for a, b, new in tok.merges:
        vocab[token_to_unicode(tok.vocab[new])] = new
        merges_txt.append(f"{token_to_unicode(tok.vocab[a])} {token_to_unicode(tok.vocab[b])}")
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("\n".join(merges_txt) + "\n")
    loaded = Tokenizer.from_gpt2_files(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"), pattern=tok.pattern)
    assert loaded.encode_ordinary(CORPUS) == [remap(t) for t in tok.encode_ordinary(CORPUS)]
    assert loaded.decode(loaded.encode_ordinary(CORPUS)) == CORPUS


def test_bad_ids_and_bad_files_are_clear_errors(trained, tmp_path):
    tok, _ = trained
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([10**6])
    (tmp_path / "parbpe.json").write_text("{not json")
    with pytest.raises(ValueError, match="parbpe.json:1"):
        Tokenizer.load(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        Tokenizer.load(str(tmp_path / "missing"))


def test_stop_list_is_not_exported_to_merge_only_formats(tmp_path):
    (tmp_path / "c.txt").write_text("the cat and the dog and the bird " * 10)
    result = parbpe.train([str(tmp_path / "c.txt")], vocab_size=280, stop_list_size=3, workers=1,
                          out_dir=str(tmp_path / "out"))
    files = result.files
    assert files["parbpe.json"] == "written" and files["stats.json"] == "written"
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken"):
        assert files[name].startswith("not written: a stop list")
        assert not (tmp_path / "out" / name).exists()
    loaded = Tokenizer.load(str(tmp_path / "out"))
    assert loaded.stop_words == result.tokenizer.stop_words
    assert loaded.encode_ordinary(" the cat") == result.tokenizer.encode_ordinary(" the cat")
    assert loaded.encode_ordinary(" the")[0] in loaded.stop_words.values()


def _hf_and_tiktoken(out):
    tokenizers = pytest.importorskip("tokenizers")
    tiktoken = pytest.importorskip("tiktoken")
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    ranks = {}
    for line in (out / "tokenizer.tiktoken").read_text().splitlines():
        b64, rank = line.split()
        ranks[base64.b64decode(b64)] = int(rank)
    data = json.loads((out / "parbpe.json").read_text())
    tk = tiktoken.Encoding(name="parbpe-test", pat_str=data["pattern"], mergeable_ranks=ranks,
                           special_tokens=data["special_tokens"])
    return hf, tk


def test_exports_encode_like_parbpe(trained):
    tok, out = trained
    hf, tk = _hf_and_tiktoken(out)
    rng = random.Random(1)
    texts = [CORPUS] + [random_unicode(rng, 300) for _ in range(50)] + [CORPUS[i:] for i in range(0, 300, 7)]
    for text in texts:
        ours = tok.encode_ordinary(text)
        assert tk.encode_ordinary(text) == ours
        # HF always recognises added (special) tokens, like encode(allowed_special="all").
        with_specials = tok.encode(text, allowed_special="all")
        assert hf.encode(text, add_special_tokens=False).ids == with_specials
        assert hf.decode(with_specials, skip_special_tokens=False) == tok.decode(with_specials)
    with_special = "a<|endoftext|>b"
    assert hf.encode(with_special).ids == tok.encode(with_special, allowed_special="all")
    assert tk.encode(with_special, allowed_special="all") == tok.encode(with_special, allowed_special="all")


@pytest.mark.parametrize("long, batch", [(None, None), (1, 2), (2, 3), (3, 1)])
def test_files_written_in_pieces_are_the_whole_texts(tmp_path, monkeypatch, long, batch):
    """tokenizer.json, vocab.json, merges.txt and the tiktoken file are made a token at a time
    (never whole: tokens of hostile text are megabytes); their bytes are those of json.dumps of the
    whole structures, also when a file is past the write buffer and a special token's text equals a
    regular token's (it takes that entry's place, as a dict update would); with tokens counted long
    (written in pieces of their own) from 1, 2 or 3 bytes, and short ones joined 1, 2 or 3 at a time.
    parbpe.json is json.dumps with indent=1, its merges' lists written by hand."""
    import parbpe.io.atomic as atomic
    from parbpe.tokenizer import exports

    if long is not None:
        monkeypatch.setattr(exports, "_LONG", long)
        monkeypatch.setattr(exports, "_BATCH", batch)

    a = ord("a")
    tok = Tokenizer(pattern=GPT4_PATTERN,
                    merges=[(a, a, 256), (256, 256, 257), (257, ord("b"), 258), (ord(" "), "é".encode()[0], 259),
                            (ord('"'), ord("\\"), 260), (260, a, 261), (ord("\n"), a, 262)],
                    special_tokens={"<|end|>": 263, "aaaa": 264, 'say "é"': 265})
    whole = {
        "tokenizer.json": json.dumps(exports.hf_json(tok), ensure_ascii=False),
        "vocab.json": json.dumps(exports.unicode_vocab(tok), ensure_ascii=False),
        "merges.txt": "#version: 0.2\n" + "".join(line + "\n" for line in exports.merge_lines(tok)),
        "tokenizer.tiktoken": exports.tiktoken_ranks(tok),
        "parbpe.json": json.dumps(exports.parbpe_json(tok), indent=1),
    }
    assert '"aaaa": 264' in whole["vocab.json"] and whole["vocab.json"].count('"aaaa"') == 1
    for buffer in (atomic.BUFFER_BYTES, 10):  # buffered whole, and written piece by piece
        monkeypatch.setattr(atomic, "BUFFER_BYTES", buffer)
        out = tmp_path / f"b{buffer}"
        tok.save(str(out))
        for name, text in whole.items():
            assert (out / name).read_text(encoding="utf-8") == text, name
    assert Tokenizer.load(str(tmp_path / "b10")).encode("aab ab é") == tok.encode("aab ab é")


def test_a_save_turns_each_token_into_text_once(tmp_path, monkeypatch, trained):
    """vocab.json, merges.txt and tokenizer.json write each token two to four times; a save makes
    each token's byte-to-unicode text once (exports.Spelling), and the files are those of a save
    that made the texts again for each file."""
    from parbpe.tokenizer import exports

    tok, _ = trained
    calls = []
    convert = exports.token_to_unicode
    monkeypatch.setattr(exports, "token_to_unicode", lambda token: calls.append(token) or convert(token))
    tok.save(str(tmp_path / "once"))
    assert len(calls) == len(tok.vocab) and len(set(calls)) == len(calls)
    monkeypatch.setattr(exports.Spelling, "text", property(
        lambda spelling: {i: convert(t) for i, t in spelling._vocab.items() if len(t) <= exports._LONG}))
    monkeypatch.setattr(exports.Spelling, "escaped", property(
        lambda spelling: {i: exports.json_quoted(text)[1:-1] for i, text in spelling.text.items()}))
    tok.save(str(tmp_path / "every time"))
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        assert (tmp_path / "once" / name).read_bytes() == (tmp_path / "every time" / name).read_bytes(), name


def test_byte_level_strings_and_their_json_quoting_match_the_obvious_ones():
    from parbpe.tokenizer.byte_level import json_quoted

    rng = random.Random(0)
    mapping = bytes_to_unicode()
    tokens = [bytes([b]) for b in range(256)] + [b"a" * 100_000, b'"\\' * 50]
    tokens += [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    for token in tokens:
        text = token_to_unicode(token)
        assert text == "".join(mapping[b] for b in token)
        assert json_quoted(text) == json.dumps(text, ensure_ascii=False)
        assert json_quoted(f"{text} {text}") == json.dumps(f"{text} {text}", ensure_ascii=False)

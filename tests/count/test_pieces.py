"""The piece shortcut gives exactly the counts of applying the pattern to whole documents."""

from __future__ import annotations

import random
import sys
from collections import Counter

import pyarrow as pa
import pytest
import regex
from corpora import ALPHABET, random_text

from parbpe.config import TrainConfig
from parbpe.count import cuts
from parbpe.count.counter import ShardCounter
from parbpe.count.cuts import WHITESPACE
from parbpe.count.pieces import count_table, cut_pieces, documents_holding, supports
from parbpe.patterns import PATTERNS, Splitter, training_pattern

# Heavier on what the cuts look at: spaces after all kinds of characters, letters next to punctuation.
CUT_ALPHABET = ALPHABET + [" ", " ", " a", "a ", "a.", "Z,", "b'", ". ", "\n ", "\t ", "\u3000 ", "  x", "A-", "x@",
                           "Ab", "aB", "ABc", "\u0301 ", "1 ", "12345", " 1", "'s ", "e\u0301.", "1.", "9\n", "a\n",
                           "Z\r\n", "7,", "x\n\n", ".\n", "4\r", "!\n", "a\x00", "\x01 ", "9\x7f", "é ", "\xa0 ",
                           "\u2003 ", "\u205f ", "ж ", "中 ", "😀 ", "\x1f "]


def _plain(texts: list[str], pattern: str) -> Counter[str]:
    compiled = regex.compile(pattern)
    return Counter(chunk for text in texts for chunk in compiled.findall(text))


def _summed_rows(table: pa.Table) -> Counter[str]:
    """A counts table's rows added up (the superword counter's may repeat a chunk: the reduce sums them)."""
    summed: Counter[str] = Counter()
    for chunk, count in zip(table.column("chunk").to_pylist(), table.column("count").to_pylist()):
        summed[chunk] += count
    return summed


def _fast(texts: list[str], config: TrainConfig, tmp_path) -> Counter[str]:
    shard = ShardCounter(config, str(tmp_path), "t")
    assert shard.pieces is not None
    shard.add_texts(pa.array(texts, pa.string()))
    table = shard.pieces.chunk_counts()
    return _summed_rows(table) + shard.plain


def test_whitespace_is_exactly_regex_whitespace():
    chars = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    assert set(WHITESPACE) == set(regex.findall(r"\s", chars))


def _reference_pieces(text: str) -> list[str]:
    """The cut rule, one character at a time."""
    alnum = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    after_alnum = {chr(c) for c in range(128)} - alnum - set(WHITESPACE) - {"'"} | {"\n", "\r"}
    pieces, piece = [], ""
    for before, char in zip(" " + text, text):
        if piece and ((char == " " and before not in WHITESPACE) or (char in after_alnum and before in alnum)):
            pieces.append(piece)
            piece = ""
        piece += char
    return pieces + [piece] if piece else pieces


@pytest.mark.parametrize(("seed", "window"), [(seed, 4 << 20) for seed in range(6)] + [(6, 3), (7, 5)])
def test_cuts_equal_the_character_by_character_rule(seed, window, monkeypatch):
    monkeypatch.setattr(cuts, "_CUT_WINDOW", window)
    rng = random.Random(seed)
    texts = ["".join(rng.choice(CUT_ALPHABET) for _ in range(rng.randint(0, 300))) for _ in range(50)]
    texts += ["", " ", "a", "中 x", "\xa0 y", "\u3000 z", "é b"]
    assert cut_pieces(pa.array(texts)).to_pylist() == [p for text in texts for p in _reference_pieces(text)]
    sliced = pa.array([None, *texts, None]).slice(1, len(texts))  # an array offset and nulls
    assert cut_pieces(sliced).to_pylist() == [p for text in texts for p in _reference_pieces(text)]


@pytest.mark.parametrize(("pattern", "digits", "seed"),
                         [(p, None, seed) for p in ("gpt2", "gpt4", "gpt4o") for seed in range(12)]
                         + [(p, d, seed) for p, d in (("gpt2", 1), ("gpt2", 3), ("gpt4", 1), ("gpt4o", 1))
                            for seed in range(3)])
def test_random_unicode_counts_equal_plain(pattern, digits, seed, tmp_path):
    rng = random.Random(seed)
    texts = ["".join(rng.choice(CUT_ALPHABET) for _ in range(rng.randint(0, 400))) for _ in range(60)]
    texts += [random_text(rng, 300) for _ in range(20)]
    config = TrainConfig(pattern=pattern, digits=digits, workers=1)
    assert _fast(texts, config, tmp_path) == _plain(texts, config.pattern)


def test_pieces_put_together_are_the_text():
    rng = random.Random(5)
    texts = ["".join(rng.choice(CUT_ALPHABET) for _ in range(200)) for _ in range(30)]
    pieces = cut_pieces(pa.array(texts)).to_pylist()
    assert "".join(pieces) == "".join(texts)
    assert len(pieces) > 30 * 20  # it did cut


def test_specials_split_documents_for_the_pieces(tmp_path):
    texts = ["a b<|endoftext|>c d", "x\x00 y", "plain words here", "<|endoftext|>", "<|endoftext|><|endoftext|> z",
             "e<|endof", "text|>f", "<|end<|endoftext|>oftext|> q<|endoftext|>"]
    config = TrainConfig(special_tokens=("<|endoftext|>", "<|end"), workers=1)
    shard = ShardCounter(config, str(tmp_path), "t")
    shard.add_texts(pa.array(texts, pa.string()))
    assert not shard.plain  # the pieces counted all of it
    expected = Counter(["a", " b", "c", " d", "x", "\x00", " y", "plain", " words", " here", " z", "e", "of",
                        "text", "|>", "f", "oftext", "|>", " q"])
    assert _fast(texts, config, tmp_path) == expected


def test_documents_holding_finds_needles_within_documents_only():
    texts = pa.array(["ab", "cd", "xabx", "", "é<|s|>", "<|s", "|>"])
    assert documents_holding(texts, ["ab"]).tolist() == [True, False, True, False, False, False, False]
    assert documents_holding(texts, ["bc", "dx"]) is None  # only across two documents
    assert documents_holding(texts, ["<|s|>", "cd"]).tolist() == [False, True, False, False, True, False, False]
    assert documents_holding(pa.array([], pa.string()), ["a"]) is None


def test_custom_patterns_take_the_plain_path(tmp_path):
    assert not supports(r"\w+|\s+")
    config = TrainConfig(pattern=r"\w+|[^\w]", workers=1)
    assert ShardCounter(config, str(tmp_path), "t").pieces is None
    assert all(supports(PATTERNS[name]) for name in ("gpt2", "gpt4", "gpt4o"))


def test_count_table_sums_exactly_even_past_float_precision():
    values = pa.array(["a", "b", "a", "c", "b", "a"])
    small = count_table(values, pa.array([1, 2, 3, 4, 5, 6]))
    assert dict(zip(*small.to_pydict().values())) == {"a": 10, "b": 7, "c": 4}
    huge = count_table(values, pa.array([2**60, 1, 2**60 + 1, 7, 2**55, 3]))
    assert dict(zip(*huge.to_pydict().values())) == {"a": 2**61 + 4, "b": 2**55 + 1, "c": 7}
    assert count_table(values).to_pydict() == {"chunk": ["a", "b", "c"], "count": [3, 2, 1]}
    chunked = count_table(pa.chunked_array([["a", "b"], [], ["a", "c", "b", "a", "d"]]),
                          pa.chunked_array([[1, 2], [], [3, 4, 5, 6, 7]]))  # as concat_tables gives them
    assert dict(zip(*chunked.to_pydict().values())) == {"a": 10, "b": 7, "c": 4, "d": 7}
    assert count_table(pa.chunked_array([], pa.string()), pa.chunked_array([], pa.int64())).num_rows == 0


def test_pieces_are_compacted_before_a_spill(tmp_path):
    """Batches repeat pieces; summing them is tried first, so a limit that holds the sum spills nothing."""
    texts = pa.array(["the same words, over and over again. " * 20 + str(i % 7) for i in range(40)])
    config = TrainConfig(workers=1)
    one = ShardCounter(config, str(tmp_path), "one")
    one.add_texts(texts)
    shard = ShardCounter(config, str(tmp_path), "many", data_limit=3 * one.nbytes)
    for _ in range(12):
        shard.add_texts(texts)
        shard._check_limit()
    assert shard.spills == 0 and shard.pieces.nbytes < 12 * one.nbytes / 2
    counted = shard.pieces.chunk_counts()
    expected = one.pieces.chunk_counts()
    assert dict(zip(*counted.to_pydict().values())) == {k: 12 * v for k, v in zip(*expected.to_pydict().values())}


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "gpt4o", "superword"])
def test_random_texts_with_specials_equal_plain(pattern, tmp_path):
    rng = random.Random(11)
    specials = ("<|endoftext|>", "<|pad|>")
    alphabet = CUT_ALPHABET + list(specials) + ["<|", "|>", "\r/", "\r"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(80)]
    config = TrainConfig(pattern=pattern, special_tokens=specials, workers=1)
    splitter = Splitter(training_pattern(config.pattern), specials)
    expected = Counter(chunk for text in texts for piece, special in splitter.segments(text) if not special
                       for chunk in splitter.chunks(piece))
    assert _fast(texts, config, tmp_path) == expected

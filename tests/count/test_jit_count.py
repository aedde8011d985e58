"""The numba lexer (chunking.py): exactly `regex`'s chunks, and with it the numpy path's counts."""

from __future__ import annotations

import os
import random
import sys
import unicodedata
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex
from reference import count_with

from parbpe import jit
from parbpe.config import TrainConfig
from parbpe.io.plan import plan
from parbpe.patterns import PATTERNS, SUPERWORD_LINES_PATTERN, SUPERWORD_PATTERN, with_digits

pytest.importorskip("numba")

from parbpe.count import chunking  # noqa: E402  (after the skip: its kernels compile with numba)
from parbpe.count.pieces import PieceCounter  # noqa: E402
from parbpe.count.superword import _class_table, superword_chunk_starts  # noqa: E402
from parbpe.kernels import lexer as lexing  # noqa: E402

# Each built-in pattern and its --digits variants.
PATTERN_VARIANTS = {name: PATTERNS[name] for name in ("gpt2", "gpt4", "gpt4o")}
for _name, _group in (("gpt2", 1), ("gpt2", 3), ("gpt4", 1), ("gpt4o", 1)):
    PATTERN_VARIANTS[f"{_name}-d{_group}"] = with_digits(PATTERNS[_name], _group)
NAMES = sorted(PATTERN_VARIANTS)

# What the rules look at: contractions in both cases (and after letters, digits, spaces, symbols),
# runs of whitespace of every kind, line breaks around symbols and slashes, digits of other scripts,
# case changes, marks, the long s and the Kelvin sign that `regex` folds.
TRICKY = (list("aAsSdDmMtTlLvVeErRxZ0129 \t\n\r'.,-_/\x0b\x0c\x1c\x1f\x00\x7f!\"")
          + ["'s", "'ll", "'VE", "'Re", "'d", "'M", "'t", "'lL", "'S", "'LL", "'lv", "'sa", "'ſ", "'\u212a",
             "don't", "DON'T", "x'S", "IT'S", "a'Re", "x's's", "  ", "   ", "\n\n", " \n", "\n ", "\r\n", "\t\t",
             " '", ".\n", ".\n/", "\n/", "/\n", " .", "\t.", "''", " 's", "\t's", ".'s", "1's", "123456", " 1234",
             "١٢٣", "²³", "Ⅻ", "٣4", "aB", "AbC", "ABc", "ǅa", "ʰa", "e\u0301", "É\u0301x", "\u3000", "\xa0",
             "\x85", "\u2028", "\u1680", "\u2003 ", "中文", "😀", "\U00010400x", "é", "ß", "İ", "ﬀ"])


def _category_samples() -> dict[str, list[str]]:
    """Up to 200 characters of every Unicode general category (surrogates left out), drawn evenly."""
    found: dict[str, list[str]] = {}
    for point in range(0, 0x110000, 7):
        category = unicodedata.category(chr(point))
        if category != "Cs" and len(found.setdefault(category, [])) < 200:
            found[category].append(chr(point))
    return found


CATEGORIES = _category_samples()


def random_text(rng: random.Random, length: int) -> str:
    """Characters of every Unicode category mixed with the tricky strings."""
    out = []
    for _ in range(length):
        if rng.random() < 0.3:
            out.append(rng.choice(CATEGORIES[rng.choice(sorted(CATEGORIES))]))
        else:
            out.append(rng.choice(TRICKY))
    return "".join(out)


def jit_chunks(documents: list[str], pattern: str) -> list[str]:
    """The chunks the kernels find in each document, in order."""
    kind, group = chunking.kind_of(pattern)
    encoded = [d.encode() for d in documents]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    docs = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    bounds = chunking.chunk_bounds(data, docs, kind, group, chunking.char_tables()).tolist()
    return [data[a:b].tobytes().decode() for a, b in zip(bounds, bounds[1:])]


def regex_chunks(documents: list[str], pattern: str) -> list[str]:
    compiled = regex.compile(pattern)
    return [chunk for document in documents for chunk in compiled.findall(document)]


@pytest.mark.parametrize("name", NAMES)
def test_each_tricky_string_alone_equals_regex(name):
    pattern = PATTERN_VARIANTS[name]
    for text in TRICKY:
        assert jit_chunks([text], pattern) == regex_chunks([text], pattern), text


# chunk_bounds' parts: the default (these texts in one), and 64 bytes (many; documents longer whole)
SPANS = [chunking.CHUNK_BOUNDS_BYTES, 64]


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", NAMES)
def test_random_text_of_every_category_equals_regex(monkeypatch, name, seed, span):
    monkeypatch.setattr(chunking, "CHUNK_BOUNDS_BYTES", span)
    pattern = PATTERN_VARIANTS[name]
    rng = random.Random(seed)
    documents = [random_text(rng, rng.randint(0, 80)) for _ in range(400)]
    assert jit_chunks(documents, pattern) == regex_chunks(documents, pattern)


def test_a_wrong_class_is_caught(monkeypatch):
    """The comparison can fail: with "'" read as a letter, GPT-4's chunks differ."""
    pattern = PATTERNS["gpt4"]
    bits, canon = chunking.char_tables()
    bits = bits.copy()
    bits[ord("'")] |= lexing.LETTER
    monkeypatch.setattr(chunking, "char_tables", lambda: (bits, canon))
    assert jit_chunks(["don't stop"], pattern) != regex_chunks(["don't stop"], pattern)


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["gpt2", "gpt4", "gpt4o"])
def test_real_text_equals_regex(shared_data, name):
    pattern = PATTERN_VARIANTS[name]
    documents = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    documents = [d for d in documents if d]
    assert sum(not d.isascii() for d in documents) > 50
    assert jit_chunks(documents, pattern) == regex_chunks(documents, pattern)


def superword_documents(documents: list[str]) -> list[str]:
    """The documents the superword split's lexers take: those holding "\r/" go to `regex` (counter.py)."""
    return [d for d in documents if "\r/" not in d]


def test_superword_tricky_strings_alone_equal_regex():
    for text in superword_documents(TRICKY + ["a  !!\r\r\nb", " ..\n", "12345 678", "x   y", "  ", "a ..b"]):
        assert jit_chunks([text], SUPERWORD_PATTERN) == regex_chunks([text], SUPERWORD_LINES_PATTERN), text


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("seed", range(4))
def test_superword_random_text_of_every_category_equals_regex(monkeypatch, seed, span):
    monkeypatch.setattr(chunking, "CHUNK_BOUNDS_BYTES", span)
    rng = random.Random(seed)
    documents = superword_documents([random_text(rng, rng.randint(0, 80)) for _ in range(400)])
    assert jit_chunks(documents, SUPERWORD_PATTERN) == regex_chunks(documents, SUPERWORD_LINES_PATTERN)
    assert jit_chunks(documents, SUPERWORD_PATTERN) == numpy_superword_chunks(documents)


def numpy_superword_chunks(documents: list[str]) -> list[str]:
    """superword.py's numpy split, for the kernel's comparison on what `regex` is too slow for."""
    encoded = [d.encode() for d in documents]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    starts = superword_chunk_starts(data, np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)).tolist()
    return [data[a:b].tobytes().decode() for a, b in zip(starts, starts[1:] + [len(data)])]


@pytest.mark.shared_data
def test_superword_real_text_equals_regex(shared_data):
    documents = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    documents = superword_documents([d for d in documents if d])
    assert jit_chunks(documents, SUPERWORD_PATTERN) == regex_chunks(documents, SUPERWORD_LINES_PATTERN)


def test_the_kernels_superword_classes_are_the_numpy_splits_for_every_code_point():
    # Two derivations of regex's classes: char_tables()'s bits (the kernels') and lexer.py's code_point_tables.
    assert np.array_equal(chunking.superword_classes(), _class_table())


def test_a_wrong_superword_rule_is_caught(monkeypatch):
    """The comparison can fail: with digits read as letters, the superword chunks differ."""
    classes = chunking.superword_classes().copy()
    classes[ord("0"):ord("9") + 1] = lexing.SW_LETTER
    monkeypatch.setattr(chunking, "superword_classes", lambda: classes)
    assert jit_chunks(["abc 12345"], SUPERWORD_PATTERN) != regex_chunks(["abc 12345"], SUPERWORD_LINES_PATTERN)


def piece_counts(documents: list[str], pattern: str, use_jit: bool) -> dict[str, int]:
    counter = PieceCounter(pattern, regex.compile(pattern).findall, use_jit=use_jit)
    for start in range(0, len(documents), 50):  # several batches
        counter.add(pa.array(documents[start:start + 50], pa.string()))
    table = counter.chunk_counts()
    return dict(zip(table.column("chunk").to_pylist(), table.column("count").to_pylist()))


@pytest.mark.parametrize("name", NAMES)
def test_pieces_split_by_the_numba_lexer_count_as_regex(name):
    pattern = PATTERN_VARIANTS[name]
    rng = random.Random(5)
    documents = [random_text(rng, rng.randint(0, 300)) for _ in range(500)] + ["a\x00 a a\x00\x00 \x00", ""]
    counts = piece_counts(documents, pattern, use_jit=True)
    assert counts == Counter(regex_chunks(documents, pattern)) == piece_counts(documents, pattern, use_jit=False)


def test_the_character_tables_are_cached_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    chunking.char_tables.cache_clear()
    try:
        built = chunking.char_tables()
        (cached,) = list((tmp_path / "parbpe").iterdir())
        chunking.char_tables.cache_clear()
        loaded = chunking.char_tables()
        assert all((a == b).all() for a, b in zip(built, loaded))
        with np.load(cached) as saved:
            assert saved["tables"].shape == (2, 0x110000)
    finally:
        chunking.char_tables.cache_clear()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "edited"])
def test_a_damaged_cache_file_is_built_again(monkeypatch, tmp_path, damage):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    chunking.char_tables.cache_clear()
    try:
        built = chunking.char_tables()
        (cached,) = list((tmp_path / "parbpe").iterdir())
        if damage == "garbage":
            cached.write_bytes(b"not a numpy file")
        elif damage == "truncated":
            cached.write_bytes(cached.read_bytes()[:1000])
        else:  # the right shape and type, a letter made a digit: only the digest tells
            with np.load(cached) as saved:
                tables, digest = saved["tables"].copy(), saved["digest"]
            tables[0, ord("a")] = lexing.NUMBER
            with open(cached, "wb") as f:
                np.savez(f, tables=tables, digest=digest)
        chunking.char_tables.cache_clear()
        loaded = chunking.char_tables()
        assert all((a == b).all() for a, b in zip(built, loaded))
        chunking.char_tables.cache_clear()
        assert all((a == b).all() for a, b in zip(built, chunking.char_tables()))  # and the file was rewritten
    finally:
        chunking.char_tables.cache_clear()


def test_an_unwritable_cache_directory_builds_the_tables_each_time(monkeypatch, tmp_path):
    (tmp_path / "parbpe").write_text("a file where the cache directory would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    chunking.char_tables.cache_clear()
    try:
        bits, _ = chunking.char_tables()
        assert bits[ord("a")] & lexing.LETTER and bits[ord("7")] & lexing.NUMBER
    finally:
        chunking.char_tables.cache_clear()


WORDS = ["alpha", "Beta", "épsilon", "ζήτα", "中文", "😀", "1234", "٣٤", "don't", "IT'S", "  ", "\n", "x.y", ".\n/",
         "camelCase", "\u2003", "e\u0301", "(paren)"]
SPECIAL = "<|endoftext|>"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(1)
    for k in range(3):
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 80))) for _ in range(40)]
        texts[0] += SPECIAL + texts[1]
        pq.write_table(pa.table({"text": texts}), d / f"part-{k}.parquet", row_group_size=7)
    return d


@pytest.mark.parametrize("name", ["gpt2", "gpt4", "gpt4o", "gpt4-d1", "superword"])
@pytest.mark.parametrize("workers", [1, 2])
def test_counts_with_the_jit_on_and_off_are_identical(corpus, tmp_path, monkeypatch, name, workers):
    units = plan([str(corpus)])
    config = TrainConfig(pattern=PATTERN_VARIANTS.get(name, SUPERWORD_PATTERN), special_tokens=(SPECIAL,),
                         workers=workers)
    results = {}
    for mode in ("off", "on"):
        monkeypatch.setenv("PARBPE_JIT", mode)
        os.makedirs(tmp_path / mode)
        results[mode], _ = count_with(units, config, tmp_path / mode, data_limit=None if workers == 1 else 1)
    assert results["on"] == results["off"] and len(results["on"]) > 30


@pytest.mark.parametrize(("mode", "name", "splits"), [
    ("on", "gpt4", True), ("on", "gpt2", True), ("off", "gpt4o", False),
    ("auto", "gpt4o", True), ("auto", "gpt4", True), ("auto", "gpt2", True)])
def test_the_numba_kernels_count_the_pieces_when_on_or_auto(monkeypatch, mode, name, splits):
    from parbpe.count.counter import ShardCounter

    monkeypatch.setenv("PARBPE_JIT", mode)
    expected = chunking.kind_of(PATTERNS[name]) if splits else None
    assert ShardCounter(TrainConfig(pattern=name), "/nonexistent", "t").pieces._jit_kind == expected
    assert chunking.uses_jit(PATTERNS[name]) == splits


def test_a_custom_pattern_is_never_the_numba_lexers(monkeypatch):
    from parbpe.count.counter import ShardCounter

    monkeypatch.setenv("PARBPE_JIT", "on")
    assert ShardCounter(TrainConfig(pattern=r"\w+|\s+|."), "/nonexistent", "t").pieces is None  # custom: regex
    assert not chunking.uses_jit(r"\w+|\s+|.")
    assert "numba" in sys.modules


@pytest.mark.parametrize("name", ["superword", "gpt4", "gpt2"])
@pytest.mark.parametrize(("mode", "text_bytes", "numba"), [
    ("auto", jit.COUNT_MIN_BYTES - 1, False), ("auto", jit.COUNT_MIN_BYTES, True),
    ("on", 1, True), ("off", 10**12, False)])
def test_a_run_counts_with_numba_from_enough_text_under_auto(monkeypatch, name, mode, text_bytes, numba):
    """Under auto a run's count takes the numba kernels when there is enough text to repay numba's start."""
    from parbpe.count.counter import ShardCounter
    from parbpe.pipeline.count import jit_fits

    monkeypatch.setenv("PARBPE_JIT", mode)
    pattern = SUPERWORD_PATTERN if name == "superword" else PATTERNS[name]
    assert jit_fits(10**11, 2, 10**6, pattern, text_bytes) == numba
    pieces = ShardCounter(TrainConfig(pattern=name), "/nonexistent", "t").pieces  # (a worker: the run decided)
    assert (pieces._use_jit if name == "superword" else pieces._jit_kind is not None) == (mode != "off")


@pytest.mark.parametrize(("budget", "numba"), [(400 * 10**6, False), (10**9, True)])
def test_whether_numba_counts_is_one_answer_for_one_command(monkeypatch, budget, numba):
    """The 1 GB corpus's command (1.7 MB units, 2 workers): at 400 MB numba's weight would leave one
    counting shard where numpy has two, at 1 GB both have two. The answer is reckoned from CALLER_FLOOR,
    never from the RSS measured, which put the same command on either side (a start of 99.8 or 107.4 MB
    at 400 MB, 2026-11-26) and the merge stage's cutoff with it (it reckons numba once loaded)."""
    from parbpe.pipeline import count as count_stage
    from parbpe.run import memory

    monkeypatch.setenv("PARBPE_JIT", "auto")
    for module in (memory, count_stage):  # a measure, were one taken, would say there is no room
        monkeypatch.setattr(module, "process_rss", lambda: 10**12)
    assert count_stage.jit_fits(budget, 2, 1_700_000, PATTERNS["gpt2"], 10**9) == numba

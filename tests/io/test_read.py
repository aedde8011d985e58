"""Readers, planning, counts files, and the safe-cut rule for streaming text files."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex
from corpora import random_text
from reference import count_with, reference_counts

import parbpe
from parbpe.config import TrainConfig
from parbpe.count.counts_file import load_counts_files, write_counts_file
from parbpe.count.partitions import split_partitions
from parbpe.count.pieces import counter_table
from parbpe.io.counts_files import read_counts
from parbpe.io.plan import default_corpus_files, plan
from parbpe.io.readers import ReadStats, _is_safe_cut, iter_text_pieces
from parbpe.patterns import PATTERNS


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "gpt4o"])
@pytest.mark.parametrize("seed", range(30))
def test_safe_cuts_never_change_chunks(pattern, seed):
    rng = random.Random(seed)
    text = random_text(rng, 3000)
    data = text.encode("utf-8")
    cuts = [i for i in range(len(data)) if _is_safe_cut(data, i)]
    pieces, last = [], 0
    for c in cuts:
        pieces.append(data[last:c].decode("utf-8"))
        last = c
    pieces.append(data[last:].decode("utf-8"))
    compiled = regex.compile(PATTERNS[pattern])
    whole = Counter(compiled.findall(text))
    cut = Counter(chunk for piece in pieces for chunk in compiled.findall(piece))
    assert cut == whole
    assert len(cuts) > 3  # the test did cut


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "gpt4o"])
def test_streamed_text_file_counts_equal_whole_file(tmp_path, pattern):
    rng = random.Random(11)
    lines = [random_text(rng, rng.randint(0, 80)) for _ in range(2000)]
    text = "\n".join(lines)
    path = tmp_path / "big.txt"
    path.write_text(text, encoding="utf-8")
    stats = ReadStats()
    pieces = list(iter_text_pieces(str(path), stats, block=1000))
    assert len(pieces) > 10
    assert "".join(pieces) == text
    compiled = regex.compile(PATTERNS[pattern])
    assert Counter(c for p in pieces for c in compiled.findall(p)) == Counter(compiled.findall(text))
    assert stats.bytes == len(text.encode())


def _write_parquet(path, texts, row_group_size=2, **extra_columns):
    table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts, **extra_columns})
    pq.write_table(table, path, row_group_size=row_group_size)


def test_plan_has_one_unit_per_row_group_and_is_sorted(tmp_path):
    _write_parquet(tmp_path / "b.parquet", ["x"] * 5)
    _write_parquet(tmp_path / "a.parquet", ["y"] * 3)
    (tmp_path / "c.txt").write_text("z")
    units = plan([str(tmp_path)])
    assert [(u.path.rsplit("/", 1)[1], u.row_group) for u in units] == [
        ("a.parquet", 0), ("a.parquet", 1), ("b.parquet", 0), ("b.parquet", 1), ("b.parquet", 2), ("c.txt", -1)
    ]
    assert plan([str(tmp_path / "*.parquet")]) == units[:5]


def test_parquet_counts_match_reference(tmp_path):
    texts = ["Hello world", "Hello there", None, "world world<|endoftext|>Hello"]
    _write_parquet(tmp_path / "t.parquet", texts)
    config = TrainConfig(vocab_size=300, special_tokens=("<|endoftext|>",), workers=1)
    counts, result = count_with(plan([str(tmp_path / "t.parquet")]), config, tmp_path)
    assert counts == {"Hello": 3, " world": 2, " there": 1, "world": 1}
    assert result.stats.documents == 3


def test_missing_text_column_lists_the_columns(tmp_path):
    pq.write_table(pa.table({"content": ["a"], "id": ["1"]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"no column 'text'.*\['content', 'id'\].*--text-column"):
        parbpe.train([str(tmp_path / "x.parquet")], vocab_size=300, workers=1)
    result = parbpe.train([str(tmp_path / "x.parquet")], vocab_size=300, workers=1, text_column="content")
    assert result.stats["documents"] == 1


def test_corrupt_parquet_names_the_file(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ValueError, match="bad.parquet"):
        parbpe.train([str(bad)], vocab_size=300, workers=1)


def test_missing_input_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        parbpe.train([str(tmp_path / "nope.parquet")], vocab_size=300)


def test_empty_corpus_is_a_clear_error(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty"):
        parbpe.train([str(tmp_path / "empty.txt")], vocab_size=300, workers=1)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_plain_and_compressed(tmp_path, suffix):
    docs = [{"text": "Hello world", "id": 1}, {"text": "héllo wörld 😀"}, {"text": None}]
    raw = "".join(json.dumps(d) + "\n" for d in docs).encode()
    path = tmp_path / f"docs{suffix}"
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(raw))
    elif suffix.endswith(".zst"):
        with pa.CompressedOutputStream(str(path), "zstd") as out:
            out.write(raw)
    else:
        path.write_bytes(raw)
    counts, result = count_with(plan([str(path)]), TrainConfig(vocab_size=300, workers=1), tmp_path)
    assert counts == {"Hello": 1, " world": 1, "héllo": 1, " wörld": 1, " 😀": 1}
    assert result.stats.documents == 2


def test_jsonl_missing_field_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a"}\n{"body": "b"}\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2: no field 'text'"):
        count_with(plan([str(path)]), TrainConfig(vocab_size=300, workers=1), tmp_path)


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good text \xff\xfe bad \xc3 end")
    counts, result = count_with(plan([str(path)]), TrainConfig(vocab_size=300, workers=1), tmp_path)
    assert result.stats.replaced_bytes == 3
    assert sum(counts.values()) > 0
    result = parbpe.train([str(path)], vocab_size=260, workers=1)
    assert result.stats["replaced_utf8_sequences"] == 3


def test_counts_file_round_trip_and_adding_up(tmp_path):
    config = TrainConfig(vocab_size=300, workers=1)
    total = Counter({"hello": 3, " wörld": 2})
    path = tmp_path / "c.parquet"
    write_counts_file(str(path), split_partitions(counter_table(total)), config)
    [unit] = plan([str(path)])
    assert unit.kind == "counts-parquet"
    back = read_counts(unit)
    assert dict(zip(back.chunks, back.counts)) == {"hello".encode(): 3, " wörld".encode(): 2}
    summed = load_counts_files([unit, unit], config)
    assert dict(zip(*summed.to_pydict().values())) == {"hello": 6, " wörld": 4}


def test_counts_file_with_another_pattern_is_refused(tmp_path):
    path = tmp_path / "c.parquet"
    write_counts_file(str(path), [counter_table(Counter({"a b": 1}))], TrainConfig(vocab_size=300, pattern="gpt2"))
    with pytest.raises(ValueError, match="pattern"):
        parbpe.train([str(path)], vocab_size=300, pattern="gpt4", workers=1)


def test_batchbpe_csv_counts(tmp_path):
    path = tmp_path / "counts.csv"
    path.write_text('str,int\nThe,5\n" the",7\n"a,b",2\n' + f'"{PATTERNS["gpt4"]}",0\n', encoding="utf-8")
    [unit] = plan([str(path)])
    counts = read_counts(unit)
    assert dict(zip(counts.chunks, counts.counts)) == {b"The": 5, b" the": 7, b"a,b": 2}
    assert counts.pattern == PATTERNS["gpt4"]
    result = parbpe.train([str(path)], vocab_size=258, workers=1, max_batch_size=1)
    # "he" (5 + 7); then (" ", "t") and ("t", "he") tie at 7 and "t" > " " wins.
    assert [(a, b) for a, b, _ in result.tokenizer.merges] == [(ord("h"), ord("e")), (ord("t"), 256)]


def test_counts_file_trains_like_its_text(tmp_path):
    (tmp_path / "t.txt").write_text("the cat sat on the mat with the hat " * 20)
    text_result = parbpe.train([str(tmp_path / "t.txt")], vocab_size=280, workers=1)
    parbpe.count_to_file([str(tmp_path / "t.txt")], str(tmp_path / "c.parquet"), TrainConfig(workers=1))
    counts_result = parbpe.train([str(tmp_path / "c.parquet")], vocab_size=280, workers=1)
    assert counts_result.tokenizer.merges == text_result.tokenizer.merges


def test_default_corpus_is_the_standard_library():
    files = default_corpus_files()
    assert len(files) > 100
    assert any(f.endswith("/json/decoder.py") for f in files)
    assert not any("/test/" in f or "site-packages" in f for f in files)


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "gpt4o"])
def test_text_file_byte_ranges_count_like_the_whole_file(tmp_path, pattern):
    rng = random.Random(3)
    text = "\n".join(random_text(rng, rng.randint(0, 120)) for _ in range(3000))
    path = tmp_path / "big.txt"
    path.write_text(text, encoding="utf-8")
    units = plan([str(path)], range_bytes=7000)
    assert len(units) > 20 and all(u.kind == "text" for u in units)
    config = TrainConfig(pattern=pattern, workers=1)
    pieces = [p for u in units for p in iter_text_pieces(u.path, ReadStats(), block=1000, start=u.start, end=u.end)]
    assert "".join(pieces) == text  # the ranges tile the file exactly
    counts, result = count_with(units, config, tmp_path)
    assert counts == dict(Counter(regex.compile(config.pattern).findall(text)))
    assert result.stats.bytes == len(text.encode()) and result.stats.documents == 1


def test_jsonl_byte_ranges_give_every_line_once(tmp_path):
    docs = [{"text": f"document {i} says héllo {'x' * (i % 50)}"} for i in range(2000)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    units = plan([str(path)], range_bytes=5000)
    assert len(units) > 10
    counts, result = count_with(units, TrainConfig(workers=2), tmp_path)
    assert result.stats.documents == 2000
    expected = reference_counts([d["text"] for d in docs], TrainConfig().pattern)
    assert {c.encode(): n for c, n in counts.items()} == dict(expected)


def test_jsonl_error_in_a_later_range_names_the_true_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine"}\n' * 999 + "oops\n" + '{"text": "fine"}\n' * 10)
    units = plan([str(path)], range_bytes=1000)
    with pytest.raises(ValueError, match=r"d.jsonl:1000: not valid JSON"):
        count_with(units, TrainConfig(workers=1), tmp_path)


def test_compressed_files_are_one_unit(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "x"}\n' * 1000))
    assert len(plan([str(path)], range_bytes=100)) == 1


def test_corrupt_row_group_names_the_file_and_row_group(tmp_path):
    rng = random.Random(1)
    texts = ["".join(rng.choice("abcdefgh ") for _ in range(2000)) for _ in range(40)]
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=20, compression="none")
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(1).column(0)
    data = bytearray(path.read_bytes())
    start = column.data_page_offset + 40
    data[start:start + 3000] = bytes(3000)  # zero the middle of row group 1's data page
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"c.parquet \(row group 1\): corrupt or unreadable parquet data"):
        parbpe.train([str(path)], vocab_size=300, workers=1)

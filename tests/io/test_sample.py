"""--sample-docs / --sample-bytes with --seed: a deterministic sample of documents, the same for any
worker count, input layout or executor, whose chunk counts equal those of the sampled documents
counted by a plain reference; --sample-bytes holds about that many bytes; one-line refusals."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex

import parbpe
from parbpe.cli import main
from parbpe.config import TrainConfig
from parbpe.io.sample import sample_mask
from parbpe.patterns import PATTERNS

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "1984", "x!", "über"]


def _in_sample(text: str, share: float, seed: int) -> bool:
    """The rule, spelled out: a keyed 8-byte BLAKE2b of the document below share x 2^64."""
    digest = hashlib.blake2b(text.encode(), digest_size=8, key=seed.to_bytes(8, "little", signed=True)).digest()
    return int.from_bytes(digest, "little") < share * 2**64


def _documents(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [f"doc {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))) for i in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("sample")
    docs = _documents(900)
    for k in range(3):
        pq.write_table(pa.table({"text": docs[k * 300:(k + 1) * 300]}), d / f"part-{k}.parquet", row_group_size=50)
    return d, docs


def _counts(path) -> Counter:
    table = pq.read_table(path)
    return Counter(dict(zip(table.column("chunk").to_pylist(), table.column("count").to_pylist())))


def test_the_mask_is_the_rule_and_takes_about_the_share():
    docs = _documents(4000) + ["", "é" * 3]
    array = pa.array(docs + [None], pa.string())
    for share, seed in ((0.3, 0), (0.3, 7), (0.05, -2), (1.0, 1)):
        mask = sample_mask(array, share, seed)
        assert mask.tolist() == [_in_sample(d, share, seed) for d in docs] + [False]
        assert abs(mask[:4000].mean() - share) < 0.03
    assert (sample_mask(array, 0.3, 0) != sample_mask(array, 0.3, 1)).any()  # the seed matters
    assert sample_mask(array.slice(10, 20), 0.3, 0).tolist() == sample_mask(array, 0.3, 0)[10:30].tolist()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_counts_of_the_sample_equal_the_reference_for_any_worker_count(corpus, tmp_path, workers):
    d, docs = corpus
    out = tmp_path / "c.parquet"
    stats = parbpe.count_to_file([str(d)], str(out), TrainConfig(workers=workers, sample_docs=0.25, seed=5))
    kept = [t for t in docs if _in_sample(t, 0.25, 5)]
    expected = Counter(c.encode() for t in kept for c in regex.findall(PATTERNS["gpt4"], t))
    assert _counts(out) == expected
    assert stats["sample"] == {"share": 0.25, "seed": 5, "sample_bytes": None, "documents": len(kept),
                               "bytes": sum(len(t.encode()) for t in kept)}
    assert stats["documents"] == len(docs)  # read: all of them


def test_the_same_sample_from_a_stream_and_a_training_run(corpus, tmp_path):
    d, docs = corpus
    files = parbpe.train([str(d)], vocab_size=300, sample_docs=0.5, seed=2, workers=2, out_dir=str(tmp_path / "a"))
    stream = parbpe.train_from_iterator(iter(docs), vocab_size=300, sample_docs=0.5, seed=2, workers=2)
    assert files.tokenizer.merges == stream.tokenizer.merges
    assert files.stats["sample"]["documents"] == stream.stats["sample"]["documents"] == sum(
        _in_sample(t, 0.5, 2) for t in docs)
    other_seed = parbpe.train([str(d)], vocab_size=300, sample_docs=0.5, seed=3, workers=1)
    assert other_seed.tokenizer.merges != files.tokenizer.merges


def test_sample_bytes_holds_about_that_many_bytes(corpus, tmp_path, capsys):
    d, docs = corpus
    total = sum(len(t.encode()) for t in docs)
    stats_path = tmp_path / "stats.json"
    assert main(["count", str(d), "--sample-bytes", str(total // 4), "--seed", "1", "--out",
                 str(tmp_path / "c.parquet"), "--stats", str(stats_path), "--progress", "none"]) == 0
    sample = json.loads(stats_path.read_text())["sample"]
    assert sample["sample_bytes"] == total // 4 and 0.2 < sample["share"] < 0.26  # offsets count in the metadata
    assert 0.7 * total / 4 < sample["bytes"] < 1.3 * total / 4
    result = parbpe.train([str(d)], vocab_size=300, sample_bytes=10**9, workers=1)
    assert result.stats["sample"]["share"] == 1.0 and result.stats["sample"]["documents"] == len(docs)


def test_refusals_are_one_line(corpus, tmp_path, capsys):
    d, _ = corpus
    counts = tmp_path / "c.parquet"
    parbpe.count_to_file([str(d)], str(counts), TrainConfig(workers=1))
    assert main(["train", str(counts), "--sample-docs", "0.5", "--out", str(tmp_path / "o")]) == 2
    assert "sampling takes documents, which a counts file no longer has" in capsys.readouterr().err
    for bad, message in ((["--sample-docs", "0"], "--sample-docs must be a share"),
                         (["--sample-docs", "1.5"], "--sample-docs must be a share"),
                         (["--sample-docs", "0.5", "--sample-bytes", "1MB"], "not both")):
        assert main(["train", str(d), *bad, "--out", str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="sample_bytes needs the input's size"):
        parbpe.train_from_iterator(iter(["a b"]), vocab_size=300, sample_bytes=100)


def test_a_text_file_is_sampled_line_by_line(tmp_path):
    lines = [f"line {i} " + " ".join(random.Random(i).choice(WORDS) for _ in range(8)) + "\n" for i in range(3000)]
    path = tmp_path / "t.txt"
    path.write_text("".join(lines) + "last line without end")
    out = tmp_path / "c.parquet"
    stats = parbpe.count_to_file([str(path)], str(out), TrainConfig(workers=2, sample_docs=0.2, seed=9))
    kept = [t for t in lines + ["last line without end"] if _in_sample(t, 0.2, 9)]
    assert stats["sample"]["documents"] == len(kept) and stats["sample"]["bytes"] == len("".join(kept).encode())
    assert _counts(out) == Counter(c.encode() for c in regex.findall(PATTERNS["gpt4"], "".join(kept)))


def test_lines_cut_between_pieces_are_put_together_first():
    from parbpe.io.readers import ReadStats
    from parbpe.io.sample import sample_lines

    text = "".join(f"row {i} {'x' * (i % 13)}\n" for i in range(500)) + "tail"
    whole = "".join(a[0].as_py() for a in sample_lines(iter([pa.array([text])]), 0.4, 1, ReadStats()))
    for size in (7, 64, 1000):
        pieces = iter([pa.array([text[i:i + size]]) for i in range(0, len(text), size)])
        stats = ReadStats()
        assert "".join(a[0].as_py() for a in sample_lines(pieces, 0.4, 1, stats)) == whole
        assert stats.sampled_bytes == len(whole.encode())

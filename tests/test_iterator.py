"""train_from_iterator: texts from Python, counted in parallel, give what the same documents in a file give."""

from __future__ import annotations

import filecmp
import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parbpe
from parbpe.count.stream import count_stream_to_runs
from parbpe.io.iterables import text_batches
from parbpe.io.readers import ReadStats

SPECIAL = "<|endoftext|>"


def _documents(seed: int, n: int = 400) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzé中") for _ in range(rng.randint(1, 8))) for _ in range(200)]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 80))) + rng.choice([".", "\n", "!\n\n"])
            for _ in range(n)]
    docs[3] = f"two documents {SPECIAL} glued together"
    return docs


def _same_outputs(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if name != "stats.json":  # holds times and RSS
            assert filecmp.cmp(a / name, b / name, shallow=False), name


@pytest.mark.parametrize("workers", [1, 2])
def test_every_kind_of_iterable_equals_the_parquet_file(tmp_path, workers):
    docs = _documents(workers)
    pq.write_table(pa.table({"text": docs}), tmp_path / "docs.parquet")
    settings = dict(vocab_size=400, special_tokens=(SPECIAL,), workers=workers)
    parbpe.train(tmp_path / "docs.parquet", out_dir=tmp_path / "file", **settings)
    iterables = {
        "generator": (d for d in docs),
        "list": docs,
        "lists": (docs[i:i + 7] for i in range(0, len(docs), 7)),
        "arrow": (pa.array(docs[i:i + 50]) for i in range(0, len(docs), 50)),
        "one-array": pa.chunked_array([pa.array(docs[:100]), pa.array(docs[100:])]).cast(pa.large_string()),
    }
    for name, texts in iterables.items():
        # tiny batches, so that several go through the queue to both workers
        result = parbpe.train_from_iterator(texts, out_dir=tmp_path / name, data_limit=1 << 16, **settings)
        _same_outputs(tmp_path / "file", tmp_path / name)
        assert result.stats["documents"] == len(docs), name


def test_length_drives_the_progress(tmp_path):
    import io
    import json

    from parbpe.run.progress import Progress

    stream = io.StringIO()
    docs = _documents(3)
    parbpe.train_from_iterator(iter(docs), vocab_size=300, workers=1, length=len(docs),
                               progress=Progress("jsonl", stream))
    counts = [e for e in map(json.loads, stream.getvalue().splitlines())
              if e["event"] == "progress" and e["stage"] == "count"]
    assert counts[-1]["done"] == len(docs) and counts[-1]["total"] == len(docs)


def test_batches_are_a_few_mb_and_surrogates_are_replaced():
    stats = ReadStats()
    texts = ["x" * 1000] * 10_000 + ["bad \ud800 surrogate"]
    batches = list(text_batches(iter(texts), stats, batch_bytes=1 << 20))
    assert len(batches) == 10 and all(b.nbytes < 2 << 20 for b in batches)
    assert stats.documents == len(texts) and stats.replaced_bytes == 1
    with pytest.raises(ValueError, match="yielded a int"):
        list(text_batches([1], ReadStats()))


def test_a_path_or_bytes_is_refused_by_train_from_iterator(tmp_path):
    with pytest.raises(ValueError, match="not a path"):
        parbpe.train_from_iterator(str(tmp_path / "x.txt"), vocab_size=300)
    with pytest.raises(ValueError, match="yielded a bytes"):
        parbpe.train_from_iterator(iter([b"bytes"]), vocab_size=300, workers=1)


def test_a_failing_iterable_or_worker_ends_the_run_with_its_error(tmp_path):
    def broken():
        yield "some text"
        raise OSError("the source went away")

    with pytest.raises(OSError, match="went away"):
        parbpe.train_from_iterator(broken(), vocab_size=300, workers=2)
    assert not any(p.name.startswith("parbpe-") for p in tmp_path.iterdir())


def test_a_killed_counting_worker_is_an_error_not_a_hang(tmp_path, monkeypatch):
    from parbpe.run.faults import KILL_HOOK
    from parbpe.run.pool import WorkerDied

    monkeypatch.setenv(KILL_HOOK, "count:3")  # a worker SIGKILLs itself when it takes its 4th batch
    config = parbpe.TrainConfig(vocab_size=300, workers=2)
    batches = text_batches((pa.array(["word " * 20_000] * 10) for _ in range(200)), ReadStats())
    started = time.monotonic()
    with pytest.raises(WorkerDied, match=r"counting worker \d \(pid \d+, batches of an iterable\) died \(signal 9"):
        count_stream_to_runs(batches, config, str(tmp_path), start_method="fork")
    assert time.monotonic() - started < 5


def test_stdin_trains_like_the_same_text_file(tmp_path):
    text = "\n".join(_documents(5)) + "\n\xff invalid byte"
    data = text.encode("utf-8").replace(b"\xc3\xbf", b"\xff")
    (tmp_path / "corpus.txt").write_bytes(data)
    args = ["--vocab-size", "320", "--workers", "2", "--progress", "none"]
    run = [sys.executable, "-m", "parbpe.cli", "train"]
    subprocess.run(run + [str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "file")] + args, check=True,
                   capture_output=True)
    done = subprocess.run(run + ["-", "--out", str(tmp_path / "stdin")] + args, input=data, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    _same_outputs(tmp_path / "file", tmp_path / "stdin")
    import json

    stats = json.loads((tmp_path / "stdin" / "stats.json").read_text())
    assert stats["inputs"]["source"] == "standard input" and stats["replaced_utf8_sequences"] == 1


@pytest.mark.shared_data
@pytest.mark.parametrize("workers", [1, 2])
def test_realmix_documents_from_an_iterator_equal_the_parquet_run(realmix_run, tmp_path, workers):
    files, settings, expected, expected_dir = realmix_run

    def documents():
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(columns=["text"], batch_size=256):
                yield from batch.column(0).to_pylist()

    got = parbpe.train_from_iterator(documents(), out_dir=tmp_path / "iterator", workers=workers, **settings)
    assert got.tokenizer.merges == expected.tokenizer.merges
    _same_outputs(expected_dir, tmp_path / "iterator")
    for key in ("documents", "bytes_read", "chunks", "unique_chunks"):
        assert got.stats[key] == expected.stats[key], key

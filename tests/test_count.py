"""Counting in worker processes gives exactly the in-process counts."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parbpe
from parbpe.config import TrainConfig
from parbpe.count import count_units
from parbpe.read import plan

WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "ζήτα", "中文", "😀", "1234", "don't", "  ", "\n"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for k in range(3):
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60))) for _ in range(40)]
        texts[0] = texts[0] + "<|endoftext|>" + texts[1]
        pq.write_table(pa.table({"text": texts}), d / f"part-{k}.parquet", row_group_size=7)
    (d / "notes.txt").write_text("\n".join(rng.choice(WORDS) for _ in range(500)))
    return d


@pytest.mark.parametrize("workers", [2, 3, 4])
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_parallel_counts_equal_serial(corpus, workers, start_method):
    units = plan([str(corpus)])
    assert len(units) > 10
    config = TrainConfig(special_tokens=("<|endoftext|>",), workers=1)
    serial, serial_stats = count_units(units, config)
    seen = []
    parallel, stats = count_units(units, TrainConfig(special_tokens=("<|endoftext|>",), workers=workers),
                                  start_method=start_method, on_progress=lambda *a: seen.append(a))
    assert parallel == serial
    assert (stats.documents, stats.bytes) == (serial_stats.documents, serial_stats.bytes)
    assert seen[-1] == (len(units), len(units), stats.bytes)


def test_training_output_is_identical_for_any_worker_count(corpus, tmp_path):
    outputs = []
    for workers in (1, 3):
        out = tmp_path / f"w{workers}"
        parbpe.train([str(corpus)], vocab_size=300, special_tokens=("<|endoftext|>",), workers=workers,
                     out_dir=str(out))
        outputs.append({name: (out / name).read_bytes() for name in ("parbpe.json", "tokenizer.json",
                                                                     "merges.txt", "tokenizer.tiktoken")})
    assert outputs[0] == outputs[1]


def test_worker_error_names_the_unit(tmp_path):
    pq.write_table(pa.table({"text": ["fine text"] * 3}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"body": ["no text column"]}), tmp_path / "b.parquet")
    with pytest.raises(RuntimeError, match=r"worker \d+ failed on .*b.parquet \(row group 0\).*no column 'text'"):
        count_units(plan([str(tmp_path)]), TrainConfig(workers=2))


def test_a_killed_worker_is_a_clear_error_not_a_hang(corpus, monkeypatch):
    import os
    import signal

    import parbpe.count as count_module

    # With fork, the workers inherit this stand-in: each kills itself as the kernel's OOM killer would.
    monkeypatch.setattr(count_module, "count_unit", lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
    with pytest.raises(RuntimeError, match="probably killed for running out of memory"):
        count_units(plan([str(corpus)]), TrainConfig(workers=2), start_method="fork")

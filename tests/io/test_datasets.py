"""Hugging Face `datasets` objects passed to parbpe.train: a Dataset is read from its Arrow cache files
in parallel (one work unit per record-batch range); other datasets objects go through the iterator path."""

from __future__ import annotations

import filecmp
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parbpe
from parbpe.io.iterables import dataset_source

pytestmark = pytest.mark.heavy_imports  # run last (conftest.py): importing datasets grows this process


@pytest.fixture
def datasets():
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return pytest.importorskip("datasets")


def _docs(n: int = 600) -> list[str]:
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghij ") for _ in range(rng.randint(1, 9))) for _ in range(300)]
    return [" ".join(rng.choices(words, k=rng.randint(1, 60))) for _ in range(n)]


def _same(a, b) -> None:
    for name in sorted(os.listdir(a)):
        if name != "stats.json":
            assert filecmp.cmp(os.path.join(a, name), os.path.join(b, name), shallow=False), name


@pytest.fixture
def small(tmp_path, datasets):
    docs = _docs()
    pq.write_table(pa.table({"text": docs, "n": list(range(len(docs)))}), tmp_path / "docs.parquet", row_group_size=100)
    ds = datasets.Dataset.from_parquet(str(tmp_path / "docs.parquet"), cache_dir=str(tmp_path / "cache"))
    expected = parbpe.train(tmp_path / "docs.parquet", vocab_size=320, workers=2, out_dir=tmp_path / "parquet")
    return tmp_path, docs, ds, expected


def test_a_cached_dataset_is_read_from_its_arrow_files_by_record_batch_ranges(small, monkeypatch):
    tmp_path, docs, ds, expected = small
    import parbpe.io.iterables as iterables

    monkeypatch.setattr(iterables, "ARROW_RANGE_BYTES", 4096)  # several units from one small cache file
    units = dataset_source(ds, "text")
    assert isinstance(units, list) and len(units) > 1 and {u.kind for u in units} == {"arrow"}
    assert [u.start for u in units] == [0] + [u.end for u in units[:-1]]
    result = parbpe.train(ds, vocab_size=320, workers=2, out_dir=tmp_path / "dataset")
    _same(tmp_path / "parquet", tmp_path / "dataset")
    assert result.stats["documents"] == len(docs) and result.stats["work_units"] == len(units)


def test_dict_split_in_memory_filtered_and_streaming_datasets_give_the_same_result(small, datasets):
    tmp_path, docs, ds, expected = small
    split = datasets.DatasetDict({"train": ds})["train"]
    cases = {
        "split": split,
        "in-memory": datasets.Dataset.from_dict({"text": docs}),
        "shuffled": ds.shuffle(seed=1),  # an indices mapping: not the cache files' order, so the iterator path
        "streaming": ds.to_iterable_dataset(num_shards=3),
    }
    for name, obj in cases.items():
        got = parbpe.train(obj, vocab_size=320, workers=2, out_dir=tmp_path / name)
        _same(tmp_path / "parquet", tmp_path / name)
        assert got.stats["documents"] == len(docs), name
    assert parbpe.train_from_iterator(ds, vocab_size=320, workers=1).tokenizer.merges == expected.tokenizer.merges


def test_a_whole_dataset_dict_or_a_missing_column_says_what_to_pass(small, datasets):
    tmp_path, docs, ds, expected = small
    with pytest.raises(ValueError, match=r"holds several splits \(train, test\): pass one, e.g. ds\['train'\]"):
        parbpe.train(datasets.DatasetDict({"train": ds, "test": ds}), vocab_size=320)
    with pytest.raises(ValueError, match=r"no column 'content'; its columns are \['text', 'n'\]"):
        parbpe.train(ds, vocab_size=320, text_column="content")


@pytest.mark.shared_data
def test_a_dataset_built_from_realmix_shards_equals_the_parquet_run(realmix_run, tmp_path, datasets):
    files, settings, expected, expected_dir = realmix_run
    ds = datasets.Dataset.from_parquet(files, cache_dir=str(tmp_path / "cache"))
    got = parbpe.train(ds, out_dir=tmp_path / "dataset", **settings)
    assert got.tokenizer.merges == expected.tokenizer.merges
    _same(expected_dir, tmp_path / "dataset")
    assert got.stats["bytes_read"] == expected.stats["bytes_read"] and got.stats["work_units"] >= 2

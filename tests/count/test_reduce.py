"""The reduce's training chunks: sorted by bytes, or by bytes within each partition (SuperBPE's stage 2)."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest

from parbpe.config import TrainConfig
from parbpe.count.partitions import write_run
from parbpe.count.pieces import SCHEMA
from parbpe.count.reduce import combine_selections, reduce_runs, select_partition

N_PARTITIONS = 5


def _runs(tmp_path, n_runs: int = 3) -> tuple[list[str], dict[str, int]]:
    """Run files of random chunks (each chunk in several runs), and the chunks' summed counts."""
    rng = random.Random(n_runs)
    alphabet = ["a", "b", "é", " ", "\n", "\x00", "中", "😀"]
    totals: dict[str, int] = {}
    runs = []
    for k in range(n_runs):
        rows = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))): rng.randint(1, 5)
                for _ in range(400)}
        for chunk, count in rows.items():
            totals[chunk] = totals.get(chunk, 0) + count
        path = str(tmp_path / f"run{k}.arrow")
        write_run(path, pa.table({"chunk": list(rows), "count": list(rows.values())}, schema=SCHEMA), N_PARTITIONS)
        runs.append(path)
    return runs, totals


def _rows(chunks) -> list[tuple[bytes, int]]:
    return list(zip(chunks.chunks, chunks.counts.tolist()))


@pytest.mark.parametrize("workers", [1, 2])
def test_sorted_partitions_join_in_partition_order(tmp_path, workers):
    """reduce_runs(sort=True): each partition's kept chunks sorted by bytes, joined in partition order as
    they are (no sort of all of them); the same rows as the sorted join, freq_cutoff and the stop list
    applied alike, whatever the number of workers."""
    runs, totals = _runs(tmp_path)
    config = TrainConfig(freq_cutoff=2, stop_list_size=3)
    by_bytes = combine_selections(list(reduce_runs(runs, workers, config=config, n_partitions=N_PARTITIONS)), config)
    selections = list(reduce_runs(runs, workers, config=config, n_partitions=N_PARTITIONS, sort=True))
    assert all(s.sorted for s in selections)
    parts = [s.kept.column("chunk").to_pylist() for s in selections]
    by_partition = combine_selections(selections, config)

    expected = sorted((c.encode(), n) for c, n in totals.items() if n >= 2 and c.encode() not in by_bytes.stop_words)
    assert _rows(by_bytes) == expected and len(by_bytes.stop_words) == 3
    assert by_partition.stop_words == by_bytes.stop_words
    assert sorted(_rows(by_partition)) == expected
    stop = set(by_bytes.stop_words)
    in_order = [c.encode() for part in parts for c in sorted(part, key=str.encode) if c.encode() not in stop]
    assert by_partition.chunks == in_order
    assert by_partition.chunks != [c for c, _ in expected]  # (else the test shows nothing: partitions interleave)
    assert (by_partition.unique_chunks, by_partition.total_chunks, by_partition.dropped_by_cutoff) == \
        (by_bytes.unique_chunks, by_bytes.total_chunks, by_bytes.dropped_by_cutoff)


def test_one_unsorted_selection_sorts_them_all():
    """combine_selections joins in partition order only where every selection came sorted."""
    config = TrainConfig()
    tables = [pa.table({"chunk": chunks, "count": [1] * len(chunks)}, schema=SCHEMA)
              for chunks in (["zz", "b"], ["a", "y"])]
    mixed = [select_partition(tables[0], config, sort=True), select_partition(tables[1], config)]
    assert combine_selections(mixed, config).chunks == [b"a", b"b", b"y", b"zz"]
    both = [select_partition(t, config, sort=True) for t in tables]
    assert combine_selections(both, config).chunks == [b"b", b"zz", b"a", b"y"]


@pytest.mark.parametrize("workers", [1, 2])
def test_parts_written_by_the_reduce_workers_hold_what_they_would_send(tmp_path, workers):
    """reduce_runs(parts_dir=...): each partition's sorted kept chunks written to a file of its own (read
    back, a run directory's reduced parts: RunDirectory.save_reduced_parts), the Selection carrying
    only its facts; the same chunks in the same order as the selections sent back."""
    from parbpe.run.run_dir import RunDirectory

    runs, totals = _runs(tmp_path)
    config = TrainConfig(freq_cutoff=2)
    sent = combine_selections(list(reduce_runs(runs, workers, config=config, n_partitions=N_PARTITIONS, sort=True)),
                              config)
    run = RunDirectory(str(tmp_path / "run"))
    selections = list(reduce_runs(runs, workers, config=config, n_partitions=N_PARTITIONS, sort=True,
                                  parts_dir=run.reduced_parts_dir()))
    assert all(s.kept.num_rows == 0 and s.part is not None for s in selections)
    assert [os.path.basename(s.part[0]) for s in selections] == [f"part-{k:05d}.arrow" for k in range(N_PARTITIONS)]
    run.save_reduced_parts([s.part for s in selections], {})
    data, offsets, counts, _ = run.load_reduced()
    assert [data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])] == sent.chunks
    assert counts.tolist() == sent.counts.tolist()
    assert sum(s.unique_chunks for s in selections) == sent.unique_chunks == len(totals)


def test_a_reduce_worker_killed_while_writing_parts_is_one_line_and_nothing_is_recorded(tmp_path, monkeypatch):
    from parbpe.run.faults import KILL_HOOK
    from parbpe.run.pool import WorkerDied
    from parbpe.run.run_dir import RunDirectory

    runs, _ = _runs(tmp_path)
    run = RunDirectory(str(tmp_path / "run"))
    monkeypatch.setenv(KILL_HOOK, "reduce:2")
    with pytest.raises(WorkerDied) as died:
        list(reduce_runs(runs, 2, config=TrainConfig(), n_partitions=N_PARTITIONS, sort=True,
                         parts_dir=run.reduced_parts_dir()))
    assert "\n" not in str(died.value) and "reducing worker" in str(died.value)
    assert not run.has_reduced() and run.load_reduced() is None

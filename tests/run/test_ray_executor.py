"""Counting and training on a Ray cluster of two nodes simulated on this machine (one CPU each):
every output is byte-identical to the local executor's, also when tasks fail and are retried."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parbpe
from parbpe.cli import main
from parbpe.config import TrainConfig
from parbpe.run.faults import FAIL_ONCE_ENV

ray = pytest.importorskip("ray", reason="needs ray (pip install -e '.[test]' or 'parbpe[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils", reason="needs ray's cluster_utils")

pytestmark = pytest.mark.ray

WORDS = ["ray", "tasks", "count", "the", "chunks", "naïve", "中文", "don't", "2024", "a.b", "\n", "   ", "ζ", "🙂"]
NODE = {"num_cpus": 1, "object_store_memory": 150 * 2**20}


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each on 127.0.0.1, started once for the module, this process connected."""
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (tests/conftest.py, set before Ray is imported): 127.0.0.1 only.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        c = cluster_utils.Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
        c.add_node(**NODE)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        assert c.address.startswith("127.0.0.1:")
        try:
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Parquet files of several row groups, a text file and a counts file: every kind of work unit."""
    d = tmp_path_factory.mktemp("raycorpus")
    rng = random.Random(5)
    for k in range(3):
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 200))) for _ in range(50)]
        pq.write_table(pa.table({"text": texts, "id": list(range(50))}), d / f"part-{k}.parquet", row_group_size=10)
    (d / "notes.txt").write_text("\n".join(f"Note{i} " + " ".join(rng.choice(WORDS) for _ in range(30))
                                           for i in range(300)))
    parbpe.count_to_file([str(d / "notes.txt")], str(d / "extra-counts.parquet"), TrainConfig(workers=1))
    return d


def _count(inputs, out: Path, **kwargs) -> dict:
    """count_to_file; local runs get a fixed worker limit, since this process's tree holds the cluster."""
    sample = kwargs.pop("config_sample", None)
    config = TrainConfig(workers=kwargs.pop("workers", 1), memory_budget="2GB", seed=4, sample_docs=sample,
                         normalize="nfkd" if sample else None)
    if kwargs.get("executor") != "ray":
        kwargs["data_limit"] = 64 << 20
    return parbpe.count_to_file(inputs, str(out), config, **kwargs)


def test_counts_on_two_nodes_equal_local_counts(cluster, corpus, tmp_path, capsys):
    _count([str(corpus)], tmp_path / "local.parquet", workers=2)
    code = main(["count", str(corpus), "--out", str(tmp_path / "ray.parquet"), "--executor", "ray",
                 "--ray-address", cluster.address, "--workers", "1", "--memory-budget", "2GB",
                 "--stats", str(tmp_path / "stats.json"), "--progress", "none"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["executor"] == "ray" and stats["ray"]["nodes"] == 2
    assert stats["ray"]["tasks"] == {"count": 8, "reduce": 32} and stats["ray"]["retries"] == {"count": 0, "reduce": 0}
    assert sum(stats["ray"]["tasks_per_node"].values()) == 40


def test_a_sample_on_ray_is_the_local_sample(cluster, corpus, tmp_path):
    """--sample-docs: the same documents whatever the executor (the rule looks at each document alone);
    --normalize applied by the tasks as by local workers."""
    texts = [str(corpus / f"part-{k}.parquet") for k in range(3)] + [str(corpus / "notes.txt")]
    local = _count(texts, tmp_path / "local.parquet", workers=2, config_sample=0.3)
    on_ray = _count(texts, tmp_path / "ray.parquet", executor="ray", config_sample=0.3)
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert local["sample"] == on_ray["sample"] and 0 < local["sample"]["bytes"] < local["bytes_read"]


@pytest.mark.parametrize("superbpe", [False, True])
def test_train_on_ray_writes_the_same_files(cluster, corpus, tmp_path, superbpe):
    """Ray's count and reduce tasks make the local files; SuperBPE's too (stage 2's partitions sorted
    by the reduce tasks)."""
    settings = {"vocab_size": 420, "stop_list_size": 3, "freq_cutoff": 2, "workers": 1, "memory_budget": "2GB"}
    inputs = [str(corpus)]
    if superbpe:  # (the text files: SuperBPE counts text twice, and refuses counts files)
        settings.update(superbpe_transition=100, stop_list_size=0)
        inputs = [str(corpus / f"part-{k}.parquet") for k in range(3)] + [str(corpus / "notes.txt")]
    parbpe.train(inputs, out_dir=str(tmp_path / "local"), data_limit=64 << 20, **settings)
    result = parbpe.train(inputs, out_dir=str(tmp_path / "ray"), executor="ray", **settings)
    for name in ("parbpe.json", "tokenizer.tiktoken", "tokenizer.json", "vocab.json", "merges.txt"):
        if (tmp_path / "local" / name).exists() or (tmp_path / "ray" / name).exists():
            assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    assert result.stats["ray"]["nodes"] == 2 and result.stats["executor"] == "ray"


def test_failed_and_killed_tasks_are_retried_and_never_counted_twice(cluster, corpus, tmp_path, monkeypatch):
    # The first task attempt to finish raises after counting; the next one is SIGKILLed after counting.
    _count([str(corpus)], tmp_path / "local.parquet")
    monkeypatch.setenv(FAIL_ONCE_ENV, f"raise:{tmp_path / 'raised'},kill:{tmp_path / 'killed'}")
    summary = _count([str(corpus)], tmp_path / "ray.parquet", executor="ray")
    assert (tmp_path / "raised").exists() and (tmp_path / "killed").exists()
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert summary["ray"]["retries"]["count"] == 2 and summary["ray"]["retries"]["reduce"] == 0


def test_a_killed_attempt_log_leaves_the_counts_as_they_were(cluster, corpus, tmp_path, monkeypatch):
    """The actor that counts attempts (AttemptLog) killed before the reduce: its tasks count as first
    attempts, and the counts file is the local one."""
    from parbpe.run import ray_executor

    _count([str(corpus)], tmp_path / "local.parquet")
    submit = ray_executor.RayExecutor.submit

    def kill_the_log_first(self, stage, *args):
        if stage == "reduce" and self._attempts is not None:
            ray.kill(self._attempts)
        return submit(self, stage, *args)

    monkeypatch.setattr(ray_executor.RayExecutor, "submit", kill_the_log_first)
    summary = _count([str(corpus)], tmp_path / "ray.parquet", executor="ray")
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert summary["ray"]["retries"] == {"count": 0, "reduce": 0}


@pytest.mark.shared_data
def test_realmix_counts_on_two_nodes_equal_local_counts(cluster, shared_data, tmp_path):
    shards = [str(shared_data / "realmix" / f"train-0000{k}-of-00008.parquet") for k in (0, 1)]
    local = _count(shards, tmp_path / "local.parquet", workers=2)
    remote = _count(shards, tmp_path / "ray.parquet", executor="ray")
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert remote["bytes_read"] == local["bytes_read"] and remote["ray"]["nodes"] == 2


def test_a_user_error_in_a_task_is_one_line_and_not_retried(cluster, tmp_path, capsys):
    pq.write_table(pa.table({"body": ["no text column here"]}), tmp_path / "wrong.parquet")
    code = main(["count", str(tmp_path / "wrong.parquet"), "--out", str(tmp_path / "c.parquet"), "--executor", "ray",
                 "--workers", "1", "--memory-budget", "2GB", "--progress", "none"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("parbpe count: error: ") and "has no column 'text'" in err and err.count("\n") == 1, err


def test_a_task_larger_than_every_node_is_refused_before_it_hangs(cluster, corpus, tmp_path):
    with pytest.raises(ValueError, match="no Ray node offers more than"):
        parbpe.count_to_file([str(corpus)], str(tmp_path / "c.parquet"),
                             TrainConfig(workers=1, memory_budget="100TB"), executor="ray")


def test_a_node_that_dies_mid_count_changes_nothing(cluster, corpus, tmp_path):
    # A node other than the head (there are two: a third joins first) is removed without warning once
    # it has finished a count task: its running tasks are retried elsewhere, and the partitions lost
    # with its object store are recomputed by Ray from their lineage when the reduce tasks need them.
    # Ray's scheduler picks the nodes, and small tasks may all run on the head: the count is made again,
    # up to four times, until one of the two has run a task. (Last in the module: the cluster is not
    # the same afterwards.)
    from parbpe.count.counts_file import write_counts_file
    from parbpe.count.on_ray import count_on_ray, reduce_on_ray
    from parbpe.io.plan import plan
    from parbpe.run.ray_executor import RayExecutor

    _count([str(corpus)], tmp_path / "local.parquet")
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    removable = {node.node_id[:12]: node for node in cluster.worker_nodes}
    assert len(removable) == 2
    config = TrainConfig(workers=1, memory_budget="2GB")
    removed = []

    with RayExecutor(cluster.address, task_memory=1 << 30) as executor:
        assert executor.stats.nodes == 3

        def on_progress(*_: int) -> None:
            ran = [key for key in removable if key in executor.stats.tasks_per_node]
            if not removed and ran:
                cluster.remove_node(removable[ran[0]], allow_graceful=False)
                removed.append(dict(executor.stats.tasks_per_node))

        for _ in range(4):
            counted = count_on_ray(plan([str(corpus)]), config, executor, data_limit=64 << 20, on_progress=on_progress)
            if removed:
                break
        write_counts_file(str(tmp_path / "ray.parquet"), reduce_on_ray(counted.partitions, executor), config)
    if not removed:  # Ray ran every count task of four counts on the head: the failure never happened
        pytest.skip("Ray ran every count task on the head node in four counts; no node was removed")
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()

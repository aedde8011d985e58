"""The benchmark scripts run on tiny inputs and print well-formed results (peers optional)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _corpus(path: Path, seed: int, n_docs: int = 60) -> None:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(80)]
    texts = [" ".join(rng.choice(words) for _ in range(120)) for _ in range(n_docs)]
    pq.write_table(pa.table({"text": texts}), path)


def test_compare_runs_and_reports_missing_peers_as_skipped(tmp_path):
    _corpus(tmp_path / "train.parquet", 0)
    _corpus(tmp_path / "heldout.parquet", 1, n_docs=10)
    out = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--corpus", str(tmp_path / "train.parquet"),
         "--heldout", str(tmp_path / "heldout.parquet"), "--vocab-size", "300", "--repeat", "2",
         "--trainers", "parbpe-w1,parbpe,rustbpe,bpeasy", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    result = json.loads((tmp_path / "r.json").read_text())
    rows = {r["trainer"]: r for r in result["rows"]}
    assert rows["parbpe-w1"]["ratio_to_first"] == 1.0
    assert rows["parbpe"]["merges_equal_first"] is True  # worker count never changes the result
    for name in ("rustbpe", "bpeasy"):
        assert name in rows or name in result["skipped"]
        if name in result["skipped"]:
            assert f"{name:12s} skipped: not installed" in out
    for row in rows.values():
        assert row["median_s"] > 0 and row["peak_rss_sampled_mb"] > 0 and row["bytes_per_token"] > 1


def test_merge_phase_bench_on_a_counts_file(tmp_path):
    rng = random.Random(2)
    words = ["".join(rng.choice("abcdef") for _ in range(6)) for _ in range(300)]
    lines = ["str,int"] + [f"{w},{rng.randint(10, 99)}" for w in words]
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, str(BENCH / "merge_phase.py"), str(tmp_path / "c.csv"),
                          "--vocab-size", "400", "--repeat", "2", "--threads", "1,2"], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    report = json.loads(out)
    assert report["merges"] == 144 and report["rounds"] >= 1
    assert len(report["merge_seconds"]["runs"]) == 4  # the script checks that every run made the same merges
    assert sorted(report["by_threads"]) == ["1", "2"]
    assert all(len(r["runs"]) == 2 for r in report["by_threads"].values())


def test_merge_phase_against_a_baseline_checkout(tmp_path):
    """--baseline: processes with each checkout's parbpe, interleaved (here the same checkout twice)."""
    rng = random.Random(4)
    words = ["".join(rng.choice("abcdef") for _ in range(6)) for _ in range(200)]
    lines = ["str,int"] + [f"{w},{rng.randint(10, 99)}" for w in words]
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    command = [sys.executable, str(BENCH / "merge_phase.py"), str(tmp_path / "c.csv"), "--vocab-size", "350",
               "--repeat", "1"]
    report = json.loads(subprocess.run([*command, "--baseline", str(BENCH.parent), "--pairs", "2"],
                                       capture_output=True, text=True, check=True, timeout=300).stdout)
    assert report["same_merges"] and report["ratio"] > 0 and report["cpu_ratio"] > 0
    assert len(report["runs"]["this"]) == len(report["runs"]["baseline"]) == 2
    for extra, message in ((["--baseline", str(tmp_path)], "is not a parbpe checkout"),
                           (["--baseline", str(BENCH.parent), "--pairs", "0"], "--pairs must be at least 1")):
        done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1]


def test_batching_bench_on_a_counts_file(tmp_path):
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 9))) for _ in range(400)]
    lines = ["str,int"] + [f"{w},{rng.randint(10, 500)}" for w in words]
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    _corpus(tmp_path / "heldout.parquet", 4, n_docs=5)
    subprocess.run([sys.executable, str(BENCH / "batching.py"), "--counts", str(tmp_path / "c.csv"),
                    "--heldout", str(tmp_path / "heldout.parquet"), "--vocab-sizes", "300", "400",
                    "--json", str(tmp_path / "b.json")], capture_output=True, text=True, check=True, timeout=300)
    result = json.loads((tmp_path / "b.json").read_text())
    rows = result["rows"]
    assert [r["setting"] for r in rows[:8]] == ["serial", "exact", "cap_divisor=2", "cap_divisor=4", "cap_divisor=8",
                                                 "max_batch_size=50", "max_batch_size=200", "max_batch_size=1000"]
    serial, exact = rows[0], rows[1]
    assert serial["merges_differing_from_serial"] == 0 and serial["merges_per_round_max"] == 1
    assert serial["rounds"] == 300 - 256
    assert exact["merges_differing_from_serial"] == 0 and exact["tokens_not_in_serial"] == 0
    assert exact["rounds"] < serial["rounds"]
    assert all(r["bytes_per_token"] > 1 for r in rows)
    assert set(result["curves"]) == {r["setting"] for r in rows[:8]}


def _make_corpus(tmp_path: Path, name: str, seed: int, size: str = "300KB") -> Path:
    out = tmp_path / name
    subprocess.run([sys.executable, str(BENCH / "make_corpus.py"), "--size", size, "--out", str(out), "--seed",
                    str(seed), "--source", str(tmp_path / "source"), "--shard-size", "120KB", "--workers", "2"],
                   check=True, capture_output=True, text=True)
    return out


def test_make_corpus_is_deterministic_with_fineweb_schema_and_grows_vocabulary(tmp_path):
    (tmp_path / "source").mkdir()
    rng = random.Random(0)
    paragraphs = ["\n\n".join(" ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran"])
                                       for _ in range(40)) for _ in range(5)) for _ in range(50)]
    pq.write_table(pa.table({"text": paragraphs}), tmp_path / "source" / "train-0.parquet")
    a = _make_corpus(tmp_path, "a", seed=1)
    b = _make_corpus(tmp_path, "b", seed=1)
    c = _make_corpus(tmp_path, "c", seed=2)
    files = sorted(p.name for p in a.glob("*.parquet"))
    assert len(files) == 3
    texts = {name: [pq.read_table(d / f, columns=["text"]).column(0).to_pylist() for f in files]
             for name, d in (("a", a), ("b", b), ("c", c))}
    assert texts["a"] == texts["b"] and texts["a"] != texts["c"]
    table = pq.read_table(a / files[0])
    assert table.column_names == ["text", "id", "dump", "url", "file_path", "language", "language_score",
                                  "token_count", "score", "int_score"]
    total = sum(len(t.encode()) for shard in texts["a"] for t in shard)
    assert 300_000 <= total < 330_000
    # Rare words: far more distinct words than the nine of the source, still growing in the last shard.
    seen: set[str] = set()
    new_per_shard = []
    for shard in texts["a"]:
        words = {w for t in shard for w in t.split()}
        new_per_shard.append(len(words - seen))
        seen |= words
    assert new_per_shard[0] > 100 and new_per_shard[1] > 0.2 * new_per_shard[0]


def test_memory_bench_runs_budgets_and_compares_outputs(tmp_path):
    _corpus(tmp_path / "train.parquet", 0)
    out = subprocess.run(
        [sys.executable, str(BENCH / "memory.py"), "--corpus", str(tmp_path / "train.parquet"),
         "--budgets", "none,1GB", "--workers", "2", "--json", str(tmp_path / "m.json")],
        check=True, capture_output=True, text=True)
    assert "same output" in out.stdout
    rows = json.loads((tmp_path / "m.json").read_text())["rows"]
    assert [r["budget"] for r in rows] == ["none", "1GB"]
    assert all(r["equal_to_first"] and r["peak_rss_sampled_mb"] > 0 and r["unique_chunks"] > 0 for r in rows)
    assert rows[1]["budget_bytes"] == 10**9


def test_memory_bench_trains_under_budgets_with_peaks_by_stage(tmp_path):
    _corpus(tmp_path / "train.parquet", 0)
    out = subprocess.run(
        [sys.executable, str(BENCH / "memory.py"), "--corpus", str(tmp_path / "train.parquet"), "--train",
         "--vocab-size", "300", "--budgets", "none,2GB,50MB", "--workers", "1", "--json", str(tmp_path / "m.json"),
         "--plot", str(tmp_path / "m.png")],
        check=True, capture_output=True, text=True, timeout=600)
    rows = json.loads((tmp_path / "m.json").read_text())["rows"]
    assert [r["budget"] for r in rows] == ["none", "2GB", "50MB"]
    for row in rows[:2]:
        assert row["equal_to_first"] and row["min_count"] == 1 and not row["auto_cutoff"]
        assert set(row["peak_by_stage_mb"]) == {"count", "reduce", "table", "merge", "write"}
        assert 0 < max(row["peak_by_stage_mb"].values()) <= row["peak_rss_sampled_mb"] * 1.01
    assert "too small" in rows[2]["refused"]  # a one-line reason, not a traceback
    assert "refused: " in out.stdout and (tmp_path / "m.png").stat().st_size > 0


def test_scaling_bench_counts_prefixes_of_a_generated_corpus(tmp_path):
    (tmp_path / "source").mkdir()
    _corpus(tmp_path / "source" / "train-0.parquet", 0)
    corpus = _make_corpus(tmp_path, "gen", seed=0, size="300KB")
    out = subprocess.run(
        [sys.executable, str(BENCH / "scaling.py"), "--corpus", str(corpus), "--sizes", "100KB,300KB",
         "--workers", "1,2", "--json", str(tmp_path / "s.json")], check=True, capture_output=True, text=True)
    assert "unique chunks" in out.stdout
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert [(r["files"], r["workers"]) for r in rows] == [(1, 1), (1, 2), (3, 1), (3, 2)]
    assert rows[0]["unique_chunks"] == rows[1]["unique_chunks"] < rows[2]["unique_chunks"] == rows[3]["unique_chunks"]


def test_checkpoints_bench_times_settings_and_a_resume(tmp_path):
    for k in range(3):
        _corpus(tmp_path / f"part{k}.parquet", 10 + k)
    subprocess.run([sys.executable, str(BENCH / "checkpoints.py"), "--corpus", str(tmp_path / "part*.parquet"),
                    "--vocab-size", "400", "--repeat", "1", "--workers", "1", "--json", str(tmp_path / "r.json")],
                   capture_output=True, text=True, timeout=600, check=True)
    result = json.loads((tmp_path / "r.json").read_text())
    assert sorted(result["median"]) == ["default", "end-only", "every-unit"]
    assert result["resume"]["killed_status"] == -9 and result["resume"]["identical_files"] is True


def test_ray_scaling_bench_compares_s3_and_disk(tmp_path):
    # The S3 half of bench/ray_scaling.py (a moto server on 127.0.0.1); the Ray half is tests/run's.
    pytest.importorskip("moto.server", reason="needs moto[server] (pip install -e '.[test]')")
    _corpus(tmp_path / "train-00000.parquet", 0)
    _corpus(tmp_path / "train-00001.parquet", 1)
    out = subprocess.run([sys.executable, str(BENCH / "ray_scaling.py"), "--realmix", str(tmp_path), "--repeat", "1",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, cwd=BENCH, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "realmix from S3" in out.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["s3"]["s3"][0]["digest"] == result["s3"]["disk"][0]["digest"]


def test_superbpe_bench_runs_both_kinds_and_evaluates_side_by_side(tmp_path):
    rng = random.Random(5)
    words = ["the", "of", "cat", "sat", "on", "mat", "and", "a"]
    texts = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + "." for _ in range(40))
             for _ in range(30)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "train.parquet")
    pq.write_table(pa.table({"text": texts[:5]}), tmp_path / "heldout.parquet")
    out = subprocess.run(
        [sys.executable, str(BENCH / "superbpe.py"), "--corpus", str(tmp_path / "train.parquet"),
         "--heldout", str(tmp_path / "heldout.parquet"), "--vocab-size", "400", "--transition", "0.8",
         "--workers", "1", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["heldout"]["superbpe"]["tokens"] < result["heldout"]["bpe"]["tokens"]
    stage2 = result["runs"]["superbpe"][0]["superbpe"]
    assert stage2["stage1_merges"] + stage2["stage2_merges"] == 400 - 257 and stage2["stage2_merges"] > 0
    assert "SuperBPE stage 2" in out and "superbpe" in out


def test_stage2_workers_bench_cuts_each_step_and_compares_worker_counts(tmp_path):
    rng = random.Random(6)
    words = ["the", "of", "cat", "sat", "on", "mat", "and", "a", "12", "::"]
    texts = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + "." for _ in range(40))
             for _ in range(30)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "train.parquet")
    out = subprocess.run(
        [sys.executable, str(BENCH / "stage2_workers.py"), "--corpus", str(tmp_path / "train.parquet"),
         "--vocab-size", "400", "--workers", "1,2", "--repeat", "1", "--interval", "0.02",
         "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert [r["workers"] for r in runs] == [1, 2] and len({r["digest"] for r in runs}) == 1
    for run in runs:
        assert set(run["steps"]) == {"superbpe_count", "superbpe_table", "superbpe_encode", "superbpe_merge"}
        assert all(step["peak_rss_mb"] > 0 and step["peak_pss_mb"] > 0 for step in run["steps"].values())
    assert "| 2 | encode+merge |" in out and "the same in every run" in out


def test_grow_bench_continues_a_rank_file_and_checks_it(tmp_path):
    # GPT-2's rank file is not in the repository: a small rank file made the same way stands in.
    from parbpe.cli import main as parbpe_main

    words = ["grow", "the", "tokenizer", "on", "new", "text", "  ", "\n", "123", "ünï"]
    rng = random.Random(4)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) for _ in range(400)]
    (tmp_path / "corpus.txt").write_text("\n".join(texts[:300]))
    pq.write_table(pa.table({"text": texts[300:]}), tmp_path / "heldout.parquet")
    assert parbpe_main(["train", str(tmp_path / "corpus.txt"), "--vocab-size", "300", "--pattern", "gpt2",
                        "--out", str(tmp_path / "small"), "--progress", "none", "--workers", "1"]) == 0
    rank_file = tmp_path / "small" / "tokenizer.tiktoken"
    out = subprocess.run([sys.executable, str(BENCH / "grow.py"), "--tiktoken", str(rank_file),
                          "--corpus", str(tmp_path / "corpus.txt"), "--heldout", str(tmp_path / "heldout.parquet"),
                          "--add", "20", "--workers", "1", "--out", str(tmp_path / "grown"),
                          "--json", str(tmp_path / "grow.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "checks passed on 100 held-out documents" in out.stdout
    result = json.loads((tmp_path / "grow.json").read_text())
    ranks = len(rank_file.read_text().splitlines())
    assert result["checks"]["grown"]["vocab_size"] == ranks + 1 + 20
    assert result["checks"]["grown"]["tokens"] < result["checks"]["gpt2"]["tokens"]


def test_option_cost_bench_compares_variants_interleaved(tmp_path):
    _corpus(tmp_path / "train.parquet", 0)
    _corpus(tmp_path / "heldout.parquet", 1, n_docs=10)
    out = subprocess.run(
        [sys.executable, str(BENCH / "option_cost.py"), str(tmp_path / "train.parquet"), "--heldout",
         str(tmp_path / "heldout.parquet"), "--vocab-size", "400", "--repeat", "1", "--workers", "1",
         "--variant", "plain=", "--variant", "cap4=--max-token-bytes 4"],
        capture_output=True, text=True, timeout=600, check=True).stdout
    table, stages = out.split("\n\n")
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert rows["plain"][2] == "1.00" and rows["plain"][-1] != "4" and rows["cap4"][-1] == "4"
    assert "merge" in stages.splitlines()[0] and [line.split()[0] for line in stages.splitlines()[1:]] == [
        "plain", "cap4"]


def test_pathpiece_bench_runs_bpe_and_pathpiece_and_evaluates_both(tmp_path):
    _corpus(tmp_path / "train.parquet", 0)
    _corpus(tmp_path / "heldout.parquet", 1, n_docs=10)
    out = subprocess.run(
        [sys.executable, str(BENCH / "pathpiece.py"), str(tmp_path / "train.parquet"), "--heldout",
         str(tmp_path / "heldout.parquet"), "--vocab-size", "300", "--initial-vocab-size", "600", "--workers", "2"],
        capture_output=True, text=True, timeout=600, check=True).stdout
    assert "pathpiece-w2" in out and "bpe-w2" in out
    methods = [line.split()[:2] for line in out.splitlines() if line.startswith("  ")]
    assert ["bpe-w2", "merges"] in methods and ["pathpiece-w2", "shortest"] in methods


def test_merge_engines_merge_a_counts_file_alike(tmp_path):
    """bench/merge_engines.py: the linked and chunk engines on one counts file, each in its own process,
    the same merges."""
    _corpus(tmp_path / "train.parquet", 2)
    subprocess.run([sys.executable, "-m", "parbpe", "count", str(tmp_path / "train.parquet"), "--pattern", "gpt2",
                    "--workers", "1", "--progress", "none", "--out", str(tmp_path / "counts.parquet")],
                   check=True, capture_output=True, cwd=BENCH.parent, timeout=300)
    out = subprocess.run([sys.executable, str(BENCH / "merge_engines.py"), str(tmp_path / "counts.parquet"),
                          "--vocab-size", "300"], capture_output=True, text=True, timeout=300, check=True).stdout
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert [line["engine"] for line in lines[:-1]] == ["linked", "chunk"]
    assert lines[-1] == {"same_merges": True} and all(line["merges"] > 0 for line in lines[:-1])


def test_compile_times_lists_the_kernels_it_compiles():
    """bench/compile_times.py compiles the kernels named, in an empty cache of its own, and sums them."""
    pytest.importorskip("numba")
    out = subprocess.run([sys.executable, str(BENCH / "compile_times.py"), "--only", "distinct_pairs,counting_offsets"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert sorted(line["kernel"].rsplit(".", 1)[-1] for line in lines[:-1]) == ["counting_offsets", "distinct_pairs"]
    assert lines[-1]["kernels"] == 2 and lines[-1]["seconds"] > 0 and all(line["code_bytes"] > 0 for line in lines[:-1])

"""How distinct chunks grow with the corpus (Heaps' law), and FineWeb-Edu in full from it (docs/SCALE.md).

    python bench/heaps.py count --out-dir /tmp/heaps/gen --per 1 '/tmp/corpus10g/train-*.parquet'
    python bench/heaps.py curve --out-dir /tmp/heaps/gen --json /tmp/heaps/gen.json
    python bench/heaps.py runs --out-dir /tmp/heaps/gen --to /tmp/heaps/gen-runs
    python bench/heaps.py reduce --runs /tmp/heaps/gen-runs --json /tmp/heaps/gen-reduce.json
    python bench/heaps.py plan --curve /tmp/heaps/realmix.json --curve /tmp/heaps/gen.json \
        --reduce /tmp/heaps/gen-reduce.json --fineweb ../shared/data/fineweb-edu-counts/fineweb-edu-1gb-cutoff10.csv

count: each group of --per input files is counted by its own `parbpe count` (GPT-4 pattern,
<|endoftext|>, --workers 1, under nice), into OUT_DIR/group-NNNNN.parquet; its stats, the tree's
peak RSS and the largest bytes of run files on disk (both sampled every 0.1 s) go beside it
(--keep-runs: hard links to the run files too). A group counted before is kept: the command resumes.
curve: the groups' counts summed in order, so that after group k they are the counts of the
corpus's first k groups; after each: text bytes, documents, chunk occurrences, distinct chunks and,
for each cutoff c, the distinct chunks seen at least c times, their bytes and the merge table they
make (chunks of more than one byte, their bytes); then Heaps' law V = K * n^beta fitted to each
(least squares on log10 V against log10 n: K, beta, R^2, residuals), and two checks of the plan's
method (collapse, backtest).
objects: one Ray count task's partitions, their bytes in the object store against their Arrow bytes.
runs: each group's counts as a run file (what a Ray count task returns for that text: its counts
cut into the hash partitions). reduce: run files reduced partition by partition by count/reduce.py's
reduce_runs in this process, its RSS sampled: the peak above the start per byte of a partition's input.
plan: FineWeb-Edu in full from those figures and the constants below (each says where it comes from).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from parbpe.count.partitions import N_PARTITIONS, write_run  # noqa: E402
from parbpe.count.pieces import SCHEMA, sum_tables  # noqa: E402
from parbpe.count.reduce import reduce_runs  # noqa: E402
from parbpe.io.counts_files import read_counts  # noqa: E402
from parbpe.io.plan import plan as plan_units  # noqa: E402
from parbpe.merge.fit import MERGE_BYTES_PER_CHUNK, MERGE_BYTES_PER_TOKEN  # noqa: E402
from parbpe.run.memory import PeakSampler, process_rss  # noqa: E402

CUTOFFS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
SPECIAL = "<|endoftext|>"

# The figures of the plan that do not come from this script's measurements. Update them here.
# Counting MB/s per worker: BENCHMARKS.md section 41 (2026-11-27, 7a7c252): realmix's count stage inside
# `train` (GPT-4, 2 workers) 1.55 s, the middle of three interleaved medians (1.45-1.66 s):
# 152.8 MB / 1.55 s / 2 = 49.3 MB/s per worker (section 24's 3.28 s gave 23.3).
MB_PER_S_PER_WORKER = 49.3
FINEWEB_TEXT_BYTES = 5.5e12  # FineWeb-Edu in full: 1.3 T tokens, some 5-6 TB of text (issue 27)
FINEWEB_ANCHOR_BYTES = 1e9  # the counts file's text: "about 1 GB of the FineWeb-Edu 10B sample" (data README)
NODE_CORES = 16
NODE_MEMORY = 64e9
NODE_BUDGET = 48e9  # `ray start --memory` and --memory-budget per node, as docs/SCALE.md's config sets it
HEAD_BUDGET = 60e9  # the 64 GB head node's --memory-budget, 4 GB left to the system and Ray's own processes
HEAD_BASE_RSS = 0.5e9  # assumed: above M6's 133 MB before the merge stage and the Ray driver's 0.23 GB (BENCHMARKS 7)
NODES = (1, 8, 32, 128)
TASKS_PER_CPU = 4  # count/on_ray.py: count tasks per cluster CPU
RAY_OBJECT_STORE_SHARE = 0.3  # Ray's default object store: 30% of a node's memory
# The merge stage's peak per table token, all in (the table, the engine, the index; fit.py's model says 38
# a token and 24 a chunk): `parbpe train` realmix -> 32,768, --workers 1 (BENCHMARKS.md section 26):
# 703.2 MB at the peak, 132.6 MB before the stage (merge_fit's estimate less its model), 11.8 M table tokens.
MERGE_BYTES_PER_TOKEN_MEASURED = (703.2e6 - 132.6e6) / 11_800_097
# The merge stage's time, per table token, to 65,536 tokens: BENCHMARKS.md section 41, realmix -> 32,768
# (11.8 M table tokens, 2 workers, numba) 2.72 s, the middle of three interleaved medians (2.70-2.73 s;
# section 24: 6.39 s); assumed linear in table tokens and in merges.
MERGE_SECONDS_PER_TOKEN = 2.72 / 11.8e6 * (65536 - 256) / (32768 - 256)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    count = sub.add_parser("count", help="count each group of input files with `parbpe count`")
    count.add_argument("inputs", nargs="+")
    count.add_argument("--out-dir", required=True)
    count.add_argument("--per", type=int, default=1, help="input files per group")
    count.add_argument("--keep-runs", action="store_true", help="keep (hard links to) each count's run files")
    curve = sub.add_parser("curve", help="the groups' counts summed in order; Heaps' law fitted")
    curve.add_argument("--out-dir", required=True)
    curve.add_argument("--json", required=True)
    curve.add_argument("--subtract", type=int, default=0,
                       help="also fit V minus this many chunks (a resampled source's own), from --subtract-from bytes")
    curve.add_argument("--subtract-from", type=float, default=0.0)
    runs = sub.add_parser("runs", help="each group's counts as a run file (a Ray count task's output)")
    runs.add_argument("--out-dir", required=True, help="the groups' counts (count's --out-dir)")
    runs.add_argument("--to", required=True)
    reduce = sub.add_parser("reduce", help="run files reduced partition by partition, RSS sampled")
    reduce.add_argument("--runs", required=True, help="a directory of run files (runs --to, or count --keep-runs)")
    reduce.add_argument("--json", required=True)
    objects = sub.add_parser("objects", help="one Ray count task's partitions: object store bytes against Arrow's")
    objects.add_argument("inputs", nargs="+")
    plan = sub.add_parser("plan", help="FineWeb-Edu in full from the measured figures")
    plan.add_argument("--curve", action="append", required=True,
                      help="curve JSON of a family whose V_1 / V_10 and bytes a row stand in for FineWeb's")
    plan.add_argument("--reduce", action="append", required=True, help="reduce JSON (several: a line is fitted)")
    plan.add_argument("--fineweb", required=True, help="the FineWeb-Edu counts CSV (cutoff 10)")
    plan.add_argument("--json")
    args = parser.parse_args(argv)
    if args.command == "count":
        count_groups(args.inputs, args.out_dir, args.per, args.keep_runs)
    elif args.command == "curve":
        _dump(args.json, growth_curve(args.out_dir, args.subtract, args.subtract_from))
    elif args.command == "runs":
        write_group_runs(args.out_dir, args.to)
    elif args.command == "reduce":
        _dump(args.json, measure_reduce(args.runs))
    elif args.command == "objects":
        _dump(None, task_objects(args.inputs))
    else:
        _dump(args.json, fineweb_plan(args.curve, args.reduce, args.fineweb))


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _dump(path: str | None, result: dict) -> None:
    text = json.dumps(result, indent=1)
    if path:
        with open(path, "w") as f:
            f.write(text)
    print(text)


# ---- count ---------------------------------------------------------------------------------------

def count_groups(inputs: list[str], out_dir: str, per: int, keep_runs: bool) -> None:
    """One `parbpe count` per group of `per` files (sorted), skipping groups counted before."""
    files = sorted(f for pattern in inputs for f in glob.glob(pattern))
    os.makedirs(out_dir, exist_ok=True)
    for k in range(0, len(files), per):
        name = os.path.join(out_dir, f"group-{k // per:05d}")
        if os.path.exists(name + ".json"):
            continue
        record = count_one(files[k:k + per], name, keep_runs)
        print(f"{os.path.basename(name)}: {record['stats']['bytes_read'] / 1e6:.1f} MB, "
              f"{record['stats']['unique_chunks']:,} distinct, peak {record['peak_rss'] / 1e6:.0f} MB", flush=True)


def count_one(files: list[str], name: str, keep_runs: bool) -> dict:
    """`parbpe count` of files into NAME.parquet, sampled; NAME.json holds what was measured."""
    tmp = name + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    command = ["nice", "-n", "10", sys.executable, "-P", "-m", "parbpe.cli", "count", *files,
               "--out", name + ".parquet", "--workers", "1", "--special-tokens", SPECIAL, "--progress", "jsonl",
               "--stats", name + ".stats.json", "--tmp-dir", tmp]
    started = time.time()
    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": tree})
    sampler = RunSampler(proc.pid, tmp, name + ".runs" if keep_runs else None)
    with sampler:
        for line in proc.stderr:
            sampler.progress(line)
    if proc.wait():
        raise SystemExit(f"{' '.join(command)} failed with {proc.returncode}")
    with open(name + ".stats.json") as f:
        stats = json.load(f)
    record = {"files": files, "command": command, "seconds": round(time.time() - started, 2), "stats": stats,
              "counts_file_bytes": os.path.getsize(name + ".parquet"), "peak_rss": sampler.peak,
              "peak_rss_by_phase": sampler.by_phase, "max_run_bytes": sampler.max_run_bytes,
              "run_files": sampler.run_files, "run_bytes": sampler.run_bytes}
    with open(name + ".json", "w") as f:
        json.dump(record, f, indent=1)
    if not os.listdir(tmp):
        os.rmdir(tmp)
    return record


class RunSampler(PeakSampler):
    """The RSS of a `parbpe count` process tree (PeakSampler, every 0.1 s) and the run files in its
    temporary directory, by phase: `count` until its progress says every unit is counted, then
    `finish+reduce` (the last run, then the reduce stage). keep: a directory where each run file is
    hard-linked as it appears."""

    def __init__(self, pid: int, tmp: str, keep: str | None) -> None:
        super().__init__(interval=0.1, pid=pid)
        self.tmp, self.keep = tmp, keep
        self.max_run_bytes = 0
        self.runs: dict[str, int] = {}
        if keep:
            os.makedirs(keep, exist_ok=True)
        self.stage("count")

    @property
    def by_phase(self) -> dict[str, int]:
        return self.by_stage

    @property
    def run_files(self) -> int:
        return len(self.runs)

    @property
    def run_bytes(self) -> int:
        return sum(self.runs.values())

    def progress(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if event.get("stage") == "count" and event.get("done") == event.get("total"):
            self.stage("finish+reduce")

    def sample(self) -> int:
        rss = super().sample()
        total = 0
        for root, _, names in os.walk(self.tmp):
            for n in names:
                if n.endswith(".arrow"):
                    path = os.path.join(root, n)
                    try:
                        size = os.path.getsize(path)
                    except OSError:
                        continue
                    total += size
                    self.runs[path] = max(self.runs.get(path, 0), size)
                    self._link(path, n)
        self.max_run_bytes = max(self.max_run_bytes, total)
        return rss

    def _link(self, path: str, name: str) -> None:
        if self.keep and not os.path.exists(os.path.join(self.keep, name)):
            try:
                os.link(path, os.path.join(self.keep, name))
            except OSError:
                pass


# ---- curve ---------------------------------------------------------------------------------------

def group_names(out_dir: str) -> list[str]:
    return sorted(p[:-len(".json")] for p in glob.glob(os.path.join(out_dir, "group-*[0-9].json")))


def read_group(name: str) -> pa.Table:
    """A group's counts file as a counts table (chunk as string, as the counting code holds it)."""
    table = pq.read_table(name + ".parquet")
    return pa.table({"chunk": table.column("chunk").cast(pa.string()), "count": table.column("count")}, schema=SCHEMA)


def growth_curve(out_dir: str, subtract: int = 0, subtract_from: float = 0.0) -> dict:
    """Cumulative counts over the groups in order, a row per prefix, and Heaps' law fitted to each column
    (and to the distinct chunks less `subtract`, on the prefixes of at least subtract_from bytes)."""
    rows, groups, total = [], [], SCHEMA.empty_table()
    text_bytes = documents = 0
    for name in group_names(out_dir):
        with open(name + ".json") as f:
            record = json.load(f)
        table = read_group(name)
        groups.append(group_row(record, table))
        total = sum_tables([total, table])
        text_bytes += record["stats"]["bytes_read"]
        documents += record["stats"]["documents"]
        rows.append({"text_bytes": text_bytes, "documents": documents, **table_row(total)})
        print(f"{len(rows)}: {text_bytes / 1e9:.3f} GB, {rows[-1]['distinct'][1]:,} distinct", flush=True)
    fits = fit_all(rows)
    if subtract:
        points = [(r["text_bytes"], r["distinct"][1] - subtract) for r in rows if r["text_bytes"] >= subtract_from]
        fits[f"distinct-{subtract}"] = heaps_fit(*zip(*points))
    return {"out_dir": out_dir, "groups": groups, "prefixes": rows, "fits": fits,
            "collapse": collapse(rows), "backtest": backtest(rows),
            "whole": {"arrow_bytes_per_row": total.nbytes / max(total.num_rows, 1)}}


def at_cutoff(row: dict, c: float) -> float:
    """Distinct chunks of a prefix seen at least c times, interpolated log-log between CUTOFFS."""
    return float(np.exp(np.interp(np.log(c), np.log(CUTOFFS), np.log([max(row["distinct"][k], 1) for k in CUTOFFS]))))


def collapse(rows: list[dict]) -> list[dict]:
    """Whether V_c(n) is a function of n / c: the largest prefix's V_c against the V_{c'} of an earlier
    prefix i at c' = c * n_i / n (interpolated), for c >= 10 and c' >= 5; measured / predicted."""
    last, out = rows[-1], []
    for row in rows[:-1]:
        scale = row["text_bytes"] / last["text_bytes"]
        for c in CUTOFFS:
            if c >= 10 and c * scale >= 5:
                out.append({"from_bytes": row["text_bytes"], "c": c, "c_prime": round(c * scale, 2),
                            "ratio": last["distinct"][c] / at_cutoff(row, c * scale)})
    return out


def backtest(rows: list[dict]) -> list[dict]:
    """The FineWeb method on a measured family: F fitted on prefix i's top decade (c from 10 to 100, at
    m = n_i / c) predicts the largest prefix's V_c = F(n / c) for c >= 10; measured / predicted."""
    last, out = rows[-1], []
    for row in rows[:-1]:
        grid = [c for c in CUTOFFS if 10 <= c <= 100]
        fit = heaps_fit([row["text_bytes"] / c for c in grid], [row["distinct"][c] for c in grid])
        for c in (c for c in CUTOFFS if c >= 10):
            predicted = extrapolate(fit, last["text_bytes"] / c)
            out.append({"from_bytes": row["text_bytes"], "beta": fit["beta"], "c": c,
                        "ratio": last["distinct"][c] / predicted})
    return out


def group_row(record: dict, table: pa.Table) -> dict:
    """One group's own figures: what one count task of that text would hand to the reduce stage."""
    stats = record["stats"]
    return {"files": [os.path.basename(f) for f in record["files"]], "text_bytes": stats["bytes_read"],
            "documents": stats["documents"], "occurrences": stats["chunks"], "distinct": stats["unique_chunks"],
            "counts_file_bytes": record["counts_file_bytes"], "arrow_bytes": table.nbytes,
            "peak_rss": record["peak_rss"], "peak_rss_by_phase": record["peak_rss_by_phase"],
            "max_run_bytes": record["max_run_bytes"], "run_files": record["run_files"],
            "count_seconds": stats["seconds"].get("count"), "reduce_seconds": stats["seconds"].get("reduce")}


def table_row(table: pa.Table, cutoffs: tuple[int, ...] | list[int] = CUTOFFS) -> dict:
    """Distinct chunks at each cutoff, their bytes, the merge table they make (chunks of more than one
    byte, their bytes: its tokens), the occurrences they hold and the text bytes those cover."""
    counts = table.column("count").to_numpy()
    lengths = pc.binary_length(table.column("chunk")).to_numpy()
    multi = lengths > 1
    row = {"occurrences": int(counts.sum()), "distinct": {}, "chunk_bytes": {}, "table_chunks": {},
           "table_tokens": {}, "occurrences_kept": {}, "text_kept": {}}
    for c in cutoffs:
        keep = counts >= c
        row["distinct"][c] = int(keep.sum())
        row["chunk_bytes"][c] = int(lengths[keep].sum())
        row["table_chunks"][c] = int((keep & multi).sum())
        row["table_tokens"][c] = int(lengths[keep & multi].sum())
        row["occurrences_kept"][c] = int(counts[keep].sum())
        row["text_kept"][c] = int((counts[keep] * lengths[keep]).sum())
    return row


def heaps_fit(n: list[float], v: list[float]) -> dict:
    """V = K * n^beta by least squares on log10: K, beta, R^2, each point's residual (log10 of measured /
    fitted), the local slopes between neighbouring points (in the order given) and the last of them."""
    x, y = np.log10(np.asarray(n, float)), np.log10(np.asarray(v, float))
    beta, log_k = np.polyfit(x, y, 1)
    residuals = y - (log_k + beta * x)
    r2 = 1 - float((residuals ** 2).sum()) / max(float(((y - y.mean()) ** 2).sum()), 1e-300)
    slopes = [round(float(s), 4) for s in np.diff(y) / np.diff(x)]
    return {"K": float(10 ** log_k), "beta": float(beta), "r2": r2,
            "max_abs_residual_log10": float(abs(residuals).max()),
            "residuals_log10": [round(float(r), 4) for r in residuals], "local_slopes": slopes,
            "last_slope": slopes[-1] if slopes else float("nan")}


def fit_all(rows: list[dict]) -> dict:
    """Heaps' law for the distinct chunks at each cutoff and for the merge table's tokens at each cutoff."""
    n = [r["text_bytes"] for r in rows]
    fits = {}
    for key in ("distinct", "table_tokens"):
        for c in CUTOFFS:
            points = [(x, r[key][c]) for x, r in zip(n, rows) if r[key][c] > 0]
            if len(points) >= 2:
                fits[f"{key}>={c}"] = heaps_fit(*zip(*points))
    return fits


# ---- reduce --------------------------------------------------------------------------------------

def write_group_runs(out_dir: str, to: str) -> None:
    """Each group's counts as a run file in `to`: what a Ray count task of that text returns, cut into
    the hash partitions (reduced in another process, so that this one's heap does not serve it)."""
    os.makedirs(to, exist_ok=True)
    for name in group_names(out_dir):
        write_run(os.path.join(to, os.path.basename(name) + ".arrow"), read_group(name))


def measure_reduce(runs_dir: str) -> dict:
    """reduce_runs over the run files of runs_dir, in this process, one partition at a time (as a local
    reduce or a Ray reduce task does): the RSS peak above the start, overall and per partition, against
    a partition's input (the run files' bytes / N_PARTITIONS)."""
    runs = sorted(glob.glob(os.path.join(runs_dir, "*.arrow")))
    run_bytes = sum(os.path.getsize(r) for r in runs)
    start = process_rss()
    parts, started = [], time.perf_counter()
    with PeakSampler(interval=0.01, pid=os.getpid()) as sampler:
        sampler.stage("p0")
        for p, table in enumerate(reduce_runs(runs, workers=1)):
            parts.append({"rows": table.num_rows, "arrow_bytes": table.nbytes})
            del table
            sampler.stage(f"p{p + 1}")
    seconds = time.perf_counter() - started
    above = [sampler.by_stage.get(f"p{p}", start) - start for p in range(len(parts))]
    share = run_bytes / N_PARTITIONS
    return {"runs": len(runs), "run_bytes": run_bytes, "partition_input_bytes": share,
            "start_rss": start, "peak_rss": sampler.peak, "peak_above_start": sampler.peak - start,
            "peak_per_input_byte": (sampler.peak - start) / share,
            "first_partition_per_input_byte": above[0] / share,
            "median_partition_per_input_byte": float(np.median(above)) / share,
            "seconds": seconds, "input_MB_per_s": run_bytes / 1e6 / seconds,
            "reduced_rows": sum(p["rows"] for p in parts), "reduced_arrow_bytes": sum(p["arrow_bytes"] for p in parts),
            "partitions": [{**part, "peak_above_start": a} for part, a in zip(parts, above)]}


def task_objects(inputs: list[str]) -> dict:
    """count/on_ray.py's count_task over the inputs' units as one task on a local Ray instance (1 CPU):
    its partitions' bytes in the object store (ray.experimental.get_object_locations) and as Arrow."""
    import ray
    from ray.experimental import get_object_locations

    from parbpe.config import TrainConfig
    from parbpe.count.on_ray import count_task

    config = TrainConfig(vocab_size=300, special_tokens=(SPECIAL,), workers=1)
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        refs = ray.remote(count_task).options(num_returns=1 + N_PARTITIONS).remote(plan_units(inputs), config, None)
        read = ray.get(refs[0])["read"]
        parts = ray.get(refs[1:])
        stored = sum(v["object_size"] for v in get_object_locations(list(refs[1:])).values())
    finally:
        ray.shutdown()
    rows, arrow = sum(p.num_rows for p in parts), sum(p.nbytes for p in parts)
    return {"text_bytes": read.bytes, "rows": rows, "arrow_bytes": arrow, "object_store_bytes": stored,
            "object_bytes_per_row": stored / rows, "arrow_bytes_per_row": arrow / rows}


# ---- plan ----------------------------------------------------------------------------------------
# Chunks seen at least c times in n bytes of text are, for c of 5 or more, about those whose share of the
# corpus is at least c / n: their number is a function of n / c alone, F(n / c) (the curves of realmix and
# of the generated corpus collapse so: `curve`'s "collapse"). FineWeb-Edu's counts file (1 GB, chunks seen
# at least 10 times) gives F(1 GB / c') for every c' >= 10, that is F up to 100 MB, on real FineWeb text;
# FineWeb in full needs F(5.5 TB / c), which is F fitted on its top decade and extrapolated, or read off
# the counts file where 5.5 TB / c <= 100 MB.

FIGURES = ("distinct", "table_tokens", "table_chunks", "chunk_bytes")
ANCHOR_GRID = (10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200, 300, 500, 1000)
SLOPES = (0.64, 0.66, 0.70, 0.73)  # steeper slopes of F past the counts file, for the head's need
HEAD_GRID = (10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150, 200, 250, 300, 400, 500, 700, 1000, 2000)


def fineweb_anchor(path: str) -> dict:
    """The FineWeb-Edu counts file's own figures at each cutoff of ANCHOR_GRID (and CUTOFFS >= 10)."""
    (unit,) = plan_units([path])
    counts = read_counts(unit)
    table = pa.table({"chunk": pa.array(counts.chunks, pa.binary()), "count": pa.array(counts.counts, pa.int64())})
    row = table_row(table, sorted(set(ANCHOR_GRID) | {c for c in CUTOFFS if c >= 10}))
    row["rows"] = table.num_rows
    row["min_count"] = int(pc.min(table.column("count")).as_py())
    return row


def anchor_fits(anchor: dict) -> dict:
    """F(m) of FineWeb for each figure (distinct, table tokens, table chunks, chunk bytes): Heaps' law
    on m = 1 GB / c' for c' from 10 to 100 (the top decade, used to extrapolate) and 10 to 1000."""
    fits = {}
    for key in FIGURES:
        for name, top in (("top_decade", 100), ("two_decades", 1000)):
            grid = [c for c in reversed(ANCHOR_GRID) if c <= top]  # m = 1 GB / c ascending
            fits[f"{key}:{name}"] = heaps_fit([FINEWEB_ANCHOR_BYTES / c for c in grid], [anchor[key][c] for c in grid])
    return fits


def fineweb_at(anchor: dict, fits: dict, key: str, c: float, n: float = FINEWEB_TEXT_BYTES) -> float:
    """key (distinct, table_tokens, ...) of chunks seen at least c times in n bytes of FineWeb: F(n / c)."""
    m = n / c
    if m <= FINEWEB_ANCHOR_BYTES / 10:  # read off the counts file, at c' = 1 GB / m (interpolated on its grid)
        grid = sorted(anchor[key])
        cprime = FINEWEB_ANCHOR_BYTES / m
        return float(np.exp(np.interp(np.log(cprime), np.log(grid), np.log([anchor[key][g] for g in grid]))))
    return extrapolate(fits[f"{key}:top_decade"], m)


def reduce_model(paths: list[str]) -> dict:
    """A reduce task's peak above its start as fixed + slope * its input (least squares over the
    reduce measurements), and its input MB/s (the median)."""
    runs = []
    for path in paths:
        runs.append({k: v for k, v in _load(path).items() if k != "partitions"})
    x = [r["partition_input_bytes"] for r in runs]
    slope, fixed = np.polyfit(x, [r["peak_above_start"] for r in runs], 1) if len(runs) > 1 else (3.0, 0.0)
    return {"slope": float(slope), "fixed": float(fixed), "measurements": runs,
            "input_MB_per_s": float(np.median([r["input_MB_per_s"] for r in runs if r["partition_input_bytes"] > 1e7]))}


def fineweb_plan(curve_paths: list[str], reduce_paths: list[str], fineweb_csv: str) -> dict:
    """Every figure of SCALE.md's FineWeb-Edu plan; what FineWeb's counts file cannot say (chunks seen
    fewer than 10 times) from each measured family in turn."""
    curves = {os.path.basename(p).rsplit(".", 1)[0]: _load(p) for p in curve_paths}
    reduce = reduce_model(reduce_paths)
    anchor = fineweb_anchor(fineweb_csv)
    fits = anchor_fits(anchor)
    out = {"constants": {k: globals()[k] for k in (
        "MB_PER_S_PER_WORKER", "FINEWEB_TEXT_BYTES", "FINEWEB_ANCHOR_BYTES", "NODE_CORES", "NODE_MEMORY",
        "NODE_BUDGET", "HEAD_BUDGET", "HEAD_BASE_RSS", "TASKS_PER_CPU", "RAY_OBJECT_STORE_SHARE",
        "MERGE_SECONDS_PER_TOKEN", "MERGE_BYTES_PER_TOKEN", "MERGE_BYTES_PER_CHUNK", "MERGE_BYTES_PER_TOKEN_MEASURED",
        "N_PARTITIONS")},
        "fineweb_anchor": anchor, "fineweb_F": fits, "head": head_plan(anchor, fits),
        "reduce": reduce, "families": {}}
    for family, curve in curves.items():
        out["families"][family] = family_plan(curve, anchor, fits, reduce)
    return out


def head_plan(anchor: dict, fits: dict) -> dict:
    """For each freq_cutoff c: FineWeb in full's training chunks and merge table (chunks seen at least c
    times), the head's need by fit.py's model, whether it fits HEAD_BUDGET, the merge stage's time, and
    the largest slope of F beyond the counts file (from 100 MB on) with which it would still fit."""
    rows = {}
    for c in HEAD_GRID:
        f = {key: fineweb_at(anchor, fits, key, c) for key in FIGURES}
        rows[c] = {**f, **head_need(f), "merge_seconds": f["table_tokens"] * MERGE_SECONDS_PER_TOKEN,
                   "extrapolated": FINEWEB_TEXT_BYTES / c > FINEWEB_ANCHOR_BYTES / 10,
                   "beta_limit": beta_limit(anchor, c), "need_at_slope": need_at_slopes(anchor, c)}
    fitting = [c for c in HEAD_GRID if rows[c]["need_bytes"] <= HEAD_BUDGET]
    return {"by_cutoff": rows, "smallest_cutoff_that_fits": fitting[0] if fitting else None}


def head_need(f: dict) -> dict:
    """The head's bytes at the merge stage's peak: the driver, the training chunks' arrays (their bytes,
    int64 offsets and counts) and the stage, as measured on realmix (need_bytes) and by fit.py's model
    (38 bytes a table token and 24 a table chunk: need_bytes_model)."""
    arrays = f["chunk_bytes"] + 16 * f["distinct"]
    model = MERGE_BYTES_PER_TOKEN * f["table_tokens"] + MERGE_BYTES_PER_CHUNK * f["table_chunks"]
    measured = MERGE_BYTES_PER_TOKEN_MEASURED * f["table_tokens"]
    return {"training_chunk_arrays": arrays, "merge_estimate": measured, "merge_estimate_model": model,
            "need_bytes": HEAD_BASE_RSS + arrays + measured, "need_bytes_model": HEAD_BASE_RSS + arrays + model}


def need_at_slopes(anchor: dict, c: float) -> dict:
    """The head's need (and table tokens) at cutoff c if F's slope from the counts file's top (100 MB) on
    were each of SLOPES."""
    scale = FINEWEB_TEXT_BYTES / c / (FINEWEB_ANCHOR_BYTES / 10)
    out = {}
    for beta in SLOPES if scale > 1 else ():
        f = {key: anchor[key][10] * scale ** beta for key in FIGURES}
        out[beta] = {"need_bytes": head_need(f)["need_bytes"], "table_tokens": f["table_tokens"]}
    return out


def beta_limit(anchor: dict, c: float) -> float | None:
    """The slope of F from the counts file's top (100 MB, c' = 10) to 5.5 TB / c at which cutoff c's
    need reaches HEAD_BUDGET (bisection); None when 5.5 TB / c is within the counts file."""
    scale = FINEWEB_TEXT_BYTES / c / (FINEWEB_ANCHOR_BYTES / 10)
    if scale <= 1:
        return None
    lo, hi = 0.0, 2.0
    for _ in range(50):
        beta = (lo + hi) / 2
        need = head_need({key: anchor[key][10] * scale ** beta for key in FIGURES})["need_bytes"]
        lo, hi = (beta, hi) if need <= HEAD_BUDGET else (lo, beta)
    return lo


def family_plan(curve: dict, anchor: dict, fits: dict, reduce: dict) -> dict:
    """The stages with one family's figures where FineWeb's are missing: V_1 / V_10 (all distinct chunks
    against those seen 10 times, at the same text) and the object bytes per distinct chunk."""
    fam = curve["fits"]
    ratio = {n: extrapolate(fam["distinct>=1"], n) / extrapolate(fam["distinct>=10"], n)
             for n in (1e8, 1e9, 1e10, 1e11, 1e12, FINEWEB_TEXT_BYTES)}
    row_bytes = float(np.median([g["arrow_bytes"] / g["distinct"] for g in curve["groups"]]))
    file_bytes = float(np.median([g["counts_file_bytes"] / g["distinct"] for g in curve["groups"]]))

    held = curve["prefixes"][-1]["distinct"]["1"] / curve["prefixes"][-1]["distinct"]["10"]

    def distinct_all(n: float, hold: bool = False) -> float:
        """FineWeb's distinct chunks in n bytes: its V_10 times the family's V_1 / V_10 (fitted, or held
        at the family's largest prefix)."""
        ratio_at_n = held if hold else extrapolate(fam["distinct>=1"], n) / extrapolate(fam["distinct>=10"], n)
        return max(ratio_at_n, 1.0) * fineweb_at(anchor, fits, "distinct", 10, n)

    def distinct_held(n: float) -> float:
        return distinct_all(n, hold=True)

    whole = distinct_all(FINEWEB_TEXT_BYTES)
    return {"own_fit_at_fineweb": {c: extrapolate(fam[f"distinct>={c}"], FINEWEB_TEXT_BYTES) for c in (1, 10, 100)},
            "ratio_1_to_10": ratio, "ratio_held": held, "arrow_bytes_per_row": row_bytes,
            "counts_file_bytes_per_row": file_bytes, "fineweb_distinct_all": whole,
            "fineweb_distinct_all_ratio_held": distinct_held(FINEWEB_TEXT_BYTES),
            "fineweb_counts_file_bytes": whole * file_bytes,
            "clusters": {nodes: cluster_plan(nodes, distinct_all, row_bytes, reduce) for nodes in NODES},
            "clusters_ratio_held": {nodes: cluster_plan(nodes, distinct_held, row_bytes, reduce) for nodes in NODES}}


def cluster_plan(nodes: int, distinct_all, row_bytes: float, reduce: dict) -> dict:
    """One cluster size: count tasks, a task's text and partial counts, the object store, the reduce
    partitions for a reduce task to fit its share of a node's budget, and the stages' times."""
    cpus = nodes * NODE_CORES
    tasks = TASKS_PER_CPU * cpus
    task_text = FINEWEB_TEXT_BYTES / tasks
    task_rows = distinct_all(task_text)
    volume = tasks * task_rows * row_bytes
    per_task_budget = NODE_BUDGET / NODE_CORES
    slope, fixed = reduce["slope"], reduce["fixed"]
    partitions = max(N_PARTITIONS, math.ceil(volume * slope / (per_task_budget - fixed)))
    reduce_mb_s = reduce["input_MB_per_s"]
    return {"cpus": cpus, "count_tasks": tasks, "task_text_bytes": task_text, "task_distinct": task_rows,
            "object_store_bytes": volume, "object_store_capacity": nodes * NODE_MEMORY * RAY_OBJECT_STORE_SHARE,
            "reduce_partitions_needed": partitions, "reduce_input_per_task": volume / partitions,
            "reduce_input_per_task_at_32": volume / N_PARTITIONS,
            "reduce_peak_per_task_at_32": fixed + volume / N_PARTITIONS * slope,
            "count_seconds": FINEWEB_TEXT_BYTES / 1e6 / (cpus * MB_PER_S_PER_WORKER),
            "reduce_seconds": math.ceil(partitions / cpus) * volume / partitions / 1e6 / reduce_mb_s,
            "reduce_seconds_at_32": volume / N_PARTITIONS / 1e6 / reduce_mb_s}


def extrapolate(fit: dict, n: float) -> float:
    return fit["K"] * n ** fit["beta"]


if __name__ == "__main__":
    main()

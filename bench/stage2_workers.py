"""SuperBPE's stage 2 with 1 and with N workers: each step's time, and the peak RSS and PSS of the tree.

    python bench/stage2_workers.py --corpus 'DATA/train-*.parquet' [--vocab-size 32768]
        [--transition 0.8] [--workers 1,2] [--repeat 2] [--limit-gb 10] [--json results.json]

Each run is `parbpe train --superbpe-transition` in its own process, the worker counts interleaved
over the repetitions. Step times come from the run's stats.json (superbpe_count, _table, _encode,
_merge); the bench samples every process of the run's tree every 0.1 s and cuts the samples into
steps by the run's progress events. Per step it reports the peak of the summed RSS (what parbpe's
own stats report: a page mapped by several processes counts once per process, so a forked
worker counts its parent's pages) and of the summed PSS (proportional set size: a shared page is
shared out, so the sum is the memory the tree really holds). The merges of every run must be the
same (their digest is printed).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

STEPS = ("superbpe_count", "superbpe_table", "superbpe_encode", "superbpe_merge")


def sample_tree(proc: subprocess.Popen, interval: float) -> list[tuple[float, int, int]]:
    """(time, summed RSS, summed PSS) of proc's tree until it exits."""
    root = psutil.Process(proc.pid)
    samples = []
    while proc.poll() is None:
        rss = pss = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    info = p.memory_full_info()
                except psutil.Error:
                    continue
                rss += info.rss
                pss += info.pss
        except psutil.Error:
            pass
        samples.append((time.time(), rss, pss))
        time.sleep(interval)
    return samples


def one_run(args: argparse.Namespace, workers: int, out: str) -> dict:
    cmd = [sys.executable, "-m", "parbpe.cli", "train", *sorted(glob.glob(args.corpus)), "--vocab-size",
           str(args.vocab_size), "--superbpe-transition", args.transition, "--special-tokens", args.special_tokens,
           "--workers", str(workers), "--out", out, "--progress", "jsonl"]

    def limit() -> None:
        if args.limit_gb:
            cap = int(args.limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile("w+") as events:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=events, preexec_fn=limit, text=True)
        samples = sample_tree(proc, args.interval)
        wall = time.perf_counter() - start
        events.seek(0)
        lines = events.read().splitlines()
    if proc.returncode != 0:
        raise RuntimeError(f"workers={workers}: exit {proc.returncode}: {lines[-3:]}")
    ends = {}
    for line in lines:
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "stage":
                ends[event["message"]] = event["time"]
    with open(os.path.join(out, "stats.json")) as f:
        stats = json.load(f)
    superbpe = stats["superbpe"]
    steps = {}  # each step runs from the end of the stage before it (the count follows stage 1's reduce)
    order = ["reduce", "superbpe_count", "table", "merge", "superbpe_table", "superbpe_encode", "superbpe_merge"]
    for step in STEPS:
        begin = ends[order[order.index(step) - 1]]
        window = [s for s in samples if begin <= s[0] <= ends[step]]
        if not window:  # a step shorter than the interval: the tree as last seen before its end
            window = [s for s in samples if s[0] <= ends[step]][-1:]
        steps[step] = {"seconds": superbpe["seconds"][step],
                       "peak_rss_mb": round(max((s[1] for s in window), default=0) / 2**20),
                       "peak_pss_mb": round(max((s[2] for s in window), default=0) / 2**20),
                       "stats_peak_rss_mb": round(stats["peak_rss_by_stage"][step] / 2**20)}
    with open(os.path.join(out, "merges.txt"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return {"workers": workers, "wall": round(wall, 2), "steps": steps, "digest": digest,
            "encode_workers": superbpe.get("encode_workers"), "merge_workers": superbpe.get("merge_workers")}


def table(runs: list[dict], workers_list: list[int]) -> str:
    """Medians per worker count: each step's seconds and peaks, and encode + merge together."""
    lines = ["| workers | step | seconds | peak RSS (sum) | peak PSS (sum) |", "| --- | --- | --- | --- | --- |"]
    for w in workers_list:
        mine = [r for r in runs if r["workers"] == w]
        for step in (*STEPS, "encode+merge"):
            parts = ("superbpe_encode", "superbpe_merge") if step == "encode+merge" else (step,)
            secs = statistics.median(sum(r["steps"][p]["seconds"] for p in parts) for r in mine)
            rss = statistics.median(max(r["steps"][p]["peak_rss_mb"] for p in parts) for r in mine)
            pss = statistics.median(max(r["steps"][p]["peak_pss_mb"] for p in parts) for r in mine)
            lines.append(f"| {w} | {step} | {secs:.1f} | {rss:,.0f} MB | {pss:,.0f} MB |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="training files (a glob)")
    p.add_argument("--vocab-size", type=int, default=32768)
    p.add_argument("--transition", default="0.8")
    p.add_argument("--special-tokens", default="<|endoftext|>")
    p.add_argument("--workers", default="1,2", help="worker counts to compare, e.g. 1,2")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--interval", type=float, default=0.1, help="seconds between samples of the tree")
    p.add_argument("--limit-gb", type=float, default=None, help="address-space cap of each run")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not glob.glob(args.corpus):
        p.error(f"no file matches --corpus {args.corpus!r}")
    workers_list = [int(w) for w in args.workers.split(",")]
    runs = []
    with tempfile.TemporaryDirectory(prefix="stage2-bench-") as tmp:
        for rep in range(args.repeat):
            for w in workers_list:
                run = one_run(args, w, os.path.join(tmp, f"w{w}-{rep}"))
                runs.append(run)
                print(json.dumps(run), flush=True)
    digests = {r["digest"] for r in runs}
    print(table(runs, workers_list))
    print(f"merges digest: {', '.join(sorted(digests))} ({'the same in every run' if len(digests) == 1 else 'DIFFER'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "python": platform.python_version(), "cores": os.cpu_count()}, f, indent=1)
    if len(digests) != 1:
        sys.exit(1)


if __name__ == "__main__":
    main()

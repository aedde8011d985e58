"""parbpe's counting under a list of memory budgets: peak RSS, spills, time, and equal output.

    python bench/memory.py --corpus DIR_OR_GLOB [--budgets 1GB,2GB,4GB,none] [--workers 2]
                           [--plot docs/img/memory.png] [--json OUT]

Each budget runs `parbpe count` in its own process (none = no --memory-budget, parbpe's default
of half the available RAM). For each: the budget, peak RSS of the whole process tree sampled by
psutil every 50 ms, the kernel's peak RSS of the largest single process (ru_maxrss), spills, wall
time, MB/s, and whether the counts file is byte-identical to the one of the first budget listed
(put the unbounded run first to compare against it). A PNG plots peak RSS and time against budget.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile

from harness import run_sampled, save_results, write_rusage

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run_one(argv: list[str], rusage_path: str) -> None:
    from parbpe.cli import main

    code = main(argv)
    write_rusage(rusage_path)
    sys.exit(code)


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", nargs="+", help="inputs as parbpe count takes them")
    parser.add_argument("--budgets", default="none,4GB,2GB,1GB")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tmp-dir", help="parbpe's --tmp-dir for spills")
    parser.add_argument("--plot", help="write a PNG of peak RSS and time against budget")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--run-one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        run_one(args.run_one[1:], args.run_one[0])
        return
    if not args.corpus:
        parser.error("--corpus is required")

    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        reference = None
        for k, budget in enumerate(budgets):
            out = os.path.join(tmp, f"counts-{k}.parquet")
            stats_path = os.path.join(tmp, f"stats-{k}.json")
            rusage = os.path.join(tmp, f"rusage-{k}.json")
            cli = ["count", *args.corpus, "--out", out, "--workers", str(args.workers), "--progress", "none",
                   "--stats", stats_path]
            if budget != "none":
                cli += ["--memory-budget", budget]
            if args.tmp_dir:
                cli += ["--tmp-dir", args.tmp_dir]
            measured = run_sampled([sys.executable, __file__, "--run-one", rusage, *cli], rusage)
            with open(stats_path) as f:
                stats = json.load(f)
            digest = _digest(out)
            reference = reference or digest
            os.unlink(out)
            row = {
                "budget": budget, "budget_bytes": stats["memory_budget"],
                "worker_data_limit": stats["worker_data_limit"],
                "wall_s": measured["wall"], "peak_rss_sampled_mb": measured["peak_sampled"] / 1e6,
                "peak_rss_kernel_process_mb": measured["peak_kernel_process"] / 1e6,
                "peak_rss_parbpe_sampled_mb": stats["peak_rss_bytes"] / 1e6, "spills": stats["spills"],
                "bytes_read": stats["bytes_read"], "mb_per_s": stats["bytes_read"] / 1e6 / measured["wall"],
                "unique_chunks": stats["unique_chunks"], "seconds": stats["seconds"],
                "equal_to_first": digest == reference,
            }
            rows.append(row)
            print(f"# {budget}: {row['wall_s']:.1f} s, peak {row['peak_rss_sampled_mb']:.0f} MB, "
                  f"{row['spills']} spills", file=sys.stderr)
    print(f"corpus: {' '.join(args.corpus)}; {rows[0]['bytes_read'] / 1e9:.2f} GB of text; workers {args.workers}; "
          f"{platform.python_version()}, {os.cpu_count()} cores")
    print(f"{'budget':>8s} {'peak RSS MB':>12s} {'kernel MB':>10s} {'under':>6s} {'spills':>7s} {'wall s':>8s} "
          f"{'MB/s':>7s} {'unique chunks':>14s} {'same output':>12s}")
    for r in rows:
        under = "-" if r["budget"] == "none" else str(r["peak_rss_sampled_mb"] * 1e6 <= r["budget_bytes"])
        print(f"{r['budget']:>8s} {r['peak_rss_sampled_mb']:12.0f} {r['peak_rss_kernel_process_mb']:10.0f} "
              f"{under:>6s} {r['spills']:7d} {r['wall_s']:8.1f} {r['mb_per_s']:7.1f} {r['unique_chunks']:14,d} "
              f"{str(r['equal_to_first']):>12s}")
    if args.json:
        save_results(args.json, rows=rows, corpus=args.corpus, workers=args.workers)
    if args.plot:
        plot(rows, args.plot)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bounded = [r for r in rows if r["budget"] != "none"]
    bounded.sort(key=lambda r: r["budget_bytes"])
    if not bounded:
        return
    x = [r["budget_bytes"] / 1e9 for r in bounded]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, [r["peak_rss_sampled_mb"] / 1e3 for r in bounded], "o-", label="peak RSS of the tree (GB)")
    ax.plot(x, x, ":", color="grey", label="budget")
    ax.set_xlabel("--memory-budget (GB)")
    ax.set_ylabel("GB")
    ax2 = ax.twinx()
    ax2.plot(x, [r["wall_s"] for r in bounded], "s--", color="tab:red", label="wall time (s)")
    ax2.set_ylabel("seconds")
    ax2.set_ylim(0, max(r["wall_s"] for r in bounded) * 1.2)
    ax.set_ylim(0, max(x) * 1.1)
    fig.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88))
    ax.set_title("parbpe count under memory budgets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

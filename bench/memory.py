"""parbpe's counting (or, with --train, whole training) under a list of memory budgets: peak RSS
(per stage with --train), spills, time, and equal output.

    python bench/memory.py --corpus DIR_OR_GLOB [--budgets 1GB,2GB,4GB,none] [--workers 2]
                           [--train [--vocab-size 32768]] [--plot docs/img/memory.png] [--json OUT]

With --train, each budget runs `parbpe train`; the table adds the peak RSS of each stage (count,
reduce, table, merge, write, from stats.json), the merge stage's estimate and any automatic
cutoff, and the plot shows each stage's peak against the budget line. A budget parbpe refuses is
listed with its one-line reason.

Each budget runs `parbpe count` in its own process (none = no --memory-budget, parbpe's default
of half the available RAM). For each: the budget, peak RSS of the whole process tree sampled by
psutil every 10 ms (finer than the run's own 50 ms sampler, whose by-stage peaks it is
compared with), the kernel's peak RSS of the largest single process (ru_maxrss), spills, wall
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

SAMPLE_INTERVAL = 0.01  # seconds between samples of the run's tree

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
    parser.add_argument("--train", action="store_true", help="run parbpe train instead of parbpe count")
    parser.add_argument("--vocab-size", type=int, default=32768, help="with --train")
    parser.add_argument("--run-one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        run_one(args.run_one[1:], args.run_one[0])
        return
    if not args.corpus:
        parser.error("--corpus is required")

    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    if args.train:
        train_budgets(args, budgets)
        return
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
            measured = run_sampled([sys.executable, __file__, "--run-one", rusage, *cli], rusage,
                                   interval=SAMPLE_INTERVAL)
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


STAGES = ("count", "reduce", "table", "merge", "write")


def train_budgets(args: argparse.Namespace, budgets: list[str]) -> None:
    """`parbpe train` under each budget: peak RSS per stage, time, the merge estimate, equal merges."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        reference = None
        for k, budget in enumerate(budgets):
            out = os.path.join(tmp, f"out-{k}")
            rusage = os.path.join(tmp, f"rusage-{k}.json")
            cli = ["train", *args.corpus, "--out", out, "--workers", str(args.workers), "--progress", "none",
                   "--vocab-size", str(args.vocab_size), "--special-tokens", "<|endoftext|>"]
            if budget != "none":
                cli += ["--memory-budget", budget]
            if args.tmp_dir:
                cli += ["--tmp-dir", args.tmp_dir]
            try:
                measured = run_sampled([sys.executable, __file__, "--run-one", rusage, *cli], rusage,
                                   interval=SAMPLE_INTERVAL)
            except RuntimeError as error:
                reason = str(error).strip().splitlines()[-1]
                rows.append({"budget": budget, "refused": reason})
                print(f"# {budget}: refused: {reason}", file=sys.stderr)
                continue
            with open(os.path.join(out, "stats.json")) as f:
                stats = json.load(f)
            digest = _digest(os.path.join(out, "merges.txt"))
            reference = reference or digest
            row = {
                "budget": budget, "budget_bytes": stats["memory_budget"], "wall_s": measured["wall"],
                "peak_rss_sampled_mb": measured["peak_sampled"] / 1e6,
                "peak_rss_kernel_process_mb": measured["peak_kernel_process"] / 1e6,
                "peak_by_stage_mb": {s: stats["peak_rss_by_stage"].get(s, 0) / 1e6 for s in STAGES},
                "seconds": stats["seconds"], "spills": stats["spills"], "worker_data_limit": stats["worker_data_limit"],
                "merge_estimate_mb": stats["merge_fit"]["estimate_bytes"] / 1e6,
                "min_count": stats["merge_fit"]["min_count"], "auto_cutoff": stats["merge_fit"]["auto_cutoff"],
                "table_tokens": stats["table_tokens"], "bytes_read": stats["bytes_read"],
                "equal_to_first": digest == reference,
            }
            rows.append(row)
            print(f"# {budget}: {row['wall_s']:.1f} s, peak {row['peak_rss_sampled_mb']:.0f} MB", file=sys.stderr)
    done = [r for r in rows if "refused" not in r]
    print(f"corpus: {' '.join(args.corpus)}; training {args.vocab_size} tokens; workers {args.workers}; "
          f"{platform.python_version()}, {os.cpu_count()} cores")
    print(f"{'budget':>8s} {'peak MB':>8s} {'under':>6s} " + " ".join(f"{s:>7s}" for s in STAGES)
          + f" {'estimate':>9s} {'cutoff':>7s} {'tokens':>11s} {'wall s':>7s} {'same merges':>12s}")
    for r in rows:
        if "refused" in r:
            print(f"{r['budget']:>8s} refused: {r['refused']}")
            continue
        under = "-" if r["budget"] == "none" else str(r["peak_rss_sampled_mb"] * 1e6 <= r["budget_bytes"])
        print(f"{r['budget']:>8s} {r['peak_rss_sampled_mb']:8.0f} {under:>6s} "
              + " ".join(f"{r['peak_by_stage_mb'][s]:7.0f}" for s in STAGES)
              + f" {r['merge_estimate_mb']:9.0f} {r['min_count']:7d} {r['table_tokens']:11,d} {r['wall_s']:7.1f}"
              + f" {str(r['equal_to_first']):>12s}")
    if args.json:
        save_results(args.json, rows=rows, corpus=args.corpus, workers=args.workers, vocab_size=args.vocab_size)
    if args.plot and done:
        plot_train(done, args.plot)


def plot_train(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bounded = sorted((r for r in rows if r["budget"] != "none"), key=lambda r: r["budget_bytes"])
    if not bounded:
        return
    x = [r["budget_bytes"] / 1e9 for r in bounded]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for stage, marker in zip(STAGES, "os^vD"):
        ax.plot(x, [r["peak_by_stage_mb"][stage] / 1e3 for r in bounded], marker + "-", label=f"peak RSS: {stage}")
    ax.plot(x, [r["peak_rss_sampled_mb"] / 1e3 for r in bounded], "k.", markersize=10, label="peak RSS of the run")
    ax.plot(x, x, ":", color="grey", label="budget")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("--memory-budget (GB)")
    ax.set_ylabel("peak RSS of the process tree (GB)")
    ax2 = ax.twinx()
    ax2.plot(x, [r["wall_s"] for r in bounded], "s--", color="tab:red", alpha=0.6, label="wall time (s)")
    ax2.set_ylabel("seconds")
    ax2.set_ylim(0, max(r["wall_s"] for r in bounded) * 1.3)
    fig.legend(loc="upper left", bbox_to_anchor=(0.1, 0.9), fontsize=7)
    ax.set_title("parbpe train under memory budgets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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

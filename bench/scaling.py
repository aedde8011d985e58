"""Counting time, throughput and unique chunks against corpus size and worker count.

    python bench/scaling.py --corpus DIR [--sizes 256MB,1GB,4GB] [--workers 1,2] [--budget 2GB]
                            [--max-single-worker 1GB] [--json OUT] [--plot PNG]

DIR is a corpus written by bench/make_corpus.py (its _manifest.meta lists the shards and their
text bytes). Each size counts the shortest prefix of its shards holding at least that much text,
with `parbpe count` in its own process; per run: wall time, seconds per stage (plan, count,
reduce), MB/s (text over wall time, and per worker over the count stage), peak RSS of the tree,
spills, unique chunks. Runs with one worker stop at --max-single-worker to keep the time sane.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile

from harness import run_sampled, save_results

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from parbpe.run.memory import format_size, parse_size  # noqa: E402

MEMORY_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory.py")


def prefixes(corpus: str, sizes: list[int]) -> list[tuple[int, list[str], int]]:
    """(size asked, shard files, their text bytes) for each size."""
    with open(os.path.join(corpus, "_manifest.meta")) as f:
        shards = json.load(f)["shards"]
    out = []
    for size in sizes:
        files, total = [], 0
        for shard in shards:
            if total >= size:
                break
            files.append(os.path.join(corpus, shard["file"]))
            total += shard["text_bytes"]
        out.append((size, files, total))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--sizes", default="256MB,1GB,4GB")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--budget", help="--memory-budget for every run (default: parbpe's own)")
    parser.add_argument("--max-single-worker", type=parse_size, default=parse_size("1GB"))
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size, files, text_bytes in prefixes(args.corpus, sizes):
            for workers in worker_counts:
                if workers == 1 and text_bytes > args.max_single_worker:
                    continue
                out, stats_path = os.path.join(tmp, "c.parquet"), os.path.join(tmp, "s.json")
                rusage = os.path.join(tmp, "r.json")
                cli = ["count", *files, "--out", out, "--workers", str(workers), "--progress", "none",
                       "--stats", stats_path]
                if args.budget:
                    cli += ["--memory-budget", args.budget]
                measured = run_sampled([sys.executable, MEMORY_BENCH, "--run-one", rusage, *cli], rusage)
                with open(stats_path) as f:
                    stats = json.load(f)
                os.unlink(out)
                row = {"size": format_size(size), "files": len(files), "text_bytes": stats["bytes_read"],
                       "workers": workers, "wall_s": measured["wall"], "seconds": stats["seconds"],
                       "mb_s": stats["bytes_read"] / 1e6 / measured["wall"],
                       "count_mb_s_per_worker": stats["bytes_read"] / 1e6 / stats["seconds"]["count"] / workers,
                       "peak_rss_mb": measured["peak_sampled"] / 1e6, "spills": stats["spills"],
                       "unique_chunks": stats["unique_chunks"], "chunks": stats["chunks"]}
                rows.append(row)
                print(f"# {row['size']} x{workers}: {row['wall_s']:.1f} s", file=sys.stderr)
    print(f"corpus: {args.corpus}; budget {args.budget or 'default'}; {platform.python_version()}, "
          f"{os.cpu_count()} cores")
    print(f"{'text GB':>8s} {'workers':>7s} {'wall s':>8s} {'count s':>8s} {'reduce s':>8s} {'MB/s':>6s} "
          f"{'MB/s/worker':>11s} {'peak MB':>8s} {'spills':>6s} {'unique chunks':>14s}")
    for r in rows:
        print(f"{r['text_bytes'] / 1e9:8.2f} {r['workers']:7d} {r['wall_s']:8.1f} {r['seconds']['count']:8.1f} "
              f"{r['seconds']['reduce']:8.1f} {r['mb_s']:6.1f} {r['count_mb_s_per_worker']:11.1f} "
              f"{r['peak_rss_mb']:8.0f} {r['spills']:6d} {r['unique_chunks']:14,d}")
    if args.json:
        save_results(args.json, rows=rows, corpus=args.corpus, budget=args.budget)
    if args.plot:
        plot(rows, args.plot)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for workers in sorted({r["workers"] for r in rows}):
        mine = [r for r in rows if r["workers"] == workers]
        left.plot([r["text_bytes"] / 1e9 for r in mine], [r["mb_s"] for r in mine], "o-", label=f"{workers} worker(s)")
    left.set_xscale("log")
    left.set_ylim(0, max(r["mb_s"] for r in rows) * 1.2)
    left.set_xlabel("text (GB, log scale)")
    left.set_ylabel("MB/s (wall)")
    left.legend()
    left.set_title("counting throughput")
    best = {}
    for r in rows:
        best[r["text_bytes"]] = r["unique_chunks"]
    xs = sorted(best)
    right.plot([x / 1e9 for x in xs], [best[x] / 1e6 for x in xs], "o-")
    right.set_xscale("log")
    right.set_ylim(0, max(best.values()) / 1e6 * 1.2)
    right.set_xlabel("text (GB, log scale)")
    right.set_ylabel("unique chunks (millions)")
    right.set_title("vocabulary growth")
    for ax in (left, right):
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

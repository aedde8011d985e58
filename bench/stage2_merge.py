"""The merge stage on a SuperBPE stage-2 table: replay stage 1's merges, then merge to the final size,
with 1 and with N merge workers, interleaved side by side (each run a fresh process).

    python bench/stage2_merge.py STAGE1_COUNTS STAGE2_COUNTS --stage2-pattern REGEX \
        [--vocab-size 32768] [--transition 26214] [--workers 1,2] [--repeat 2] [--min-tokens-per-worker N]

STAGE1_COUNTS (ordinary pattern) gives stage 1: learn_merges to the transition, whose merges and
batch sizes are the replay of stage 2. STAGE2_COUNTS (counted with the superword split, e.g. by
`parbpe count --pattern REGEX`) is stage 2's table. Each run reports the seconds of the replay and
of the whole merge stage, and the peak of the process tree during the stage (RSS, which counts a
page shared by several processes once per process, and PSS, which shares it out), above the tree
before the stage and in all.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

from parbpe.config import TrainConfig
from parbpe.count.counts_file import load_counts_files
from parbpe.count.reduce import select_training_chunks
from parbpe.io.plan import plan
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import table_from_arrays
from parbpe.run.memory import PeakSampler, tree_rss


def tree_pss() -> int:
    """Proportional set size of this process and its descendants (a shared page counted once)."""
    root = psutil.Process()
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:
            pass
    return total


class PssSampler(PeakSampler):
    """PeakSampler of the tree's PSS (slower to read than RSS: sampled every 0.2 s)."""

    def __init__(self) -> None:
        super().__init__(interval=0.2)
        self.peak = tree_pss()

    def _sample(self) -> int:
        pss = tree_pss()
        self.peak = max(self.peak, pss)
        return pss


def table_of(counts: str, pattern: str | None, vocab_size: int):
    config = TrainConfig(vocab_size=vocab_size, workers=1, **({"pattern": pattern} if pattern else {}))
    chunks = select_training_chunks(load_counts_files(plan([counts]), config), config)
    return table_from_arrays(chunks.data, chunks.offsets, chunks.counts, vocab_size)


def one_run(args: argparse.Namespace) -> None:
    """One measured run in this process: build the table, then replay and merge on it."""
    with open(args.stage1_file) as f:
        stage1 = json.load(f)
    table = table_of(args.stage2_counts, args.stage2_pattern, args.vocab_size)
    vocab = [bytes([b]) for b in range(256)]
    replay = ([tuple(m) for m in stage1["merges"]], stage1["batch_sizes"])
    base_rss, base_pss = tree_rss(), tree_pss()
    with PeakSampler(interval=0.02) as rss, PssSampler() as pss:
        clock = time.perf_counter()
        result = learn_merges(table, vocab, args.vocab_size - 256, workers=args.workers, replay=replay,
                              min_tokens_per_worker=args.min_tokens_per_worker)
        seconds = time.perf_counter() - clock
    print(json.dumps({
        "workers": args.workers, "table_tokens": int(table.starts[-1]), "table_chunks": table.n_chunks,
        "merges": len(result.merges), "seconds": round(seconds, 2), "seconds_by_part": result.seconds,
        "peak_rss_mb": round(rss.peak / 1e6), "peak_rss_above_mb": round((rss.peak - base_rss) / 1e6),
        "peak_pss_mb": round(pss.peak / 1e6), "peak_pss_above_mb": round((pss.peak - base_pss) / 1e6),
        "merges_digest": hash(tuple(result.merges)) & 0xFFFFFFFF,
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage1_counts")
    parser.add_argument("stage2_counts")
    parser.add_argument("--stage1-pattern", default=None, help="pattern of STAGE1_COUNTS (default gpt4)")
    parser.add_argument("--stage2-pattern", default=None, help="pattern STAGE2_COUNTS was counted with")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--transition", type=int, default=26214, help="vocabulary size at the end of stage 1")
    parser.add_argument("--workers", default="1,2", help="merge workers of the runs compared, a comma list")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--min-tokens-per-worker", type=int, default=None)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stage1-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        args.workers = int(args.workers)
        one_run(args)
        return

    with tempfile.TemporaryDirectory(prefix="stage2-bench-") as tmp:
        clock = time.perf_counter()
        stage1 = learn_merges(table_of(args.stage1_counts, args.stage1_pattern, args.transition),
                              [bytes([b]) for b in range(256)], args.transition - 256)
        print(f"stage 1: {len(stage1.merges)} merges in {len(stage1.batch_sizes)} rounds, "
              f"{time.perf_counter() - clock:.1f} s", file=sys.stderr)
        stage1_file = os.path.join(tmp, "stage1.json")
        with open(stage1_file, "w") as f:
            json.dump({"merges": stage1.merges, "batch_sizes": stage1.batch_sizes}, f)
        runs: dict[int, list[dict]] = {}
        for _ in range(args.repeat):
            for workers in (int(w) for w in args.workers.split(",")):
                command = [sys.executable, __file__, "--one", args.stage1_counts, args.stage2_counts,
                           "--workers", str(workers), "--stage1-file", stage1_file,
                           "--vocab-size", str(args.vocab_size)]
                if args.stage2_pattern:
                    command += ["--stage2-pattern", args.stage2_pattern]
                if args.min_tokens_per_worker is not None:
                    command += ["--min-tokens-per-worker", str(args.min_tokens_per_worker)]
                out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                run = json.loads(out)
                print(json.dumps(run), file=sys.stderr)
                runs.setdefault(workers, []).append(run)
    digests = {r["merges_digest"] for rs in runs.values() for r in rs}
    assert len(digests) == 1, "the merges differ between runs"
    summary = {w: {"seconds_median": statistics.median(r["seconds"] for r in rs),
                   "replay_seconds_median": statistics.median(r["seconds_by_part"]["replaying"] for r in rs),
                   "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rs),
                   "peak_pss_mb_max": max(r["peak_pss_mb"] for r in rs)} for w, rs in runs.items()}
    one = summary[min(summary)]
    for w, s in summary.items():
        s["speedup_vs_fewest"] = round(one["seconds_median"] / s["seconds_median"], 2)
        s["rss_ratio_vs_fewest"] = round(s["peak_rss_mb_max"] / one["peak_rss_mb_max"], 2)
        s["pss_ratio_vs_fewest"] = round(s["peak_pss_mb_max"] / one["peak_pss_mb_max"], 2)
    print(json.dumps({"table_tokens": next(iter(runs.values()))[0]["table_tokens"],
                      "table_chunks": next(iter(runs.values()))[0]["table_chunks"],
                      "merges": next(iter(runs.values()))[0]["merges"], "by_workers": summary,
                      "python": platform.python_version(), "numpy": np.__version__}, indent=1))


if __name__ == "__main__":
    main()

"""Time the merge phase alone: read a counts input, build the chunk table, run the merge rounds.

    python bench/merge_phase.py ../shared/data/fineweb-edu-counts/fineweb-edu-1gb-cutoff10.csv \
        --vocab-size 50304 [--max-batch-size N] [--batching batchbpe|exact] [--workers N] [--repeat 3]
        [--threads 1,2]

--threads 1,2 runs each repeat once with each thread count of the coordinator's own engine
(merge/coordinator.py THREADS), interleaved, and reports each one's times apart (by_threads).

--baseline CHECKOUT [--pairs 4]: this checkout against another, the merge phase alone (no counting,
reducing or writing to add their noise): PAIRS pairs of processes of this script, one with each
checkout's parbpe (PYTHONPATH), alternating which goes first, each making --repeat runs; prints both
sides' runs and medians (wall, and CPU time of the process), their ratios (this / baseline: under 1
is faster) and whether every run of both made the same merges.

Peak RSS is sampled over the whole process tree (merge workers included).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

from parbpe.config import TrainConfig
from parbpe.count.counts_file import load_counts_files
from parbpe.count.reduce import select_training_chunks
from parbpe.io.plan import plan
from parbpe.merge import coordinator
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table
from parbpe.run.memory import PeakSampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counts", nargs="+")
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--max-batch-size", type=int, default=0)
    parser.add_argument("--cap-divisor", type=int, default=2)
    parser.add_argument("--pair-count", default="overlap")
    parser.add_argument("--batching", default="batchbpe", choices=["batchbpe", "exact"])
    parser.add_argument("--workers", type=int, default=1, help="merge worker processes (1: in-process)")
    parser.add_argument("--special-tokens", nargs="*", default=[])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default=None,
                        help="comma-separated thread counts of the in-process engine, interleaved (default: parbpe's)")
    parser.add_argument("--baseline", default=None, help="a checkout to compare this one with (see above)")
    parser.add_argument("--pairs", type=int, default=4, help="with --baseline: pairs of processes")
    args = parser.parse_args()
    if args.baseline is not None:
        if not os.path.isdir(os.path.join(args.baseline, "parbpe")):
            parser.error(f"{args.baseline} is not a parbpe checkout (no parbpe/ in it)")
        if args.pairs < 1:
            parser.error(f"--pairs must be at least 1, got {args.pairs}")
        against_baseline(args.baseline, args.pairs, _without_baseline(sys.argv[1:]))
        return

    config = TrainConfig(vocab_size=args.vocab_size, max_batch_size=args.max_batch_size,
                         cap_divisor=args.cap_divisor, pair_count=args.pair_count, workers=1, batching=args.batching,
                         special_tokens=tuple(args.special_tokens))
    chunks = select_training_chunks(load_counts_files(plan(args.counts), config), config)
    times, cpu_times, merges_seen = [], [], None
    thread_counts = [int(t) for t in args.threads.split(",")] if args.threads else [coordinator.THREADS]
    by_threads: dict[int, list[tuple[float, float]]] = {t: [] for t in thread_counts}
    for threads in [t for _ in range(args.repeat) for t in thread_counts]:
        coordinator.THREADS = threads
        table = build_table(chunks.chunks, chunks.counts, config.vocab_size)
        vocab = [bytes([b]) for b in range(256)]
        with PeakSampler() as sampler:
            t, cpu = time.perf_counter(), time.process_time()
            result = learn_merges(table, vocab, config.n_merges, max_batch_size=config.max_batch_size,
                                  cap_divisor=config.cap_divisor, nonoverlap=config.pair_count == "nonoverlap",
                                  batching=config.batching, workers=args.workers)
            times.append(time.perf_counter() - t)
            cpu_times.append(time.process_time() - cpu)
            by_threads[threads].append((times[-1], cpu_times[-1]))
        if merges_seen is not None:
            assert merges_seen == result.merges, "merges differ between repeats"
        merges_seen = result.merges
    sizes = np.array(result.batch_sizes)
    print(json.dumps({
        "input": args.counts, "chunks": len(chunks.chunks), "table_tokens": int(len(table.tokens)),
        "vocab_size": args.vocab_size, "max_batch_size": args.max_batch_size, "batching": args.batching,
        "workers": args.workers, "merges": len(result.merges), "seconds_by_part": result.seconds,
        "rounds": len(sizes), "merges_per_round": {"min": int(sizes.min()), "mean": round(float(sizes.mean()), 1),
                                                  "max": int(sizes.max())},
        "merge_seconds": {"median": round(statistics.median(times), 3), "min": round(min(times), 3),
                          "max": round(max(times), 3), "runs": [round(x, 3) for x in times]},
        "merge_cpu_seconds": [round(x, 3) for x in cpu_times],
        "by_threads": {t: {"median": round(statistics.median(w for w, _ in runs), 3),
                           "runs": [round(w, 3) for w, _ in runs], "cpu": [round(c, 3) for _, c in runs]}
                       for t, runs in by_threads.items()},
        "peak_rss_mb": round(sampler.peak / 1e6, 1), "python": platform.python_version(),
        "merges_sha256": hashlib.sha256(json.dumps(result.merges).encode()).hexdigest(),
    }, indent=1))


def _without_baseline(argv: list[str]) -> list[str]:
    """The command line less --baseline and --pairs (and their values): what each side runs."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--baseline", "--pairs"):
            skip = True
        elif not arg.startswith(("--baseline=", "--pairs=")):
            out.append(arg)
    return out


def against_baseline(baseline: str, pairs: int, argv: list[str]) -> None:
    """Interleaved processes of this script with this checkout's parbpe and the baseline's."""
    trees = {"this": os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), "baseline": baseline}
    runs: dict[str, list[float]] = {side: [] for side in trees}
    cpu: dict[str, list[float]] = {side: [] for side in trees}
    digests = set()
    for k in range(pairs):
        for side in (("this", "baseline") if k % 2 == 0 else ("baseline", "this")):
            env = {**os.environ, "PYTHONPATH": os.path.abspath(trees[side])}
            # -P: not the working directory's checkout first on sys.path; PYTHONPATH alone picks the tree
            done = subprocess.run([sys.executable, "-P", os.path.abspath(__file__), *argv], env=env,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{side} ({trees[side]}) failed: {done.stderr.strip()[-2000:]}")
            report = json.loads(done.stdout)
            runs[side] += report["merge_seconds"]["runs"]
            cpu[side] += report["merge_cpu_seconds"]
            digests.add(report["merges_sha256"])
    medians = {side: statistics.median(times) for side, times in runs.items()}
    cpu_medians = {side: statistics.median(times) for side, times in cpu.items()}
    print(json.dumps({"runs": {side: [round(x, 3) for x in times] for side, times in runs.items()},
                      "median_s": {side: round(m, 3) for side, m in medians.items()},
                      "ratio": round(medians["this"] / medians["baseline"], 3),
                      "cpu_median_s": {side: round(m, 3) for side, m in cpu_medians.items()},
                      "cpu_ratio": round(cpu_medians["this"] / cpu_medians["baseline"], 3),
                      "same_merges": len(digests) == 1}, indent=1))


if __name__ == "__main__":
    main()

"""parbpe eval (corpus scale) against parbpe count on the same text, interleaved: issue 24's bar is
eval with merges, greedy and shortest in at most 1.5x the time of counting the text. Wall seconds and
the CPU seconds of each command's process tree (user + system: less moved by other work on the machine);
the median of the rounds' ratios beside the ratio of the medians (a round's count and eval ran side by side).
--jit-cache cold gives every eval an empty numba cache (NUMBA_CACHE_DIR): the kernels compile each time;
--jit off runs eval's numpy path (PARBPE_JIT).

    python bench/eval_vs_count.py --tokenizer TOK --repeat 3 /work/shared/data/realmix/train-*.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds of a parbpe command (its own interpreter, as a user runs it) and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "parbpe.cli", *args], check=True, capture_output=True, text=True,
                          env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--methods", default="merges,greedy,shortest")
    parser.add_argument("--jit-cache", choices=("warm", "cold"), default="warm")
    parser.add_argument("--jit", choices=("auto", "on", "off"), default="auto")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eval_vs_count_"))
    count_s, eval_s, count_cpu, eval_cpu, rows = [], [], [], [], []
    for r in range(options.repeat):
        wall, cpu, _ = timed(["count", *options.inputs, "--out", str(work / f"c{r}.parquet"), "--workers",
                              str(options.workers), "--progress", "none"])
        count_s.append(wall)
        count_cpu.append(cpu)
        env = {**os.environ, "PARBPE_JIT": options.jit}
        if options.jit_cache == "cold":
            env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(dir=work)
        wall, cpu, out = timed(["eval", "--tokenizer", options.tokenizer, *options.inputs, "--method",
                                options.methods, "--workers", str(options.workers), "--json"], env)
        eval_s.append(wall)
        eval_cpu.append(cpu)
        rows = json.loads(out)
        print(f"round {r + 1}: count {count_s[-1]:.2f} s (CPU {count_cpu[-1]:.2f} s), eval {eval_s[-1]:.2f} s "
              f"(CPU {eval_cpu[-1]:.2f} s), ratio {eval_s[-1] / count_s[-1]:.2f}", flush=True)
    median = statistics.median
    print(f"median: count {median(count_s):.2f} s, eval {median(eval_s):.2f} s, "
          f"ratio {median(eval_s) / median(count_s):.2f} (median of the rounds' ratios "
          f"{median(e / c for e, c in zip(eval_s, count_s)):.2f}); CPU count {median(count_cpu):.2f} s, "
          f"eval {median(eval_cpu):.2f} s, ratio {median(eval_cpu) / median(count_cpu):.2f}")
    for row in rows:
        print(f"  {row['method']:9s} tokens {row['tokens']:,}  bytes/token {row['bytes_per_token']:.4f}  "
              f"Renyi {row['renyi_efficiency']:.4f}")


if __name__ == "__main__":
    main()

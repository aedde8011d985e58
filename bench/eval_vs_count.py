"""parbpe eval (corpus scale) against parbpe count on the same text, interleaved: issue 24's bar is
eval with merges, greedy and shortest in at most 1.5x the time of counting the text.

    python bench/eval_vs_count.py --tokenizer TOK --repeat 3 /work/shared/data/realmix/train-*.parquet
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(args: list[str]) -> tuple[float, str]:
    """Wall seconds of a parbpe command (its own interpreter, as a user runs it) and its stdout."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "parbpe.cli", *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--methods", default="merges,greedy,shortest")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eval_vs_count_"))
    count_s, eval_s, rows = [], [], []
    for r in range(options.repeat):
        seconds, _ = timed(["count", *options.inputs, "--out", str(work / f"c{r}.parquet"), "--workers",
                            str(options.workers), "--progress", "none"])
        count_s.append(seconds)
        seconds, out = timed(["eval", "--tokenizer", options.tokenizer, *options.inputs, "--method", options.methods,
                              "--workers", str(options.workers), "--json"])
        eval_s.append(seconds)
        rows = json.loads(out)
        print(f"round {r + 1}: count {count_s[-1]:.2f} s, eval {eval_s[-1]:.2f} s, "
              f"ratio {eval_s[-1] / count_s[-1]:.2f}", flush=True)
    print(f"median: count {statistics.median(count_s):.2f} s, eval {statistics.median(eval_s):.2f} s, "
          f"ratio {statistics.median(eval_s) / statistics.median(count_s):.2f}")
    for row in rows:
        print(f"  {row['method']:9s} tokens {row['tokens']:,}  bytes/token {row['bytes_per_token']:.4f}  "
              f"Renyi {row['renyi_efficiency']:.4f}")


if __name__ == "__main__":
    main()

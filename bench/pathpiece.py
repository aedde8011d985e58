"""PathPieceL against BPE at the same vocabulary size, interleaved in one run: time and peak RSS of
each `parbpe train`, the prune stage alone, and held-out tokens with each segmentation method.

    python bench/pathpiece.py realmix/train-*.parquet --heldout realmix/heldout.parquet \\
        [--vocab-size 32768] [--initial-vocab-size 262144[,131072]] [--workers 1,2] [--prune-share 0.2[,0.35]] \\
        [--jit auto] [--repeat 1] [--json results.json]

Per round: `parbpe train --algorithm bpe` (2 workers), then `--algorithm pathpiece` for each worker
count, start size and drop share (every combination). Each run in its own process; peak RSS of the
process tree sampled every 50 ms. Then `parbpe eval` of the first round's tokenizers on the held-out
text: BPE with merges, greedy and shortest, each PathPiece with greedy and shortest. The load average
is printed before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import run_tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="+")
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--initial-vocab-size", default="", help="comma-separated; none: parbpe's default")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--prune-share", default="", help="comma-separated; none: parbpe's default")
    parser.add_argument("--jit", default=None, help="--jit of every run (default: PARBPE_JIT, else auto)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pathpiece_bench_"))
    base = [sys.executable, "-m", "parbpe", "train", *args.corpus, "--vocab-size", str(args.vocab_size),
            "--progress", "none", *(["--jit", args.jit] if args.jit else [])]
    variants = [("bpe-w2", ["--workers", "2"])]
    initials, shares = args.initial_vocab_size.split(","), args.prune_share.split(",")
    for w, initial, share in itertools.product(args.workers.split(","), initials, shares):  # named by what varies
        name = f"pathpiece-w{w}" + (f"-i{initial}" if len(initials) > 1 else "") + (
            f"-s{share}" if len(shares) > 1 else "")
        variants.append((name, ["--algorithm", "pathpiece", "--workers", w,
                                *(["--initial-vocab-size", initial] if initial else []),
                                *(["--prune-share", share] if share else [])]))
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    results: dict[str, list[dict]] = {name: [] for name, _ in variants}
    for r in range(args.repeat):
        for name, extra in variants:
            out = work / f"{name}-{r}"
            wall, peak = run_tree([*base, *extra, "--out", str(out)])
            stats = json.loads((out / "stats.json").read_text())
            results[name].append({"wall": wall, "peak": peak, "prune": stats["seconds"].get("prune"),
                                  "merge": stats["seconds"].get("merge"), "pathpiece": stats.get("pathpiece")})
            print(f"{name} round {r + 1}: {wall:.1f} s, peak {peak / 2**20:.0f} MB, load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    bpe_wall = statistics.median(x["wall"] for x in results["bpe-w2"])
    print(f"{'run':<34}{'wall s':>9}{'vs BPE':>8}{'merge s':>9}{'prune s':>9}{'iterations':>11}{'peak MB':>9}")
    for name, _ in variants:
        xs = results[name]
        wall = statistics.median(x["wall"] for x in xs)
        pp = xs[0]["pathpiece"] or {}
        print(f"{name:<34}{wall:>9.1f}{wall / bpe_wall:>8.2f}{statistics.median(x['merge'] or 0 for x in xs):>9.1f}"
              f"{statistics.median(x['prune'] or 0 for x in xs):>9.1f}{pp.get('iterations', ''):>11}"
              f"{max(x['peak'] for x in xs) / 2**20:>9.0f}")
    print("\nheld-out tokens (parbpe eval):")
    heldout: dict[str, dict[str, int]] = {}
    for name, _ in variants:
        methods = "merges,greedy,shortest" if name == "bpe-w2" else "greedy,shortest"
        done = subprocess.run([sys.executable, "-m", "parbpe", "eval", "--tokenizer", str(work / f"{name}-0"),
                               args.heldout, "--method", methods, "--json", "--progress", "none"],
                              check=True, capture_output=True, text=True)
        for row in json.loads(done.stdout):
            heldout.setdefault(name, {})[row["method"]] = row["tokens"]
            print(f"  {name:<34}{row['method']:<10}{row['tokens']:>12,}{row['bytes_per_token']:>9.4f} bytes/token"
                  f"{row['renyi_efficiency']:>8.4f} Renyi")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "heldout": heldout, "work": str(work)}, indent=1))


if __name__ == "__main__":
    main()

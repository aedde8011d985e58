"""What a training option costs and changes: `parbpe train` with and without it, interleaved.

    python bench/option_cost.py CORPUS... --heldout FILE [--vocab-size 32768] [--repeat 2] [--workers 2]
        --variant plain= --variant capped="--max-token-bytes 16" [--baseline DIR] [--json OUT]

Each variant is `parbpe train CORPUS --vocab-size N --workers W --heldout FILE` plus its options, run in
its own process, interleaved (A B A B ...). Per variant: wall time of each run (median), the merge and
count stages' seconds (from stats.json), the peak RSS of the process tree, the held-out tokens (the
first run's stats.json "heldout"), and the longest token in bytes; then every stage's seconds.
Ratios are against the first variant. --baseline DIR adds the variant "baseline": the first
variant's options run by the parbpe of another checkout (python -m parbpe in DIR), interleaved with
the others: a change against main, stage by stage.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from harness import run_tree, save_results

import parbpe


def _run(args, extra: list[str], out: Path, cwd: str | None = None) -> dict:
    cmd = [sys.executable, "-m", "parbpe", "train", *args.corpus, "--vocab-size", str(args.vocab_size),
           "--workers", str(args.workers), "--heldout", args.heldout, "--out", str(out), "--progress", "none",
           *extra]
    wall, peak = run_tree(cmd, cwd=cwd)
    stats = json.loads((out / "stats.json").read_text())
    tok = parbpe.Tokenizer.load(out)
    return {"wall": wall, "peak": peak, "seconds": stats["seconds"], "heldout_tokens": stats["heldout"]["tokens"],
            "longest_token": max(len(t) for t in tok.vocab.values()), "vocab": tok.n_vocab}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="+")
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variant", action="append", required=True, metavar="NAME=OPTIONS")
    parser.add_argument("--baseline", metavar="DIR", help="a checkout of another parbpe commit")
    parser.add_argument("--json")
    args = parser.parse_args()
    args.corpus = [os.path.abspath(p) for p in args.corpus]  # (the baseline runs in its own directory)
    args.heldout = os.path.abspath(args.heldout)
    variants = [(v.split("=", 1)[0], shlex.split(v.split("=", 1)[1])) for v in args.variant]
    if args.baseline:
        variants.append(("baseline", variants[0][1]))
    runs: dict[str, list[dict]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for name, extra in variants:
                runs[name].append(_run(args, extra, Path(tmp) / f"{name}-{r}",
                                        cwd=args.baseline if name == "baseline" else None))
                print(f"{name} run {r + 1}: {runs[name][-1]['wall']:.1f} s", file=sys.stderr)
    first = variants[0][0]
    base_wall = statistics.median(x["wall"] for x in runs[first])
    base_tokens = runs[first][0]["heldout_tokens"]
    print(f"{'variant':<12}{'wall s (median)':>16}{'ratio':>7}{'merge s':>9}{'count s':>9}{'peak MB':>9}"
          f"{'held-out tokens':>17}{'vs first':>10}{'longest':>9}")
    for name, _ in variants:
        xs = runs[name]
        wall = statistics.median(x["wall"] for x in xs)
        merge = statistics.median(x["seconds"].get("merge", 0) for x in xs)
        count = statistics.median(x["seconds"].get("count", 0) for x in xs)
        tokens = xs[0]["heldout_tokens"]
        print(f"{name:<12}{wall:>16.1f}{wall / base_wall:>7.2f}{merge:>9.2f}{count:>9.2f}"
              f"{max(x['peak'] for x in xs) / 2**20:>9.0f}{tokens:>17,}{(tokens / base_tokens - 1) * 100:>+9.2f}%"
              f"{xs[0]['longest_token']:>9}")
    stages = list(dict.fromkeys(k for xs in runs.values() for x in xs for k in x["seconds"]))
    print("\nby stage, seconds (median):" + "".join(f"{s:>9}" for s in stages))
    for name, _ in variants:
        print(f"{name:<27}" + "".join(f"{statistics.median(x['seconds'].get(s, 0) for x in runs[name]):>9.2f}"
                                      for s in stages))
    if args.json:
        save_results(args.json, variants=dict(variants), runs=runs)


if __name__ == "__main__":
    main()

"""The first run after an install against the next one: the cost of compiling parbpe's kernels.

    python bench/first_run.py [--cases realmix,superbpe,demo] [--repeat 3] [--parbpe PATH] [--json OUT]

Each repetition gives every case an empty numba cache (NUMBA_CACHE_DIR, a new temporary directory)
and a new HOME, then runs the same command twice: the first run compiles the kernels it needs, the
second loads them from the cache. Repetitions and cases are interleaved (first, second, first,
second, ...), so a noisy minute hits both. The `parbpe` command run is --parbpe (default: the one
beside this Python, e.g. .venv/bin/parbpe), so a fresh virtual environment can be measured as it is.
Reported per case: the wall times of each pair, their ratios, the medians, and the compile seconds
stats.json records for the first run.

Cases:
- realmix: realmix train-*.parquet -> 32,768 tokens, GPT-2 split (the headline run);
- superbpe: the same with --superbpe-transition 0.8;
- demo: `make demo`'s training (--sample-corpus, 4,096 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from compare import DEFAULT_CORPUS
from harness import run_tree

CASES = {
    "realmix": [DEFAULT_CORPUS, "--vocab-size", "32768", "--pattern", "gpt2"],
    "superbpe": [DEFAULT_CORPUS, "--vocab-size", "32768", "--pattern", "gpt2", "--superbpe-transition", "0.8"],
    "demo": ["--sample-corpus", "--vocab-size", "4096"],
}


def one_pair(parbpe: str, case: list[str], tmp: str) -> dict:
    """The case run twice on a new, empty numba cache and a new HOME: wall seconds of each run, and the
    compile seconds of the first."""
    cache, home = tempfile.mkdtemp(dir=tmp, prefix="numba-"), tempfile.mkdtemp(dir=tmp, prefix="home-")
    env_before = {k: os.environ.get(k) for k in ("NUMBA_CACHE_DIR", "HOME")}
    os.environ.update(NUMBA_CACHE_DIR=cache, HOME=home)
    try:
        walls, compiled = [], None
        for run in (1, 2):
            out = os.path.join(tmp, f"out-{run}")
            shutil.rmtree(out, ignore_errors=True)
            wall, _ = run_tree([parbpe, "train", *case, "--progress", "none", "--out", out], cwd=tmp)
            walls.append(wall)
            with open(os.path.join(out, "stats.json")) as f:
                kernels = json.load(f).get("kernels", {})
            if run == 1:
                compiled = kernels.get("compile_seconds")
        return {"first": walls[0], "second": walls[1], "ratio": walls[0] / walls[1], "compile_seconds": compiled}
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="realmix,superbpe,demo")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parbpe", default=os.path.join(os.path.dirname(sys.executable), "parbpe"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}: choose from {', '.join(CASES)}")
    results: dict[str, list[dict]] = {n: [] for n in names}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="parbpe-first-run-") as tmp:
        for rep in range(args.repeat):
            for name in names:
                pair = one_pair(args.parbpe, CASES[name], tmp)
                results[name].append(pair)
                print(f"{name} #{rep + 1}: first {pair['first']:.2f} s, second {pair['second']:.2f} s, "
                      f"{pair['ratio']:.2f}x (compiled {pair['compile_seconds']} s)", flush=True)
    print(f"\nstarted {started}, load now {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print("| case | first run (s) | second run (s) | first / second | compile (s) |")
    print("|---|---|---|---|---|")
    for name, pairs in results.items():
        firsts, seconds = [p["first"] for p in pairs], [p["second"] for p in pairs]
        ratios = [p["ratio"] for p in pairs]
        print(f"| {name} | {', '.join(f'{x:.2f}' for x in firsts)} | {', '.join(f'{x:.2f}' for x in seconds)} | "
              f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}) | "
              f"{', '.join(str(p['compile_seconds']) for p in pairs)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

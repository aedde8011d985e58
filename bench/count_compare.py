"""`parbpe count` from this checkout against another (a baseline), interleaved, per pattern.

    python bench/count_compare.py --baseline DIR [FILES ...] [--patterns gpt2,gpt4,gpt4o,superword]
                                  [--workers 2] [--memory-budget B] [--repeat 3] [--json OUT]

Runs `python -m parbpe.cli count` with this checkout's parbpe and with DIR's, alternately (A B A B
...), on the same files with <|endoftext|> as special token. For each run: the count stage's
seconds from --stats, MB/s per worker (text MB / count seconds / workers) and the SHA-256 of the
counts file, which must be the same for both checkouts and every run (the script fails if not); and
the CPU seconds of the whole command (all its processes, start to end: user + system), which other
work on a shared machine disturbs far less than the wall time.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

REALMIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "realmix")
DEFAULT = [os.path.join(REALMIX, "train-*.parquet"), "/work/shared/data/realmix/train-*.parquet"]
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def count_once(tree: str, files: list[str], pattern: str, workers: int, budget: str | None, out: str) -> dict:
    """One `parbpe count` with parbpe imported from tree: count seconds, MB, spills and the file's SHA-256."""
    stats = out + ".json"
    # -P: without it `python -m` imports the parbpe of the working directory, whatever PYTHONPATH says.
    cmd = [sys.executable, "-P", "-m", "parbpe.cli", "count", *files, "--out", out, "--workers", str(workers),
           "--progress", "none", "--pattern", pattern, "--special-tokens", "<|endoftext|>", "--stats", stats]
    if budget:
        cmd += ["--memory-budget", budget]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": tree}, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(stats) as f:
        result = json.load(f)
    with open(out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"count_s": result["seconds"]["count"], "mb": result["bytes_read"] / 1e6, "spills": result.get("spills"),
            "sha256": digest, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--baseline", required=True, metavar="DIR", help="a checkout of another parbpe commit")
    parser.add_argument("--patterns", default="gpt2,gpt4,gpt4o,superword")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-budget")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write every run here")
    args = parser.parse_args()
    files = sorted({os.path.realpath(f) for p in (args.files or DEFAULT) for f in glob.glob(p)})
    if not files:
        raise SystemExit(f"no files match {args.files or DEFAULT}")
    trees = {"this": HERE, "baseline": os.path.abspath(args.baseline)}
    runs: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for pattern in (p.strip() for p in args.patterns.split(",") if p.strip()):
                for name, tree in trees.items():
                    run = count_once(tree, files, pattern, args.workers, args.memory_budget,
                                     os.path.join(tmp, f"{name}-{pattern}-{rep}.parquet"))
                    runs.setdefault((pattern, name), []).append(run)
                    print(f"# {rep + 1}/{args.repeat} {pattern} {name}: count {run['count_s']:.2f} s", file=sys.stderr)
    print(f"{len(files)} files, {args.workers} workers, budget {args.memory_budget or 'default'}, "
          f"{args.repeat} interleaved runs")
    print(f"{'pattern':10s} {'checkout':9s} {'count s (runs)':>26s} {'MB/s/worker':>12s} {'x baseline':>10s} "
          f"{'spills':>6s} {'cpu s':>6s} same counts")
    for pattern, name in runs:
        mine = runs[(pattern, name)]
        base = statistics.median(r["count_s"] for r in runs[(pattern, "baseline")])
        med = statistics.median(r["count_s"] for r in mine)
        shas = {r["sha256"] for r in mine + runs[(pattern, "baseline")]}
        if len(shas) != 1:
            raise SystemExit(f"{pattern}: the counts files differ ({sorted(shas)})")
        per_worker = mine[0]["mb"] / med / args.workers
        each = ", ".join(f"{r['count_s']:.2f}" for r in mine)
        cpu = statistics.median(r["cpu_s"] for r in mine)
        print(f"{pattern:10s} {name:9s} {med:7.2f} ({each}) "
              f"{per_worker:12.1f} {base / med:10.2f} {mine[0]['spills']!s:>6s} {cpu:6.2f} {next(iter(shas))[:12]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"pattern": p, "checkout": n, "runs": r} for (p, n), r in runs.items()], f, indent=1)


if __name__ == "__main__":
    main()

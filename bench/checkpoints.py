"""What checkpoints cost an uninterrupted run, and what a resume after a kill costs, on one corpus.

    python bench/checkpoints.py [--corpus GLOB ...] [--vocab-size 8192] [--workers 2] [--repeat 2]
                                [--json OUT]

Runs of `parbpe train` (each in its own process), interleaved, with three checkpoint settings:
- default: counting workers commit every 10 s, merging checkpoints every 5 s (what parbpe ships);
- every-unit: PARBPE_CHECKPOINT_SECONDS=0, a commit after every work unit and a checkpoint after
  every merge round (what a kill-anywhere guarantee at unit granularity would cost);
- end-only: PARBPE_CHECKPOINT_SECONDS=1e9, one commit per worker and one checkpoint, at the end.
For each run: wall seconds and stats.json's count, reduce and merge seconds. Then once: a run that
SIGKILLs itself after half its merge rounds (PARBPE_TEST_STOP), resumed with --resume: the resume's
wall time and replaying seconds, and whether its files equal the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REALMIX = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "realmix", "train-*.parquet")
SETTINGS = {"default": {}, "every-unit": {"PARBPE_CHECKPOINT_SECONDS": "0"},
            "end-only": {"PARBPE_CHECKPOINT_SECONDS": "1e9"}}
OUTPUTS = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken", "parbpe.json")


def train(files: list[str], out: str, vocab_size: int, workers: int, env: dict[str, str],
          *extra: str) -> tuple[float, int, str]:
    """One `parbpe train` run in a new session: (wall seconds, exit status, stderr)."""
    command = [sys.executable, "-m", "parbpe.cli", "train", *files, "--vocab-size", str(vocab_size),
               "--out", out, "--workers", str(workers), "--progress", "none", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, start_new_session=True)
    return time.perf_counter() - start, done.returncode, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", nargs="+", default=[REALMIX])
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    files = sorted({f for pattern in args.corpus for f in glob.glob(pattern)})
    if not files:
        sys.exit(f"no input matches {args.corpus}")
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="ckbench-") as tmp:
        for rep in range(args.repeat):
            for name, env in SETTINGS.items():
                out = os.path.join(tmp, f"{name}-{rep}")
                wall, status, err = train(files, out, args.vocab_size, args.workers, env)
                if status != 0:
                    sys.exit(f"{name}: exit {status}: {err[-2000:]}")
                with open(os.path.join(out, "stats.json")) as f:
                    stats = json.load(f)
                runs[name].append({"wall": round(wall, 2), **{k: stats["seconds"].get(k, 0.0)
                                                              for k in ("count", "reduce", "merge")}})
                print(name, runs[name][-1], flush=True)
        reference = os.path.join(tmp, "default-0")
        with open(os.path.join(reference, "stats.json")) as f:
            reference_stats = json.load(f)
        half = max(1, reference_stats["rounds"] // 2)
        killed = os.path.join(tmp, "killed")
        _, status, _ = train(files, killed, args.vocab_size, args.workers,
                             {"PARBPE_CHECKPOINT_SECONDS": "0", "PARBPE_TEST_STOP": f"merge:{half}:KILL"})
        wall, resumed_status, err = train(files, killed, args.vocab_size, args.workers, {}, "--resume")
        if resumed_status != 0:
            sys.exit(f"resume: exit {resumed_status}: {err[-2000:]}")
        with open(os.path.join(killed, "stats.json")) as f:
            resumed = json.load(f)
        same = all(open(os.path.join(killed, n), "rb").read() == open(os.path.join(reference, n), "rb").read()
                   for n in OUTPUTS)
    resume = {"killed_at_round": half, "rounds": reference_stats["rounds"], "killed_status": status,
              "resume_wall": round(wall, 2), "replaying": resumed["merge_seconds"]["replaying"],
              "merge_uninterrupted": reference_stats["seconds"]["merge"], "identical_files": same}
    print("resume", resume)
    summary = {name: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]} for name, rs in runs.items()}
    for name, med in summary.items():
        print(f"{name:11s} median of {args.repeat}: " + ", ".join(f"{k} {v} s" for k, v in med.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"corpus": args.corpus, "vocab_size": args.vocab_size, "workers": args.workers,
                       "runs": runs, "median": summary, "resume": resume, "cores": os.cpu_count()}, f, indent=1)


if __name__ == "__main__":
    main()

"""Hostile text: one huge chunk per input. Generates the inputs, trains on each, and reports the wall
time and the peak RSS of the process tree (workers included).

    python bench/hostile.py [--dir DIR] [--vocab-size 1024] [--workers 2] [--json results.json]
        [--cases a50,letters20,cjk20] [--limit-gb 12]

Cases: `aN` is N MB of the letter a (one chunk), `lettersN` N MB of random ASCII letters with no space
(one chunk), `cjkN` N MB of random CJK ideographs (3 bytes each, no space: one chunk). --limit-gb
caps each run's address space (ulimit -v) so that a blow-up fails instead of taking the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import run_sampled, save_results, write_rusage  # noqa: E402

CHUNK = 1 << 20


def make_input(case: str, directory: str) -> str:
    """The input file of a case (written once, deterministically), as one line with no space."""
    match = re.fullmatch(r"(a|letters|cjk)(\d+)", case)
    if not match:
        raise SystemExit(f"unknown case {case!r}: use aN, lettersN or cjkN (N in MB)")
    kind, size = match.group(1), int(match.group(2)) * 1_000_000
    path = os.path.join(directory, f"{case}.txt")
    if os.path.exists(path) and os.path.getsize(path) >= size - 3:
        return path
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written < size:
            if kind == "a":
                piece = "a" * min(CHUNK, size - written)
            elif kind == "letters":
                piece = "".join(rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                            k=min(CHUNK, size - written)))
            else:
                piece = "".join(chr(c) for c in rng.choices(range(0x4E00, 0x9FFF), k=min(CHUNK, size - written) // 3))
            f.write(piece)
            written += len(piece.encode("utf-8"))
    return path


def child(args: list[str]) -> None:
    """In the measured process: train through the CLI, then write the kernel's peak RSS."""
    rusage_path, *argv = args
    from parbpe.cli import main

    status = main(argv)
    write_rusage(rusage_path)
    sys.exit(status)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Not parbpe-*: that is the pattern of parbpe's own temporary directories, which runs report as stale.
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "hostile-inputs"))
    parser.add_argument("--cases", default="a50,letters20,cjk20")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-gb", type=float, default=12.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rows = []
    for case in args.cases.split(","):
        path = make_input(case, args.dir)
        out = os.path.join(args.dir, f"out-{case}")
        rusage = os.path.join(args.dir, f"rusage-{case}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", rusage, "train", path, "--out", out,
               "--vocab-size", str(args.vocab_size), "--workers", str(args.workers), "--progress", "none"]
        limit = int(args.limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))  # inherited by the child
        row = {"case": case, "MB": round(os.path.getsize(path) / 1e6, 1)}
        try:
            measured = run_sampled(cmd, rusage)
            stats = json.load(open(os.path.join(out, "stats.json")))
            row |= {"ok": True, "wall_s": round(measured["wall"], 1),
                    "peak_tree_MB": round(measured["peak_sampled"] / 1e6), "peak_process_MB":
                    round(measured["peak_kernel_process"] / 1e6), "vocab": stats["vocab_size"],
                    "merges": stats["merges"], "stages_s": stats["seconds"]}
        except RuntimeError as exc:
            row |= {"ok": False, "error": str(exc).strip().splitlines()[-1][:300]}
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        save_results(args.json, rows=rows, vocab_size=args.vocab_size, workers=args.workers, limit_gb=args.limit_gb)


if __name__ == "__main__":
    main()

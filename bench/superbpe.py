"""SuperBPE against ordinary BPE: the whole run's time and peak RSS, stage 2's steps, held-out tokens.

    python bench/superbpe.py --corpus 'DATA/train-*.parquet' --heldout DATA/heldout.parquet
        [--vocab-size 32768] [--transition 0.8] [--special-tokens '<|endoftext|>'] [--repeat 2]
        [--workers 2] [--limit-gb 10] [--out DIR] [--json results.json]

Each run is `parbpe train` in its own process (the CLI's own code path), ordinary and SuperBPE
interleaved over the repetitions; wall time is process start to exit, RSS the peak of the process
tree (sampled every 50 ms). The last run of each kind is then evaluated on the held-out text with
`parbpe eval`'s code (evaluate), side by side. --limit-gb caps each run's address space.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import run_sampled, save_results, write_rusage  # noqa: E402


def child(args: list[str]) -> None:
    """Run the parbpe CLI with args[1:], then write the kernel's peak RSS to args[0]."""
    from parbpe.cli import main

    status = main(args[1:])
    write_rusage(args[0])
    sys.exit(status)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="training files (a glob)")
    p.add_argument("--heldout", required=True, help="held-out text (parquet, txt, jsonl)")
    p.add_argument("--vocab-size", type=int, default=32768)
    p.add_argument("--transition", default="0.8", help="--superbpe-transition (a share or a merge count)")
    p.add_argument("--special-tokens", default="<|endoftext|>")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--limit-gb", type=float, default=None, help="address-space cap of each run (ulimit -v)")
    p.add_argument("--out", default=None, help="where the tokenizers go (default: a temporary directory)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    files = sorted(glob.glob(args.corpus))
    if not files:
        raise SystemExit(f"no file matches {args.corpus!r}")
    if args.limit_gb:
        limit = int(args.limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))  # inherited by the children
    out = args.out or tempfile.mkdtemp(prefix="superbpe-bench-")
    kinds = {"bpe": [], "superbpe": ["--superbpe-transition", args.transition]}
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for rep in range(args.repeat):
        for kind, extra in kinds.items():
            target = os.path.join(out, kind)
            if os.path.exists(target):
                shutil.rmtree(target)
            rusage = os.path.join(out, f"rusage-{kind}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--child", rusage, "train", *files, "--out", target,
                   "--vocab-size", str(args.vocab_size), "--special-tokens", args.special_tokens,
                   "--workers", str(args.workers), "--progress", "none", *extra]
            measured = run_sampled(cmd, rusage)
            with open(os.path.join(target, "stats.json")) as f:
                stats = json.load(f)
            measured.update(seconds=stats["seconds"], peak_rss_bytes=stats["peak_rss_bytes"],
                            peak_rss_by_stage=stats["peak_rss_by_stage"], superbpe=stats.get("superbpe"))
            runs[kind].append(measured)
            print(f"run {rep + 1} {kind:9s} {measured['wall']:7.1f} s  peak {measured['peak_sampled'] / 1e6:7.0f} MB",
                  flush=True)

    from parbpe.tokenizer.evaluate import evaluate
    from parbpe.tokenizer.model import Tokenizer

    reports = {kind: evaluate(Tokenizer.load(os.path.join(out, kind)), [args.heldout]) for kind in kinds}
    wall = {kind: statistics.median(r["wall"] for r in runs[kind]) for kind in kinds}
    print(f"\n{'':9s} {'median s':>9s} {'x bpe':>6s} {'peak MB':>8s} {'held-out tokens':>16s} {'x bpe':>7s} "
          f"{'B/token':>8s} {'tok/word':>9s} {'superword':>9s}")
    for kind in kinds:
        r = reports[kind]
        peak = max(m["peak_sampled"] for m in runs[kind])
        print(f"{kind:9s} {wall[kind]:9.1f} {wall[kind] / wall['bpe']:6.2f} {peak / 1e6:8.0f} {r['tokens']:16,d} "
              f"{r['tokens'] / reports['bpe']['tokens']:7.4f} {r['bytes_per_token']:8.4f} {r['tokens_per_word']:9.4f} "
              f"{100 * r['superword_share']:8.2f}%")
    last = runs["superbpe"][-1]["superbpe"]
    print(f"\nSuperBPE stage 2 (last run): {last['unique_chunks']:,} unique chunks, {last['table_tokens']:,} table "
          f"bytes -> {last['encoded_table_tokens']:,} tokens after stage 1's merges; seconds {last['seconds']}; "
          f"peak RSS {last['peak_rss_bytes'] / 1e6:.0f} MB; {last['skipped_tokens']} tokens refused by the rules")
    if args.json:
        save_results(args.json, runs=runs, heldout=reports, median_wall=wall, argv=sys.argv[1:])


if __name__ == "__main__":
    main()

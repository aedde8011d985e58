"""Hostile text: one huge chunk per input. Generates the inputs, trains on each, and reports the wall
time and the peak RSS of the process tree (workers included).

    python bench/hostile.py [--dir DIR] [--vocab-size 1024] [--workers 2] [--json results.json]
        [--cases a50,letters20,cjk20] [--limit-gb 12] [--memory-budget 1GB [--follow]] [--extra=--jit=on]

Cases: `aN` is N MB of the letter a (one chunk), `lettersN` N MB of random ASCII letters with no space
(one chunk), `cjkN` N MB of random CJK ideographs (3 bytes each, no space: one chunk), `eacuteN` N MB
of the two-byte character é (one chunk of 2-byte runs), `bytesN` N MB of random bytes (0-255) read
as text: invalid UTF-8 becomes U+FFFD, so many chunks of every kind. --limit-gb caps each run's
address space (ulimit -v) so that a blow-up fails instead of taking the machine. --memory-budget
passes a budget: a run that refuses it reports its one-line error and the tree's peak until then,
and with --follow the case runs again at the budget the error names (until one is not refused).
--extra passes more options. Each finished run's tokenizer is checked: every merge joins two earlier tokens, every
token's bytes are its parts', and tokenizer.json loads in `tokenizers` and round-trips a sample.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import run_sampled, save_results, write_rusage  # noqa: E402

CHUNK = 1 << 20


def make_input(case: str, directory: str) -> str:
    """The input file of a case (written once, deterministically), as one line with no space."""
    match = re.fullmatch(r"(a|letters|cjk|eacute|bytes)(\d+)", case)
    if not match:
        raise SystemExit(f"unknown case {case!r}: use aN, lettersN, cjkN, eacuteN or bytesN (N in MB)")
    kind, size = match.group(1), int(match.group(2)) * 1_000_000
    path = os.path.join(directory, f"{case}.txt")
    if os.path.exists(path) and os.path.getsize(path) >= size - 3:
        return path
    rng = random.Random(0)
    if kind == "bytes":
        with open(path, "wb") as f:
            f.write(rng.randbytes(size))
        return path
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written < size:
            if kind == "a":
                piece = "a" * min(CHUNK, size - written)
            elif kind == "eacute":
                piece = "\u00e9" * (min(CHUNK, size - written) // 2)
            elif kind == "letters":
                piece = "".join(rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                            k=min(CHUNK, size - written)))
            else:
                piece = "".join(chr(c) for c in rng.choices(range(0x4E00, 0x9FFF), k=min(CHUNK, size - written) // 3))
            f.write(piece)
            written += len(piece.encode("utf-8"))
    return path


def check_tokenizer(out: str, sample: bytes) -> str:
    """Why the tokenizer in `out` is not valid, or "" if it is: ids 0..V-1 each once, the 256 bytes
    first, every other token the join of a merge of two earlier tokens, and tokenizer.json encoding
    `sample` to ids that decode back to it."""
    with open(os.path.join(out, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(out, "merges.txt"), encoding="utf-8") as f:
        merges = [line.rstrip("\n").split(" ") for line in f if line.strip() and not line.startswith("#version")]
    if sorted(vocab.values()) != list(range(len(vocab))):
        return "ids are not 0..V-1"
    made = {}
    for left, right in merges:
        token = left + right
        if left not in vocab or right not in vocab or token not in vocab:
            return f"merge {left!r} {right!r} joins tokens not in the vocabulary"
        if vocab[token] <= max(vocab[left], vocab[right]) or token in made:
            return f"merge {left!r} {right!r} makes {token!r} out of order or twice"
        made[token] = True
    singles = [t for t in vocab if t not in made]
    if len(singles) != 256 or any(vocab[t] >= 256 for t in singles):
        return f"{len(singles)} tokens come from no merge (256 bytes expected)"
    from tokenizers import Tokenizer

    text = sample.decode("utf-8", errors="replace")
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    if tok.decode(tok.encode(text).ids) != text:
        return "tokenizer.json does not round-trip a sample of the input"
    return ""


def child(args: list[str]) -> None:
    """In the measured process: train through the CLI, then write the kernel's peak RSS."""
    rusage_path, *argv = args
    from parbpe.cli import main

    status = main(argv)
    write_rusage(rusage_path)
    sys.exit(status)


def run_case(case: str, budget: str | None, args: argparse.Namespace) -> dict:
    """One training run of a case under a budget (None: parbpe's default): its row."""
    path = make_input(case, args.dir)
    out = os.path.join(args.dir, f"out-{case}")
    if os.path.exists(out):
        shutil.rmtree(out)  # (a refused run's run directory would be resumed)
    rusage = os.path.join(args.dir, f"rusage-{case}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", rusage, "train", path, "--out", out,
           "--vocab-size", str(args.vocab_size), "--workers", str(args.workers), "--progress", "none",
           *(["--memory-budget", budget] if budget else []), *args.extra.split()]
    limit = int(args.limit_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))  # inherited by the child
    row = {"case": case, "MB": round(os.path.getsize(path) / 1e6, 1), "budget": budget}
    try:
        measured = run_sampled(cmd, rusage, check=False)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    row |= {"ok": "returncode" not in measured, "wall_s": round(measured["wall"], 1),
            "peak_tree_MB": round(measured["peak_sampled"] / 1e6)}
    if not row["ok"]:
        return row | {"exit": measured["returncode"], "error": measured["error"][:400]}
    stats = json.load(open(os.path.join(out, "stats.json")))
    row |= {"peak_process_MB": round(measured["peak_kernel_process"] / 1e6), "vocab": stats["vocab_size"],
            "merges": stats["merges"], "stages_s": stats["seconds"],
            "peak_by_stage_MB": {k: round(v / 1e6) for k, v in stats.get("peak_rss_by_stage", {}).items()}}
    # In a process of its own: loading a tokenizer.json of GBs (50 MB of one letter makes one) would
    # raise this process's peak RSS, which the next run's child inherits in ru_maxrss.
    checked = subprocess.run([sys.executable, os.path.abspath(__file__), "--check", out, path],
                             capture_output=True, text=True)
    row["invalid"] = (checked.stdout.strip() or None) if checked.returncode == 0 else checked.stderr[-300:]
    return row


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        with open(sys.argv[3], "rb") as f:
            print(check_tokenizer(sys.argv[2], f.read(20_000)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Not parbpe-*: that is the pattern of parbpe's own temporary directories, which runs report as stale.
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "hostile-inputs"))
    parser.add_argument("--cases", default="a50,letters20,cjk20")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-gb", type=float, default=12.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--memory-budget", default=None, help="passed to parbpe train")
    parser.add_argument("--extra", default="", help="more parbpe train options, space-separated")
    parser.add_argument("--follow", action="store_true", help="run again at the budget a refusal names")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rows = []
    for case in args.cases.split(","):
        budget = args.memory_budget
        for _ in range(4 if args.follow else 1):
            row = run_case(case, budget, args)
            rows.append(row)
            print(json.dumps(row), flush=True)
            named = re.search(r"use at least ([0-9.]+ [KMGT]?B) \(--memory-budget\)", row.get("error", ""))
            if row["ok"] or not named:
                break
            budget = named.group(1).replace(" ", "")
    if args.json:
        save_results(args.json, rows=rows, vocab_size=args.vocab_size, workers=args.workers, limit_gb=args.limit_gb)


if __name__ == "__main__":
    main()

"""The working tree against a baseline checkout, interleaved, with time ratios by stage.

    python bench/regress.py --baseline /work/wt/base [--cases realmix,fineweb,fineweb-exact,serial,superbpe]
                            [--repeat 3] [--json OUT]

Each case is one `parbpe train` command, run by both trees in their own processes, alternating
(tree, baseline, tree, baseline, ...), each with PYTHONPATH set to its checkout. For every run: the
wall time of the process and the stage times from its stats.json (plan, count, reduce, table, merge,
write; merge also split into selection, applying, updating). Printed per case: the median of each
time for both trees and their ratio (tree / baseline: under 1 is faster), and whether the output
files (merges.txt, vocab.json, tokenizer.tiktoken) are byte-identical between the two trees.

With --cold-jit, every run starts with an empty numba cache (its kernels compiled in the run);
otherwise the trees use their caches (warm after their first run). --jit auto|on|off is train's
--jit for both trees (a checkout without the JIT, such as d27603a, runs numpy).

Cases: realmix (train-*.parquet -> 32,768, GPT-4 pattern, 2 workers), fineweb (FineWeb-Edu counts ->
50,304), fineweb-exact (the same, --batching exact), serial (--max-batch-size 1, 500 tokens on the
first 133 KB of realmix's held-out text, 1 worker), superbpe (realmix with --superbpe-transition 0.8
and '<|endoftext|>' as a special token: stage 2's count, table, encode and merge by stage; not in
the default cases). docs/ARCHITECTURE.md asks for this run before
a change to merge/ or count/ is resolved.
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

from compare import DEFAULT_HELDOUT, REALMIX

_DATA = os.path.dirname(REALMIX)
FINEWEB = os.path.join(_DATA, "fineweb-edu-counts", "fineweb-edu-1gb-cutoff10.csv")
OUTPUTS = ("merges.txt", "vocab.json", "tokenizer.tiktoken")
SERIAL_BYTES = 133_000


def case_args(name: str, tmp: str) -> list[str]:
    """The `parbpe train` arguments of a case (input, size and options)."""
    if name == "realmix":
        return [*sorted(glob.glob(os.path.join(REALMIX, "train-*.parquet"))), "--vocab-size", "32768",
                "--pattern", "gpt4", "--workers", "2"]
    if name in ("fineweb", "fineweb-exact"):
        return [FINEWEB, "--vocab-size", "50304", *(["--batching", "exact"] if name == "fineweb-exact" else [])]
    if name == "superbpe":
        return [*case_args("realmix", tmp), "--superbpe-transition", "0.8", "--special-tokens", "<|endoftext|>"]
    if name == "serial":
        return [serial_text(tmp), "--vocab-size", "500", "--max-batch-size", "1", "--workers", "1"]
    raise ValueError(f"unknown case {name!r}; choose from realmix, fineweb, fineweb-exact, serial, superbpe")


def serial_text(tmp: str) -> str:
    """The first SERIAL_BYTES of the held-out documents as a text file (made once per bench run)."""
    path = os.path.join(tmp, "serial.txt")
    if not os.path.exists(path):
        import pyarrow.parquet as pq

        text = "\n".join(t for t in pq.read_table(DEFAULT_HELDOUT, columns=["text"]).column(0).to_pylist() if t)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.encode()[:SERIAL_BYTES].decode(errors="ignore"))
    return path


def run_tree(tree: str, args: list[str], out: str, cold_jit: bool = False, jit: str | None = None
             ) -> dict[str, float]:
    """One training run of the checkout `tree`: wall time and stage times (seconds). cold_jit: in a
    new, empty numba cache (every kernel it runs is compiled); jit: its --jit, if it has the JIT."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    if jit and os.path.exists(os.path.join(tree, "parbpe", "jit.py")):
        args = [*args, "--jit", jit]
    if cold_jit:
        env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(dir=os.path.dirname(out))
    # -P: `python -m` puts the working directory first on sys.path, which would import the checkout the
    # command is run from for both trees; PYTHONPATH alone picks the tree.
    cmd = [sys.executable, "-P", "-m", "parbpe.cli", "train", *args, "--progress", "none", "--out", out]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {' '.join(cmd[3:6])} ... failed: {done.stderr.decode()[-2000:]}")
    with open(os.path.join(out, "stats.json")) as f:
        stats = json.load(f)
    times = {"wall": wall, **stats["seconds"]}
    times.update({f"merge.{k}": v for k, v in stats.get("merge_seconds", {}).items()
                  if k in ("selection", "applying", "updating")})
    return times


def identical(a: str, b: str) -> bool:
    """Whether two output directories hold byte-identical tokenizer files."""
    for name in OUTPUTS:
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            if fa.read() != fb.read():
                return False
    return True


def run_case(name: str, tree: str, baseline: str, repeat: int, tmp: str, cold_jit: bool = False,
             jit: str | None = None) -> dict:
    """Interleaved runs of one case; medians by stage, ratios and the identity check."""
    args = case_args(name, tmp)
    runs: dict[str, list[dict[str, float]]] = {"tree": [], "baseline": []}
    outs = {side: os.path.join(tmp, f"{name}-{side}") for side in runs}
    for _ in range(repeat):
        for side, path in (("tree", tree), ("baseline", baseline)):
            runs[side].append(run_tree(path, args, outs[side], cold_jit, jit))
    keys = [k for k in runs["tree"][0] if all(k in r for r in runs["tree"] + runs["baseline"])]
    medians = {side: {k: statistics.median(r[k] for r in rs) for k in keys} for side, rs in runs.items()}
    ratios = {k: medians["tree"][k] / medians["baseline"][k] if medians["baseline"][k] else None for k in keys}
    return {"case": name, "args": args, "medians": medians, "ratios": ratios,
            "identical": identical(outs["tree"], outs["baseline"])}


def print_case(result: dict) -> None:
    """One table per case: stage, tree's median, baseline's median, ratio."""
    print(f"\n{result['case']}: outputs {'byte-identical' if result['identical'] else 'DIFFER'}")
    print(f"  {'stage':<16}{'tree s':>9}{'base s':>9}{'ratio':>8}")
    for k, ratio in result["ratios"].items():
        shown = f"{ratio:.2f}" if ratio is not None else "-"
        print(f"  {k:<16}{result['medians']['tree'][k]:>9.3f}{result['medians']['baseline'][k]:>9.3f}{shown:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="a checkout of the commit to compare with")
    parser.add_argument("--tree", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                        help="the checkout measured (default: this one)")
    parser.add_argument("--cases", default="realmix,fineweb,fineweb-exact,serial")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--cold-jit", action="store_true",
                        help="every run in a new, empty numba cache (NUMBA_CACHE_DIR): the JIT's compile time counted")
    parser.add_argument("--jit", choices=["auto", "on", "off"], default=None,
                        help="train's --jit for both trees (a checkout without the JIT runs numpy; default: auto)")
    args = parser.parse_args()
    for path in (args.baseline, args.tree):
        if not os.path.isdir(os.path.join(path, "parbpe")):
            parser.error(f"{path} is not a parbpe checkout (no parbpe/ in it); give --baseline a checkout")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    names = [c for c in args.cases.split(",") if c]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            case_args(name, tmp)  # every case name checked before the first long run
        results = []
        for name in names:
            results.append(run_case(name, args.tree, args.baseline, args.repeat, tmp, args.cold_jit, args.jit))
            print_case(results[-1])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

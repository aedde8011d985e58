"""What a first run compiles, kernel by kernel: the seconds numba takes for each on an empty cache.

    python bench/compile_times.py [--pattern gpt2] [--vocab-size 32768] [--only NAME,...]

The calls a realmix-like run makes (the counting kernels of the pattern, the reduce's sort and the
merge's kernels, recorded as kernels_ahead's compiling processes record them: jit.signatures_of) are
compiled one after another in this process, into a new empty numba cache directory, and listed
largest first with their bytecode size (jit.Kernel.code_size, inlined helpers counted). The total
is the CPU a first run spends compiling however it spreads it over processes (docs/BENCHMARKS.md,
"First run after install").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pattern", default="gpt2")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--only", default=None, help="kernels to compile, by the last part of their names")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parbpe-compile-") as cache:  # (removed with what numba wrote)
        os.environ["NUMBA_CACHE_DIR"] = cache  # read when numba is imported: below
        rows = compile_all(args)
    for row in sorted(rows, key=lambda row: -row["seconds"]):
        print(json.dumps(row))
    print(json.dumps({"kernels": len(rows), "seconds": round(sum(row["seconds"] for row in rows), 2)}))


def compile_all(args: argparse.Namespace) -> list[dict]:
    """Each recorded call compiled in turn: its kernel, seconds and bytecode size."""
    sys.path.insert(0, ROOT)
    from parbpe import jit
    from parbpe.patterns import PATTERNS
    from parbpe.pipeline.kernels_ahead import count_calls, later_calls

    jit.set_mode("on")
    calls = count_calls(PATTERNS.get(args.pattern, args.pattern))
    calls += [call for call in later_calls(["reduce", "merge"], args.vocab_size) if call not in calls]
    if args.only:
        wanted = set(args.only.split(","))
        calls = [call for call in calls if call[0].rsplit(".", 1)[-1] in wanted]
    rows = []
    for name, types in calls:
        started = time.perf_counter()
        jit.KERNELS[name].load_for(types)
        rows.append({"kernel": name, "seconds": round(time.perf_counter() - started, 3),
                     "code_bytes": jit.KERNELS[name].code_size()})
    return rows

if __name__ == "__main__":
    main()

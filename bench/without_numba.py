"""parbpe with numba against parbpe without it: two `parbpe` commands (two virtual environments, one
with numba uninstalled), run in turn on realmix and the FineWeb-Edu counts; medians, ratios, and
whether the merges are the same.

    python -m venv /tmp/vplain && /tmp/vplain/bin/pip install .
    python -m venv /tmp/vnonumba && /tmp/vnonumba/bin/pip install . && /tmp/vnonumba/bin/pip uninstall -y numba llvmlite
    python bench/without_numba.py --with /tmp/vplain/bin/parbpe --without /tmp/vnonumba/bin/parbpe [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from compare import REALMIX
from harness import run_tree

FINEWEB = os.path.join(os.path.dirname(REALMIX), "fineweb-edu-counts", "fineweb-edu-1gb-cutoff10.csv")
CASES = {"realmix": [os.path.join(REALMIX, f"train-0000{i}-of-00008.parquet") for i in range(8)]
         + ["--vocab-size", "32768", "--pattern", "gpt4"],
         "fineweb": [FINEWEB, "--vocab-size", "50304"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--with", dest="with_numba", required=True, help="the parbpe command of an install with numba")
    parser.add_argument("--without", required=True, help="the parbpe command of an install without numba")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    commands = {"with": args.with_numba, "without": args.without}
    walls: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="parbpe-without-numba-") as tmp:
        for rep in range(args.repeat):
            for case, case_args in CASES.items():
                for name, command in commands.items():
                    out = os.path.join(tmp, f"{case}-{name}")
                    shutil.rmtree(out, ignore_errors=True)
                    wall, peak = run_tree([command, "train", *case_args, "--progress", "none", "--out", out])
                    walls.setdefault((case, name), []).append(wall)
                    print(f"{case} {name} numba #{rep + 1}: {wall:.2f} s, peak {peak / 1e6:.0f} MB", flush=True)
        print("| case | with numba | without numba | without / with | same merges |")
        print("|---|---|---|---|---|")
        for case in CASES:
            a, b = statistics.median(walls[(case, "with")]), statistics.median(walls[(case, "without")])
            merges = [open(os.path.join(tmp, f"{case}-{n}", "merges.txt"), "rb").read() for n in commands]
            print(f"| {case} | {a:.2f} s | {b:.2f} s | {b / a:.2f} | {merges[0] == merges[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

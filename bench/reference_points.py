"""Physical reference points on one core: reading parquet text, and the split pattern alone.

    python bench/reference_points.py [FILES ...] [--pattern gpt4]

Prints MB/s of UTF-8 text for: reading the text column into Python strings; the split pattern's
findall alone; findall plus counting chunks in a Counter (what parbpe's count stage does per
document). These bound what any Python-level counting can reach per core.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from collections import Counter

import pyarrow.parquet as pq
import regex

from parbpe.patterns import resolve_pattern

REALMIX = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "realmix")
DEFAULT = os.path.join(REALMIX, "train-0000[0-1]-of-00008.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", default=[DEFAULT])
    parser.add_argument("--pattern", default="gpt4")
    args = parser.parse_args()
    files = sorted(f for p in args.files for f in glob.glob(p))
    t = time.perf_counter()
    docs = [s for f in files for b in pq.ParquetFile(f).iter_batches(columns=["text"]) for s in b.column(0).to_pylist()]
    read_s = time.perf_counter() - t
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    compiled = regex.compile(resolve_pattern(args.pattern))
    t = time.perf_counter()
    for d in docs:
        compiled.findall(d)
    split_s = time.perf_counter() - t
    t = time.perf_counter()
    counts: Counter[str] = Counter()
    for d in docs:
        counts.update(compiled.findall(d))
    count_s = time.perf_counter() - t
    print(json.dumps({"files": len(files), "text_mb": round(mb, 1), "pattern": args.pattern,
                      "read_parquet_mb_s": round(mb / read_s, 1), "split_pattern_mb_s": round(mb / split_s, 2),
                      "split_and_count_mb_s": round(mb / count_s, 2), "unique_chunks": len(counts)}, indent=1))


if __name__ == "__main__":
    main()

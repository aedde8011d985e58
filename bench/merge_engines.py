"""The merge engines side by side on one table: time, the process's peak and whether the merges agree.

    python bench/merge_engines.py COUNTS [--pattern gpt2] [--vocab-size 32768] [--engines linked,chunk]
        [--repeat 1]

Each engine runs in a process of its own (learn_merges(engine=E, threads=1) on the table of a counts
input: `parbpe count` writes one), in interleaved rounds. Per run: the rounds' seconds, the process's
RSS before the table and its peak (ru_maxrss), and a digest of the merges, which must be equal across
engines. What a compact engine must beat before it is worth its kernels (docs/DECISIONS.md, Merging).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

ONE_RUN = """
import hashlib, json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from parbpe.config import TrainConfig
from parbpe.count.counts_file import load_counts_files
from parbpe.count.reduce import select_training_chunks
from parbpe.io.plan import plan
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import table_from_arrays
from parbpe.run.memory import process_rss, trim_heap

engine, vocab_size, pattern, counts = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
config = TrainConfig(vocab_size=vocab_size, workers=1, pattern=pattern)
chunks = select_training_chunks(load_counts_files(plan(counts), config), config)
trim_heap()
before = process_rss()
table = table_from_arrays(chunks.data, chunks.offsets, chunks.counts, vocab_size)
started = time.perf_counter()
result = learn_merges(table, [bytes([b]) for b in range(256)], config.n_merges, engine=engine, threads=1)
seconds = time.perf_counter() - started
print(json.dumps({"engine": engine, "seconds": round(seconds, 2), "rss_before_MB": round(before / 1e6),
                  "peak_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3),
                  "table_tokens": int(len(table.tokens)), "merges": len(result.merges),
                  "digest": hashlib.sha256(repr(result.merges).encode()).hexdigest()[:12]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counts", nargs="+")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pattern", default="gpt2", help="the counts file's split pattern")
    parser.add_argument("--engines", default="linked,chunk")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    digests = set()
    for _ in range(args.repeat):
        for engine in args.engines.split(","):
            done = subprocess.run([sys.executable, "-c", ONE_RUN, ROOT, engine, str(args.vocab_size), args.pattern,
                                   *args.counts],
                                  capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{engine}: {done.stderr.strip().splitlines()[-1]}")
            line = json.loads(done.stdout.strip().splitlines()[-1])
            digests.add(line["digest"])
            print(json.dumps(line), flush=True)
    print(json.dumps({"same_merges": len(digests) == 1}))


if __name__ == "__main__":
    main()

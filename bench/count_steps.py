"""Where one counting worker's time goes, step by step, for each named pattern (one process).

    python bench/count_steps.py [FILES ...] [--patterns gpt2,gpt4,gpt4o,superword] [--repeat 1] [--json OUT]

The steps are the ones a counting worker runs (count/counter.py), timed one after the other over
all the files in this process: reading the parquet text column (row group by row group), the
search for special tokens (<|endoftext|>), cutting documents into pieces, counting the pieces
(keys of up to 8 bytes, pairs of keys up to 16, pyarrow hashing beyond: one sort each per batch),
summing the batches, and splitting the distinct pieces into chunks (the lexers, or `regex`) and
counting those; the superword split has no pieces: its chunks are found and counted straight
from the text. With the JIT on (PARBPE_JIT=on, or auto with numba) the numba kernel of
piece_keyer.py cuts and keys the pieces in one pass ("cut pieces"; "count pieces" is then the
sorts) and the numba lexer (chunking.py) splits the distinct pieces. MB/s are of the UTF-8 text
(realmix: 152.8 MB) over each step's own time, so the slowest step shows which to cut; "total" is
the sum, one worker's throughput.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

import pyarrow.parquet as pq

from parbpe.config import TrainConfig
from parbpe.count.counter import ShardCounter
from parbpe.count.cuts import cut_bounds
from parbpe.count.pieces import _buffers, documents_holding, string_array
from parbpe.count.superword import SuperwordCounter
from parbpe.io.readers import ReadStats, iter_text_batches
from parbpe.io.units import WorkUnit

REALMIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "realmix")
DEFAULT = [os.path.join(REALMIX, "train-*.parquet"), "/work/shared/data/realmix/train-*.parquet"]
SPECIAL = "<|endoftext|>"


def _units(files: list[str]) -> list[WorkUnit]:
    return [WorkUnit(path, "parquet", row_group=rg) for path in files
            for rg in range(pq.ParquetFile(path).num_row_groups)]


def steps(files: list[str], pattern: str) -> dict[str, float]:
    """Seconds of each step of counting files with pattern, in this process."""
    seconds: dict[str, float] = {}

    def timed(name: str, func, *args):
        start = time.perf_counter()
        result = func(*args)
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
        return result

    stats = ReadStats()
    batches = timed("read parquet", lambda: [string_array(b) for u in _units(files)
                                             for b in iter_text_batches(u, "text", stats)])
    for texts in batches:
        timed("special tokens", documents_holding, texts, (SPECIAL,))
    shard = ShardCounter(TrainConfig(pattern=pattern, special_tokens=(SPECIAL,)), "/nonexistent", "bench")
    counter = shard.pieces
    if isinstance(counter, SuperwordCounter):
        for texts in batches:
            timed("split and count chunks", counter.add, texts)
        timed("sum batches", counter.compact)
        timed("counts table", counter.chunk_counts)
    else:
        for texts in batches:
            offsets, data = _buffers(texts)
            if counter._jit_kind is None:
                bounds = timed("cut pieces", cut_bounds, offsets, data)
                timed("count pieces", counter._held.add, data, bounds)
            else:  # the numba kernel cuts and keys in one pass (piece_keyer.py), a segment at a time
                segments = counter._keyer.pieces(offsets, data)
                while (keyed := timed("cut pieces", next, segments, None)) is not None:
                    timed("count pieces", counter._held.add_keyed, *keyed)
        timed("sum batches", counter.compact)
        timed("split pieces, count chunks", counter.chunk_counts)
    seconds["text MB"] = stats.bytes / 1e6
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--patterns", default="gpt2,gpt4,gpt4o,superword")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each pattern, interleaved; the best is kept")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    files = sorted({os.path.realpath(f) for p in (args.files or DEFAULT) for f in glob.glob(p)})
    if not files:
        raise SystemExit(f"no files match {args.files or DEFAULT}")
    patterns = [p.strip() for p in args.patterns.split(",") if p.strip()]
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeat):
        for pattern in patterns:
            result = steps(files, pattern)
            total = sum(v for k, v in result.items() if k != "text MB")
            if pattern not in best or total < best[pattern]["total"]:
                best[pattern] = {**result, "total": total}
    for pattern, result in best.items():
        mb = result["text MB"]
        print(f"{pattern}  ({mb:.1f} MB of text)")
        for name, secs in result.items():
            if name != "text MB":
                print(f"  {name:28s} {secs:6.2f} s  {mb / secs:7.1f} MB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(best, f, indent=1)


if __name__ == "__main__":
    main()

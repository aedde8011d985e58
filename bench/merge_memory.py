"""Bytes per table token of the merge stage, structure by structure, and the peak of the stage.

    python bench/merge_memory.py COUNTS [--pattern gpt2] [--vocab-size 32768] [--freq-cutoff N]

Builds the chunk table from a counts input and runs the merge rounds in this process (the linked
engine), recording after the initial pair count and after every round the bytes held by each
structure: the table (tokens, starts, lengths, counts), the engine (the kernels' records, or numpy's
next, prev, weight and marks),
the pair index blocks, the pair counts store and the candidate pool. The stage's peak RSS above
the process before the table (sampled every 10 ms) is given per table token too: it is what
parbpe's merge estimate (run/memory.py MERGE_BYTES_PER_TOKEN) must cover.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from parbpe.config import TrainConfig
from parbpe.count.counts_file import load_counts_files
from parbpe.count.reduce import select_training_chunks
from parbpe.io.plan import plan
from parbpe.merge import coordinator
from parbpe.merge.engines import LinkedEngine
from parbpe.merge.selection import PairQueue
from parbpe.merge.table import table_from_arrays
from parbpe.run.memory import PeakSampler, tree_rss


def sizes(engine: LinkedEngine, queue: PairQueue | None) -> dict[str, int]:
    """Bytes held by each structure of the merge stage now."""
    t = engine.table
    out = {"tokens": t.tokens.nbytes, "starts+lengths+counts": t.starts.nbytes + t.lengths.nbytes + t.counts.nbytes}
    if engine.records is not None:  # the kernels' layout: one record a position, (next, prev, weight, token)
        out["records"] = engine.records.nbytes
    else:
        out.update({"next": engine.next.nbytes, "prev": engine.prev.nbytes, "weight": engine.weight.nbytes,
                    "marks": engine._marked.nbytes})
    out["index"] = sum(b.nbytes if isinstance(b, np.ndarray) else b.keys.nbytes + b.values.nbytes
                       for b in engine.index.blocks)
    if queue is not None:
        out["pair_counts"] = queue.counts._ages.nbytes + queue.counts._counts.nbytes
        out["pool"] = queue._pool_keys.nbytes + queue._pool_counts.nbytes
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counts", nargs="+")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--freq-cutoff", type=int, default=1)
    parser.add_argument("--pattern", default="gpt2", help="the counts file's split pattern")
    args = parser.parse_args()
    config = TrainConfig(vocab_size=args.vocab_size, workers=1, freq_cutoff=args.freq_cutoff, pattern=args.pattern)
    chunks = select_training_chunks(load_counts_files(plan(args.counts), config), config)
    before = tree_rss()
    largest: dict[str, int] = {}
    seen: dict[str, object] = {}

    class Measured(LinkedEngine):
        def initial_pair_counts(self):
            result = super().initial_pair_counts()
            seen["engine"] = self
            return result

        def apply(self, first, second, new_ids):
            result = super().apply(first, second, new_ids)
            for k, v in sizes(self, seen.get("queue")).items():
                largest[k] = max(largest.get(k, 0), v)
            return result

    original_queue = coordinator.PairQueue

    class MeasuredQueue(original_queue):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            seen["queue"] = self
            seen["initial"] = sizes(seen["engine"], self)

    coordinator.PairQueue = MeasuredQueue
    coordinator.LinkedEngine = Measured
    t = time.perf_counter()
    with PeakSampler(interval=0.01) as sampler:
        table = table_from_arrays(chunks.data, chunks.offsets, chunks.counts, config.vocab_size)
        result = coordinator.learn_merges(table, [bytes([b]) for b in range(256)], config.n_merges)
    n = len(table.tokens)
    print(json.dumps({
        "input": args.counts, "vocab_size": args.vocab_size, "freq_cutoff": args.freq_cutoff,
        "table_chunks": table.n_chunks, "table_tokens": n, "merges": len(result.merges),
        "seconds": round(time.perf_counter() - t, 2),
        "bytes_per_token_initial": {k: round(v / n, 2) for k, v in seen["initial"].items()},
        "bytes_per_token_largest": {k: round(v / n, 2) for k, v in largest.items()},
        "peak_above_start_per_token": round((sampler.peak - before) / n, 2),
        "peak_above_start_mb": round((sampler.peak - before) / 1e6, 1),
    }, indent=1))


if __name__ == "__main__":
    main()

"""Counting with Ray core tasks (parbpe's --executor ray) against a Ray Data pipeline doing the same.

    python bench/ray_data_vs_tasks.py [--corpus ../shared/data/realmix] [--repeat 2] [--cpus 2]

Both run on one local Ray instance with --cpus CPUs, interleaved. Core tasks: parbpe.count_to_file
with executor="ray" (count tasks that aggregate all their units, 32 partitions each, one reduce
task per partition). Ray Data: read_parquet of the text column, map_batches counting each batch
with the same piece counter, then groupby("chunk").sum("count"). Needs pandas (Ray Data imports
it); parbpe itself does not. Prints seconds per run and checks both found the same chunks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read when Ray is imported: 127.0.0.1 only
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import parbpe  # noqa: E402
from parbpe.config import TrainConfig  # noqa: E402

REALMIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "realmix")


def count_batch(batch: pa.Table) -> pa.Table:
    """One batch's chunk counts with the piece counter a count task uses (gpt4, no specials)."""
    from parbpe.count.counter import ShardCounter

    shard = ShardCounter(TrainConfig(workers=1), tempfile.gettempdir(), "batch")
    shard.add_texts(batch.column("text").combine_chunks())
    table = shard.pieces.chunk_counts()
    return pa.table({"chunk": table.column("chunk"), "count": table.column("count")})


def core_tasks(files: list[str], out: str, cpus: int) -> tuple[float, int, int]:
    t = time.perf_counter()
    summary = parbpe.count_to_file(files, out, TrainConfig(workers=cpus, memory_budget="4GB"), executor="ray")
    return time.perf_counter() - t, summary["unique_chunks"], summary["chunks"]


def ray_data(files: list[str]) -> tuple[float, int, int]:
    import ray

    t = time.perf_counter()
    ds = ray.data.read_parquet(files, columns=["text"])
    counts = ds.map_batches(count_batch, batch_format="pyarrow", batch_size=1024)
    summed = counts.groupby("chunk").sum("count").materialize()
    total = sum(pc.sum(b.column(1)).as_py() for b in summed.iter_batches(batch_format="pyarrow"))
    return time.perf_counter() - t, summed.count(), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=REALMIX)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    import ray

    files = sorted(os.path.join(args.corpus, f) for f in os.listdir(args.corpus)
                   if f.endswith(".parquet") and not f.startswith("heldout"))
    text = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeat):
                a = core_tasks(files, os.path.join(tmp, "c.parquet"), args.cpus)
                b = ray_data(files)
                assert a[1:] == b[1:], f"different counts: core tasks {a[1:]}, Ray Data {b[1:]}"
                print(f"round {r + 1}: core tasks {a[0]:.1f} s, Ray Data {b[0]:.1f} s ({b[0] / a[0]:.2f}x); "
                      f"{a[1]:,} unique chunks, {a[2]:,} chunks, {text:,} documents", flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

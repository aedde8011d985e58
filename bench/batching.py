"""Batching quality and speed: serial BPE against BatchBPE batching with several settings.

    python bench/batching.py --counts realmix-counts.parquet --special-tokens '<|endoftext|>' \
        --heldout ../shared/data/realmix/heldout.parquet --vocab-sizes 8192 32768 50304 \
        [--plot batch-sizes.png] [--json OUT]

For each vocabulary size: serial mode, exact batching (serial's merges, many per round), then
BatchBPE batching with cap_divisor 2, 4, 8 (no size limit) and max_batch_size 50, 200, 1000
(cap_divisor 2). For each: rounds, merges per round, merge-phase
time, held-out bytes per token, and how many merges differ from serial (same rank position, other
pair) and how many of its tokens serial does not make at all. The plot shows merges per round over
the run for the largest vocabulary (the paper's figure). Counts files (or BatchBPE CSVs) are inputs,
so every setting trains on identical chunk counts.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from parbpe.config import TrainConfig
from parbpe.count.counts_file import load_counts_files
from parbpe.count.reduce import select_training_chunks
from parbpe.io.plan import plan
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table
from parbpe.tokenizer.evaluate import evaluate
from parbpe.tokenizer.model import Tokenizer

SETTINGS = [("serial", 2, 1, "batchbpe"), ("exact", 2, 0, "exact")] + [
    (f"cap_divisor={c}", c, 0, "batchbpe") for c in (2, 4, 8)] + [
    (f"max_batch_size={m}", 2, m, "batchbpe") for m in (50, 200, 1000)
]


def train_one(chunks, config: TrainConfig, cap_divisor: int, max_batch_size: int, batching: str = "batchbpe"):
    table = build_table(chunks.chunks, chunks.counts, config.vocab_size)
    vocab = [bytes([b]) for b in range(256)] + list(chunks.stop_words)
    t = time.perf_counter()
    result = learn_merges(table, vocab, config.n_merges, cap_divisor=cap_divisor, max_batch_size=max_batch_size,
                          batching=batching)
    seconds = time.perf_counter() - t
    first = 256 + len(chunks.stop_words)
    n_regular = first + len(result.merges)
    tok = Tokenizer(pattern=config.pattern, merges=[(a, b, first + r) for r, (a, b) in enumerate(result.merges)],
                    special_tokens={s: n_regular + k for k, s in enumerate(config.special_tokens)})
    return result, seconds, tok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", nargs="+", required=True)
    parser.add_argument("--special-tokens", nargs="*", default=[])
    parser.add_argument("--heldout", default=None)
    parser.add_argument("--vocab-sizes", nargs="+", type=int, default=[8192, 32768, 50304])
    parser.add_argument("--plot", default=None, help="PNG of merges per round (needs matplotlib)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    rows = []
    curves = {}
    for vocab_size in args.vocab_sizes:
        config = TrainConfig(vocab_size=vocab_size, special_tokens=tuple(args.special_tokens), workers=1)
        chunks = select_training_chunks(load_counts_files(plan(args.counts), config), config)
        serial_merges = None
        for name, cap, max_batch, batching in SETTINGS:
            result, seconds, tok = train_one(chunks, config, cap, max_batch, batching)
            if serial_merges is None:
                serial_merges = result.merges
            differ = sum(1 for a, b in zip(result.merges, serial_merges, strict=False) if a != b)
            own_tokens = {tok.vocab[i] for i in range(256, 256 + len(result.merges))}
            if name == "serial":
                serial_tokens = own_tokens
            quality = evaluate(tok, [args.heldout]) if args.heldout else {}
            sizes = result.batch_sizes
            row = {
                "vocab_size": vocab_size, "setting": name, "rounds": len(sizes),
                "merges_per_round_min": min(sizes), "merges_per_round_mean": round(sum(sizes) / len(sizes), 1),
                "merges_per_round_max": max(sizes), "merge_seconds": round(seconds, 2),
                "bytes_per_token": round(quality.get("bytes_per_token", 0.0), 5),
                "heldout_tokens": quality.get("tokens"), "merges_differing_from_serial": differ,
                "tokens_not_in_serial": len(own_tokens - serial_tokens),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            if vocab_size == max(args.vocab_sizes):
                curves[name] = sizes
    print()
    print(f"{'vocab':>6s} {'setting':20s} {'rounds':>7s} {'mean/round':>10s} {'max/round':>9s} {'merge s':>8s} "
          f"{'B/token':>8s} {'differ':>7s} {'not in serial':>13s}")
    for r in rows:
        print(f"{r['vocab_size']:6d} {r['setting']:20s} {r['rounds']:7d} {r['merges_per_round_mean']:10.1f} "
              f"{r['merges_per_round_max']:9d} {r['merge_seconds']:8.2f} {r['bytes_per_token']:8.4f} "
              f"{r['merges_differing_from_serial']:7d} {r['tokens_not_in_serial']:13d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": args.counts, "rows": rows, "curves": curves}, f)
    if args.plot:
        plot(curves, max(args.vocab_sizes), args.plot)


def plot(curves: dict[str, list[int]], vocab_size: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, sizes in curves.items():
        if name == "serial":
            continue
        done, xs = 0, []
        for s in sizes:
            done += s
            xs.append(done)
        ax.plot(xs, sizes, label=name, linewidth=1)
    ax.set_xlabel("merges made (end of round)")
    ax.set_ylabel("merges in the round")
    ax.set_title(f"Merges per round over a run to {vocab_size:,} tokens (exact and BatchBPE batching)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {os.path.abspath(path)}")


if __name__ == "__main__":
    main()

"""Write a synthetic corpus in FineWeb-Edu's parquet schema, of any size, for scale tests.

    python bench/make_corpus.py --size 10GB --out /tmp/corpus10g --seed 0

Documents are paragraphs of real text (../shared/data/realmix by default) resampled, with rare
words put in at about one per RARE_EVERY bytes: misspellings of common words, names, numbers,
identifiers and URLs. The rare words come from a Heaps'-law process: the k-th rare word of the
corpus is new while the number of distinct rare words is below HEAPS_K * k ** HEAPS_BETA, and is
otherwise an earlier one (Zipf-like, early ones more often). So unique chunks keep appearing as
the corpus grows, as they do in web text, instead of saturating at realmix's vocabulary.

Deterministic for a seed: shard k depends only on (seed, k), and the rare-word process is indexed
by the byte offset in the whole corpus, so shards can be written by several processes.
Shards hold about --shard-size of text, in row groups of 2,000 rows like the published files.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from parbpe.run.memory import format_size, parse_size  # noqa: E402

DEFAULT_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "realmix")
ROWS_PER_GROUP = 2000
RARE_EVERY = 250  # bytes of text per rare word, on average
HEAPS_K, HEAPS_BETA = 6.0, 0.72
SYLLABLES = ["ka", "lo", "mi", "ra", "ten", "vor", "shi", "an", "el", "dru", "pax", "zu", "ne", "qui", "bor", "ith",
             "ul", "gra", "fen", "os", "yt", "mar", "cel", "dox"]
TLDS = ["com", "org", "net", "edu", "io", "de", "co.uk", "gov", "info"]
SCHEMA = pa.schema([
    ("text", pa.string()), ("id", pa.string()), ("dump", pa.string()), ("url", pa.string()),
    ("file_path", pa.string()), ("language", pa.string()), ("language_score", pa.float64()),
    ("token_count", pa.int64()), ("score", pa.float64()), ("int_score", pa.int64()),
])


def load_paragraphs(source: str) -> tuple[list[str], list[str]]:
    """Paragraphs of the source parquet files (train shards only) and its common words."""
    files = sorted(os.path.join(source, f) for f in os.listdir(source)
                   if f.endswith(".parquet") and not f.startswith("heldout"))
    if not files:
        raise SystemExit(f"make_corpus: no parquet files in {source}")
    paragraphs: list[str] = []
    for path in files:
        for text in pq.read_table(path, columns=["text"]).column(0).to_pylist():
            paragraphs.extend(p for p in text.split("\n\n") if p.strip())
    counts: dict[str, int] = {}
    for p in paragraphs[::50]:
        for w in p.split():
            if w.isalpha() and w.isascii() and 3 <= len(w) <= 12:
                counts[w.lower()] = counts.get(w.lower(), 0) + 1
    common = sorted(counts, key=lambda w: (-counts[w], w))[:5000]
    return paragraphs, common


class RareWords:
    """The rare word for a global draw index: new or reused as Heaps' law says, built from its id."""

    def __init__(self, seed: int, common: list[str]) -> None:
        self.seed = seed
        self.common = common

    def id(self, draw: int, rng: random.Random) -> int:
        """The id of the word of global draw `draw` (ids count up as new words appear)."""
        distinct = max(1, int(HEAPS_K * (draw + 1.0) ** HEAPS_BETA))
        if distinct > int(HEAPS_K * float(draw) ** HEAPS_BETA):
            return distinct - 1  # a new word
        return min(int(distinct * rng.random() ** 3), distinct - 1)  # an earlier one, early ones more often

    @functools.lru_cache(maxsize=1 << 17)  # noqa: B019 (one instance per run)
    def word(self, word_id: int) -> str:
        h = int.from_bytes(hashlib.blake2b(f"{self.seed}:{word_id}".encode(), digest_size=8).digest(), "little")
        kind, h = h % 5, h // 5
        if kind == 0:  # a misspelling of a common word
            base = self.common[h % len(self.common)]
            h //= len(self.common)
            i = h % len(base)
            letter = "abcdefghijklmnopqrstuvwxyz"[(h // 16) % 26]
            edits = [base[:i] + letter + base[i + 1:], base[:i] + letter + base[i:], base[:i] + base[i + 1:]]
            return edits[(h // 512) % 3] or base
        if kind == 1:  # a name
            n = 2 + h % 3
            h //= 3
            parts = []
            for _ in range(n):
                parts.append(SYLLABLES[h % len(SYLLABLES)])
                h //= len(SYLLABLES)
            return "".join(parts).capitalize()
        if kind == 2:  # a number
            digits = 1 + h % 9
            value = str((h // 9) % 10**digits)
            return value if h % 4 else f"{value[:-2] or '0'}.{value[-2:]}"
        if kind == 3:  # an identifier
            a = self.common[h % len(self.common)]
            b = self.common[(h // 5000) % len(self.common)]
            style = (h // 25_000_000) % 3
            return [f"{a}_{b}", f"{a}{b.capitalize()}", f"{a}_{b}{h % 97}"][style]
        name = "".join(SYLLABLES[(h >> (5 * k)) % len(SYLLABLES)] for k in range(3))
        path = self.common[(h >> 20) % len(self.common)]
        return f"https://www.{name}.{TLDS[(h >> 40) % len(TLDS)]}/{path}/{(h >> 44) % 10000}"


_SOURCE: tuple[list[str], RareWords] | None = None  # set before forking the writers: shared, not pickled


def write_shard(index: int, out: str, target_bytes: int, shard_size: int, seed: int) -> dict:
    """Shard `index`: documents until target_bytes of text, rare words indexed by global offset."""
    paragraphs, rare = _SOURCE
    rng = random.Random(f"{seed}:{index}")
    nrng = np.random.default_rng([seed, index])
    offset = index * shard_size  # global byte offset of this shard's first document
    path = os.path.join(out, f"train-{index:05d}.parquet")
    tmp = path + ".tmp"
    written = 0
    rows: list[str] = []
    with pq.ParquetWriter(tmp, SCHEMA, compression="snappy") as writer:
        while written < target_bytes:
            n_par = max(1, int(rng.lognormvariate(1.2, 0.8)))
            text = "\n\n".join(rng.choice(paragraphs) for _ in range(n_par))
            n_rare = nrng.poisson(len(text) / RARE_EVERY)
            if n_rare:
                first = (offset + written) // RARE_EVERY
                words = [rare.word(rare.id(first + k, rng)) for k in range(n_rare)]
                positions = sorted(rng.randrange(len(text) + 1) for _ in words)
                pieces, last = [], 0
                for pos, word in zip(positions, words):
                    pos = max(last, text.rfind(" ", last, pos))  # between words where there are spaces
                    pieces.append(text[last:pos])
                    pieces.append(f" {word}")
                    last = pos
                pieces.append(text[last:])
                text = "".join(pieces)
            rows.append(text)
            written += len(text.encode("utf-8"))
            if len(rows) == ROWS_PER_GROUP:
                writer.write_table(_table(rows, index, rng), row_group_size=ROWS_PER_GROUP)
                rows = []
        if rows:
            writer.write_table(_table(rows, index, rng), row_group_size=ROWS_PER_GROUP)
    os.replace(tmp, path)
    return {"file": os.path.basename(path), "text_bytes": written}


def _table(texts: list[str], shard: int, rng: random.Random) -> pa.Table:
    n = len(texts)
    ids = [f"<urn:uuid:{shard:05d}-{rng.getrandbits(64):016x}>" for _ in range(n)]
    scores = [round(2.5 + rng.random() * 2.5, 4) for _ in range(n)]
    return pa.table({
        "text": texts, "id": ids, "dump": ["CC-MAIN-2024-10"] * n,
        "url": [f"https://example.org/{i[10:-1]}" for i in ids],
        "file_path": [f"s3://synthetic/parbpe/shard-{shard:05d}.warc.gz"] * n,
        "language": ["en"] * n, "language_score": [round(0.9 + rng.random() * 0.1, 4) for _ in range(n)],
        "token_count": [len(t) // 4 for t in texts], "score": scores, "int_score": [int(round(s)) for s in scores],
    }, schema=SCHEMA)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", required=True, type=parse_size, help="text bytes in total, e.g. 10GB")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", default=DEFAULT_SOURCE, help="directory of parquet files to resample")
    parser.add_argument("--shard-size", type=parse_size, default=parse_size("256MB"))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t = time.perf_counter()
    global _SOURCE
    paragraphs, common = load_paragraphs(args.source)
    _SOURCE = (paragraphs, RareWords(args.seed, common))
    n_shards = max(1, -(-args.size // args.shard_size))
    sizes = [args.shard_size] * (n_shards - 1) + [args.size - args.shard_size * (n_shards - 1)]
    jobs = [(k, args.out, sizes[k], args.shard_size, args.seed) for k in range(n_shards)]
    if args.workers > 1 and n_shards > 1:
        import multiprocess

        with multiprocess.get_context("fork").Pool(min(args.workers, n_shards)) as pool:
            shards = pool.starmap(write_shard, jobs)
    else:
        shards = [write_shard(*job) for job in jobs]
    total = sum(s["text_bytes"] for s in shards)
    manifest = {"seed": args.seed, "size": args.size, "text_bytes": total, "shards": shards,
                "source": os.path.abspath(args.source), "rare_every": RARE_EVERY,
                "heaps": {"k": HEAPS_K, "beta": HEAPS_BETA}, "seconds": round(time.perf_counter() - t, 1)}
    # Not .json: readers would take a .json file in the directory for input text.
    with open(os.path.join(args.out, "_manifest.meta"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(shards)} shards, {format_size(total)} of text, to {args.out} "
          f"in {manifest['seconds']} s ({total / 1e6 / max(manifest['seconds'], 1e-9):.0f} MB/s)")


if __name__ == "__main__":
    main()

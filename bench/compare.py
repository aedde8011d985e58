"""parbpe side by side with peer trainers on the same corpus and settings.

    python bench/compare.py [--corpus GLOB ...] [--heldout FILE] [--vocab-size 32768] [--repeat 3]
                            [--trainers parbpe,parbpe-w1,parbpe-iter,tokenizers,rustbpe,bpeasy] [--json OUT]
                            [--baseline DIR] [--pattern gpt4|gpt2]

With --memory-budget, every parbpe trainer runs under it but `parbpe-unbounded` (parbpe's default
budget): list both to see what a budget costs in time and in held-out compression.

With --baseline DIR (a checkout of another parbpe commit, e.g. made by `git worktree add`), the
trainer `parbpe-baseline` runs parbpe imported from DIR, interleaved with the others: a before/after
comparison of a change in one run.

Every trainer runs in its own process, interleaved (A B C A B C ...), on the same parquet text
column, GPT-4 split pattern and the same number of merges (vocab_size less 256 bytes less one
special token, <|endoftext|>). For each run: wall time from process start to exit, and peak RSS of
the whole process tree, both sampled by psutil and as the kernel reports it (ru_maxrss of the
process and of its largest child). From the first run of each trainer: bytes per token and tokens
per word on held-out text, whether its merges equal those of the first trainer listed (same token
bytes in the same rank order), and how many of its tokens the first trainer does not have.
A peer that is not installed is reported as skipped.

`gigabpe` (Rust, in the bench extra) trains from text files: before the runs, each parquet file's
documents are written to a text file, one after another with a newline between (not timed). With
--pattern gpt2 parbpe uses the GPT-2 split and gigabpe its `bytelevel` pre-tokenizer (the same
regex); the other peers keep the GPT-4 pattern.

`parbpe-iter` is parbpe.train_from_iterator over the same Python iterator of documents (iter_texts)
that tokenizers' and rustbpe's train_from_iterator consume; `parbpe` reads the parquet files.
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import platform
import statistics
import sys
import tempfile

from harness import run_sampled, write_rusage

PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
SPECIAL = "<|endoftext|>"
# The shared data beside the project (../shared/data from the repository), found from this file's
# absolute path so the defaults resolve from any working directory; else the machine's copy.
_SHARED = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"), "/work/shared/data"]
REALMIX = os.path.normpath(next((os.path.join(d, "realmix") for d in _SHARED
                                 if os.path.isdir(os.path.join(d, "realmix"))), os.path.join(_SHARED[0], "realmix")))
DEFAULT_CORPUS = os.path.join(REALMIX, "train-*.parquet")
DEFAULT_HELDOUT = os.path.join(REALMIX, "heldout.parquet")
TRAINERS = ("parbpe", "parbpe-w1", "tokenizers", "rustbpe", "bpeasy")  # and parbpe-baseline (--baseline)
# also parbpe-iter: parbpe.train_from_iterator over iter_texts, the iterator the peers consume
# parbpe-unbounded: parbpe without --memory-budget (its default), beside a bounded parbpe run
PEER_MODULES = {"tokenizers": "tokenizers", "rustbpe": "rustbpe", "bpeasy": "bpeasy", "gigabpe": "gigabpe"}
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def iter_texts(files: list[str], batch_rows: int = 1024):
    import pyarrow.parquet as pq

    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=["text"]):
            yield from (t for t in batch.column(0).to_pylist() if t is not None)


# -- one trainer, in a child process: writes ranks.json (token bytes in rank order) ----------------


def write_text_files(files: list[str], directory: str) -> list[str]:
    """Each parquet file's documents as a text file in directory (for gigabpe, which reads text files)."""
    paths = []
    for path in files:
        paths.append(os.path.join(directory, os.path.basename(path) + ".txt"))
        with open(paths[-1], "w", encoding="utf-8") as f:
            for text in iter_texts([path]):
                f.write(text)
                f.write("\n")
    return paths


def hf_ranks(merges: list) -> list[bytes]:
    """Token bytes in rank order from Hugging Face BPE merges: the 256 bytes, then the merges (gigabpe's
    vocabulary holds only the bytes it saw, so its merge count is vocab_size less those and the special)."""
    from parbpe.tokenizer.byte_level import unicode_to_token

    merged = [unicode_to_token("".join(m.split(" ")) if isinstance(m, str) else "".join(m)) for m in merges]
    return [bytes([b]) for b in range(256)] + merged


def run_one(name: str, files: list[str], vocab_size: int, out: str, memory_budget: str | None = None,
            baseline: str | None = None, pattern: str = "gpt4", text_dir: str | None = None) -> None:
    n_regular = vocab_size - 1  # bytes + merges; the special token comes last
    if name.startswith("parbpe"):
        if name == "parbpe-baseline":
            sys.path.insert(0, os.path.abspath(baseline))
        import parbpe

        if name == "parbpe-baseline" and not parbpe.__file__.startswith(os.path.abspath(baseline)):
            raise SystemExit(f"parbpe-baseline imported {parbpe.__file__}, not the one in {baseline}")

        workers = 1 if name == "parbpe-w1" else (os.cpu_count() or 1)
        settings = dict(vocab_size=vocab_size, special_tokens=(SPECIAL,), pattern=pattern, workers=workers,
                        out_dir=out, memory_budget=memory_budget)
        if name == "parbpe-iter":
            result = parbpe.train_from_iterator(iter_texts(files), **settings)
        else:
            result = parbpe.train(files, **settings)
        vocab = result.tokenizer.vocab
        ranks = [vocab[i] for i in range(n_regular)]
    elif name == "tokenizers":
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(iter_texts(files), trainer=trainer)
        tok.save(os.path.join(out, "tokenizer.json"))
        from parbpe.tokenizer.byte_level import unicode_to_token

        by_id = {i: s for s, i in tok.get_vocab().items() if s != SPECIAL}
        ranks = [unicode_to_token(by_id[i]) for i in sorted(by_id)]
        # HF numbers tokens in its own order: bytes by its alphabet, then merges in rank order.
        merges = json.loads(tok.to_str())["model"]["merges"]
        byte_tokens = sorted(r for r in ranks if len(r) == 1)
        merged = [unicode_to_token("".join(m.split(" ")) if isinstance(m, str) else "".join(m)) for m in merges]
        ranks = byte_tokens + merged
    elif name == "rustbpe":
        import rustbpe

        tok = rustbpe.Tokenizer()
        tok.train_from_iterator(iter_texts(files), n_regular, pattern=PATTERN)
        ranks = [b for b, _ in sorted(tok.get_mergeable_ranks(), key=lambda kv: kv[1])]
        ranks = [bytes(b) for b in ranks]
    elif name == "gigabpe":
        import gigabpe

        texts = sorted(glob.glob(os.path.join(text_dir, "*.txt")))
        _, merges = gigabpe.train_bpe(texts, vocab_size, special_tokens=[SPECIAL], pretokenizer="bytelevel",
                                      threads=os.cpu_count())
        ranks = hf_ranks(merges)
    elif name == "bpeasy":
        import bpeasy

        vocab = bpeasy.train_bpe(iter_texts(files), PATTERN, 128, n_regular)
        ranks = [bytes(b) for b, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    else:
        raise SystemExit(f"unknown trainer {name}")
    with open(os.path.join(out, "ranks.json"), "w") as f:
        json.dump([base64.b64encode(r).decode() for r in ranks], f)
    write_rusage(os.path.join(out, "rusage.json"))


# -- the parent: runs, samples, evaluates, prints the table ---------------------------------------


def measure(name: str, files: list[str], vocab_size: int, out: str, memory_budget: str | None = None,
            baseline: str | None = None, pattern: str = "gpt4", text_dir: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--run-one", name, "--vocab-size", str(vocab_size), "--out", out,
           "--pattern", pattern, "--corpus", *files]
    if text_dir:
        cmd += ["--text-dir", text_dir]
    if memory_budget:
        cmd += ["--memory-budget", memory_budget]
    if baseline:
        cmd += ["--baseline", baseline]
    result = run_sampled(cmd, os.path.join(out, "rusage.json"))
    result["peak_kernel"] = result.pop("peak_kernel_process")
    return result


def heldout_quality(name: str, out: str, heldout: str, pattern: str = "gpt4") -> dict:
    """Bytes per token and tokens per word on held-out text (special strings encoded as text)."""
    texts = list(iter_texts([heldout]))
    if name == "tokenizers":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        n_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    else:
        import tiktoken

        with open(os.path.join(out, "ranks.json")) as f:
            ranks = {base64.b64decode(r): i for i, r in enumerate(json.load(f))}
        gpt2 = pattern == "gpt2" and (name == "gigabpe" or name.startswith("parbpe"))  # those trained with it
        pat_str = GPT2_PATTERN if gpt2 else PATTERN
        enc = tiktoken.Encoding(name=name, pat_str=pat_str, mergeable_ranks=ranks, special_tokens={})
        n_tokens = sum(len(ids) for ids in enc.encode_ordinary_batch(texts))
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_words = sum(len(t.split()) for t in texts)
    return {"heldout_tokens": n_tokens, "bytes_per_token": n_bytes / n_tokens, "tokens_per_word": n_tokens / n_words}


def parbpe_fit(out: str) -> dict:
    """A parbpe run's automatic cutoff (merge_fit.min_count, 1 = none) and peak RSS per stage, from
    its stats.json; nothing for the peers."""
    path = os.path.join(out, "stats.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        stats = json.load(f)
    return {"min_count": stats.get("merge_fit", {}).get("min_count", 1),
            "peak_rss_by_stage_mb": {k: round(v / 1e6, 1) for k, v in stats.get("peak_rss_by_stage", {}).items()}}


def available(name: str) -> bool:
    module = PEER_MODULES.get(name)
    if module is None:
        return True
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", nargs="+", default=[DEFAULT_CORPUS])
    parser.add_argument("--heldout", default=DEFAULT_HELDOUT)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trainers", default=",".join(TRAINERS))
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--memory-budget", help="parbpe's --memory-budget (default: its own default)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="a checkout of another parbpe commit; adds the trainer parbpe-baseline")
    parser.add_argument("--pattern", default="gpt4", choices=["gpt4", "gpt2"],
                        help="parbpe's split pattern (gigabpe: bytelevel, the GPT-2 regex; the others: GPT-4)")
    parser.add_argument("--text-dir", help=argparse.SUPPRESS)
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    files = sorted(f for pattern in args.corpus for f in glob.glob(pattern))
    if not files:
        raise SystemExit(f"no corpus files match {args.corpus}")
    if not args.run_one and not os.path.exists(args.heldout):  # before any run, not as 0.0000 in the table
        raise SystemExit(f"held-out file {args.heldout} not found: pass one with --heldout")
    if args.run_one:
        run_one(args.run_one, files, args.vocab_size, args.out, args.memory_budget, args.baseline, args.pattern,
                args.text_dir)
        return

    names = [n.strip() for n in args.trainers.split(",") if n.strip()]
    if args.baseline and "parbpe-baseline" not in names:
        names.append("parbpe-baseline")
    if "parbpe-baseline" in names and not args.baseline:
        raise SystemExit("the trainer parbpe-baseline needs --baseline DIR")
    skipped = [n for n in names if not available(n)]
    names = [n for n in names if n not in skipped]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    quality: dict[str, dict] = {}
    ranks: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        text_dir = None
        if "gigabpe" in names:
            text_dir = os.path.join(tmp, "text")
            os.makedirs(text_dir)
            write_text_files(files, text_dir)
        for rep in range(args.repeat):
            for name in names:
                out = os.path.join(tmp, f"{name}-{rep}")
                os.makedirs(out)
                budget = args.memory_budget if name.startswith("parbpe") and name != "parbpe-unbounded" else None
                runs[name].append(measure(name, files, args.vocab_size, out, budget, args.baseline, args.pattern,
                                          text_dir))
                print(f"# run {rep + 1}/{args.repeat} {name}: {runs[name][-1]['wall']:.1f} s", file=sys.stderr)
                if rep == 0:
                    quality[name] = heldout_quality(name, out, args.heldout, args.pattern) | parbpe_fit(out)
                    with open(os.path.join(out, "ranks.json")) as f:
                        ranks[name] = json.load(f)
    reference = names[0] if names else None
    corpus_mb = sum(os.path.getsize(f) for f in files) / 1e6
    rows = []
    base = statistics.median(r["wall"] for r in runs[reference]) if reference else 1.0
    for name in names:
        walls = [r["wall"] for r in runs[name]]
        med = statistics.median(walls)
        rows.append({
            "trainer": name, "median_s": med, "min_s": min(walls), "max_s": max(walls), "ratio_to_first": med / base,
            "peak_rss_sampled_mb": max(r["peak_sampled"] for r in runs[name]) / 1e6,
            "peak_rss_kernel_mb": max(r["peak_kernel"] for r in runs[name]) / 1e6,
            **quality.get(name, {}),
            "merges_equal_first": ranks[name] == ranks[reference],
            "tokens_not_in_first": len(set(ranks[name]) - set(ranks[reference])),
        })
    header = (f"{'trainer':15s} {'median s':>9s} {'min':>7s} {'max':>7s} {'x first':>8s} {'RSS MB':>8s} "
              f"{'kern MB':>8s} {'B/token':>8s} {'tok/word':>8s} {'same merges':>11s} {'other tokens':>12s}")
    print(f"held-out: {os.path.abspath(args.heldout)}")
    print(f"corpus: {len(files)} files, {corpus_mb:.1f} MB on disk; vocab {args.vocab_size}; "
          f"{args.repeat} interleaved runs; {platform.python_version()}, {os.cpu_count()} cores")
    print(header)
    for r in rows:
        print(f"{r['trainer']:15s} {r['median_s']:9.1f} {r['min_s']:7.1f} {r['max_s']:7.1f} {r['ratio_to_first']:8.2f} "
              f"{r['peak_rss_sampled_mb']:8.0f} {r['peak_rss_kernel_mb']:8.0f} {r.get('bytes_per_token', 0):8.4f} "
              f"{r.get('tokens_per_word', 0):8.4f} {str(r['merges_equal_first']):>11s} {r['tokens_not_in_first']:12d}")
    unbounded = quality.get("parbpe-unbounded", {}).get("bytes_per_token")
    for r in rows:
        if "min_count" in r:
            loss = f", held-out loss against parbpe-unbounded {100 * (1 - r['bytes_per_token'] / unbounded):.3f}%" \
                if unbounded and r["trainer"] != "parbpe-unbounded" else ""
            print(f"{r['trainer']}: automatic cutoff min_count {r['min_count']}{loss}; peak RSS by stage (MB) "
                  f"{r['peak_rss_by_stage_mb']}")
    for name in skipped:
        print(f"{name:12s} skipped: not installed (pip install '.[bench]')")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "skipped": skipped, "files": files, "vocab_size": args.vocab_size,
                       "repeat": args.repeat, "python": platform.python_version(), "cores": os.cpu_count()}, f,
                      indent=1)


if __name__ == "__main__":
    main()

"""Growing a published tokenizer: GPT-2 continued on a corpus (train --init), checked and measured.

    pip download --no-deps openai-whisper && tar xzf openai_whisper-*.tar.gz   # whisper/assets/gpt2.tiktoken
    python bench/grow.py --tiktoken whisper/assets/gpt2.tiktoken --corpus 'DATA/realmix/train-*.parquet' \
        --heldout DATA/realmix/heldout.parquet [--add 4096] [--out DIR] [--json results.json]

Runs `parbpe train --init gpt2.tiktoken --pattern gpt2 --special-tokens '<|endoftext|>'` to
GPT-2's 50,257 tokens (the rank file's, then <|endoftext|>) + --add in its own process (wall
time, peak RSS of the tree sampled every 50 ms), then checks what the issue asks: every GPT-2
token keeps its id (the special token at 50256), merges.txt begins with GPT-2's 50,000 merges in
order, the new tokens take the ids after them, and HF tokenizers (tokenizer.json) and tiktoken
(the rank file) encode the held-out text exactly as parbpe. Last, GPT-2 and the grown tokenizer
side by side on the held-out text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import run_sampled, save_results, write_rusage  # noqa: E402


def child(args: list[str]) -> None:
    """Run the parbpe CLI with args[1:], then write the kernel's peak RSS to args[0]."""
    from parbpe.cli import main

    status = main(args[1:])
    write_rusage(args[0])
    sys.exit(status)


def heldout_texts(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["text"]).column("text").to_pylist()


def check(gpt2_path: str, out: str, heldout: str) -> dict:
    """The issue's checks on the grown tokenizer in out; raises AssertionError on the first that fails."""
    import base64

    import tiktoken
    import tokenizers

    from parbpe.tokenizer.byte_level import token_to_unicode
    from parbpe.tokenizer.evaluate import evaluate
    from parbpe.tokenizer.inherit import inherit
    from parbpe.tokenizer.load import read_any
    from parbpe.tokenizer.model import Tokenizer

    ranks = read_any(gpt2_path, pattern="gpt2")
    eot = 256 + len(ranks["merges"])  # GPT-2: 50256
    gpt2 = Tokenizer(**{**ranks, "special_tokens": {"<|endoftext|>": eot}})
    grown = Tokenizer.load(out)
    vocab = json.loads(open(os.path.join(out, "vocab.json"), encoding="utf-8").read())
    kept = all(vocab[token_to_unicode(token)] == i for i, token in gpt2.vocab.items() if i != eot)
    assert kept and vocab["<|endoftext|>"] == eot, "a GPT-2 token changed its id"
    merges = open(os.path.join(out, "merges.txt"), encoding="utf-8").read().splitlines()
    merges = merges[1:] if merges[0].startswith("#version") else merges
    expected = [f"{token_to_unicode(gpt2.vocab[a])} {token_to_unicode(gpt2.vocab[b])}" for a, b, _ in gpt2.merges]
    assert merges[:len(expected)] == expected, "merges.txt does not begin with GPT-2's merges"
    new_ids = sorted(i for t, i in vocab.items() if i > eot)
    assert new_ids == list(range(eot + 1, len(vocab))), "the new tokens do not take the ids after GPT-2's"
    assert inherit(grown, out).merges[:len(gpt2.merges)] == inherit(gpt2, gpt2_path).merges

    hf = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    ranks = {}
    for line in open(os.path.join(out, "tokenizer.tiktoken"), encoding="utf-8"):
        b64, rank = line.split()
        ranks[base64.b64decode(b64)] = int(rank)
    tk = tiktoken.Encoding(name="grown", pat_str=grown.pattern, mergeable_ranks=ranks,
                           special_tokens=grown.special_tokens)
    texts = heldout_texts(heldout)
    for text in texts:
        ours = grown.encode_ordinary(text)
        assert hf.encode(text, add_special_tokens=False).ids == ours, "HF tokenizers encodes otherwise"
        assert tk.encode_ordinary(text) == ours, "tiktoken encodes otherwise"
    return {"documents_checked": len(texts), "gpt2": evaluate(gpt2, [heldout]),
            "grown": evaluate(grown, [heldout]),
            "new_tokens_example": [grown.vocab[i].decode("utf-8", "replace")
                                   for i in range(eot + 1, min(eot + 21, grown.n_vocab))]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiktoken", required=True, help="GPT-2's rank file (whisper/assets/gpt2.tiktoken)")
    parser.add_argument("--corpus", required=True, help="what to continue on (a path, glob or directory)")
    parser.add_argument("--heldout", required=True, help="held-out parquet (a text column)")
    parser.add_argument("--add", type=int, default=4096, help="new tokens (default 4096)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default=None, help="where the grown tokenizer goes (default: a temp dir)")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="grow-")
    rusage = os.path.join(tempfile.gettempdir(), f"grow-rusage-{os.getpid()}.json")
    from parbpe.tokenizer.load import read_any

    base = 256 + len(read_any(args.tiktoken)["merges"]) + 1  # GPT-2: 50,257 with <|endoftext|>
    cmd = [sys.executable, os.path.abspath(__file__), "--child", rusage, "train", args.corpus, "--init", args.tiktoken,
           "--pattern", "gpt2", "--special-tokens", "<|endoftext|>", "--vocab-size", str(base + args.add),
           "--workers", str(args.workers), "--out", out, "--progress", "none"]
    run = run_sampled(cmd, rusage)
    stats = json.loads(open(os.path.join(out, "stats.json")).read())
    checks = check(args.tiktoken, out, args.heldout)
    print(f"{base:,} tokens + {args.add}: {run['wall']:.1f} s wall, peak RSS {run['peak_sampled'] / 1e6:.0f} MB "
          f"(tree, sampled); stages {stats['seconds']}")
    print(f"checks passed on {checks['documents_checked']} held-out documents (ids kept, merges.txt prefix, new ids "
          "after GPT-2's, HF tokenizers and tiktoken encode as parbpe)")
    for name in ("gpt2", "grown"):
        e = checks[name]
        print(f"  {name:6s} {e['vocab_size']:6d} tokens: {e['bytes_per_token']:.4f} bytes/token, "
              f"{e['tokens_per_word']:.4f} tokens/word, {e['tokens']:,} tokens")
    print("first new tokens:", checks["new_tokens_example"])
    if args.json:
        save_results(args.json, run=run, stats_seconds=stats["seconds"], checks=checks, command=cmd[4:])


if __name__ == "__main__":
    main()

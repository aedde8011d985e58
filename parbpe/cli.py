"""Command line: parbpe train | count | encode | decode | eval (thin wrappers over the library functions)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .config import TrainConfig
from .patterns import PATTERNS
from .run.memory import format_size, parse_size
from .run.progress import MODES, Progress

_COUNT_UNITS = {"": 1, "k": 1024, "m": 1024**2}


def parse_count(text: str) -> int:
    """A vocabulary size as people write it: 32768, 50_304, 50,304, 32k (= 32,768), 1M (= 1,048,576)."""
    cleaned = text.strip().replace("_", "").replace(",", "").lower()
    number, unit = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in ("k", "m") else (cleaned, "")
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as a size: write 32768, 50_304 or 32k (k = 1,024)")
    return int(number) * _COUNT_UNITS[unit]


def parse_transition(text: str) -> int | float:
    """--superbpe-transition: a merge count (26000, 26_000) or a share of the vocabulary (0.8 or 80%)."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    try:
        if cleaned.endswith("%"):
            return float(cleaned[:-1]) / 100
        return float(cleaned) if any(c in cleaned for c in ".eE") else int(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as a transition: write a merge count (26000) or a "
                                         "share of the vocabulary (0.8 or 80%)") from None


def _parse_sizes(text: str) -> list[int]:
    """--also-save: vocabulary sizes as a comma list (8192,16k,50_304)."""
    return [parse_count(t) for t in text.split(",") if t.strip()]


def _split_specials(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _add_corpus_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="files, globs or directories (parquet, arrow, jsonl and txt, optionally .gz/.zst, counts "
                        "files; any other extension is read as UTF-8 text), or - for standard input")
    p.add_argument("--sample-corpus", action="store_true",
                   help="with no INPUT: train on the built-in sample corpus (the Python standard library's sources)")
    p.add_argument("--pattern", default=None,
                   help=f"split pattern: {', '.join(PATTERNS)} or tiktoken's names (cl100k_base, o200k_base), "
                        "any case; or a regex (default gpt4; with --init, that tokenizer's)")
    p.add_argument("--special-tokens", action="extend", type=_split_specials, default=[], metavar="TOKEN[,TOKEN]",
                   help="special tokens, e.g. '<|endoftext|>', as a comma list or one flag per token: they split "
                        "the text and get the last ids")
    p.add_argument("--text-column", default="text", help="parquet/arrow column or jsonl field with the text")
    p.add_argument("--max-chunk-bytes", type=parse_count, default=0, metavar="N",
                   help="cut chunks longer than N bytes into pieces of at most N bytes, on character boundaries, "
                        "before they are counted (changes the result; like sentencepiece's max_sentence_length, "
                        "for text with huge chunks; default 0: off)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    p.add_argument("--memory-budget", type=parse_size, default=None, metavar="SIZE",
                   help="RAM limit for the process tree, every stage, e.g. 2GB; counts past a worker's "
                        "share spill to disk, and the rarest chunks stay out of training if the merge stage "
                        "would not fit (default: half the available RAM)")
    p.add_argument("--tmp-dir", default=None, metavar="DIR",
                   help="directory for spilled counts, removed at the end (default: the system's temp dir); "
                        "train keeps them in its run directory instead (--run-dir)")
    p.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default=None,
                   help="how worker processes start (default: fork where available)")
    p.add_argument("--progress", choices=MODES, default="bar",
                   help="progress on stderr: bar (for people), jsonl (one JSON object per line, for tools) or none")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="count and reduce in local processes (default) or as Ray tasks (pip install 'parbpe[ray]')")
    p.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="with --executor ray: 'auto' joins the cluster this machine belongs to, or host:port / "
                        "ray://host:port (default: start or use a local Ray instance)")
    _add_debug(p)


def _add_debug(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parbpe", description="Train byte-level BPE tokenizers, fast.")
    parser.add_argument("--version", action="version", version=f"parbpe {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a tokenizer and write its files")
    _add_corpus_options(train)
    train.add_argument("--vocab-size", type=parse_count, default=32768,
                       help="total tokens incl. specials: 32768, 50_304 or 32k (k = 1,024; default 32768)")
    for role in ("eos", "bos", "pad"):
        train.add_argument(f"--{role}-token", default=None, metavar="TOKEN",
                           help=f"the special token transformers uses as {role}_token"
                                + (" (default: the first special token)" if role == "eos" else ""))
    train.add_argument("--heldout", action="append", default=[], metavar="PATH",
                       help="evaluate the result on this text at the end (bytes/token, tokens/word, unused "
                            "vocabulary), recorded in stats.json; repeat for several")
    train.add_argument("--out", required=True, metavar="DIR", help="output directory")
    train.add_argument("--init", metavar="TOKENIZER", default=None,
                       help="continue this byte-level BPE tokenizer: a parbpe output directory, a tokenizer.json, "
                            "GPT-2's vocab.json (merges.txt beside it) or a .tiktoken rank file; its tokens keep "
                            "their ids and --vocab-size counts them")
    train.add_argument("--also-save", type=_parse_sizes, default=[], metavar="SIZE[,SIZE]",
                       help="also write the tokenizer of each smaller vocabulary size (the run's first merges) "
                            "to OUT/vocab-SIZE/, e.g. 8192,16384")
    train.add_argument("--freq-cutoff", type=int, default=0, help="drop chunks seen fewer times than this")
    train.add_argument("--stop-list-size", type=int, default=0,
                       help="whole-chunk tokens for the N most frequent chunks")
    train.add_argument("--max-batch-size", type=int, default=0,
                       help="merges per round at most (0 = no limit, 1 = serial)")
    train.add_argument("--cap-divisor", type=int, default=2, help="BatchBPE: rank at most remaining/N pairs a round")
    train.add_argument("--pair-count", choices=["overlap", "nonoverlap"], default="overlap",
                       help="count overlapping pairs like 'aa' in 'aaa' twice (overlap, standard BPE) or once "
                            "(nonoverlap, as BatchBPE)")
    train.add_argument("--batching", choices=["batchbpe", "exact"], default="batchbpe",
                       help="batchbpe: BatchBPE's safe batches (default); exact: the merges of serial BPE, "
                            "in the same order, many per round")
    train.add_argument("--superbpe-transition", type=parse_transition, default=None, metavar="T",
                       help="SuperBPE: ordinary BPE for T merges (a count) or up to a share of --vocab-size "
                            "(0.8), then superword tokens: the text re-counted with the superword split and "
                            "merged on (see docs/USAGE.md, SuperBPE)")
    train.add_argument("--run-dir", metavar="DIR", default=None,
                       help="working files and checkpoints of the run, spilled counts included "
                            "(default OUT/.parbpe-run)")
    train.add_argument("--resume", action="store_true",
                       help="continue a run that stopped (same command), from its last checkpoint")
    train.add_argument("--keep-run-dir", action="store_true", help="keep the run directory after success")

    count = sub.add_parser("count", help="count chunks and write a counts file (a valid training input)")
    _add_corpus_options(count)
    count.add_argument("--out", required=True, metavar="FILE", help="counts file to write (.parquet)")
    count.add_argument("--freq-cutoff", type=int, default=0, help="leave out chunks seen fewer times than this")
    count.add_argument("--stats", metavar="FILE", help="also write the run's stats (times, bytes, spills, peak RSS) "
                       "as JSON")

    encode = sub.add_parser("encode", help="encode text (or the documents of files, in parallel) into token ids")
    encode.add_argument("--tokenizer", required=True, metavar="DIR", help="a directory written by parbpe train")
    encode.add_argument("text", nargs="?", help="text to encode (default: read stdin)")
    encode.add_argument("--files", action="extend", nargs="+", default=[], metavar="PATH",
                        help="encode every document of these files, globs or directories instead: one line of ids "
                             "per document, in input order")
    encode.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes encoding --files (default: all cores)")
    encode.add_argument("--text-column", default="text", help="parquet/arrow column or jsonl field with the text")
    encode.add_argument("--allow-special", action="store_true", help="encode special-token strings as specials")
    encode.add_argument("--show", action="store_true", help="print each token's bytes next to its id")
    _add_debug(encode)

    decode = sub.add_parser("decode", help="decode token ids into text")
    decode.add_argument("--tokenizer", required=True, metavar="DIR", help="a directory written by parbpe train")
    decode.add_argument("ids", nargs="*", metavar="ID",
                        help="token ids (default: read stdin, one sequence of ids per line)")
    _add_debug(decode)

    ev = sub.add_parser("eval", help="bytes per token, tokens per word, superword tokens and unused vocabulary "
                                     "on text, for one tokenizer or several side by side")
    ev.add_argument("--tokenizer", required=True, action="append", metavar="DIR",
                    help="a directory written by parbpe train; repeat to compare several side by side")
    ev.add_argument("inputs", nargs="+", metavar="INPUT", help="files, globs or directories of text")
    ev.add_argument("--text-column", default="text", help="parquet/arrow column or jsonl field with the text")
    ev.add_argument("--json", action="store_true", help="print JSON")
    _add_debug(ev)
    return parser


def _config(args: argparse.Namespace, **extra) -> TrainConfig:
    return TrainConfig(pattern=args.pattern, special_tokens=tuple(args.special_tokens), workers=args.workers,
                       memory_budget=args.memory_budget, text_column=args.text_column, tmp_dir=args.tmp_dir,
                       max_chunk_bytes=args.max_chunk_bytes, **extra)


def console() -> int:
    """The `parbpe` command: main() in a process that is parbpe's alone, so pyarrow is told to
    leave pandas unloaded (run/pool.py keep_pandas_out_of_pyarrow: 50 MB less RSS)."""
    from .run.pool import keep_pandas_out_of_pyarrow

    keep_pandas_out_of_pyarrow()
    return main()


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on its write end)."""
    import select

    poller = select.poll()
    try:
        poller.register(sys.stdout.fileno(), select.POLLERR)
    except (OSError, ValueError):  # no file behind stdout (a caller's capture)
        return False
    return bool(poller.poll(0))


def main(argv: list[str] | None = None) -> int:
    """Run a command; errors are one line on stderr (a traceback only with --debug).

    Exit status: 0 done, 2 a user, input, disk or worker error (a killed worker included),
    3 an internal error (a bug: please report it with the --debug traceback), 130 interrupted.
    """
    from .run.pool import WorkerDied

    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:
        if not _stdout_gone():  # a pipe to a worker that died: an error like any other
            print(f"parbpe {args.command}: error: a worker's pipe broke (a worker died)", file=sys.stderr)
            return 2
        # the reader went away (`parbpe encode ... | head`): end quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not fail
        return 141
    except (ValueError, OSError, WorkerDied) as exc:
        if args.debug:
            raise
        print(f"parbpe {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        again = " (the same command with --resume continues it)" if args.command == "train" else ""
        print(f"parbpe {args.command}: interrupted{again}", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"parbpe {args.command}: internal error: {type(exc).__name__}: {_one_line(exc)} "
              "(run again with --debug for the traceback, and please report it)", file=sys.stderr)
        return 3


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (a worker's multi-line report keeps its first line);
    an OSError as its message and file, without "[Errno n]"."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return text.splitlines()[0]


def _run(args: argparse.Namespace) -> int:
    from .tokenizer.evaluate import evaluate
    from .tokenizer.model import Tokenizer
    from .train import count_to_file, train

    if args.command == "train":
        config = _config(args, vocab_size=args.vocab_size, freq_cutoff=args.freq_cutoff,
                         stop_list_size=args.stop_list_size, max_batch_size=args.max_batch_size,
                         cap_divisor=args.cap_divisor, pair_count=args.pair_count, batching=args.batching,
                         eos_token=args.eos_token, bos_token=args.bos_token, pad_token=args.pad_token,
                         superbpe_transition=args.superbpe_transition, init=args.init)
        _check_inputs(args)
        result = train(args.inputs, config, out_dir=args.out, progress=Progress(args.progress),
                       start_method=args.start_method, executor=args.executor, ray_address=args.ray_address,
                       run_dir=args.run_dir, resume=args.resume, keep_run_dir=args.keep_run_dir,
                       sample_corpus=args.sample_corpus, heldout=args.heldout or None, also_save=args.also_save)
        s = result.stats
        source = f"{s['bytes_read'] / 1e6:.1f} MB of text" if s["bytes_read"] else "counts files"
        inherited = f" after {s['init']['inherited_merges']:,} inherited" if "init" in s else ""
        print(f"Trained {s['vocab_size']} tokens ({s['merges']} merges{inherited} in {s['rounds']} rounds) from "
              f"{source}, {s['unique_chunks']:,} unique chunks, "
              f"in {sum(s['seconds'].values()):.1f} s; peak RSS {format_size(s['peak_rss_bytes'])}.")
        if "heldout" in s:
            h = s["heldout"]
            print(f"Held-out ({h['documents']:,} documents, {h['bytes'] / 1e6:.1f} MB): "
                  f"{h['bytes_per_token']:.4f} bytes/token, {h['tokens_per_word']:.4f} tokens/word, "
                  f"{100 * h['vocab_unused_share']:.2f}% of the vocabulary unused.")
        print(f"Wrote to {args.out}:")
        for name, outcome in (result.files or {}).items():
            if "/" not in name:
                print(f"  {name:24s} {outcome}")
        for row in s.get("also_save", []):
            scores = f": {row['bytes_per_token']:.4f} bytes/token held-out" if "bytes_per_token" in row else ""
            print(f"  {row['directory'] + '/':24s} the {row['vocab_size']}-token tokenizer{scores}")
        return 0
    if args.command == "count":
        config = _config(args)
        _check_inputs(args)
        summary = count_to_file(args.inputs, args.out, config, freq_cutoff=args.freq_cutoff,
                                progress=Progress(args.progress), start_method=args.start_method,
                                executor=args.executor, ray_address=args.ray_address,
                                sample_corpus=args.sample_corpus)
        seconds = sum(summary["seconds"].values())
        print(f"Wrote {summary['rows_written']:,} chunk counts ({summary['chunks']:,} chunks, "
              f"{summary['bytes_read'] / 1e6:.1f} MB read) to {summary['out']} in {seconds:.1f} s "
              f"({summary['bytes_read'] / 1e6 / max(seconds, 1e-9):.1f} MB/s); {summary['spills']} spills, "
              f"peak RSS {format_size(summary['peak_rss_bytes'])}.")
        if args.stats:
            from .io.atomic import write_text_atomically

            write_text_atomically(args.stats, json.dumps(summary, indent=1))
        return 0
    if args.command == "encode":
        tok = Tokenizer.load(args.tokenizer)
        if args.files:
            if args.text is not None:
                raise ValueError("give either TEXT or --files, not both")
            for ids in encode_files(tok, args.files, args.text_column, args.workers, args.allow_special):
                sys.stdout.write(ids + "\n")
            return 0
        text = args.text if args.text is not None else sys.stdin.read()
        ids = tok.encode(text, allowed_special="all" if args.allow_special else set())
        if args.show:
            for i in ids:
                print(i, repr(tok.token_bytes(i)))
        else:
            print(" ".join(map(str, ids)))
        return 0
    if args.command == "decode":
        tok = Tokenizer.load(args.tokenizer)
        lines = [" ".join(args.ids)] if args.ids else sys.stdin
        for line in lines:
            ids = [_token_id(x, tok.n_vocab) for x in line.replace(",", " ").split()]
            sys.stdout.buffer.write(tok.decode_bytes(ids) + (b"\n" if not args.ids else b""))
        sys.stdout.flush()
        return 0
    if args.command == "eval":
        tokenizers = [Tokenizer.load(d) for d in args.tokenizer]  # all loaded before any is measured
        reports = [evaluate(tok, args.inputs, text_column=args.text_column) for tok in tokenizers]
        if args.json:
            print(json.dumps(reports[0] if len(reports) == 1 else dict(zip(args.tokenizer, reports)), indent=1))
        elif len(reports) == 1:
            report = reports[0]
            print(f"documents        {report['documents']:,}")
            print(f"bytes            {report['bytes']:,}")
            print(f"tokens           {report['tokens']:,}")
            print(f"bytes per token  {report['bytes_per_token']:.4f}")
            print(f"tokens per word  {report['tokens_per_word']:.4f}")
            print(f"superword tokens {100 * report['superword_share']:.2f}%")
            print(f"vocab unused     {100 * report['vocab_unused_share']:.2f}%")
        else:
            print(eval_table(args.tokenizer, reports))
        return 0
    raise AssertionError(args.command)


def eval_table(names: list[str], reports: list[dict]) -> str:
    """Reports side by side, one tokenizer a line; tokens also relative to the first."""
    width = max(9, *(len(n) for n in names))
    lines = [f"{'tokenizer':{width}s}  vocab     tokens  vs first  bytes/token  tokens/word  superword  unused",
             f"{'':{width}s}  (text: {reports[0]['documents']:,} documents, {reports[0]['bytes']:,} bytes)"]
    for name, r in zip(names, reports):
        ratio = r["tokens"] / reports[0]["tokens"]
        lines.append(f"{name:{width}s} {r['vocab_size']:6d} {r['tokens']:10,d} {ratio:8.4f}"
                     f"  {r['bytes_per_token']:11.4f}  {r['tokens_per_word']:11.4f}  {100 * r['superword_share']:8.2f}%"
                     f"  {100 * r['vocab_unused_share']:5.2f}%")
    return "\n".join(lines)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("parbpe")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _check_inputs(args: argparse.Namespace) -> None:
    """No input is an error unless --sample-corpus asks for the built-in one (and not both)."""
    if args.inputs and args.sample_corpus:
        raise ValueError("give INPUT files or --sample-corpus, not both")
    if not args.inputs and not args.sample_corpus:
        raise ValueError("no input given: name files, globs or directories (or - for standard input), or pass "
                         "--sample-corpus to train on the built-in sample corpus (the Python standard library's "
                         "sources)")


def _token_id(text: str, n_vocab: int) -> int:
    if not text.lstrip("-").isdigit() or not 0 <= int(text) < n_vocab:
        raise ValueError(f"not a token id: {text!r} (ids are integers from 0 to {n_vocab - 1})")
    return int(text)


def encode_files(tok, inputs: list[str], text_column: str, workers: int, allow_special: bool):
    """Each document of inputs as a line of space-separated ids, in input order; work units are
    encoded by `workers` processes."""
    from .io.plan import plan
    from .io.readers import ReadStats, iter_documents
    from .run.pool import get_context, parallel

    units = [u for u in plan(inputs) if not u.kind.startswith("counts")]
    if not units:
        raise ValueError("encode --files needs text inputs (parquet, arrow, jsonl, text), not counts files")

    def encode_unit(unit) -> list[str]:
        allowed = "all" if allow_special else set()
        texts = iter_documents(unit, text_column, ReadStats())
        return [" ".join(map(str, tok.encode(text, allowed_special=allowed))) for text in texts]

    if workers <= 1 or len(units) == 1:
        results = map(encode_unit, units)
    else:
        results = parallel(encode_unit, units, min(workers, len(units)), get_context())
    for lines in results:
        yield from lines


if __name__ == "__main__":
    sys.exit(console())

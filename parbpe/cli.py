"""Command line: parbpe train | count | encode | decode | eval (thin wrappers over the library functions)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import gc
import json
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

from . import config as config_module
from . import jit
from .config import GROUPS, Job, RunOptions, TrainConfig
from .run.memory import format_size


def _cli_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A settings parser (config.py) as an argparse type: its ValueError becomes argparse's message."""
    def parse_arg(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse_arg.__name__ = parse.__name__  # argparse names the type in its message
    parse_arg.__doc__ = parse.__doc__
    return parse_arg


parse_count = _cli_type(config_module.parse_count)
parse_transition = _cli_type(config_module.parse_transition)
SETTINGS = (Job, TrainConfig, RunOptions)  # what the train and count commands' options are generated from


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (`--special-token` must not pass for `--special-tokens`), whose
    error for an unknown option names the command that has it, or the nearest of the command's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}"
                       + "".join(f"; {hint}" for hint in self._hints(unknown, getattr(parsed, "command", None))))
        return parsed

    def error(self, message: str) -> None:  # type: ignore[override]
        """argparse's error without its usage lines: one line, exit 2 (--help shows the usage)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _hints(self, unknown: list[str], command: str | None) -> list[str]:
        """For each unknown --option: the command that has it, or the nearest option of this one."""
        commands = _subcommands(self)
        own = _option_strings(commands.get(command, self))
        hints = []
        for word in unknown:
            option = word.split("=")[0]
            if not option.startswith("--"):
                continue
            elsewhere = [name for name, sub in commands.items() if option in _option_strings(sub)]
            if elsewhere:
                hints.append(f"{option} is an option of {' and '.join(f'{self.prog} {n}' for n in elsewhere)}, "
                             f"not of {self.prog} {command}")
            elif match := difflib.get_close_matches(option, sorted(own), 1):
                hints.append(f"{option}: did you mean {match[0]}?")
        return hints


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers of parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of parser (its subcommands' not included)."""
    return {s for s in parser._option_string_actions if s.startswith("--")}


def add_settings(parser: argparse.ArgumentParser, command: str) -> None:
    """One option per field of the settings dataclasses that `command` offers, in config.GROUPS's
    groups, each help ending with its default."""
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    for cls in SETTINGS:
        for f in dataclasses.fields(cls):
            if command in f.metadata["commands"]:
                flags, kwargs = _argument(f)
                groups[f.metadata["group"]].add_argument(*flags, **kwargs)


def _argument(f: dataclasses.Field) -> tuple[list[str], dict[str, Any]]:
    """The add_argument arguments of one setting (see config.setting)."""
    m = f.metadata
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default
    if m["cli_default"] is not None:
        default = m["cli_default"]
    shown = m["shown"] or ("off" if m["kind"] == "flag" else str(default))
    ending = "required" if m["shown"] == "required" else f"default: {shown}"
    kwargs: dict[str, Any] = {"help": f"{m['help']} ({ending})".replace("%", "%%")}
    if m["metavar"]:
        kwargs["metavar"] = m["metavar"]
    if m["kind"] == "positional":
        return [f.name], {**kwargs, "nargs": "*", "default": []}
    kwargs["dest"] = f.name
    if m["kind"] == "flag":
        return [_flag(f.name)], {**kwargs, "action": "store_true"}
    if m["kind"] in ("list", "append"):
        kwargs.update(action="extend" if m["kind"] == "list" else "append", default=[])
    else:
        kwargs.update(default=default, required=m["shown"] == "required", choices=m["choices"])
    if m["parse"] is not None:
        kwargs["type"] = _cli_type(m["parse"])
    elif isinstance(default, int) and not isinstance(default, bool):
        kwargs["type"] = int
    if m["kind"] == "list":  # a comma list per flag; the flag may be repeated
        kwargs["type"] = _cli_type(m["parse"])
    return [_flag(f.name)], kwargs


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def settings_from(args: argparse.Namespace) -> tuple[Job, TrainConfig, RunOptions]:
    """The parsed options of train or count as the dataclasses they were generated from."""
    made = []
    for cls in SETTINGS:
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
        made.append(cls(**values))
    return made[0], made[1], made[2]


def _renyi_alpha(text: str) -> float:
    """--renyi-alpha's value: a positive, finite number."""
    from .pipeline.corpus_eval import check_renyi_alpha

    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a number") from None
    try:
        return check_renyi_alpha(value)
    except ValueError:
        raise ValueError(f"must be a positive number (2.5 by default, 1 for Shannon's entropy), got {text!r}") from None


def _add_debug(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error (default: off)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="parbpe", description="Train byte-level BPE tokenizers, fast.")
    parser.add_argument("--version", action="version", version=f"parbpe {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    train = sub.add_parser("train", help="train a tokenizer and write its files")
    add_settings(train, "train")
    _add_debug(train)

    count = sub.add_parser("count", help="count chunks and write a counts file (a valid training input)")
    add_settings(count, "count")
    _add_debug(count)

    encode = sub.add_parser("encode", help="encode text (or the documents of files, in parallel) into token ids")
    encode.add_argument("--tokenizer", required=True, metavar="PATH", help=ANY_TOKENIZER)
    _add_rank_pattern(encode)
    encode.add_argument("text", nargs="?", help="text to encode (default: read stdin)")
    encode.add_argument("--files", action="extend", nargs="+", default=[], metavar="PATH",
                        help="encode every document of these files, globs or directories instead: one line of ids "
                             "per document, in input order")
    encode.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes encoding --files (default: all cores)")
    encode.add_argument("--text-column", default="text",
                        help="parquet/arrow column or jsonl field with the text (default: text)")
    encode.add_argument("--allow-special", action="store_true", help="encode special-token strings as specials")
    encode.add_argument("--show", action="store_true", help="print each token's bytes next to its id")
    encode.add_argument("--method", default=None, choices=("merges", "greedy", "shortest"),
                        help="segmentation: the merges (BPE), greedy longest prefix, or the fewest tokens "
                             "(default: the tokenizer's own)")
    encode.add_argument("--dropout", type=float, default=0.0, metavar="P",
                        help="BPE-dropout: skip each applicable merge with probability P (default: 0, off)")
    encode.add_argument("--seed", type=int, default=None, help="seed of --dropout's choices (default: random)")
    _add_debug(encode)

    decode = sub.add_parser("decode", help="decode token ids into text")
    decode.add_argument("--tokenizer", required=True, metavar="PATH", help=ANY_TOKENIZER)
    _add_rank_pattern(decode)
    decode.add_argument("ids", nargs="*", metavar="ID",
                        help="token ids (default: read stdin, one sequence of ids per line)")
    _add_debug(decode)

    ev = sub.add_parser("eval", help="tokens (CTC), bytes/token, tokens/word, Renyi efficiency and unused vocabulary "
                                     "of one tokenizer or several side by side, by segmentation method")
    ev.add_argument("--tokenizer", required=True, action="append", metavar="PATH",
                    help=ANY_TOKENIZER + "; repeat to compare several side by side")
    _add_rank_pattern(ev)
    ev.add_argument("inputs", nargs="+", metavar="INPUT",
                    help="files, globs or directories of text (anything train reads but counts files)")
    ev.add_argument("--method", default=None, metavar="METHOD[,METHOD]",
                    help="segmentation: merges (BPE's), greedy (longest prefix first), shortest (fewest tokens, "
                         "PathPiece's), as a comma list (default: each tokenizer's own: merges, or shortest for a "
                         "vocabulary without merges)")
    ev.add_argument("--renyi-alpha", type=_cli_type(_renyi_alpha), default=2.5, metavar="A",
                    help="the order of the Renyi entropy in the efficiency (default: 2.5, as Zouhar et al.)")
    ev.add_argument("--text-column", default="text",
                    help="parquet/arrow column or jsonl field with the text (default: text)")
    ev.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                    help="processes counting and segmenting (default: all cores)")
    ev.add_argument("--memory-budget", default=None, metavar="SIZE",
                    help="memory for counting the text, e.g. 2GB (default: half the available RAM)")
    ev.add_argument("--progress", choices=("bar", "jsonl", "none"), default="bar",
                    help="progress of the counting and the segmentation on stderr (default: bar)")
    ev.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    ev.add_argument("--plot", default=None, metavar="FILE.png",
                    help="also draw bytes/token and Renyi efficiency per tokenizer and method (pip install "
                         "'parbpe[plot]')")
    _add_debug(ev)
    return parser


def console() -> int:
    """The `parbpe` command: main(), its Ctrl-C held while a kernel runs or compiles (jit.interrupts).
    Once main() has returned, Ctrl-C is ignored: the command's status stands (a Ctrl-C as the
    interpreter exited, its handlers reset, ended a finished run by SIGINT)."""
    signal.signal(signal.SIGINT, _on_sigint)
    status = main()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()  # the interpreter's last collection then passes over numba's and LLVM's many objects
    return status


def _on_sigint(signum: int, frame: Any) -> None:
    if jit.interrupts.should_raise():
        raise KeyboardInterrupt


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
    from .warnings import ParbpeWarning

    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ParbpeWarning)  # the summary says them: not twice on stderr
        return _guarded(args)


def _guarded(args: argparse.Namespace) -> int:
    """The command, its errors turned into one line and an exit status (main's docstring)."""
    from .run.pool import WorkerDied

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
        print(f"parbpe {args.command}: error: {cli_names(_one_line(exc))}", file=sys.stderr)
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


def _setting_flags() -> dict[str, tuple[str, bool]]:
    """Each setting's Python name: its flag and whether it is a flag without value."""
    return {f.name: (_flag(f.name), f.metadata["kind"] == "flag") for cls in SETTINGS for f in dataclasses.fields(cls)
            if f.metadata.get("kind") != "positional"}


def cli_names(message: str) -> str:
    """A library message as a CLI user needs it: the settings' Python names (vocab_size=10, sample_docs)
    spelled as their flags (--vocab-size 10, --sample-docs), once where the message gives both."""
    flags = _setting_flags()
    for name in sorted(flags, key=len, reverse=True):
        flag, bare = flags[name]
        message = re.sub(rf"({re.escape(flag)}) \({re.escape(name)}(=[^)]*)?\)", r"\1", message)  # --x (x=...)
        message = re.sub(rf"(?<![\w-]){re.escape(name)} \({re.escape(flag)}\)", flag, message)  # x (--x)
        message = re.sub(rf"(?<![\w-]){re.escape(name)}=True\b" if bare else
                         rf"(?<![\w-]){re.escape(name)}=", flag if bare else f"{flag} ", message)
        if "_" in name:  # a bare word that is only a Python name (pattern, seed, ... are words too)
            message = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w(])", flag, message)
    return message


def _run(args: argparse.Namespace) -> int:
    """The command's function: each prints its result and returns the exit status."""
    return COMMANDS[args.command](args)


def _train(args: argparse.Namespace) -> int:
    from .train import train

    job, config, options = settings_from(args)
    _check_inputs(args)
    result = train(list(job.inputs), config, options=options, out_dir=job.out, sample_corpus=job.sample_corpus,
                   heldout=list(job.heldout) or None, also_save=job.also_save)
    s = result.stats
    source = f"{s['bytes_read'] / 1e6:.1f} MB of text" if s["bytes_read"] else "counts files"
    inherited = f" after {s['init']['inherited_merges']:,} inherited" if "init" in s else ""
    made = f"{s['merges']} merges{inherited} in {s['rounds']} rounds"
    if "pathpiece" in s:
        pp = s["pathpiece"]
        made = f"PathPiece: {pp.get('initial_tokens', 0):,} tokens pruned in {pp.get('iterations', 0)} iterations"
    print(f"Trained {s['vocab_size']} tokens ({made}) from "
          f"{source}, {s['unique_chunks']:,} unique chunks, "
          f"in {sum(s['seconds'].values()):.1f} s; peak RSS {format_size(s['peak_rss_bytes'])}."
          + "".join(f" {_changed(change)}." for change in s.get("result_changes", [])))
    kernels = s.get("kernels", {})
    ahead = kernels.get("ahead", {})
    if kernels.get("compile_seconds", 0) + ahead.get("compile_seconds", 0) > 1:
        beside = (f", and {ahead['compiled']} in {ahead['compile_seconds']:.1f} s in {ahead['processes']} processes "
                  "beside it" if ahead.get("compiled") else "")
        print(f"Compiled {len(kernels['compiled'])} numba kernels in {kernels['compile_seconds']:.1f} s{beside} "
              "(the first run after an install: later runs load them from numba's cache).")
    if s.get("init", {}).get("reserved_ids"):
        print(f"Kept id(s) {', '.join(map(str, s['init']['reserved_ids']))} reserved (an empty token of the --init "
              "file, held by no token): no new token takes them.")
    if s.get("sample"):
        sample = s["sample"]
        print(f"Sampled {100 * sample['taken_share']:.2f}% of the documents ({100 * sample['share']:.2f}% asked, "
              f"seed {sample['seed']}): "
              f"{sample['documents']:,} documents, {sample['bytes'] / 1e6:.1f} MB.")
    if "heldout" in s:
        h = s["heldout"]
        print(f"Held-out ({h['documents']:,} documents, {h['bytes'] / 1e6:.1f} MB): "
              f"{h['bytes_per_token']:.4f} bytes/token, {h['tokens_per_word']:.4f} tokens/word, "
              f"{100 * h['vocab_unused_share']:.2f}% of the vocabulary unused."
              + (f" Measured on training text: {', '.join(h['also_training'])} is also training input."
                 if h.get("also_training") else ""))
    print(f"Wrote to {args.out}:")
    files = result.files or {}
    for name, outcome in files.items():
        if "/" not in name:
            print(f"  {name:24s} {outcome}")
    saved = {f"vocab-{row['vocab_size']}" for row in s.get("also_save", [])}
    for folder in sorted({n.split("/")[0] for n, outcome in files.items() if "/" in n and outcome.startswith("removed")}
                         - saved):
        print(f"  {folder + '/':24s} removed: an earlier run's folder")
    for row in s.get("also_save", []):
        scores = f": {row['bytes_per_token']:.4f} bytes/token held-out" if "bytes_per_token" in row else ""
        print(f"  {row['directory'] + '/':24s} the {row['vocab_size']}-token tokenizer{scores}")
    return 0


def _changed(change: dict) -> str:
    """What changed the result, for the summary line (the warning's full text is in stats.json)."""
    if change["kind"] == "AutoCutoffWarning":
        return (f"Automatic cutoff: {change['dropped_chunks']:,} chunks seen fewer than {change['min_count']} "
                "times left out to fit the memory budget (--strict refuses, a larger --memory-budget keeps them)")
    return change["message"][0].upper() + change["message"][1:]


def _count(args: argparse.Namespace) -> int:
    from .train import count_to_file

    job, config, options = settings_from(args)
    _check_inputs(args)
    summary = count_to_file(list(job.inputs), job.out, config, freq_cutoff=config.freq_cutoff, options=options,
                            sample_corpus=job.sample_corpus)
    seconds = sum(summary["seconds"].values())
    print(f"Wrote {summary['rows_written']:,} chunk counts ({summary['chunks']:,} chunks, "
          f"{summary['bytes_read'] / 1e6:.1f} MB read) to {summary['out']} in {seconds:.1f} s "
          f"({summary['bytes_read'] / 1e6 / max(seconds, 1e-9):.1f} MB/s); {summary['spills']} spills, "
          f"peak RSS {format_size(summary['peak_rss_bytes'])}.")
    if job.stats:
        from .io.atomic import write_text_atomically

        write_text_atomically(job.stats, json.dumps(summary, indent=1))
    return 0


ANY_TOKENIZER = ("a tokenizer: a directory written by parbpe train, a tokenizer.json, GPT-2's vocab.json "
                 "(merges.txt beside it) or a .tiktoken rank file")


def _add_rank_pattern(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pattern", metavar="PATTERN", default=None,
                        help="the split pattern of a format that holds none: a .tiktoken rank file (default: the "
                             "encoding's own for cl100k_base/o200k_base files, else gpt4), a hex vocabulary (gpt4), "
                             "GPT-2's vocab.json + merges.txt (gpt2); other formats carry theirs")


def load_tokenizer(path: str, pattern: str | None = None):
    """Any tokenizer --init reads; pattern applies to the formats without one (rank files, hex
    vocabularies, GPT-2's vocab.json + merges.txt); the others carry theirs."""
    from .tokenizer.load import carries_no_pattern
    from .tokenizer.model import Tokenizer

    return Tokenizer.load(path, pattern=pattern if carries_no_pattern(path) else None)


def _encode(args: argparse.Namespace) -> int:

    tok = load_tokenizer(args.tokenizer, args.pattern)
    if args.files:
        if args.text is not None:
            raise ValueError("give either TEXT or --files, not both")
        if args.dropout or args.method not in (None, "merges"):
            raise ValueError("--files encodes by the merges, without dropout: drop --method/--dropout, or encode "
                             "TEXT (or standard input)")
        for ids in encode_files(tok, args.files, args.text_column, args.workers, args.allow_special):
            sys.stdout.write(ids + "\n")
        return 0
    text = args.text if args.text is not None else sys.stdin.read()
    held = sorted(s for s in tok.special_tokens if s in text) if not args.allow_special else []
    if held:
        raise ValueError(f"the text contains the special token {held[0]!r}: pass --allow-special to encode it as "
                         "that special token (without it, remove it from the text)")
    ids = tok.encode(text, allowed_special="all" if args.allow_special else set(), method=args.method,
                     dropout=args.dropout, seed=args.seed)
    if args.show:
        for i in ids:
            print(i, repr(tok.token_bytes(i)))
    else:
        print(" ".join(map(str, ids)))
    return 0


def _decode(args: argparse.Namespace) -> int:

    tok = load_tokenizer(args.tokenizer, args.pattern)
    lines = [" ".join(args.ids)] if args.ids else sys.stdin
    for line in lines:
        ids = [_token_id(x, tok.n_vocab) for x in line.replace(",", " ").split()]
        sys.stdout.buffer.write(tok.decode_bytes(ids) + (b"\n" if not args.ids else b""))
    sys.stdout.flush()
    return 0


def _eval(args: argparse.Namespace) -> int:
    from .config import RunOptions, TrainConfig
    from .pipeline.corpus_eval import evaluate_corpus

    if args.plot:  # before any work: the evaluation may take minutes
        from .pipeline.eval_plot import check_plot_available

        check_plot_available()
    methods = [m.strip() for m in args.method.split(",") if m.strip()] if args.method is not None else None
    tokenizers = [load_tokenizer(d, args.pattern) for d in args.tokenizer]  # all loaded before any is measured
    config = TrainConfig(workers=args.workers, text_column=args.text_column, memory_budget=args.memory_budget)
    rows = evaluate_corpus(tokenizers, args.inputs, names=args.tokenizer, methods=methods, alpha=args.renyi_alpha,
                           config=config, options=RunOptions(progress=args.progress))
    if args.plot:
        from .pipeline.eval_plot import plot_rows, size_curve

        curves = {d: size_curve(d) for d in args.tokenizer if os.path.isdir(d)}
        plot_rows(rows, args.plot, args.renyi_alpha, curves)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(eval_table(rows, args.renyi_alpha))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": _train, "count": _count, "encode": _encode, "decode": _decode, "eval": _eval}


def eval_table(rows: list[dict], alpha: float) -> str:
    """Rows side by side, one tokenizer x method a line; tokens also relative to the first row."""
    width = max(9, *(len(r["tokenizer"]) for r in rows))
    lines = [f"{'tokenizer':{width}s}  method       tokens  vs first  bytes/token  tokens/word  Renyi({alpha:g})"
             "  superword  unused",
             f"{'':{width}s}  (text: {rows[0]['documents']:,} documents, {rows[0]['bytes']:,} bytes, "
             f"{rows[0]['words']:,} words)"]
    for r in rows:
        ratio = r["tokens"] / rows[0]["tokens"] if rows[0]["tokens"] else 0.0
        lines.append(f"{r['tokenizer']:{width}s}  {r['method']:8s} {r['tokens']:12,d} {ratio:8.4f}"
                     f"  {r['bytes_per_token']:11.4f}  {r['tokens_per_word']:11.4f}  {r['renyi_efficiency']:10.4f}"
                     f"  {100 * r['superword_share']:8.2f}%  {100 * r['vocab_unused_share']:5.2f}%")
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

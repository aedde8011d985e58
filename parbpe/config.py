"""Settings, each declared once: the field carries its help, default, choices and option group, and
the CLI parsers are generated from the fields (cli.py). Three dataclasses, by what they decide:

- TrainConfig: what a training run produces (plus workers, memory budget and tmp_dir, which travel
  with it to the counting workers but never change the result: `result=False` below);
- RunOptions: how a run runs (progress, start method, executor, run directory, resume): never the result;
- Job: what a command reads and writes (inputs, output, held-out text, extra sizes).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .jit import MODES as JIT_MODES
from .jit import require as require_jit
from .patterns import DIGIT_GROUPS, NORMAL_FORMS, PATTERNS, pattern_name, resolve_pattern, with_digits
from .run.memory import parse_size
from .run.progress import MODES

BATCHING_MODES = ("batchbpe", "exact")
ALGORITHMS = ("bpe", "pathpiece")
PATHPIECE_MAX_TOKEN_BYTES = 16  # PathPiece's L: its segmentation looks at tokens of at most 16 bytes
PAIR_COUNT_MODES = ("overlap", "nonoverlap")
START_METHODS = ("fork", "spawn", "forkserver")
EXECUTORS = ("local", "ray")
# Option groups of `parbpe train --help`, in this order.
GROUPS = {
    "input": "input: what is read, and how it is split",
    "output": "output: what is written",
    "vocabulary": "vocabulary: what the tokenizer holds",
    "algorithm": "algorithm: how the vocabulary is built (BPE's merges, PathPiece's pruning)",
    "resources": "resources: processes, memory, progress (never change the result)",
    "run": "run directory: checkpoints and resuming",
    "cluster": "cluster: counting on Ray",
}
_COUNT_UNITS = {"": 1, "k": 1024, "m": 1024**2}


def parse_count(text: str | int) -> int:
    """A vocabulary size as people write it: 32768, 50_304, 50,304, 32k (= 32,768), 1M (= 1,048,576)."""
    if isinstance(text, int):
        return text
    cleaned = text.strip().replace("_", "").replace(",", "").lower()
    number, unit = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in ("k", "m") else (cleaned, "")
    if not number.isdigit():
        raise ValueError(f"cannot read {text!r} as a size: write 32768, 50_304 or 32k (k = 1,024)")
    return int(number) * _COUNT_UNITS[unit]


def parse_transition(text: str) -> int | float:
    """--superbpe-transition: a merge count (26000, 26_000) or a share of the vocabulary (0.8 or 80%)."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    try:
        if cleaned.endswith("%"):
            return float(cleaned[:-1]) / 100
        return float(cleaned) if any(c in cleaned for c in ".eE") else int(cleaned)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a transition: write a merge count (26000) or a share of the "
                         "vocabulary (0.8 or 80%)") from None


def parse_sizes(text: str) -> list[int]:
    """--also-save: vocabulary sizes as a comma list (8192,16k,50_304)."""
    return [parse_count(t) for t in text.split(",") if t.strip()]


_OPEN, _CLOSE = "<[{(", ">]})"


def split_specials(text: str) -> list[str]:
    """--special-tokens: a comma list (the flag may also be repeated); "\\," is a comma within a token.
    A comma that would cut a bracketed token in two ('<|a,b|>') is refused, not split silently."""
    tokens, piece, k = [], "", 0
    while k < len(text):
        if text.startswith("\\,", k):
            piece, k = piece + ",", k + 2
            continue
        if text[k] == ",":
            tokens.append(piece)
            piece = ""
        else:
            piece += text[k]
        k += 1
    tokens.append(piece)
    tokens = [t for t in tokens if t]
    if len(tokens) > 1:
        for a, b in zip(tokens, tokens[1:]):
            if _unclosed(a) and _unopened(b):
                raise ValueError(f"--special-tokens {text!r} would cut {a + ',' + b!r} at its comma into {a!r} and "
                                 f"{b!r}: write '{a}{chr(92)},{b}' for one token holding a comma, or give "
                                 "each token its own --special-tokens")
    return tokens


def _unclosed(token: str) -> bool:
    return any(token.count(o) > token.count(c) for o, c in zip(_OPEN, _CLOSE))


def _unopened(token: str) -> bool:
    return any(token.count(c) > token.count(o) for o, c in zip(_OPEN, _CLOSE))


def setting(default: Any = None, *, help: str, group: str, commands: tuple[str, ...] = ("train",),
            shown: str | None = None, parse: Any = None, choices: tuple[str, ...] | None = None,
            metavar: str | None = None, kind: str = "value", result: bool = True,
            default_factory: Any = None, cli_default: Any = None) -> Any:
    """A dataclass field declaring one setting: its help, group, the commands that offer it as a flag,
    the default as help shows it (shown; default: the value; "required": the option must be given),
    how the CLI parses it (parse), its choices, and kind: value, flag (store_true), list (comma
    lists, repeatable), append (repeatable) or positional. result=False: it never changes what is
    produced (resume may change it). cli_default: the command line's default where it differs."""
    metadata = {"help": help, "group": group, "commands": commands, "shown": shown, "parse": parse,
                "choices": choices, "metavar": metavar, "kind": kind, "result": result, "cli_default": cli_default}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def cpu_count() -> int:
    return os.cpu_count() or 1


BOTH = ("train", "count")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides what a training run produces (plus how many workers and how much RAM).

    vocab_size counts all tokens: the 256 bytes, the stop-list tokens, the merges and the special
    tokens. max_batch_size=1 is serial (standard) BPE; 0 means no limit beyond the BatchBPE caps.
    freq_cutoff drops chunks seen fewer than that many times in the whole corpus (0 and 1 keep all).
    max_chunk_bytes > 0 cuts longer chunks into pieces of at most that many bytes (on character
    boundaries) before they are counted: it changes the result (0: off).
    init continues an existing byte-level BPE tokenizer (a path: see tokenizer/load.py read_any):
    its merges come first, its pattern is used when pattern is None, its special tokens come
    before special_tokens, and vocab_size counts its tokens too; the inputs stage reads it and
    makes the config that continues it (continuing()). pattern None without init: gpt4.
    """

    vocab_size: int = setting(
        32768, group="vocabulary", parse=parse_count, metavar="N",
        help="total tokens incl. specials: 32768, 50_304 or 32k (k = 1,024)")
    pattern: str | None = setting(
        None, group="input", commands=BOTH, shown="gpt4; with --init, that tokenizer's",
        help=f"split pattern: {', '.join(PATTERNS)} or tiktoken's names (cl100k_base, o200k_base), any case; "
             "or a regex")
    digits: int | None = setting(
        None, group="input", commands=BOTH, parse=int, choices=DIGIT_GROUPS, shown="as the pattern has it",
        help="split digits one by one (1, as Llama does) or in groups of up to 3 (3, as GPT-4 does), with any named "
             "pattern: the split regex changes, and the exported tokenizers with it")
    normalize: str | None = setting(
        None, group="input", commands=BOTH, parse=str.lower, choices=NORMAL_FORMS, shown="none",
        help="Unicode normal form of the text before it is split (nfkc: sentencepiece's default), in training, "
             "encode and eval; tokenizer.json gets the matching normalizer; with --init, that tokenizer's")
    special_tokens: tuple[str, ...] = setting(
        (), group="input", commands=BOTH, kind="list", parse=split_specials, metavar="TOKEN[,TOKEN]", shown="none",
        help="special tokens, e.g. '<|endoftext|>', as a comma list or one flag per token: they split the text "
             "and get the last ids")
    freq_cutoff: int = setting(
        0, group="vocabulary", commands=BOTH, metavar="N", help="leave out chunks seen fewer times than this")
    stop_list_size: int = setting(
        0, group="vocabulary", metavar="N", help="whole-chunk tokens for the N most frequent chunks")
    algorithm: str = setting(
        "bpe", group="algorithm", choices=ALGORITHMS,
        help="bpe: merges bottom-up (BatchBPE); pathpiece: PathPieceL, top-down from a BPE vocabulary of "
             "--initial-vocab-size, segmenting into the fewest tokens (docs/USAGE.md, PathPiece)")
    initial_vocab_size: int | None = setting(
        None, group="algorithm", parse=parse_count, metavar="N", shown="4 x --vocab-size",
        help="pathpiece: the BPE vocabulary it starts from (or --init's tokens)")
    prune_share: float = setting(
        0.2, group="algorithm", parse=float, metavar="SHARE",
        help="pathpiece: each iteration drops at most this share of the multi-byte tokens (smaller: slower, "
             "closer to one token at a time)")
    max_batch_size: int = setting(
        0, group="algorithm", metavar="N", shown="0: no limit", help="merges per round at most (1 = serial BPE)")
    cap_divisor: int = setting(
        2, group="algorithm", metavar="N", help="BatchBPE: rank at most remaining/N pairs a round")
    min_pair_count: int = setting(
        0, group="algorithm", parse=parse_count, metavar="N", shown="0: off",
        help="stop merging when the most frequent pair is seen fewer than N times (like min_frequency in HF "
             "tokenizers); the vocabulary may then be smaller than --vocab-size, which is said")
    max_token_bytes: int = setting(
        0, group="algorithm", parse=parse_count, metavar="N", shown="0: no limit; pathpiece: 16",
        help="no merge makes a token longer than N bytes (like max_token_length in HF tokenizers): such pairs are "
             "skipped, and stop-list chunks longer than N are passed over; special and --init tokens are kept")
    pair_count: str = setting(
        "overlap", group="algorithm", choices=PAIR_COUNT_MODES,
        help="count overlapping pairs like 'aa' in 'aaa' twice (overlap, standard BPE) or once (nonoverlap, as "
             "BatchBPE)")
    batching: str = setting(
        "batchbpe", group="algorithm", choices=BATCHING_MODES,
        help="batchbpe: BatchBPE's safe batches; exact: the merges of serial BPE, in the same order, many per round")
    workers: int = setting(
        group="resources", commands=BOTH, default_factory=cpu_count, shown="all cores", result=False, metavar="N",
        help="processes")
    memory_budget: int | None = setting(
        None, group="resources", commands=BOTH, parse=parse_size, metavar="SIZE", shown="half the available RAM",
        result=False,
        help="RAM limit for the process tree, every stage, e.g. 2GB; counts past a worker's share spill to disk, "
             "and the rarest chunks stay out of training if the merge stage would not fit")
    jit: str | None = setting(
        None, group="resources", commands=BOTH, choices=JIT_MODES, result=False, shown="$PARBPE_JIT, else auto",
        help="numba kernels (numba is installed with parbpe where it has wheels): auto uses them where the work repays "
             "loading them, on always (an error without numba), off never (numpy); the same result either way")
    text_column: str = setting(
        "text", group="input", commands=BOTH, metavar="NAME", help="parquet/arrow column or jsonl field with the text")
    max_chunk_bytes: int = setting(
        0, group="input", commands=BOTH, parse=parse_count, metavar="N", shown="0: off",
        help="cut chunks longer than N bytes into pieces of at most N bytes, on character boundaries, before they "
             "are counted (changes the result; like sentencepiece's max_sentence_length, for text with huge chunks)")
    sample_docs: float | None = setting(
        None, group="input", commands=BOTH, parse=float, metavar="SHARE", shown="all documents",
        help="train on a deterministic sample of this share of the documents (0.1: one in ten), chosen by a hash "
             "of each document and --seed: the same sample for any worker count or executor")
    sample_bytes: int | None = setting(
        None, group="input", commands=BOTH, parse=parse_size, metavar="SIZE", shown="all documents",
        help="train on a deterministic sample of about SIZE of text (e.g. 2GB), as --sample-docs with the share "
             "SIZE / the input's text bytes (like sentencepiece's input_sentence_size)")
    seed: int = setting(
        0, group="input", commands=BOTH, parse=int, metavar="N", help="the seed of --sample-docs/--sample-bytes")
    sample_share: float | None = setting(
        None, group="input", commands=(),
        help="the share of documents counted: sample_docs, or sample_bytes made a share by the inputs stage "
             "(no command's flag)")
    count_words: bool = setting(
        False, group="input", commands=(), result=False,
        help="counting also counts whitespace-separated words (parbpe eval's tokens/word; no command's flag)")
    tmp_dir: str | None = setting(
        None, group="resources", commands=BOTH, metavar="DIR", shown="the system's temp dir", result=False,
        help="directory for spilled counts, removed at the end; train keeps them in its run directory instead "
             "(--run-dir)")
    # Roles of special tokens for transformers (tokenizer_config.json); eos defaults to the first special.
    dropout: float | None = setting(
        None, group="output", parse=float, metavar="P", shown="none",
        help="BPE-dropout (Provilkov et al. 2020) recorded in tokenizer.json's BPE model: `tokenizers` and "
             "transformers then skip each merge with probability P when they encode (for training a model; the "
             "merges learned are the same)")
    eos_token: str | None = setting(
        None, group="vocabulary", metavar="TOKEN", shown="the first special token",
        help="the special token transformers uses as eos_token")
    bos_token: str | None = setting(
        None, group="vocabulary", metavar="TOKEN", shown="none",
        help="the special token transformers uses as bos_token")
    pad_token: str | None = setting(
        None, group="vocabulary", metavar="TOKEN", shown="none",
        help="the special token transformers uses as pad_token")
    # SuperBPE: stage 1 (ordinary BPE) stops after this many merges (an int) or when the vocabulary
    # holds this share of vocab_size (a float in (0, 1)); stage 2 re-counts with the superword split.
    superbpe_transition: int | float | None = setting(
        None, group="algorithm", parse=parse_transition, metavar="T", shown="off",
        help="SuperBPE: ordinary BPE for T merges (a count) or up to a share of --vocab-size (0.8), then superword "
             "tokens: the text re-counted with the superword split and merged on (see docs/USAGE.md, SuperBPE)")
    init: str | None = setting(
        None, group="vocabulary", metavar="TOKENIZER", shown="none: start from the 256 bytes",
        help="continue this byte-level BPE tokenizer: a parbpe output directory, a tokenizer.json, GPT-2's "
             "vocab.json (merges.txt beside it) or a .tiktoken rank file; its tokens keep their ids and "
             "--vocab-size counts them")

    def __post_init__(self) -> None:
        # Normalise first (the dataclass is frozen, so go through object.__setattr__).
        object.__setattr__(self, "special_tokens", _check_specials(self.special_tokens))
        if self.init is not None:  # its pattern, special tokens and roles come with continuing(), in the inputs stage
            self._check_init()
        if self.pattern is not None or self.init is None:
            object.__setattr__(self, "pattern", resolve_pattern("gpt4" if self.pattern is None else self.pattern))
        if self.digits is not None:
            if self.init is not None or self.superbpe_transition is not None:
                raise ValueError("digits cannot be combined with " + ("init: the tokenizer's pattern is kept"
                                 if self.init is not None else "superbpe_transition: its superword split is fixed"))
            object.__setattr__(self, "pattern", with_digits(self.pattern, self.digits))
        if self.init is None:
            if self.eos_token is None and self.special_tokens:
                object.__setattr__(self, "eos_token", self.special_tokens[0])
            _check_roles(self)
        if isinstance(self.memory_budget, str):
            object.__setattr__(self, "memory_budget", parse_size(self.memory_budget))
        self._check_sample()
        if self.algorithm != "bpe" or self.initial_vocab_size is not None:
            self._check_pathpiece()
        if self.normalize is not None:
            object.__setattr__(self, "normalize", str(self.normalize).lower())
            if self.normalize not in NORMAL_FORMS:
                raise ValueError(f"normalize must be one of {', '.join(NORMAL_FORMS)}, got {self.normalize!r}")
        if self.dropout is not None and not (isinstance(self.dropout, (int, float)) and 0 < self.dropout < 1):
            raise ValueError(f"dropout must be a probability between 0 and 1 (exclusive), got {self.dropout!r}")
        for name in ("vocab_size", "freq_cutoff", "stop_list_size", "max_batch_size", "cap_divisor", "workers",
                     "max_chunk_bytes", "min_pair_count", "max_token_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        minimum = 256 + self.stop_list_size + len(self.special_tokens)
        if self.vocab_size < minimum:
            raise ValueError(
                f"vocab_size={self.vocab_size} is too small: it must be at least {minimum} "
                f"(256 bytes + {self.stop_list_size} stop-list tokens + {len(self.special_tokens)} "
                "special tokens)"
            )
        if self.vocab_size > 2**31 - 1:
            raise ValueError(f"vocab_size={self.vocab_size} is too large (at most {2**31 - 1})")
        if self.freq_cutoff < 0:
            raise ValueError(f"freq_cutoff must be >= 0, got {self.freq_cutoff}")
        if self.max_token_bytes < 0 or self.max_token_bytes == 1:
            raise ValueError(f"max_token_bytes must be 0 (no limit) or at least 2, got {self.max_token_bytes}")
        if self.max_chunk_bytes < 0:
            raise ValueError(f"max_chunk_bytes must be >= 0 (0 = off), got {self.max_chunk_bytes}")
        if self.stop_list_size < 0:
            raise ValueError(f"stop_list_size must be >= 0, got {self.stop_list_size}")
        if self.max_batch_size < 0:
            raise ValueError(f"max_batch_size must be >= 0 (0 = unlimited, 1 = serial), got {self.max_batch_size}")
        if self.cap_divisor < 1:
            raise ValueError(f"cap_divisor must be >= 1, got {self.cap_divisor}")
        if self.pair_count not in PAIR_COUNT_MODES:
            raise ValueError(f"pair_count must be one of {PAIR_COUNT_MODES}, got {self.pair_count!r}")
        if self.batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {BATCHING_MODES}, got {self.batching!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.memory_budget is not None and self.memory_budget <= 0:
            raise ValueError(f"memory_budget must be positive, got {self.memory_budget}")
        if not self.text_column:
            raise ValueError("text_column must be a non-empty column name")
        if self.jit is not None and self.jit not in JIT_MODES:
            raise ValueError(f"jit must be one of {', '.join(JIT_MODES)}, got {self.jit!r}")
        if self.jit == "on":
            require_jit()  # ImportError naming the extra, before any work
        if self.superbpe_transition is not None:
            self._check_transition()

    def _check_sample(self) -> None:
        """sample_docs or sample_bytes (not both), and the share counting applies."""
        if self.sample_docs is not None and self.sample_bytes is not None:
            raise ValueError("give sample_docs (a share of the documents) or sample_bytes (a size), not both")
        if self.sample_docs is not None:
            if isinstance(self.sample_docs, bool) or not isinstance(self.sample_docs, (int, float)) or not (
                    0 < self.sample_docs <= 1):
                raise ValueError(f"sample_docs must be a share of the documents in (0, 1], got {self.sample_docs!r}")
            object.__setattr__(self, "sample_share", float(self.sample_docs))
        if isinstance(self.sample_bytes, str):
            object.__setattr__(self, "sample_bytes", parse_size(self.sample_bytes))
        if self.sample_bytes is not None and self.sample_bytes <= 0:
            raise ValueError(f"sample_bytes must be positive, got {self.sample_bytes}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not -2**63 <= self.seed < 2**63:
            raise ValueError(f"seed must be a 64-bit integer, got {self.seed!r}")

    def _check_init(self) -> None:
        """What init cannot be combined with (the tokenizer itself is read by the inputs stage)."""
        object.__setattr__(self, "init", os.fspath(self.init))
        if self.stop_list_size:
            raise ValueError("init cannot be combined with stop_list_size: the stop list is chosen before any "
                             "merge, the inherited merges come first; drop --stop-list-size")
        if self.superbpe_transition is not None:
            raise ValueError("init cannot be combined with superbpe_transition; to extend a tokenizer with "
                             "superword tokens as the SuperBPE authors do, use --init with --pattern superword")

    def _check_pathpiece(self) -> None:
        """PathPiece's settings; its token cap (max_token_bytes) defaults to 16 bytes."""
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.algorithm != "pathpiece":
            raise ValueError("initial_vocab_size is PathPiece's (algorithm='pathpiece', --algorithm pathpiece)")
        for name, value in (("superbpe_transition", self.superbpe_transition), ("stop_list_size", self.stop_list_size)):
            if value:
                raise ValueError(f"{name} is BPE's: PathPiece builds its vocabulary top-down; drop it")
        if not self.max_token_bytes:
            object.__setattr__(self, "max_token_bytes", PATHPIECE_MAX_TOKEN_BYTES)
        if self.max_token_bytes > PATHPIECE_MAX_TOKEN_BYTES:
            raise ValueError(f"max_token_bytes={self.max_token_bytes}: PathPiece segments with tokens of at most "
                             f"{PATHPIECE_MAX_TOKEN_BYTES} bytes")
        if isinstance(self.prune_share, bool) or not isinstance(self.prune_share, (int, float)) or not (
                0 < self.prune_share <= 0.5):
            raise ValueError(f"prune_share must be in (0, 0.5], got {self.prune_share!r}")
        initial = self.initial_vocab_size
        if initial is not None and (isinstance(initial, bool) or not isinstance(initial, int)
                                    or initial <= self.vocab_size):
            raise ValueError(f"initial_vocab_size={initial!r} must be an integer above vocab_size={self.vocab_size}")

    @property
    def pathpiece_initial(self) -> int:
        """PathPiece's starting vocabulary size (bytes and merges; specials come after pruning): 4x the
        size asked, which on realmix kept as few held-out tokens as 8x, the paper's, in less time."""
        return self.initial_vocab_size or 4 * self.vocab_size

    def _check_transition(self) -> None:
        value = self.superbpe_transition
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"superbpe_transition must be a merge count or a fraction of vocab_size such as 0.8, "
                             f"got {value!r}")
        if isinstance(value, float) and not 0 < value < 1:
            raise ValueError(f"superbpe_transition as a fraction must be between 0 and 1 (0.8: stage 1 ends at "
                             f"80% of vocab_size), got {value}")
        if isinstance(value, int) and not 0 <= value <= self.n_merges:
            raise ValueError(f"superbpe_transition={value} merges is outside 0..{self.n_merges} (the run's "
                             "merges); give a count in that range or a fraction such as 0.8")
        if self.stop_list_size:
            raise ValueError("superbpe_transition cannot be combined with stop_list_size: stage 2's chunks are "
                             "not stage 1's, so stop-list tokens would not carry over; drop --stop-list-size")
        if self.pattern == resolve_pattern("superword"):
            raise ValueError("with superbpe_transition, pattern is stage 1's split (e.g. gpt4): stage 2 uses the "
                             "superword split by itself")

    @property
    def transition_merges(self) -> int | None:
        """SuperBPE: the merges of stage 1 (None without superbpe_transition)."""
        value = self.superbpe_transition
        if value is None:
            return None
        if isinstance(value, float):
            return min(max(round(value * self.vocab_size) - 256 - self.stop_list_size, 0), self.n_merges)
        return value

    @property
    def n_merges(self) -> int:
        """How many merges the run makes: the vocabulary less bytes, stop list and specials."""
        return self.merges_for(self.vocab_size)

    def merges_for(self, size: int, inherited: int = 0, stop_words: int | None = None) -> int:
        """The merges a tokenizer of `size` tokens makes after `inherited` ones (an --init tokenizer's):
        the one place where vocabulary sizes become merge counts. stop_words: the stop list's length
        once counted (shorter than stop_list_size when the text has fewer candidates: merges fill in)."""
        stop = self.stop_list_size if stop_words is None else stop_words
        return size - 256 - stop - len(self.special_tokens) - inherited

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; the pattern is given by name when it is a built-in one."""
        data = dataclasses.asdict(self)
        data["special_tokens"] = list(self.special_tokens)
        data["pattern_name"] = pattern_name(self.pattern)
        return data

    def result_settings(self) -> dict[str, Any]:
        """to_dict() without the settings that never change the result (workers, memory budget,
        tmp_dir): what parbpe.json records, so output files are identical whatever the machine."""
        data = self.to_dict()
        for name in free_settings():
            del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of to_dict (unknown keys are ignored, so older files still load)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "special_tokens" in kwargs:
            kwargs["special_tokens"] = tuple(kwargs["special_tokens"])
        return cls(**kwargs)


def continuing(config: TrainConfig, found: dict[str, Any]) -> TrainConfig:
    """config continuing the tokenizer `found` (tokenizer/load.py read_any's dict of config.init, read by
    the inputs stage): its pattern unless one is given, its special tokens before config's, eos the
    first special token unless given; checked: the roles name special tokens, something is left to learn."""
    found_specials = found.get("special_tokens", {})  # (a hex vocabulary file has none)
    inherited = sorted(found_specials, key=found_specials.get)
    specials = tuple(inherited) + tuple(s for s in config.special_tokens if s not in inherited)
    normal = found.get("normalize")
    if config.normalize is not None and config.normalize != normal:
        raise ValueError(f"normalize={config.normalize!r} differs from {config.init}'s normalizer "
                         f"({normal or 'none'}): a continued tokenizer keeps its own; drop --normalize")
    resolved = dataclasses.replace(config, pattern=found["pattern"] if config.pattern is None else config.pattern,
                                   special_tokens=specials, normalize=normal,
                                   eos_token=config.eos_token or (specials[0] if specials else None))
    _check_roles(resolved)
    if config.algorithm == "pathpiece":  # a vocabulary to prune: larger than the one asked for
        have = 256 + len(found.get("merges", ())) + len(found.get("tokens") or ())
        if config.vocab_size - len(specials) >= have:
            raise ValueError(f"vocab_size={config.vocab_size} leaves nothing to prune: {config.init} has {have:,} "
                             "tokens besides special ones; give a smaller --vocab-size")
        return resolved
    size = 256 + len(found["merges"]) + len(specials)
    if config.vocab_size <= size:
        raise ValueError(f"vocab_size={config.vocab_size} leaves nothing to learn: {config.init} has "
                         f"{256 + len(found['merges']) + len(inherited):,} tokens, "
                         f"{size:,} with the special tokens; give a larger --vocab-size")
    return resolved


def _check_roles(config: TrainConfig) -> None:
    for role in ("eos_token", "bos_token", "pad_token"):
        value = getattr(config, role)
        if value is not None and value not in config.special_tokens:
            raise ValueError(f"{role} {value!r} is not one of the special tokens {list(config.special_tokens)}: "
                             f"add it with --special-tokens (special_tokens=...)")


def free_settings() -> tuple[str, ...]:
    """The TrainConfig fields that never change the result (a resumed run may change them)."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if not f.metadata["result"])


@dataclass(frozen=True)
class RunOptions:
    """How a run runs, never what it produces: shared by train, train_from_iterator and count_to_file.

    progress: "bar", "jsonl", "none" or a Progress. data_limit (bytes of counts a counting worker
    holds before it spills) overrides the share the memory budget gives. executor="ray" counts and
    reduces as Ray tasks (ray_address: None starts or uses a local Ray instance, "auto" joins this
    machine's cluster). run_dir (default OUT/.parbpe-run), resume and keep_run_dir: see train().
    """

    progress: Any = setting(
        "none", group="resources", commands=BOTH, choices=MODES, cli_default="bar",
        shown="bar on the command line, none in Python",
        help="progress on stderr: bar (for people), jsonl (one JSON object per line, for tools) or none")
    start_method: str | None = setting(
        None, group="resources", commands=BOTH, choices=START_METHODS, shown="fork where available",
        help="how worker processes start")
    data_limit: int | None = setting(
        None, group="resources", commands=BOTH, parse=parse_size, metavar="SIZE", shown="the memory budget's share",
        help="bytes of counts a counting worker holds before it spills (for experiments)")
    executor: str = setting(
        "local", group="cluster", commands=BOTH, choices=EXECUTORS,
        help="count and reduce in local processes or as Ray tasks (pip install 'parbpe[ray]')")
    ray_address: str | None = setting(
        None, group="cluster", commands=BOTH, metavar="ADDRESS", shown="start or use a local Ray instance",
        help="with --executor ray: 'auto' joins the cluster this machine belongs to, or host:port / ray://host:port")
    run_dir: str | None = setting(
        None, group="run", metavar="DIR", shown="OUT/.parbpe-run",
        help="working files and checkpoints of the run, spilled counts included")
    resume: bool = setting(
        False, group="run", kind="flag", help="continue a run that stopped (same command), from its last checkpoint")
    keep_run_dir: bool = setting(False, group="run", kind="flag", help="keep the run directory after success")
    strict: bool = setting(
        False, group="run", kind="flag",
        help="fail (exit 2) instead of changing the result: no automatic frequency cutoff to fit the memory "
             "budget, no early stop short of the vocabulary size, no --also-save sizes taken as BatchBPE prefixes")

    def __post_init__(self) -> None:
        if isinstance(self.progress, str) and self.progress not in MODES:
            raise ValueError(f"progress must be one of {MODES}, got {self.progress!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be 'local' or 'ray', got {self.executor!r}")
        if self.executor == "local" and self.ray_address is not None:
            raise ValueError("--ray-address needs --executor ray")
        if self.start_method is not None and self.start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {self.start_method!r}")


@dataclass(frozen=True)
class Job:
    """What a command reads and writes (the CLI's side of train()'s and count_to_file's arguments)."""

    inputs: tuple[str, ...] = setting(
        (), group="input", commands=BOTH, kind="positional", metavar="INPUT", shown="none",
        help="files, globs or directories (parquet, arrow, jsonl and txt, optionally .gz/.zst, counts files; any "
             "other extension is read as UTF-8 text), or - for standard input")
    sample_corpus: bool = setting(
        False, group="input", commands=BOTH, kind="flag",
        help="with no INPUT: the built-in sample corpus (the Python standard library's sources)")
    out: str = setting(
        "", group="output", commands=BOTH, metavar="PATH", shown="required",
        help="the output directory (train) or the counts file to write, .parquet (count)")
    heldout: tuple[str, ...] = setting(
        (), group="output", kind="append", metavar="PATH", shown="none",
        help="evaluate the result on this text at the end (bytes/token, tokens/word, unused vocabulary), recorded "
             "in stats.json; repeat for several")
    also_save: tuple[int, ...] = setting(
        (), group="output", kind="list", parse=parse_sizes, metavar="SIZE[,SIZE]", shown="none",
        help="also write the tokenizer of each smaller vocabulary size (the run's first merges) to OUT/vocab-SIZE/, "
             "e.g. 8192,16384")
    stats: str | None = setting(
        None, group="output", commands=("count",), metavar="FILE", shown="none",
        help="also write the run's stats (times, bytes, spills, peak RSS) as JSON")


def _check_specials(specials: Any) -> tuple[str, ...]:
    if isinstance(specials, str):
        raise ValueError(f"special_tokens must be a list of strings, got the string {specials!r}")
    result = tuple(specials)
    for s in result:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
    if len(set(result)) != len(result):
        raise ValueError(f"special_tokens has duplicates: {list(result)}")
    return result

"""The frozen training configuration: validated once, then passed to every stage and worker."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .patterns import pattern_name, resolve_pattern
from .run.memory import parse_size
from .tokenizer.load import read_any

BATCHING_MODES = ("batchbpe", "exact")
PAIR_COUNT_MODES = ("overlap", "nonoverlap")


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
    before special_tokens, and vocab_size counts its tokens too. pattern None without init: gpt4.
    """

    vocab_size: int = 32768
    pattern: str | None = None  # None: the init tokenizer's pattern, else gpt4
    special_tokens: tuple[str, ...] = ()
    freq_cutoff: int = 0
    stop_list_size: int = 0
    max_batch_size: int = 0
    cap_divisor: int = 2
    pair_count: str = "overlap"
    batching: str = "batchbpe"  # or "exact": serial BPE's merges, many per round
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    memory_budget: int | None = None  # bytes for the whole process tree; None: half the available RAM
    text_column: str = "text"
    max_chunk_bytes: int = 0  # 0: off; else chunks are cut into pieces of at most this many bytes
    tmp_dir: str | None = None  # where counting spills its runs; None: the system's temporary directory
    # Roles of special tokens for transformers (tokenizer_config.json); eos defaults to the first special.
    eos_token: str | None = None
    bos_token: str | None = None
    pad_token: str | None = None
    # SuperBPE: stage 1 (ordinary BPE) stops after this many merges (an int) or when the vocabulary
    # holds this share of vocab_size (a float in (0, 1)); stage 2 re-counts with the superword split.
    superbpe_transition: int | float | None = None
    init: str | None = None  # a tokenizer to continue from (train --init)

    def __post_init__(self) -> None:
        # Normalise first (the dataclass is frozen, so go through object.__setattr__).
        object.__setattr__(self, "special_tokens", _check_specials(self.special_tokens))
        if self.init is not None:
            self._take_init()
        object.__setattr__(self, "pattern", resolve_pattern("gpt4" if self.pattern is None else self.pattern))
        if self.eos_token is None and self.special_tokens:
            object.__setattr__(self, "eos_token", self.special_tokens[0])
        for role in ("eos_token", "bos_token", "pad_token"):
            value = getattr(self, role)
            if value is not None and value not in self.special_tokens:
                raise ValueError(f"{role} {value!r} is not one of the special tokens {list(self.special_tokens)}: "
                                 f"add it with --special-tokens (special_tokens=...)")
        if isinstance(self.memory_budget, str):
            object.__setattr__(self, "memory_budget", parse_size(self.memory_budget))
        for name in ("vocab_size", "freq_cutoff", "stop_list_size", "max_batch_size", "cap_divisor", "workers",
                     "max_chunk_bytes"):
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
        if self.superbpe_transition is not None:
            self._check_transition()

    def _take_init(self) -> None:
        """The init tokenizer's pattern (unless one is given) and special tokens, first."""
        object.__setattr__(self, "init", os.fspath(self.init))
        found = read_any(self.init)
        if self.pattern is None:
            object.__setattr__(self, "pattern", found["pattern"])
        inherited = sorted(found["special_tokens"], key=found["special_tokens"].get)
        object.__setattr__(self, "special_tokens",
                           tuple(inherited) + tuple(s for s in self.special_tokens if s not in inherited))
        if self.stop_list_size:
            raise ValueError("init cannot be combined with stop_list_size: the stop list is chosen before any "
                             "merge, the inherited merges come first; drop --stop-list-size")
        if self.superbpe_transition is not None:
            raise ValueError("init cannot be combined with superbpe_transition; to extend a tokenizer with "
                             "superword tokens as the SuperBPE authors do, use --init with --pattern superword")
        size = 256 + len(found["merges"]) + len(self.special_tokens)
        if self.vocab_size <= size:
            raise ValueError(f"vocab_size={self.vocab_size} leaves nothing to learn: {self.init} has "
                             f"{256 + len(found['merges']) + len(inherited):,} tokens, "
                             f"{size:,} with the special tokens; give a larger --vocab-size")

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
        return self.vocab_size - 256 - self.stop_list_size - len(self.special_tokens)

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
        del data["workers"], data["memory_budget"], data["tmp_dir"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of to_dict (unknown keys are ignored, so older files still load)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "special_tokens" in kwargs:
            kwargs["special_tokens"] = tuple(kwargs["special_tokens"])
        return cls(**kwargs)


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

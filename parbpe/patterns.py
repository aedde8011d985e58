"""Split patterns (pre-tokenization) and special-token splitting.

The built-in patterns are the ones GPT-2, GPT-4 (cl100k) and GPT-4o (o200k) use, known by parbpe's
names and tiktoken's encoding names, in any case (`cl100k_base`, `O200K_BASE`, `GPT4`); any other
string is taken as a custom regex for the `regex` module, except a bare word, which is refused as
an unknown name (a regex that is one word can be written `(?:word)`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)

GPT4O_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

PATTERNS: dict[str, str] = {
    "gpt2": GPT2_PATTERN,
    "gpt4": GPT4_PATTERN,
    "cl100k": GPT4_PATTERN,
    "gpt4o": GPT4O_PATTERN,
    "o200k": GPT4O_PATTERN,
}

# Other names of the same patterns: tiktoken's encoding names and the model names, as users write them.
ALIASES: dict[str, str] = {
    "cl100k_base": "gpt4", "gpt-4": "gpt4", "gpt-3.5-turbo": "gpt4",
    "o200k_base": "gpt4o", "gpt-4o": "gpt4o",
    "r50k_base": "gpt2", "p50k_base": "gpt2", "gpt-2": "gpt2",
}

_BARE_NAME = regex.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")


def known_pattern_names() -> list[str]:
    """Every name resolve_pattern accepts (in any case)."""
    return sorted(PATTERNS) + sorted(ALIASES)


def resolve_pattern(name_or_regex: str) -> str:
    """Return the regex for a built-in pattern name (any case, tiktoken's names too), or check and
    return a custom regex. A bare word that is no known name is refused, listing the names."""
    key = name_or_regex.lower() if isinstance(name_or_regex, str) else name_or_regex
    key = ALIASES.get(key, key)
    if key in PATTERNS:
        return PATTERNS[key]
    if isinstance(name_or_regex, str) and _BARE_NAME.fullmatch(name_or_regex):
        raise ValueError(
            f"unknown pattern name {name_or_regex!r}: known names are {', '.join(known_pattern_names())} "
            f"(any case); to use it as a regex, write (?:{name_or_regex})"
        )
    if not name_or_regex:
        raise ValueError(f"pattern must be one of {sorted(PATTERNS)} or a non-empty regex, got ''")
    try:
        compiled = regex.compile(name_or_regex)
    except regex.error as exc:
        raise ValueError(
            f"pattern {name_or_regex!r} is neither a built-in name ({', '.join(sorted(PATTERNS))}) "
            f"nor a valid regex: {exc}"
        ) from None
    for probe in _EMPTY_MATCH_PROBES:
        for match in compiled.finditer(probe):
            if match.start() == match.end():
                raise ValueError(
                    f"pattern {name_or_regex!r} can match the empty string (it does at offset {match.start()} "
                    f"of {probe!r}), which makes no chunk to train on; make every alternative match at "
                    "least one character (e.g. '+' instead of '*')"
                )
    return name_or_regex


# Texts on which a custom pattern must never match the empty string: empty, letters, digits,
# spaces, punctuation, newlines and non-ASCII, alone and mixed.
_EMPTY_MATCH_PROBES = ("", "a", "ab cd", "12 345", "  \n\t", "x, y!", "\r\n", "é中 😀", "Ab1 .\n z'S")


# The digit rule of each built-in pattern, and what --digits makes of it: digits one by one (1) or
# in groups of up to three from the left (3). GPT-2 keeps its optional space before the first digit.
_DIGIT_RULES = {"gpt2": (r" ?\p{N}+", {1: r" ?\p{N}{1}", 3: r" ?\p{N}{1,3}"}),
                "gpt4": (r"\p{N}{1,3}", {1: r"\p{N}{1}", 3: r"\p{N}{1,3}"}),
                "gpt4o": (r"\p{N}{1,3}", {1: r"\p{N}{1}", 3: r"\p{N}{1,3}"})}
DIGIT_GROUPS = (1, 3)


def _digit_variant(name: str, group: int | None) -> str:
    """The built-in pattern `name` with its digit rule made `group` (None: as it is)."""
    rule, variants = _DIGIT_RULES[name]
    pattern = PATTERNS[name]
    if group is None:
        return pattern
    parts = pattern.split("|")
    assert parts.count(rule) == 1, (name, rule)
    parts[parts.index(rule)] = variants[group]
    return "|".join(parts)


def digit_groups(pattern: str) -> tuple[str, int | None] | None:
    """(built-in name, digit group) of a built-in pattern or one of its --digits variants (group None:
    the pattern's own rule); None for any other pattern."""
    for name in _DIGIT_RULES:
        for group in (None, *DIGIT_GROUPS):
            if _digit_variant(name, group) == pattern:
                return name, group
    return None


def with_digits(pattern: str, group: int) -> str:
    """The pattern with its digits split one by one (group 1) or in groups of up to three (3); for the
    built-in patterns (and their variants) only: a custom regex says its own digit rule."""
    if group not in DIGIT_GROUPS:
        raise ValueError(f"digits must be one of {DIGIT_GROUPS} (one by one, or groups of up to 3), got {group!r}")
    known = digit_groups(pattern)
    if known is None:
        raise ValueError("digits applies to the built-in patterns (gpt2, gpt4, gpt4o); a custom regex writes its "
                         r"own digit rule (e.g. \p{N} for one digit a chunk)")
    return _digit_variant(known[0], group)


# Unicode normal forms (--normalize), applied to the text between special tokens before the split
# pattern, as HF tokenizers' normalizers apply to the text around added tokens.
NORMAL_FORMS = ("nfc", "nfkc", "nfd", "nfkd")


def normalize_text(text: str, form: str | None) -> str:
    """text in the Unicode normal form `form` (None: as it is)."""
    return unicodedata.normalize(form.upper(), text) if form else text


def pattern_name(pattern: str) -> str | None:
    """The built-in name of a pattern regex, or None for a custom one."""
    for name in ("gpt2", "gpt4", "gpt4o", "superword"):
        if PATTERNS[name] == pattern:
            return name
    return None


class Splitter:
    """Cuts text into the chunks BPE trains on: special tokens first, then (the text between them in
    the normal form `normalize`, if given) the split pattern."""

    def __init__(self, pattern: str, special_tokens: Sequence[str] = (), normalize: str | None = None) -> None:
        self.pattern = pattern
        self.special_tokens = tuple(special_tokens)
        self.normalize = normalize
        self._chunk_re = regex.compile(pattern)
        # Longest first, so that a special token that is a prefix of another never wins.
        specials = sorted(self.special_tokens, key=len, reverse=True)
        self._special_re = regex.compile("|".join(regex.escape(s) for s in specials)) if specials else None

    def segments(self, text: str) -> Iterator[tuple[str, bool]]:
        """Yield (piece, is_special) in order: ordinary text between special tokens, and the specials."""
        form = self.normalize
        if self._special_re is None:
            if text:
                yield normalize_text(text, form), False
            return
        start = 0
        for match in self._special_re.finditer(text):
            if match.start() > start:
                yield normalize_text(text[start : match.start()], form), False
            yield match.group(), True
            start = match.end()
        if start < len(text):
            yield normalize_text(text[start:], form), False

    def chunks(self, text: str) -> list[str]:
        """The pattern's chunks of ordinary text (no special-token handling)."""
        return self._chunk_re.findall(text)


# SuperBPE (Liu et al., 2025): the second stage's split, the authors' pattern used as an isolating
# split (each match is a chunk, and so is the text between matches: words with the single spaces
# between them). Their pattern is SUPERWORD_MATCHES; findall needs one that covers all text, so the
# text between matches is spelled out: a run of characters at none of which a match starts (a
# letter; whitespace other than the space; a space before a non-space, unless two symbols follow;
# a symbol not followed by another). tests/test_patterns.py checks both forms against the isolating
# split done with SUPERWORD_MATCHES.
SUPERWORD_MATCHES = r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)"
_SYMBOL = r"[^\s\p{L}\p{N}]"
SUPERWORD_PATTERN = (SUPERWORD_MATCHES
                     + rf"|(?:\p{{L}}|[^\S ]| (?=\S)(?!{_SYMBOL}{{2}})|{_SYMBOL}(?!{_SYMBOL}))+")
# The authors' trainer reads text line by line (lines keep their "\n"), so no training chunk crosses
# a line end: the same split with every chunk ended after a "\n". Training counts with this one;
# encoding uses SUPERWORD_PATTERN, as the authors' tokenizer.json does.
SUPERWORD_LINES_PATTERN = (
    rf"\p{{N}}{{1,3}}| ?{_SYMBOL}{{2,}}[\r/]*\n?| +(?!\S)"
    rf"|(?:\p{{L}}|[^\S \n]| (?=\S)(?!{_SYMBOL}{{2}})|{_SYMBOL}(?!{_SYMBOL}))+\n?|\n"
)

# The superword split over whole documents, as encoding applies it: for a count whose chunks must be
# the encoder's (parbpe eval, --heldout). The same expression grouped, so that training_pattern, which
# counts SUPERWORD_PATTERN line by line, leaves it as it is.
SUPERWORD_DOCUMENT_PATTERN = f"(?:{SUPERWORD_PATTERN})"

PATTERNS["superword"] = SUPERWORD_PATTERN


def training_pattern(pattern: str) -> str:
    """The pattern the count stage applies: the superword split line by line, any other as it is."""
    return SUPERWORD_LINES_PATTERN if pattern == SUPERWORD_PATTERN else pattern


def encoding_split(pattern: str) -> str:
    """The pattern to count text with so that its chunks are those encoding finds with pattern: the
    superword split over whole documents (SUPERWORD_DOCUMENT_PATTERN), any other as it is."""
    return SUPERWORD_DOCUMENT_PATTERN if pattern == SUPERWORD_PATTERN else pattern

"""SuperBPE's superword split: the findall forms of the authors' isolating split, and the vectorized
lexer of count/superword.py, against a plain isolating split done with the authors' pattern."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
import regex

from parbpe.config import TrainConfig
from parbpe.count.counter import ShardCounter
from parbpe.count.superword import superword_chunk_starts
from parbpe.patterns import (
    SUPERWORD_LINES_PATTERN,
    SUPERWORD_MATCHES,
    SUPERWORD_PATTERN,
    resolve_pattern,
    training_pattern,
)
from tests.reference import reference_counts

# The characters the rules look at: letters, digits, spaces, other whitespace, line ends, symbols
# (alone and in runs), "/" (which a symbol run takes after a carriage return), non-ASCII of each kind.
ALPHABET = list("ab  \n\r\t.,:!?12/-'") + ["\u00a0", "\u2028", "é", "中", "٣", "😀", "  ", "..", " 1", "\r\n"]
SAMPLE = ("The cat sat on the mat. It was 12345 degrees... really?! Yes: 3.14159\n"
          "  indented line -- with dashes, and   spaces\t\ttabs \n\nhttp://example.com/a/b ok\r\n"
          "Ünïcödé wörds, 中文 text; numbers ٣٤٥ and emoji 😀😀 end.  \n")


def isolating_split(text: str, lines: bool) -> list[str]:
    """The authors' split, plainly: each match of their pattern is a chunk, and so is the text
    between matches; with lines, each line (keeping its "\\n") is split on its own."""
    out: list[str] = []
    for line in (regex.findall(r"[^\n]*\n|[^\n]+", text) if lines else [text]):
        pos = 0
        for match in regex.finditer(SUPERWORD_MATCHES, line):
            if match.start() > pos:
                out.append(line[pos:match.start()])
            out.append(match.group())
            pos = match.end()
        if pos < len(line):
            out.append(line[pos:])
    return out


def random_texts(seed: int, n: int, length: int = 24) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, length))) for _ in range(n)]


def test_the_findall_patterns_are_the_isolating_split():
    whole, lines = regex.compile(SUPERWORD_PATTERN), regex.compile(SUPERWORD_LINES_PATTERN)
    for text in random_texts(1, 4000) + [SAMPLE]:
        assert whole.findall(text) == isolating_split(text, lines=False), text
        assert lines.findall(text) == isolating_split(text, lines=True), text


def test_superword_is_a_pattern_name_and_counts_line_by_line():
    assert resolve_pattern("superword") == resolve_pattern("SUPERWORD") == SUPERWORD_PATTERN
    assert training_pattern(SUPERWORD_PATTERN) == SUPERWORD_LINES_PATTERN
    assert training_pattern(resolve_pattern("gpt4")) == resolve_pattern("gpt4")
    assert regex.findall(SUPERWORD_PATTERN, "of the cat, 2024.\n\nNext") == ["of the cat, ", "202", "4", ".\n\nNext"]
    assert regex.findall(SUPERWORD_LINES_PATTERN, "of the cat, 2024.\n\nNext") == \
        ["of the cat, ", "202", "4", ".\n", "\n", "Next"]


def lexed(texts: list[str]) -> list[str]:
    encoded = [t.encode() for t in texts]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    offsets = np.cumsum([0] + [len(t) for t in encoded])
    bounds = np.append(superword_chunk_starts(data, offsets), len(data)).tolist()
    return [data[a:b].tobytes().decode() for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("seed", range(4))
def test_the_lexer_gives_the_chunks_of_regex(seed):
    texts = [t for t in random_texts(seed, 3000) if "\r/" not in t]
    for start in range(0, len(texts), 7):  # several texts at once: no chunk crosses from one to the next
        group = texts[start:start + 7]
        assert lexed(group) == [c for t in group for c in regex.findall(SUPERWORD_LINES_PATTERN, t)], group
    ascii_only = [t for t in texts if t.isascii()]
    assert lexed(ascii_only) == [c for t in ascii_only for c in regex.findall(SUPERWORD_LINES_PATTERN, t)]
    assert lexed([SAMPLE, "", SAMPLE]) == regex.findall(SUPERWORD_LINES_PATTERN, SAMPLE) * 2
    assert lexed([""]) == []


def test_shard_counter_counts_superword_chunks_as_regex(tmp_path):
    docs = random_texts(7, 600, length=60) + [SAMPLE, "ends with !!\r/x and <|endoftext|> a  b", "x\r/y 12 ..\r\n"]
    config = TrainConfig(pattern="superword", special_tokens=("<|endoftext|>",), workers=1)
    shard = ShardCounter(config, str(tmp_path), "w0")
    assert shard.pieces is not None  # the vectorized path, not regex alone
    shard.add_texts(pa.array(docs, pa.string()))
    table = shard.pieces.chunk_counts()
    got: Counter[bytes] = Counter()
    for chunk, count in zip(table.column("chunk").to_pylist(), table.column("count").to_pylist()):
        got[chunk.encode()] += count  # a long chunk may be in several rows (summed by the reduce)
    got.update({c.encode(): n for c, n in shard.plain.items()})
    assert got == reference_counts(docs, SUPERWORD_LINES_PATTERN, ("<|endoftext|>",))


def test_a_lone_superword_run_is_summed_by_the_reduce(tmp_path):
    """The superword counter hands its long chunks on unsummed (each row once: most are seen once), so
    its run file says its rows may repeat, and read_partition sums even that one run file: every
    partition's chunks distinct, their counts regex's. An ordinary run file is read as it is."""
    from parbpe.count.partitions import N_PARTITIONS, read_partition, write_run
    from parbpe.count.pieces import SCHEMA

    line = "the cat sat on the mat and looked at the door"  # one long superword chunk a line
    docs = [line] * 5 + ["a dog ran over " * 3 + "x", line, "12 ..!! b"]
    docs += [t for t in random_texts(3, 50, length=40) if "\r/" not in t]  # (those take regex's path)
    config = TrainConfig(pattern="superword", workers=1)
    shard = ShardCounter(config, str(tmp_path), "w0")
    shard.add_texts(pa.array(docs, pa.string()))
    runs = shard.finish()
    assert len(runs) == 1 and not shard.plain
    got: Counter[bytes] = Counter()
    for p in range(N_PARTITIONS):
        table = read_partition(runs, p)
        chunks = table.column("chunk").to_pylist()
        assert len(chunks) == len(set(chunks))
        got.update({c.encode(): n for c, n in zip(chunks, table.column("count").to_pylist())})
    assert got == reference_counts(docs, SUPERWORD_LINES_PATTERN, ())
    assert got[line.encode()] == 6
    repeated = pa.table({"chunk": ["ab", "ab"], "count": [1, 2]}, schema=SCHEMA)
    write_run(str(tmp_path / "plain.arrow"), repeated, n_partitions=1)  # (never written so: read as it is)
    assert read_partition([str(tmp_path / "plain.arrow")], 0).num_rows == 2

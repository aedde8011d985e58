"""Every kernel names its numpy twin, and each pair runs here (issue 53; parbpe/jit.py).

One test per kernel of parbpe (jit.KERNELS, every module imported first): it fails where the kernel's
twin is empty or names no numpy function of parbpe, or where no family below compares it; then it runs
its family: the family's public entry with the kernels (jit on, kernels asked for) and with numpy (jit
off), on random inputs of several sizes (none, one, many), the outputs asserted equal, and the kernel
seen to run on the first path and no kernel on the second. A family runs once a session, however many
kernels it compares; where the shared data is there, some run again on realmix's text.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest

import parbpe
from parbpe import jit


def _import_every_module() -> None:
    """Import every module of parbpe, so that jit.KERNELS holds every kernel declared (not __main__: the CLI)."""
    for module in pkgutil.walk_packages(parbpe.__path__, "parbpe."):
        if not module.name.endswith(".__main__"):
            importlib.import_module(module.name)


_import_every_module()
# (kernels that tests declare, tests/test_jit.py's, are not parbpe's)
KERNELS = {name: k for name, k in sorted(jit.KERNELS.items()) if name.startswith("parbpe.")}


def twin_of(kernel: jit.Kernel) -> Any:
    """The function kernel.twin names ("parbpe.module:qualname"): the module imported, then each name of
    qualname looked up in turn (a function, or a class's method). Raises LookupError where it names none."""
    module, colon, qualname = kernel.twin.partition(":")
    if not colon or not qualname or module.split(".")[0] != "parbpe":
        raise LookupError(f"twin {kernel.twin!r} is not 'parbpe.module:qualname'")
    try:
        found = importlib.import_module(module)
        for name in qualname.split("."):
            found = getattr(found, name)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"twin {kernel.twin!r} does not resolve: {exc}") from None
    return found


def kernel_problems(name: str, kernel: jit.Kernel) -> list[str]:
    """What breaks the rule for one kernel: no twin, a twin that is no numpy function of parbpe, no family."""
    if not kernel.twin:
        return [f"{name} names no numpy twin: declare it @kernel(twin='parbpe.module:qualname')"]
    try:
        twin = twin_of(kernel)
    except LookupError as exc:
        return [f"{name}: {exc}"]
    problems = []
    if not callable(twin) or isinstance(twin, jit.Kernel):
        problems.append(f"{name}: twin {kernel.twin!r} is not a numpy function")
    if kernel.twin not in FAMILIES:
        problems.append(f"{name}: no family of tests/test_twins.py compares its twin {kernel.twin!r} (FAMILIES)")
    return problems


# --- the two paths ---------------------------------------------------------------------------------
_call = jit.Kernel.__call__


@contextlib.contextmanager
def _recording(ran: set[str]) -> Iterator[None]:
    """Every kernel called meanwhile (any thread) added to ran, by its name in jit.KERNELS."""
    def call(self: jit.Kernel, *args: Any) -> Any:
        ran.add(f"{self.__module__}.{self.__name__}")
        return _call(self, *args)

    with mock.patch.object(jit.Kernel, "__call__", call):
        yield


@dataclasses.dataclass
class Paths:
    """A family's two ways: call(...) with the kernels (jit on) and with numpy (jit off), and which
    kernels each way ran."""

    with_kernels: set[str] = dataclasses.field(default_factory=set)
    with_numpy: set[str] = dataclasses.field(default_factory=set)

    def kernels(self, call: Callable, *args: Any, **kwargs: Any) -> Any:
        with jit.using("on"), _recording(self.with_kernels):
            return call(*args, **kwargs)

    def numpy(self, call: Callable, *args: Any, **kwargs: Any) -> Any:
        with jit.using("off"), _recording(self.with_numpy):
            return call(*args, **kwargs)


@contextlib.contextmanager
def patched(*changes: tuple[Any, str, Any]) -> Iterator[None]:
    """Attributes (owner, name, value) set for the duration: thresholds lowered so that small inputs
    take the kernels' every branch (both ways run under the same ones)."""
    with contextlib.ExitStack() as stack:
        for owner, name, value in changes:
            stack.enter_context(mock.patch.object(owner, name, value))
        yield


def equal(got: Any, expected: Any, what: str = "") -> None:
    """Equal outputs: arrays element by element (np.testing), tuples and lists item by item, the rest by ==."""
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        np.testing.assert_array_equal(got, expected, err_msg=what)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), what
        for k, (a, b) in enumerate(zip(got, expected)):
            equal(a, b, f"{what}[{k}]")
    else:
        assert got == expected, what


# --- random inputs ---------------------------------------------------------------------------------
# What the cut rule, the lexers and the superword split look at: spaces after every kind of character,
# multi-byte whitespace, symbols after letters and digits, line breaks, apostrophes and contractions,
# zero bytes, letters of every case class, digits in runs, words long enough for every kind of key.
FRAGMENTS = ["a", "Z", "0", "9", " ", ".", ",", "!", "'", "-", "\n", "\r", "\t", "\x00", "\x0b", "  ", " \n", "\xa0",
             "\u3000", "\u2003", "\x85", "\u2028", "р", "с", "é", "中", "😀", "e\u0301", "ǅ", "ʰ", "Ⅻ", "²",
             "'s", "'LL", "'Ve", "abcdefgh", "abcdefghijklmnop", "ЖЖЖЖЖЖЖЖЖ", "x" * 40, "1234567890", "Hello",
             "wORLD", "/", "\r\n"]


def random_texts(rng: np.random.Generator, documents: int, longest: int = 60, slash: bool = True) -> list[str]:
    fragments = FRAGMENTS if slash else [f for f in FRAGMENTS if f != "/"]
    return ["".join(rng.choice(fragments, int(rng.integers(0, longest + 1)))) for _ in range(documents)]


def text_cases(seed: int, slash: bool = True) -> list[list[str]]:
    """Documents: none, one empty, one character, one document, a few, many."""
    rng = np.random.default_rng(seed)
    return [[], [""], ["a"], random_texts(rng, 1, 200, slash), random_texts(rng, 7, slash=slash),
            random_texts(rng, 300, slash=slash)]


def counts_of(table: pa.Table) -> dict[str, int]:
    """A counts table as {chunk: count}, rows of one chunk summed."""
    out: collections.Counter[str] = collections.Counter()
    for chunk, count in zip(table.column("chunk").to_pylist(), table.column("count").to_pylist()):
        out[chunk] += count
    return dict(out)


def random_corpus(rng: np.random.Generator, alphabet: bytes, words: int, longest: int) -> dict[bytes, int]:
    """Chunks (words of alphabet) and their counts, a few frequent and most rare."""
    letters = np.frombuffer(alphabet, np.uint8)
    counts: dict[bytes, int] = {}
    for _ in range(words):
        word = rng.choice(letters, int(rng.integers(1, longest + 1))).tobytes()
        counts[word] = counts.get(word, 0) + int(rng.zipf(1.5)) % 1000 + 1
    return counts


def chunk_table(counts: dict[bytes, int], vocab_size: int = 4096):
    from parbpe.merge.table import build_table

    items = sorted(counts.items())
    return build_table([c for c, _ in items], [k for _, k in items], vocab_size)


def copied(table):
    return dataclasses.replace(table, tokens=table.tokens.copy(), starts=table.starts.copy(),
                               lengths=table.lengths.copy(), counts=table.counts.copy())


# --- the families ------------------------------------------------------------------------------------
def pieces_counted(paths: Paths, texts: list[list[str]] | None = None, patterns=("gpt2", "gpt4", "gpt4o")) -> None:
    """The count stage's pieces (pieces.PieceCounter): cut and keyed, counted in hash tables, spelled,
    split by the numba lexer and keyed again (use_jit), against numpy's cuts, sorts and lexers and
    `regex`: the same chunk counts, the texts added in two batches."""
    import regex

    from parbpe.count.pieces import PieceCounter
    from parbpe.patterns import PATTERNS

    for k, name in enumerate(patterns):
        pattern = PATTERNS[name]
        for documents in texts if texts is not None else text_cases(k):
            array = pa.array(documents, pa.string())
            half = len(array) // 2

            def counted(use_jit: bool, array=array, half=half, pattern=pattern) -> dict[str, int]:
                counter = PieceCounter(pattern, regex.compile(pattern).findall, use_jit=use_jit)
                counter.add(array.slice(0, half))
                counter.add(array.slice(half))
                return counts_of(counter.chunk_counts())

            equal(paths.kernels(counted, True), paths.numpy(counted, False), f"{name}: {len(documents)} documents")


def pieces_keyed(paths: Paths) -> None:
    """piece_keyer.keyed_pieces (the cut-and-key kernel, any window) against cuts.cut_bounds and short_keys:
    the same pieces, the short ones' keys, the 9-16 byte ones' words and the long ones' bytes."""
    from parbpe.count.pieces import string_buffers
    from tests.count.test_piece_keyer import kernel_pieces, numpy_pieces

    for documents in text_cases(10):
        array = pa.array(documents, pa.string())
        for part in (array, array.slice(min(len(array), 3))):  # offsets not from 0
            offsets, data = string_buffers(part)
            for window in (1, 7, 1 << 18):
                equal(paths.kernels(kernel_pieces, offsets, data, window), paths.numpy(numpy_pieces, offsets, data),
                      "keyed")


def chunks_keyed(paths: Paths) -> None:
    """PieceKeyer.chunks (chunks keyed with their pieces' counts) against StringCounts.add: one keyer
    for calls of every size, the same counts."""
    from parbpe.count import chunking, piece_keyer
    from parbpe.count.pieces import StringCounts, string_buffers
    from parbpe.patterns import PATTERNS

    keyer = piece_keyer.PieceKeyer()
    rng = np.random.default_rng(11)
    kind, group = chunking.kind_of(PATTERNS["gpt4"])
    for documents in text_cases(11):
        offsets, data = string_buffers(pa.array(documents, pa.string()))
        counts = rng.integers(1, 1000, len(documents))
        bounds = paths.kernels(chunking.chunk_bounds, data, offsets, kind, group, chunking.char_tables())

        def by_kernel() -> dict[str, int]:
            got = StringCounts(hashed=True)
            got.add_keyed(*keyer.chunks(data, offsets, bounds, counts))
            return counts_of(got.table())

        def by_numpy() -> dict[str, int]:
            expected = StringCounts()
            piece = np.searchsorted(offsets, bounds[:-1], side="right") - 1
            expected.add(data, bounds.astype(np.int64), counts[piece])
            return counts_of(expected.table())

        equal(paths.kernels(by_kernel), paths.numpy(by_numpy), "chunks")


def keys_spelled(paths: Paths) -> None:
    """piece_keyer.spell against short_keys.strings_of: keys of 1 to 8 bytes, pairs of 9 to 16, none."""
    from parbpe.count import piece_keyer, short_keys
    from parbpe.count.pieces import string_buffers

    rng = np.random.default_rng(12)
    alphabet = ["a", "Z", " ", "\n", "é", "中", "\U0001f600", "~"]
    for low, high, paired in ((1, 8, False), (9, 16, True)):
        for size in (0, 1, 300):
            strings: set[str] = set()
            while len(strings) < size:
                s = "".join(rng.choice(alphabet, int(rng.integers(1, 7))))
                if low <= len(s.encode()) <= high:
                    strings.add(s)
            offsets, data = string_buffers(pa.array(sorted(strings), pa.string()))
            starts, lengths = offsets[:-1], np.diff(offsets)
            first = short_keys.keys_of(data, starts, np.minimum(lengths, 8))
            second = short_keys.keys_of(data, starts + 8, np.maximum(lengths - 8, 0)) if paired else None
            spelled_offsets, spelled = paths.kernels(piece_keyer.spell, first, second)
            strings_of = paths.numpy(short_keys.strings_of, first, second)
            assert pa.StringArray.from_buffers(len(first), pa.py_buffer(spelled_offsets.astype(np.int32)),
                                               pa.py_buffer(spelled)).equals(strings_of)
            assert strings_of.to_pylist() == sorted(strings)


def keys_summed(paths: Paths) -> None:
    """key_tables.KeyCounts (hash tables, grown from a few slots, added to in batches, weighted or
    not) against short_keys.sum_keys and sum_pairs: the same distinct keys and pairs, the same sums."""
    from parbpe.count import short_keys
    from parbpe.count.key_tables import KeyCounts

    rng = np.random.default_rng(13)
    for n in (0, 1, 5000):
        keys = rng.integers(1, 300, n).astype(np.uint64) * np.uint64(0x10001)  # never zero, many repeats
        second = rng.integers(0, 1 << 62, n).astype(np.uint64) % np.uint64(7)
        weights = rng.integers(1, 1000, n)
        for width, words in ((1, (keys,)), (2, (keys, second))):
            for weighted in (False, True):
                def hashed(words=words, weighted=weighted) -> tuple:
                    table = KeyCounts(width, slots=16)
                    for lo in range(0, n, 1200):  # in batches
                        table.add(tuple(w[lo:lo + 1200] for w in words), weights[lo:lo + 1200] if weighted else None)
                    *distinct, sums = table.items()
                    order = np.lexsort(distinct[::-1])
                    return tuple(d[order] for d in distinct) + (sums[order],)

                def sorted_sums(words=words, weighted=weighted) -> tuple:
                    w = weights if weighted else np.ones(n, np.int64)
                    if width == 1:
                        return short_keys.sum_keys(keys, w)
                    first, second_words, sums = short_keys.sum_pairs(*words, w)
                    order = np.lexsort((second_words, first))
                    return first[order], second_words[order], sums[order]

                equal(paths.kernels(hashed), paths.numpy(sorted_sums), f"width {width}, {n} keys")


def characters_decoded(paths: Paths) -> None:
    """kernels/lexer.py's decode (classes, ASCII points, contraction letters and byte positions of the
    characters of documents) against lexer.decode_utf8 and the same tables."""
    from parbpe.count import chunking
    from parbpe.count.lexer import decode_utf8
    from parbpe.count.pieces import string_buffers
    from parbpe.kernels import lexer as lexing

    table, canon = chunking.char_tables()
    for documents in text_cases(14):
        offsets, data = string_buffers(pa.array(documents, pa.string()))
        n = len(data)

        def decoded() -> tuple:
            bits, low, folded = (np.zeros(n, np.uint8) for _ in range(3))
            pos, char_docs = np.zeros(n + 1, np.int32), np.zeros(len(offsets), np.int64)
            chars = lexing.decode(data, offsets, table, canon, bits, low, folded, pos, char_docs)
            return pos[:chars], bits[:chars], low[:chars], folded[:chars], pos[chars]

        def by_numpy() -> tuple:
            leads, points = decode_utf8(data)
            return leads, table[points], np.where(points < 0x80, points, 0), canon[points], n

        equal(paths.kernels(decoded), paths.numpy(by_numpy), f"{len(documents)} documents")


def pieces_lexed(paths: Paths) -> None:
    """chunking.chunk_bounds (decode and the pattern's kernel) over the pieces cuts.py cuts, against the
    numpy lexers of lexer.py: GPT-2 and GPT-4 on any text (and GPT-4 with one digit a chunk), GPT-4o on
    the ASCII pieces numpy lexes (none holding a line break before "/")."""
    import regex

    from parbpe.count import chunking, lexer
    from parbpe.count.pieces import cut_pieces, string_buffers

    tables = chunking.char_tables()
    numpy_lexers = [(0, chunking.NO_GROUP, lambda d, o: lexer.gpt2_chunk_starts_utf8(d, o)),
                    (1, 3, lexer.gpt4_chunk_starts_utf8),
                    (1, 1, lambda d, o: lexer.gpt4_chunk_starts_utf8(d, o, digit_group=1)),
                    (2, 3, lexer.gpt4o_chunk_starts)]
    for documents in text_cases(15):
        pieces = cut_pieces(pa.array(documents, pa.string()))
        for kind, group, numpy_lexer in numpy_lexers:
            chosen = pieces
            if kind == 2:
                lexed = [p for p in pieces.to_pylist() if p.isascii() and not regex.search(r"[\r\n]/", p)]
                chosen = pa.array(lexed, pa.string())
            offsets, data = string_buffers(chosen)
            bounds = paths.kernels(chunking.chunk_bounds, data, offsets, kind, group, tables)
            equal(bounds, paths.numpy(lambda d=data, o=offsets, f=numpy_lexer: np.append(f(d, o), len(d))),
                  f"kind {kind}, group {group}")


def superword_split(paths: Paths, texts: list[list[str]] | None = None) -> None:
    """The superword split: chunking.chunk_bounds (superword_decode, superword_starts) against
    superword.superword_chunk_starts, and SuperwordCounter's chunk counts both ways (use_jit)."""
    from parbpe.count import chunking
    from parbpe.count.pieces import string_buffers
    from parbpe.count.superword import SuperwordCounter, superword_chunk_starts

    for documents in texts if texts is not None else text_cases(16, slash=False):
        array = pa.array(documents, pa.string())
        offsets, data = string_buffers(array)
        bounds = paths.kernels(chunking.chunk_bounds, data, offsets, chunking.SUPERWORD, 0, chunking.char_tables())
        equal(bounds, paths.numpy(lambda: np.append(superword_chunk_starts(data, offsets), len(data))), "bounds")

        def counted(use_jit: bool, array=array) -> dict[str, int]:
            counter = SuperwordCounter(use_jit)
            counter.add(array)
            return counts_of(counter.chunk_counts())

        equal(paths.kernels(counted, True), paths.numpy(counted, False), "superword counts")


def random_strings(seed: int) -> list[pa.Array]:
    """String arrays: none, one, prefixes of each other across 8-byte words, long ties, multi-byte
    characters, duplicates, zero bytes, an offset into the buffers."""
    rng = np.random.default_rng(seed)
    parts = ["a", "b", "ab", "abcdefgh", "abcdefg", "é", "中", " ", "z" * 9, "\x7f", "\x01", "x" * 17, "\U0001f600"]
    arrays = [pa.array([], pa.string()), pa.array(["only"], pa.string()), pa.array(["", "a", ""], pa.string())]
    for size, zeros in ((40, False), (3000, False), (500, True)):
        strings = ["".join(rng.choice(parts + ["\x00"] * zeros, int(rng.integers(0, 14)))) for _ in range(size)]
        strings += list(rng.choice(strings, 50))  # equal strings keep their order
        arrays.append(pa.array(strings, pa.string()).slice(1))
    return arrays


def bytes_ordered(paths: Paths, arrays: list[pa.Array] | None = None) -> None:
    """byte_order: the radix kernel (jit on) against numpy's word sorts and pyarrow's (off)."""
    from parbpe.count.byte_order import byte_order

    for array in arrays if arrays is not None else random_strings(17):
        equal(paths.kernels(byte_order, array), paths.numpy(byte_order, array), f"{len(array)} strings")


def partitioned(paths: Paths, arrays: list[pa.Array] | None = None) -> None:
    """partition_ids: the kernel's hash (jit on) against numpy's (off), of arrays and chunked arrays."""
    from parbpe.count.partitions import partition_ids

    for array in arrays if arrays is not None else random_strings(18):
        for chunks in (array, pa.chunked_array([array, array.slice(len(array) // 2)], pa.string())):
            for n_partitions in (32, 7):
                equal(paths.kernels(partition_ids, chunks, n_partitions),
                      paths.numpy(partition_ids, chunks, n_partitions), f"{len(chunks)} chunks")


def _flat(chunks: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum([len(c) for c in chunks], out=offsets[1:])
    return np.frombuffer(b"".join(chunks), np.uint8), offsets


def segmented(paths: Paths, cases: list | None = None) -> None:
    """Tokenizer.segment_arrays by greedy and shortest: the segmentation kernel (over the trie of hashed
    edges fill_hash makes) with jit on, segment.py's numpy with it off; and tables.token_totals (the
    corpus evaluation's counts of each token, both methods in one pass) against numpy's ids counted."""
    from parbpe.tokenizer import tables
    from parbpe.tokenizer.model import Tokenizer

    if cases is None:
        rng = np.random.default_rng(19)
        cases = []
        for alphabet, longest in ((b"ab", 5), (b"ab\x00\xff", 30), (b"abc", 12)):
            letters = np.frombuffer(alphabet, np.uint8)
            extra = {rng.choice(letters, int(rng.integers(2, longest + 1))).tobytes() for _ in range(40)}
            tokens = [bytes([b]) for b in range(256)] + sorted(extra)
            tokens = [tokens[i] for i in rng.permutation(len(tokens))]  # ids in shuffled order
            chunks = [rng.choice(letters, int(rng.integers(0, 41))).tobytes() for _ in range(60)]
            # (not [b""] alone: numpy's segment.greedy_tokens raises on a batch of empty chunks only)
            for some in ([], [b"", b"ab"], chunks[:1], chunks):
                cases.append((Tokenizer.from_vocabulary(tokens, segmentation="greedy"), some))
    for tok, chunks in cases:
        for method in ("greedy", "shortest"):
            got = paths.kernels(tok.segment_arrays, chunks, method)
            owner, ids = paths.numpy(tok.segment_arrays, chunks, method)
            equal(got, (owner, ids), method)
        weights = np.arange(1, len(chunks) + 1, dtype=np.int64)
        totals = paths.kernels(lambda: tables.token_totals(tok.kernel_tables(), ["greedy", "shortest"],
                                                            *_flat(chunks), weights))
        for method, counted in totals.items():
            owner, ids = paths.numpy(tok.segment_arrays, chunks, method)
            equal(counted, np.bincount(ids, weights=weights[owner], minlength=len(counted)).astype(np.int64), method)


def random_merges(rng: np.random.Generator, byte_ids: list[int], letters: bytes) -> list[tuple[int, int, int]]:
    """Merges of tokens made from letters, new ids from 1000 on (ids that are not training's)."""
    tokens, merges, seen = [byte_ids[b] for b in letters], [], set()
    for _ in range(int(rng.integers(1, 40))):
        a, b = (tokens[int(i)] for i in rng.integers(0, len(tokens), 2))
        if (a, b) not in seen:
            seen.add((a, b))
            merges.append((a, b, 1000 + len(merges)))
            tokens.append(merges[-1][2])
    return merges


def pathpiece_scored(paths: Paths, cases: list | None = None) -> None:
    """PathPiece's scoring pass (ScoringPool in this process: the kernels over the flat chunk table with
    jit on, score.token_scores over padded batches with it off): the same scores, IRREPLACEABLE marks
    and usage, for vocabularies in shuffled id order with tokens up to 16 bytes, chunks empty, of one
    byte, of many, and a table of none; in each pool a vocabulary, then some of its tokens in another
    order (scored from the windows kept), then those with tokens it did not have (windows found again)."""
    from parbpe.pathpiece.score import IRREPLACEABLE
    from parbpe.pathpiece.workers import ScoringPool

    if cases is None:
        rng = np.random.default_rng(23)
        cases = []
        for alphabet, longest in ((b"ab", 6), (b"ab\x00\xff", 40), (b"abc", 16)):
            letters = np.frombuffer(alphabet, np.uint8)
            chunks = [rng.choice(letters, int(rng.integers(0, longest + 1))).tobytes() for _ in range(80)]
            extra = {c[i:i + int(rng.integers(2, 17))] for c in chunks for i in range(0, max(len(c) - 1, 0), 2)}
            tokens = [bytes([b]) for b in range(256)] + sorted(t for t in extra if len(t) > 1)
            tokens = [tokens[i] for i in rng.permutation(len(tokens))]
            fewer = [t for t in tokens if len(t) == 1 or rng.random() < 0.5][::-1]
            other = fewer + sorted({t + t[:1] for t in extra if 1 < len(t) < 16} - set(tokens))[:20]
            for some in ([], [b""], [b"a"], [b"", b"ab", b"ba"], chunks):
                cases.append(((tokens, fewer, other), some, rng.integers(1, 10**6, len(some))))
    marks = 0
    for vocabularies, chunks, counts in cases:
        def scored(vocabularies=vocabularies, chunks=chunks, counts=counts) -> list[tuple[np.ndarray, np.ndarray]]:
            with ScoringPool(*_flat(chunks), np.asarray(counts, dtype=np.int64), 1) as pool:
                return [pool.scores(tokens) for tokens in vocabularies]

        got, expected = paths.kernels(scored), paths.numpy(scored)
        equal(got, expected, f"{len(chunks)} chunks")
        marks += sum(int((scores == IRREPLACEABLE).sum()) for scores, _ in expected)
    assert marks, "no case had an occurrence without an alternative path"


def merges_encoded(paths: Paths, cases: list | None = None) -> None:
    """tables.chunk_tokens and token_totals by merges (the merges kernel: a heap over a linked list)
    against Tokenizer._merge_long (Python's heap): the same ids for every chunk, the same totals;
    bytes numbered as GPT-2 numbers them or as parbpe does, chunks of none to 300 bytes."""
    from parbpe.tokenizer import tables
    from parbpe.tokenizer.model import Tokenizer

    if cases is None:
        rng = np.random.default_rng(20)
        cases = []
        for k in range(8):
            byte_ids = list(range(256)) if k % 2 else [int(i) for i in rng.permutation(256)]
            letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)[:int(rng.integers(1, 5))]
            tok = Tokenizer(pattern="gpt4", merges=random_merges(rng, byte_ids, letters.tobytes()), byte_ids=byte_ids)
            chunks = [rng.choice(letters, int(rng.choice([0, 1, 2, 5, 12, 300]))).tobytes() for _ in range(12)]
            cases += [(tok, []), (tok, chunks[:1]), (tok, chunks)]
    for tok, chunks in cases:
        data, offsets = _flat(chunks)
        weights = np.arange(1, len(chunks) + 1, dtype=np.int64)

        def by_kernel() -> tuple:
            made = tok.kernel_tables()
            return tables.chunk_tokens(made, "merges", data, offsets), tables.token_totals(
                made, ["merges"], data, offsets, weights)["merges"]

        def by_heap(size: int) -> tuple:
            ids = [tok._merge_long([tok.byte_ids[b] for b in c]) for c in chunks]
            owner = np.repeat(np.arange(len(chunks)), [len(i) for i in ids])
            flat = np.array([t for i in ids for t in i], np.int64)
            return (owner, flat), np.bincount(flat, weights=weights[owner], minlength=size).astype(np.int64)

        (owner, ids), totals = paths.kernels(by_kernel)
        (want_owner, want_ids), want_totals = paths.numpy(by_heap, len(totals))
        equal((owner, ids), (want_owner, want_ids), "merged ids")
        equal(totals, want_totals, "merged totals")


def index_folded(paths: Paths) -> None:
    """A packed PairIndex with kernels (blocks folded by merged_runs, searched by searched: SEARCH_MIN
    lowered to every block) against numpy's (np.sort, np.searchsorted): the same blocks, spans and entries."""
    from parbpe.merge.pair_index import PairIndex
    from parbpe.merge.pairs import pack

    rng = np.random.default_rng(21)
    tokens = np.array([0, 1, 7, 255, 65534, 65535])
    rounds = []
    for step in range(150):
        n = int(rng.choice([0, 1, 3, 40, 400]))
        keys = pack(rng.choice(tokens, n), rng.choice(tokens, n))
        rounds.append((keys, rng.integers(0, 2**31 - 1, n)))
    queries = [pack(tokens[:0], tokens[:0]), pack(rng.choice(tokens, 1), rng.choice(tokens, 1)),
               pack(rng.choice(tokens, 20), rng.choice(tokens, 20))]

    def built(use_kernels: bool) -> list:
        index = PairIndex(value_dtype=np.int32, packed=True, use_kernels=use_kernels)
        seen = [index.lookup(queries[2])]
        for keys, values in rounds:
            index.add(keys, values)
            seen.append([b.copy() for b in index.blocks])
        for query in queries:
            seen += [index.spans(query), index.lookup(query)]
        return seen

    with patched((jit, "SEARCH_MIN", 1)):
        equal(paths.kernels(built, True), paths.numpy(built, False), "index")


def pairs_counted(paths: Paths) -> None:
    """PairCounts with kernels (_by_age, _rising_by_age, _lower_by_key) against numpy's (age_key and
    argsort, _lower_counts_numpy): the same store through rounds of falling counts and new pairs of new
    tokens, some falling to zero (the store compacted), a round's keys unsorted once (numpy's way)."""
    from parbpe.merge.pairs import pack
    from parbpe.merge.selection import PairCounts

    rng = np.random.default_rng(22)
    for width, n_pairs, n_rounds in ((2, 0, 3), (2, 1, 3), (50, 400, 30), (2000, 3000, 40)):
        start = np.unique(pack(rng.integers(0, width, n_pairs), rng.integers(0, width, n_pairs)))
        current = dict(zip(start.tolist(), rng.integers(1, 100, len(start)).tolist()))
        first = (start, np.array([current[k] for k in start.tolist()], np.int64))
        rounds = []
        new_id = width
        for r in range(n_rounds):
            live = [k for k, c in current.items() if c > 0]
            falling = rng.choice(live, min(len(live), int(rng.integers(0, 200)))) if live else []
            changes = {int(k): -int(rng.integers(1, current[int(k)] + 1)) for k in falling}
            if r % 3 == 0:  # many counts to zero: the store drops its dead entries
                changes.update({k: -current[k] for k in live[: len(live) // 2]})
            for _ in range(int(rng.integers(1, 4))):  # new tokens, and pairs of them with older ones
                others = rng.integers(0, new_id + 1, int(rng.integers(0, 30)))
                for x in others.tolist():
                    changes[pack(new_id, x).item() if rng.random() < 0.5 else pack(x, new_id).item()] = int(
                        rng.integers(1, 50))
                new_id += 1
            for k, d in changes.items():
                current[k] = current.get(k, 0) + d
            keys = np.array(sorted(changes), np.int64)
            rounds.append((keys, np.array([changes[k] for k in keys.tolist()], np.int64)))
        if len(rounds) > 2:  # one round's keys in descending order: the kernels leave it to numpy
            rounds[2] = (rounds[2][0][::-1].copy(), rounds[2][1][::-1].copy())

        def stored(use_kernels: bool) -> list:
            counts = PairCounts(*first, use_kernels=use_kernels)
            seen = [counts.arrays(), counts.live]
            for keys, deltas in rounds:
                counts.update(keys, deltas)
                seen += [tuple(a.copy() for a in counts.arrays()), counts.live]
            return seen

        got, expected = paths.kernels(stored, True), paths.numpy(stored, False)
        for a, b in zip(got, expected, strict=True):
            equal(a, b, f"width {width}")


def cold_table(seed: int, n_chunks: int, width: int = 300, longest: int = 12, heavy: bool = True):
    """A ChunkTable of Zipf-distributed tokens, most chunks seen once, a few 65,535 times or more."""
    from parbpe.merge.table import ChunkTable

    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, width + 1)
    lengths = rng.integers(1, longest + 1, n_chunks)
    starts = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    tokens = rng.choice(width, int(starts[-1]), p=p / p.sum()).astype(np.uint16)
    counts = rng.choice([1, 1, 1, 2, 3, 7, 40], n_chunks)
    if heavy:
        counts[rng.random(n_chunks) < 0.01] = 70_000 + seed
    return ChunkTable(tokens=tokens, starts=starts, lengths=lengths.astype(np.int64), counts=counts.astype(np.int64))


def cold_tables() -> list:
    return [cold_table(23, 0), cold_table(24, 1, longest=1), cold_table(25, 1), cold_table(26, 3000),
            cold_table(27, 400, longest=60)]


def cold_pairs_summed(paths: Paths, tables: list | None = None) -> None:
    """cold_pairs.pair_sums by its kernels (bucket_pairs, sum_buckets; one thread and two) against
    _pair_sums_numpy: the same pairs, sums and occurrences (the kernels' in no order)."""
    from parbpe.merge.cold_pairs import pair_sums

    for table in tables if tables is not None else cold_tables():
        expected = paths.numpy(pair_sums, table, use_jit=False)
        for threads in (1, 2):
            got = paths.kernels(pair_sums, table, use_jit=True, threads=threads)
            order = np.argsort(got[0])
            equal(tuple(x[order] for x in got), expected, f"{len(table.counts)} chunks, {threads} threads")


def _rows(table) -> dict[tuple[int, ...], int]:
    """A table as {piece: summed count} (rows in any order, a piece in one row or several)."""
    out: dict[tuple[int, ...], int] = collections.Counter()
    for c in range(len(table.counts)):
        out[tuple(table.tokens[table.starts[c]:table.starts[c + 1]].tolist())] += int(table.counts[c])
    return dict(out)


def cold_pairs_cut(paths: Paths, tables: list | None = None) -> None:
    """cold_pairs.cut_table by its kernels (hot_set, cut_pieces; one thread and two) against
    _cut_numpy, for no hot pair, some, all: the same pieces with the same counts."""
    from parbpe.merge.cold_pairs import _pair_sums_numpy, cut_table

    rng = np.random.default_rng(28)
    for table in tables if tables is not None else cold_tables():
        keys, sums, _ = _pair_sums_numpy(table)
        for share in (0.0, 0.3, 0.9, 1.0):
            hot = keys[rng.random(len(keys)) < share]
            expected = paths.numpy(lambda: _rows(cut_table(table, hot, use_jit=False)))
            for threads in (1, 2):
                got = paths.kernels(cut_table, table, hot, use_jit=True, threads=threads)
                assert np.array_equal(got.lengths, np.diff(got.starts)) and got.starts[-1] == len(got.tokens)
                equal(_rows(got), expected, f"share {share}, {threads} threads")


def _stage1(paths: Paths, counts: dict[bytes, int], n: int):
    """Merges learned on counts (numpy's way): (merges, batch sizes)."""
    from parbpe.merge.coordinator import learn_merges

    result = paths.numpy(learn_merges, chunk_table(counts), [bytes([b]) for b in range(256)], n)
    return result.merges, result.batch_sizes


def byte_tables_encoded(paths: Paths, cases: list | None = None) -> None:
    """encode.encode_byte_table (jit on: encode_chunks, one thread and two, its tables small so that
    they regrow) against its numpy path (off) and encode_table; encode_chunk_arrays (the kernel straight
    from chunk arrays) against the same; tables of no chunk, one, many."""
    from parbpe.merge import encode
    from parbpe.merge.table import token_dtype

    if cases is None:
        rng = np.random.default_rng(29)
        cases = []
        for alphabet in (b"ab c", b"abcd "):
            merges, sizes = _stage1(paths, random_corpus(rng, alphabet, 300, 40) | {b"ab\x00": 500}, 80)
            other = random_corpus(rng, b"abcde \x00", 600, 60) | {b"x": 2, b"ab" + b"\x00" * 5: 3}
            items = sorted(other.items())
            cases += [(merges, sizes, items[:0]), (merges, sizes, items[:1]), (merges, sizes, items)]
    for merges, sizes, items in cases:
        table = chunk_table(dict(items))
        expected = paths.numpy(encode.encode_byte_table, table, merges, sizes)
        equal(paths.numpy(lambda: encode.encode_table(table, merges, sizes, 256).tokens), expected.tokens, "twin")
        for threads, small in ((1, False), (2, True)):
            with patched((encode, "TWO_THREADS_MIN_BYTES", 1), *([(encode, "_ENCODE_SIZES", (3, 2, 1))] * small)):
                got = paths.kernels(encode.encode_byte_table, table, merges, sizes, threads=threads)
                data, offsets = _flat([c for c, _ in items])
                arrays = paths.kernels(encode.encode_chunk_arrays, data, offsets,
                                       np.array([k for _, k in items], np.int64), merges,
                                       token_dtype(256 + len(merges)), threads)
            for name in ("tokens", "starts", "lengths", "counts"):
                equal(getattr(got, name), getattr(expected, name), f"{name}, {threads} threads")
                equal(getattr(arrays, name), getattr(expected, name), f"arrays' {name}, {threads} threads")


# The linked engine's ways: (name, threads, attributes set) so that a small table takes every kernel:
# the first count by count_live_pairs (default) or sorted_live_pairs and sum_sorted_pairs, in two
# threads; rounds in two threads (split_point); candidates radix-sorted; the index rebuilt often.
def _linked_ways():
    from parbpe.merge import linked
    from parbpe.merge.engines import LinkedEngine

    every = [(linked, "TWO_THREADS_MIN", 1), (linked, "SORT_IN_TWO_MIN", 1),
             (jit, "RADIX_MIN", 1), (LinkedEngine, "MIN_REBUILD", 8), (LinkedEngine, "COUNTING_SORT_WIDTH", 0)]
    return [("default", 1, []), ("one thread, sorted", 1, every), ("two threads", 2, every[:-1]),
            ("two threads, sorted", 2, every)]


def linked_corpora(seed: int) -> list[tuple[dict[bytes, int], int]]:
    rng = np.random.default_rng(seed)
    return [({b"a" * 600: 3, b"a" * 7: 5, b"aaaa": 4, b"ba" * 50: 2, b"xyxyxy": 40, b"aab": 9, b"abab": 6}, 30),
            (random_corpus(rng, b"ab", 300, 30), 50), (random_corpus(rng, b"abc ", 800, 40), 120),
            (random_corpus(rng, bytes(range(33, 127)), 1500, 10), 200)]


def linked_engines(paths: Paths, corpora: list | None = None) -> None:
    """The linked engine with its kernels against its numpy methods: a merge list (learned numpy's way)
    replayed on both, round by round (apply, or find_hits then apply_hits as exact batching does): the
    same first counts, hits, count changes and index lookups, and the same table at the end, in every
    way of _linked_ways; then learn_merges itself, jit on and off: the same merges, batches and chunks."""
    from parbpe.merge import coordinator
    from parbpe.merge.coordinator import learn_merges
    from parbpe.merge.engines import LinkedEngine
    for counts, n in corpora if corpora is not None else linked_corpora(30):
        table = chunk_table(counts)
        merges, sizes = _stage1(paths, counts, n)
        for way, threads, changes in _linked_ways():
            with patched(*changes):
                fast = paths.kernels(LinkedEngine, copied(table), use_kernels=True, threads=threads)
                plain = paths.numpy(LinkedEngine, copied(table), use_kernels=False)
                def settled(call: Callable, *args: Any) -> Any:  # (a round's index work done before numpy's turn)
                    out = call(*args)
                    fast.settle()
                    return out

                equal(paths.kernels(settled, fast.initial_pair_counts), paths.numpy(plain.initial_pair_counts), way)
                done = 0
                for r, size in enumerate(sizes):
                    first = np.array([a for a, _ in merges[done:done + size]], np.int64)
                    second = np.array([b for _, b in merges[done:done + size]], np.int64)
                    new_ids = np.arange(256 + done, 256 + done + size, dtype=np.int64)
                    done += size
                    if r % 2:
                        hits = paths.kernels(settled, fast.find_hits, first, second)
                        plain_hits = paths.numpy(plain.find_hits, first, second)
                        assert np.all(np.diff(hits[0]) > 0), way  # in table order
                        equal(sorted(zip(*(h.tolist() for h in plain_hits))), list(zip(*(h.tolist() for h in hits))),
                              f"{way}: round {r}'s hits")
                        got = paths.kernels(settled, fast.apply_hits, *hits, new_ids)
                        expected = paths.numpy(plain.apply_hits, *plain_hits, new_ids)
                    else:
                        got = paths.kernels(settled, fast.apply, first, second, new_ids)
                        expected = paths.numpy(plain.apply, first, second, new_ids)
                    equal(got, expected, f"{way}: round {r}'s count changes")
                    equal(fast.table.tokens, plain.table.tokens, f"{way}: round {r}'s tokens")
                paths.kernels(fast.compact)
                paths.numpy(plain.compact)
                for name in ("tokens", "lengths"):
                    equal(getattr(fast.table, name), getattr(plain.table, name), f"{way}: {name}")

        def learned(**settings: Any) -> tuple:
            result = learn_merges(chunk_table(counts), [bytes([b]) for b in range(256)], n, min_tokens_per_worker=1,
                                  **settings)
            return result.merges, result.batch_sizes, [result.engine.chunk_tokens(c) for c in range(table.n_chunks)]

        for settings in ({}, {"batching": "exact"}):
            with patched((coordinator, "THREADS", 2), *_linked_ways()[-1][2]):
                assert paths.kernels(learned, **settings) == paths.numpy(learned, **settings), settings


# Each twin's families: functions of a Paths that run both ways and assert their outputs equal.
FAMILIES: dict[str, tuple[Callable[[Paths], None], ...]] = {
    "parbpe.count.cuts:cut_bounds": (pieces_keyed, pieces_counted),
    "parbpe.count.pieces:StringCounts.add": (chunks_keyed, pieces_counted),
    "parbpe.count.short_keys:strings_of": (keys_spelled, pieces_counted),
    "parbpe.count.short_keys:sum_keys": (keys_summed, pieces_counted),
    "parbpe.count.lexer:decode_utf8": (characters_decoded, pieces_lexed, pieces_counted),
    "parbpe.count.lexer:gpt2_chunk_starts_utf8": (pieces_lexed, pieces_counted),
    "parbpe.count.lexer:gpt4_chunk_starts_utf8": (pieces_lexed, pieces_counted),
    "parbpe.count.lexer:gpt4o_chunk_starts": (pieces_lexed, pieces_counted),
    "parbpe.count.superword:superword_chunk_starts": (superword_split,),
    "parbpe.count.byte_order:byte_order": (bytes_ordered,),
    "parbpe.count.partitions:partition_ids": (partitioned,),
    "parbpe.tokenizer.model:Tokenizer.segment_arrays": (segmented,),
    "parbpe.tokenizer.model:Tokenizer._merge_long": (merges_encoded,),
    "parbpe.pathpiece.score:token_scores": (pathpiece_scored,),
    "parbpe.merge.pair_index:PairIndex._fold": (index_folded,),
    "parbpe.merge.pair_index:PairIndex.spans": (index_folded,),
    "parbpe.merge.selection:PairCounts.__init__": (pairs_counted,),
    "parbpe.merge.selection:PairCounts.update": (pairs_counted,),
    "parbpe.merge.selection:_lower_counts_numpy": (pairs_counted,),
    "parbpe.merge.cold_pairs:_pair_sums_numpy": (cold_pairs_summed,),
    "parbpe.merge.cold_pairs:_cut_numpy": (cold_pairs_cut,),
    "parbpe.merge.encode:encode_table": (byte_tables_encoded,),
    "parbpe.merge.engines:LinkedEngine.__init__": (linked_engines,),
    "parbpe.merge.engines:LinkedEngine._index_live_pairs": (linked_engines,),
    "parbpe.merge.engines:LinkedEngine._packed_entries": (linked_engines,),
    "parbpe.merge.engines:LinkedEngine._index_new_pairs": (linked_engines,),
    "parbpe.merge.engines:LinkedEngine.find_hits": (linked_engines,),
    "parbpe.merge.engines:LinkedEngine.apply_hits": (linked_engines,),
    "parbpe.merge.pairs:runs_taken_left_to_right": (linked_engines,),
    "parbpe.merge.pairs:aggregate": (linked_engines,),
}


@functools.cache
def family_run(family: Callable[[Paths], None]) -> tuple[Paths, BaseException | None]:
    """A family run once a session: the kernels each way ran, and what it raised (None: its outputs agreed)."""
    paths = Paths()
    try:
        family(paths)
    except Exception as exc:  # kept, raised again for every kernel of the family
        return paths, exc
    return paths, None


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_kernel_equals_its_numpy_twin(name):
    kernel = KERNELS[name]
    problems = kernel_problems(name, kernel)
    assert not problems, "\n".join(problems)
    if not jit.installed():
        pytest.skip("numba is not installed: no kernel to compare with its twin")
    ran = set()
    for family in FAMILIES[kernel.twin]:
        paths, error = family_run(family)
        if error is not None:
            raise error
        assert not paths.with_numpy, f"{family.__name__}'s numpy path ran kernels: {sorted(paths.with_numpy)}"
        ran |= paths.with_kernels
    assert name in ran, f"{[f.__name__ for f in FAMILIES[kernel.twin]]} never ran {name} with the kernels on"


def test_every_twin_of_a_family_is_named_by_a_kernel():
    """No family left behind a renamed twin."""
    assert set(FAMILIES) == {k.twin for k in KERNELS.values()}


def test_a_kernel_without_a_twin_breaks_the_rule():
    """The check bites: a kernel declared without a twin, or naming no function, or one no family compares."""
    def _bare(values):
        return values.sum()

    def _unknown(values):
        return values.sum()

    def _lonely(values):
        return values.sum()

    declared = [jit.kernel(_bare), jit.kernel(twin="parbpe.count.cuts:no_such_function")(_unknown),
                jit.kernel(twin="parbpe.count.cuts:cut_bounds.__call__")(_lonely)]
    names = [f"{f.__module__}.{f.__name__}" for f in (_bare, _unknown, _lonely)]
    try:
        assert all(jit.KERNELS[name] is k for name, k in zip(names, declared))
        bare, unknown, lonely = (kernel_problems(name, k) for name, k in zip(names, declared))
        assert bare and "names no numpy twin" in bare[0]
        assert unknown and "does not resolve" in unknown[0]
        assert lonely and "no family" in lonely[0]
        assert not kernel_problems("cut_and_key", KERNELS["parbpe.kernels.pieces.cut_and_key"])
    finally:
        for name in names:
            jit.KERNELS.pop(name, None)


# --- realmix's text ----------------------------------------------------------------------------------
REAL_BYTES = 2 << 20


@functools.cache
def realmix_text(path: str) -> tuple[str, ...]:
    """The first REAL_BYTES or so of the text column of a realmix shard, as documents."""
    import pyarrow.parquet as pq

    documents, size = [], 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1000, columns=["text"]):
        for text in batch.column(0).to_pylist():
            if text is not None:
                documents.append(text)
                size += len(text.encode())
            if size >= REAL_BYTES:
                return tuple(documents)
    return tuple(documents)


@functools.cache
def realmix_chunks(path: str) -> dict[bytes, int]:
    """The GPT-4 chunk counts of realmix_text (the numba count, equal to numpy's: test_real_inputs)."""
    import regex

    from parbpe.count.pieces import PieceCounter
    from parbpe.patterns import PATTERNS

    counter = PieceCounter(PATTERNS["gpt4"], regex.compile(PATTERNS["gpt4"]).findall, use_jit=True)
    counter.add(pa.array(realmix_text(path), pa.string()))
    return {chunk.encode(): count for chunk, count in counts_of(counter.chunk_counts()).items()}


def _real_count(paths: Paths, path: str) -> None:
    pieces_counted(paths, [list(realmix_text(path))], patterns=("gpt4", "gpt4o"))
    superword_split(paths, [[t for t in realmix_text(path) if "\r/" not in t]])


def _real_strings(paths: Paths, path: str) -> None:
    chunks = pa.array([c.decode() for c in realmix_chunks(path)], pa.string())
    bytes_ordered(paths, [chunks])
    partitioned(paths, [chunks])


def _real_merges(paths: Paths, path: str) -> None:
    counts = realmix_chunks(path)
    top = dict(sorted(counts.items(), key=lambda item: -item[1])[:20_000])
    linked_engines(paths, [(top, 300)])
    table = chunk_table(top)
    cold_pairs_summed(paths, [table])
    cold_pairs_cut(paths, [table])
    merges, sizes = _stage1(paths, top, 200)
    byte_tables_encoded(paths, [(merges, sizes, sorted(counts.items()))])
    tok = parbpe_tokenizer(merges)
    chunks = sorted(counts)[:20_000]
    merges_encoded(paths, [(tok, chunks)])
    vocabulary = dict.fromkeys([bytes([b]) for b in range(256)] + [tok.vocab[256 + r] for r in range(len(merges))])
    segmented(paths, [(type(tok).from_vocabulary(list(vocabulary)), chunks)])
    tokens = [t for t in vocabulary if len(t) <= 16]
    fewer = [t for k, t in enumerate(tokens) if len(t) == 1 or k % 3]
    pathpiece_scored(paths, [((tokens, fewer, fewer[::-1]), chunks, [counts[c] for c in chunks])])


def parbpe_tokenizer(merges: list[tuple[int, int]]):
    from parbpe.tokenizer.model import Tokenizer

    return Tokenizer(pattern="gpt4", merges=[(a, b, 256 + r) for r, (a, b) in enumerate(merges)])


REAL = {"count": _real_count, "strings": _real_strings, "merges": _real_merges}


def realmix_shard() -> Path | None:
    """The realmix shard in shared/data beside this checkout or beside any folder above it (conftest's
    SHARED_DATA is the first of them; a worktree's is further up), or None where it is nowhere."""
    for folder in Path(__file__).resolve().parents:
        shard = folder / "shared" / "data" / "realmix" / "train-00000-of-00008.parquet"
        if shard.is_file():
            return shard
    return None


@pytest.mark.shared_data
@pytest.mark.parametrize("family", sorted(REAL))
def test_real_inputs(family):
    """Families again, on realmix's text: its chunk counts (GPT-4, GPT-4o, the superword split), the
    chunks sorted and partitioned, a table of its 20,000 commonest chunks merged, cut, encoded, and its
    chunks encoded and segmented by a tokenizer of those merges, and scored by PathPiece with its
    vocabulary."""
    shard = realmix_shard()
    if shard is None:
        pytest.skip("shared data not found (shared/data/realmix beside this checkout or above it)")
    if not jit.installed():
        pytest.skip("numba is not installed")
    paths = Paths()
    REAL[family](paths, str(shard))
    assert not paths.with_numpy and paths.with_kernels

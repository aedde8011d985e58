"""The numba cut-and-key kernel (piece_keyer.py): the same pieces, keys and long strings as numpy's
cut_bounds and short_keys, whatever the text, the documents and the kernel's window."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from parbpe.count import short_keys
from parbpe.count.cuts import cut_bounds
from parbpe.count.pieces import string_buffers

pytest.importorskip("numba")

from parbpe.count import piece_keyer  # noqa: E402  (after the skip: its kernel compiles with numba)

# What the cut rule looks at: spaces after every kind of character, multi-byte whitespace (and the
# letters whose last byte may end one: р is D1 80, like the 80 of U+3000), symbols after letters and
# digits, line breaks, the apostrophe, zero bytes, and words long enough for every kind of piece.
ALPHABET = (list("aZ09 .,;!'-\n\r\t\x00\x0b") + ["  ", " \n", "\xa0", "\u3000", "\u2003", "\x85", "\u1680",
            "\u2028", "\u205f", "р", "с", "é", "中", "😀", "\u2009x", "e\u0301", "abcdefgh", "abcdefghijklmnop",
            "ЖЖЖЖЖЖЖЖЖ", "x" * 40, "\x00abc", "1234567890"])


def _texts(seed: int, documents: int = 100) -> list[str]:
    rng = random.Random(seed)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 120))) for _ in range(documents)]
    return texts + ["", "a", " ", "\u3000 ", "р ", "x" * 17, "\x00" * 9, ""]


def numpy_pieces(offsets: np.ndarray, data: np.ndarray) -> tuple:
    """numpy's pieces: keys of the short ones, words of the 9-16 byte ones, the others' bytes."""
    bounds = cut_bounds(offsets, data)
    starts, lengths = bounds[:-1], np.diff(bounds)
    fit = short_keys.fits(data, starts, lengths, 2 * short_keys.MAX_BYTES)
    short = fit & (lengths <= short_keys.MAX_BYTES)
    mid = fit & ~short
    keys = short_keys.keys_of(data, starts, lengths)
    second = short_keys.keys_of(data, starts[mid] + 8, lengths[mid] - 8)
    long = [data[s:e].tobytes() for s, e in zip(starts[~fit], bounds[1:][~fit])]
    return keys[short], keys[mid], second, long


def kernel_pieces(offsets: np.ndarray, data: np.ndarray, window: int) -> tuple:
    keys, first, second, long = piece_keyer.keyed_pieces(offsets, data, window)
    return keys, first, second, [s.encode("utf-8") for part in long for s in part.to_pylist()]


def _equal(got: tuple, expected: tuple) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(got[:3], expected[:3])) and got[3] == expected[3]


@pytest.mark.parametrize("window", [1, 2, 3, 7, 64, 1 << 18])
@pytest.mark.parametrize("seed", range(4))
def test_the_kernel_keys_the_pieces_numpy_cuts(seed, window):
    offsets, data = string_buffers(pa.array(_texts(seed), pa.string()))
    expected = numpy_pieces(offsets, data)
    assert len(expected[0]) > 50 and len(expected[1]) > 10 and len(expected[3]) > 10  # every kind is there
    assert _equal(kernel_pieces(offsets, data, window), expected)


def test_a_slice_of_a_larger_array_and_empty_input():
    texts = pa.array(_texts(9), pa.string()).slice(5, 30)  # offsets not from 0, bytes not aligned
    offsets, data = string_buffers(texts)
    assert _equal(kernel_pieces(offsets, data, 5), numpy_pieces(offsets, data))
    offsets, data = string_buffers(pa.array(["", ""], pa.string()))
    keys, first, second, long = piece_keyer.keyed_pieces(offsets, data)
    assert len(keys) == len(first) == len(second) == sum(map(len, long)) == 0


def test_one_keyer_for_many_batches_of_any_size():
    """A keyer's buffers, grown and reused from batch to batch and segment to segment, change nothing."""
    keyer = piece_keyer.PieceKeyer(window=16, segment=100)
    for seed in (11, 12, 13):
        texts = _texts(seed, documents=20 * (seed - 10))
        offsets, data = string_buffers(pa.array(texts, pa.string()))
        parts = [(k.copy(), f.copy(), s.copy(), [x.encode() for x in long.to_pylist()])
                 for k, f, s, long in keyer.pieces(offsets, data)]
        assert len(parts) > 1  # several segments
        got = tuple(np.concatenate([p[i] for p in parts]) for i in range(3)) + ([x for p in parts for x in p[3]],)
        assert _equal(got, numpy_pieces(offsets, data))


def test_a_wrong_rule_is_caught(monkeypatch):
    """The comparison can fail: a kernel that does not cut before a space after a comma differs."""
    codes = piece_keyer._CODES.copy()
    codes[ord(",")] &= 0xFF ^ piece_keyer.NOT_WHITESPACE_BIT
    monkeypatch.setattr(piece_keyer, "_CODES", codes)
    offsets, data = string_buffers(pa.array(["a, b, c", "x, y"], pa.string()))
    assert not _equal(kernel_pieces(offsets, data, 64), numpy_pieces(offsets, data))


@pytest.mark.parametrize("seed", range(3))
def test_chunks_keyed_with_their_pieces_counts_count_as_numpy(seed):
    """PieceKeyer.chunks (the split's keying, weighted by the pieces' counts) gives StringCounts the
    counts numpy's keying gives, with a keyer reused across calls of different sizes."""
    from parbpe.count import chunking
    from parbpe.count.pieces import StringCounts
    from parbpe.patterns import PATTERNS

    keyer = piece_keyer.PieceKeyer()
    rng = np.random.default_rng(seed)
    for documents in (40, 120, 7):
        pieces = pa.array(_texts(seed * 10 + documents, documents), pa.string())
        offsets, data = string_buffers(pieces)
        counts = rng.integers(1, 1000, len(pieces))
        kind, group = chunking.kind_of(PATTERNS["gpt4"])
        bounds = chunking.chunk_bounds(data, offsets, kind, group, chunking.char_tables())
        got = StringCounts()
        got.add_keyed(*keyer.chunks(data, offsets, bounds, counts))
        expected = StringCounts()
        piece = np.searchsorted(offsets, bounds[:-1], side="right") - 1
        expected.add(data, bounds.astype(np.int64), counts[piece])
        assert got.table().sort_by("chunk").equals(expected.table().sort_by("chunk"))
        assert got.table().num_rows > 20


@pytest.mark.parametrize("seed", range(3))
def test_spelled_keys_are_the_strings_of_the_keys(seed):
    """piece_keyer.spell (a counter's distinct pieces handed to the lexer as bytes) against
    short_keys.strings_of: keys of 1 to 8 bytes, pairs of 9 to 16, multi-byte characters, none."""
    rng = random.Random(seed)
    alphabet = ["a", "Z", " ", "\n", "é", "中", "\U0001f600", "~"]
    for low, high, paired in ((1, 8, False), (9, 16, True)):
        strings = set()
        while len(strings) < 300:
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
            if low <= len(s.encode()) <= high:
                strings.add(s)
        array = pa.array(sorted(strings), pa.string())
        offsets, data = string_buffers(array)
        starts, lengths = offsets[:-1], np.diff(offsets)
        first = short_keys.keys_of(data, starts, np.minimum(lengths, 8))
        second = short_keys.keys_of(data, starts + 8, np.maximum(lengths - 8, 0)) if paired else None
        expected = short_keys.strings_of(first, second)
        spelled_offsets, spelled = piece_keyer.spell(first, second)
        assert spelled.tobytes() == data.tobytes() and np.array_equal(spelled_offsets, offsets)
        assert expected.to_pylist() == sorted(strings)
    empty_offsets, empty = piece_keyer.spell(np.zeros(0, np.uint64))
    assert len(empty) == 0 and empty_offsets.tolist() == [0]

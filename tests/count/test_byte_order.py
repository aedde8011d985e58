"""byte_order: numpy's sort of strings by their UTF-8 bytes (--jit off) and the kernel's radix sort (on,
or numba loaded), against pyarrow's sort_indices."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from parbpe.count import byte_order as byte_order_module
from parbpe.count.byte_order import byte_order
from parbpe.count.partitions import sort_by_chunk
from parbpe.count.pieces import SCHEMA

# Prefixes of each other across the 8-byte words, runs that tie for several words, multi-byte characters.
PARTS = ["a", "b", "ab", "abcdefgh", "abcdefg", "é", "中", " ", "z" * 9, "\x7f", "\x01", "x" * 17, "\U0001f600"]


def pyarrow_order(strings: pa.Array) -> np.ndarray:
    return pc.sort_indices(strings.cast(pa.large_binary())).to_numpy()


# numpy, every tie resolved by its passes or the last by Python's sort; the kernel
WAYS = [("off", 0), ("off", 1000), ("on", 0)]


@pytest.mark.parametrize(("mode", "few"), WAYS)
@pytest.mark.parametrize("seed", range(6))
def test_byte_order_is_sort_indices_order(monkeypatch, mode, few, seed):
    monkeypatch.setenv("PARBPE_JIT", mode)
    monkeypatch.setattr(byte_order_module, "_FEW", few)
    rng = random.Random(seed)
    for _ in range(60):
        strings = ["".join(rng.choice(PARTS) for _ in range(rng.randint(0, 14))) for _ in range(rng.randint(0, 300))]
        strings += rng.sample(strings, min(len(strings), 5))  # equal strings keep their order
        array = pa.array(strings, pa.string())
        if len(array) > 2:
            array = array.slice(1, len(array) - 2)  # an offset into the buffers
        assert np.array_equal(byte_order(array), pyarrow_order(array)), strings


@pytest.mark.parametrize("mode", ["off", "on"])
def test_strings_holding_a_zero_byte_sort_as_pyarrow_sorts(monkeypatch, mode):
    monkeypatch.setenv("PARBPE_JIT", mode)
    array = pa.array(["a\x00b", "a", "a\x00", "", "a\x00\x00", "b"], pa.string())
    assert np.array_equal(byte_order(array), pyarrow_order(array))


def test_a_wrong_word_is_caught(monkeypatch):
    """The comparison can fail: with every word's bytes masked away, the strings keep their order."""
    monkeypatch.setenv("PARBPE_JIT", "off")
    monkeypatch.setattr(byte_order_module, "_FEW", 0)
    monkeypatch.setattr(byte_order_module, "_BITS", 0)  # every shift past the word
    array = pa.array(["ba", "ab", "b", "a"], pa.string())
    assert not np.array_equal(byte_order(array), pyarrow_order(array))


@pytest.mark.parametrize("mode", ["off", "on"])
def test_sort_by_chunk_orders_rows_by_their_chunks(monkeypatch, mode):
    monkeypatch.setenv("PARBPE_JIT", mode)
    table = pa.table({"chunk": ["b", "ab", "", "abcdefghij", "abcdefghi"], "count": [1, 2, 3, 4, 5]}, schema=SCHEMA)
    assert sort_by_chunk(table).column("chunk").to_pylist() == ["", "ab", "abcdefghi", "abcdefghij", "b"]
    assert sort_by_chunk(table).column("count").to_pylist() == [3, 2, 5, 4, 1]
    assert sort_by_chunk(SCHEMA.empty_table()).num_rows == 0


@pytest.mark.parametrize("alphabet", ["ab", "abc\x00", "".join(map(chr, range(1, 400)))])
def test_the_radix_kernel_sorts_many_strings_as_pyarrow(alphabet):
    """Segments past the insertion sort's size, many levels deep (two letters) and hundreds of buckets
    a level (the segment stack grown past its first 64), duplicates and zero bytes: pyarrow's order."""
    rng = random.Random(len(alphabet))
    strings = ["".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 9, 30]))) for _ in range(20_000)]
    strings += rng.sample(strings, 500)
    array = pa.array(strings, pa.string())
    offsets, data = byte_order_module.string_buffers(array)
    assert np.array_equal(byte_order_module.radix_order(offsets, data), pyarrow_order(array))


def test_byte_order_takes_the_kernel_where_numba_is_loaded(monkeypatch):
    from parbpe import jit

    calls = []
    monkeypatch.setattr(byte_order_module, "radix_order", lambda *a: calls.append(1) or np.zeros(0, np.int64))
    array = pa.array(["b", "a"], pa.string())
    cases = [("off", True, False), ("auto", False, False), ("auto", True, True), ("on", False, True)]
    for mode, loaded, kernel in cases:
        monkeypatch.setenv("PARBPE_JIT", mode)
        monkeypatch.setattr(jit, "loaded", lambda loaded=loaded: loaded)
        calls.clear()
        byte_order(array)
        assert calls == ([1] if kernel else []), (mode, loaded)

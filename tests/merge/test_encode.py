"""encode_table: a chunk table encoded with a merge list equals BPE's encoding of each chunk, and
merging on from it gives the merges a replay through the engine gives."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parbpe import jit
from parbpe.merge import encode as encode_module
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.encode import encode_byte_table, encode_table, rank_order_batches
from parbpe.merge.table import build_table
from parbpe.tokenizer.model import Tokenizer
from tests.corpora import random_corpus


def corpus(seed: int, alphabet: bytes = b"ab c") -> tuple[list[bytes], list[int]]:
    rng = random.Random(seed)
    counts = random_corpus(rng, alphabet, n_words=300, max_len=40)
    counts.update({b"aaaaaaa": 5, b"ab ab ab ab": 3, b"x": 2})
    chunks = sorted(counts)
    return chunks, [counts[c] for c in chunks]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_batch_size", [0, 1])
@pytest.mark.parametrize("stage1_alphabet", [b"ab c", b"abc", b"a c"])  # the last two: pieces cut at spaces, at b
@pytest.mark.parametrize("jit_mode", ["off", "on"])  # on: the pieces encoded by a kernel (kernels/encode.py)
def test_encoded_table_is_bpe_encoding_and_merging_on_equals_replay(seed, max_batch_size, stage1_alphabet, jit_mode,
                                                                    monkeypatch):
    if jit_mode == "on":
        pytest.importorskip("numba")
    monkeypatch.setenv("PARBPE_JIT", jit_mode)
    chunks, counts = corpus(seed, stage1_alphabet)
    stage1 = learn_merges(build_table(chunks, counts, 4096), [bytes([b]) for b in range(256)], 60,
                          max_batch_size=max_batch_size)
    # Other chunks (as SuperBPE's stage 2 has), encoded with stage 1's merges.
    other, other_counts = corpus(seed + 100)
    table = build_table(other, other_counts, 4096)
    encoded = encode_table(table, stage1.merges, stage1.batch_sizes, 256)
    by_pieces = encode_byte_table(table, stage1.merges, stage1.batch_sizes)
    for name in ("tokens", "starts", "lengths", "counts"):
        assert np.array_equal(getattr(by_pieces, name), getattr(encoded, name)), name
    tok = Tokenizer(pattern="gpt4", merges=[(a, b, 256 + r) for r, (a, b) in enumerate(stage1.merges)])
    for c, chunk in enumerate([o for o in other if len(o) > 1]):  # the table leaves out one-byte chunks
        assert encoded.chunk_tokens(c) == tok._merge_short(list(chunk)), chunk
    assert encoded.starts[-1] == encoded.lengths.sum()

    replayed = learn_merges(build_table(other, other_counts, 4096), [bytes([b]) for b in range(256)], 120,
                            max_batch_size=max_batch_size, replay=(stage1.merges, stage1.batch_sizes))
    vocab = [bytes([b]) for b in range(256)]
    for a, b in stage1.merges:
        vocab.append(vocab[a] + vocab[b])
    on = learn_merges(encoded, vocab, 120 - len(stage1.merges), max_batch_size=max_batch_size)
    assert replayed.merges == stage1.merges + on.merges


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(256, 16, 12), (1, 1, 1), (3, 2, 1), (7, 4, 3)])
@pytest.mark.parametrize("seed", range(3))
def test_the_encoding_kernel_equals_the_numpy_path(monkeypatch, seed, sizes, threads):
    """encode_chunks against encode_byte_table's numpy path: pieces of 1 to 40 bytes (looked up up to 16
    bytes, in the short or the long table; encoded each time past it), pieces that differ only in
    trailing zero bytes (the same words, told apart by their lengths), tokens in the slot or kept apart,
    batches of pieces cut across chunks, and the tables regrown many times (tiny first sizes); in one
    thread, and each half of the chunks in a thread of its own."""
    pytest.importorskip("numba")
    rng = random.Random(seed)
    chunks, counts = corpus(seed, b"abcd ")
    chunks, counts = chunks + [b"ab\x00", b"b\x00\x00"], counts + [500, 400]  # merges holding zero bytes
    stage1 = learn_merges(build_table(chunks, counts, 4096), [bytes([b]) for b in range(256)], 120)
    words = [bytes(rng.choice(b"abcde") for _ in range(rng.randint(1, 40))) for _ in range(400)]
    other = sorted({b" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(600)} | {b"\x00a\x00", b"cab\x00"}
                   | {b"ab" + b"\x00" * k for k in range(7)} | {b"b" + b"\x00" * k for k in range(7)})
    table = build_table(other, [rng.randint(1, 9) for _ in other], 4096)
    with jit.using("off"):
        expected = encode_byte_table(table, stage1.merges, stage1.batch_sizes)
    monkeypatch.setattr(encode_module, "_ENCODE_SIZES", sizes)
    monkeypatch.setattr(encode_module, "TWO_THREADS_MIN_BYTES", 1)
    halves = []
    monkeypatch.setattr(encode_module, "in_two", lambda left, right: halves.append(1) or (left(), right()))
    with jit.using("on"):
        assert jit.merge_kernels(len(table.tokens))
        got = encode_byte_table(table, stage1.merges, stage1.batch_sizes, threads=threads)
    assert halves == ([1] if threads == 2 else [])
    for name in ("tokens", "starts", "lengths", "counts"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert max(expected.lengths) > 2  # some piece of several tokens (kept apart)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("one_byte_chunks", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_chunk_arrays_encode_as_their_table_of_bytes_does(monkeypatch, seed, one_byte_chunks, threads):
    """encode_chunk_arrays (the kernels, straight from the chunk arrays) against the table of bytes
    table_from_arrays makes, encoded by encode_byte_table's numpy path: the same tokens, starts,
    lengths and counts, the chunks of one byte left out as the table leaves them out."""
    pytest.importorskip("numba")
    from parbpe.merge.table import table_from_arrays

    chunks, counts = corpus(seed, b"abcd ")
    stage1 = learn_merges(build_table(chunks, counts, 4096), [bytes([b]) for b in range(256)], 100)
    other, other_counts = corpus(seed + 200, b"abcde ")
    rng = random.Random(seed)
    if one_byte_chunks:  # among the others, first and last too
        for at in (0, len(other), *rng.sample(range(len(other)), 20)):
            other.insert(at, bytes([rng.choice(b"abz ")]))
            other_counts.insert(at, rng.randint(1, 9))
    else:
        other_counts = [n for c, n in zip(other, other_counts) if len(c) > 1]
        other = [c for c in other if len(c) > 1]
    assert any(len(c) == 1 for c in other) == one_byte_chunks
    data = np.frombuffer(b"".join(other), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in other])]).astype(np.int64)
    counts_array = np.array(other_counts, dtype=np.int64)
    with jit.using("off"):
        expected = encode_byte_table(table_from_arrays(data, offsets, counts_array, 4096, 1, np.dtype(np.uint8)),
                                     stage1.merges, stage1.batch_sizes, dtype=np.dtype(np.uint16))
    monkeypatch.setattr(encode_module, "TWO_THREADS_MIN_BYTES", 1)
    with jit.using("on"):
        got = encode_module.encode_chunk_arrays(data, offsets, counts_array, stage1.merges, np.dtype(np.uint16),
                                                threads=threads)
    for name in ("tokens", "starts", "lengths", "counts"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert got.tokens.dtype == np.uint16 and len(got.counts) == sum(len(c) > 1 for c in other)


def test_bad_merge_lists_are_refused():
    table = build_table([b"abc"], [1], 1024)
    with pytest.raises(ValueError, match="batches"):
        encode_table(table, [(97, 98)], [2], 256)
    with pytest.raises(ValueError, match="twice"):
        encode_table(table, [(97, 98), (97, 98)], [1, 1], 256)
    same = encode_table(table, [], [], 256)
    assert same.chunk_tokens(0) == [97, 98, 99] and np.array_equal(same.counts, table.counts)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_batch_size", [0, 1])
def test_rank_order_batches_encode_as_bpe_does(seed, max_batch_size):
    # A merge list without its batches (a loaded tokenizer's, train --init): rank_order_batches cuts
    # it where merges could overlap or use a token made in the batch; encoding with those batches
    # is BPE's encoding of every chunk.
    chunks, counts = corpus(seed, b"ab c")
    merges = learn_merges(build_table(chunks, counts, 4096), [bytes([b]) for b in range(256)], 80,
                          max_batch_size=max_batch_size).merges
    sizes = rank_order_batches(merges)
    assert sum(sizes) == len(merges) and len(sizes) < len(merges)  # some merges do share a batch
    other, other_counts = corpus(seed + 50)
    encoded = encode_table(build_table(other, other_counts, 4096), merges, sizes, 256)
    tok = Tokenizer(pattern="gpt4", merges=[(a, b, 256 + r) for r, (a, b) in enumerate(merges)])
    for c, chunk in enumerate([o for o in other if len(o) > 1]):
        assert encoded.chunk_tokens(c) == tok._merge_short(list(chunk)), chunk


def test_rank_order_batches_cut_where_merges_could_overlap():
    merges = [(97, 98), (99, 100), (98, 99), (256, 257), (97, 97), (101, 97), (102, 103)]
    # (98, 99) could overlap (97, 98); (101, 97) could overlap (97, 97); (256, 257) uses no token of its batch.
    assert rank_order_batches(merges) == [2, 3, 2]


@pytest.mark.parametrize("seed", range(4))
def test_the_pairs_tokens_hold_side_by_side_are_each_tokens_own(seed):
    """held_side_by_side (all tokens at once) marks what each token's own byte pairs mark, never a pair
    made of one token's last byte and the next one's first; no tokens, no pairs."""
    rng = random.Random(seed)
    tokens = [bytes(rng.randrange(256) for _ in range(rng.randint(2, 6))) for _ in range(rng.randint(1, 300))]
    expected = np.zeros((256, 256), dtype=bool)
    for token in tokens:
        expected[list(token[:-1]), list(token[1:])] = True
    np.testing.assert_array_equal(encode_module.held_side_by_side(tokens), expected)
    crossing = encode_module.held_side_by_side([b"ab", b"cd"])
    assert crossing[ord("a"), ord("b")] and crossing[ord("c"), ord("d")] and not crossing[ord("b"), ord("c")]
    assert not encode_module.held_side_by_side([]).any()

"""The segmentation kernels (kernels/segment.py, through tokenizer/tables.py) against the numpy path
and the slow references: merges against Tokenizer's rescan (ties: runs of one byte), greedy and
shortest against segment.py (PARBPE_JIT off) and an exhaustive search, on random vocabularies and on
a realmix tokenizer."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parbpe.tokenizer import tables
from parbpe.tokenizer.model import _HEAP_BYTES, Tokenizer
from tests.tokenizer.test_segment import _fewest, _greedy_ref

pytest.importorskip("numba")


def _flat(chunks: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    lengths = [len(c) for c in chunks]
    return np.frombuffer(b"".join(chunks), dtype=np.uint8), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _kernel_lists(tok: Tokenizer, chunks: list[bytes], method: str) -> list[list[int]]:
    data, offsets = _flat(chunks)
    owner, ids = tables.chunk_tokens(tok.kernel_tables(), method, data, offsets)
    out: list[list[int]] = [[] for _ in chunks]
    for c, t in zip(owner.tolist(), ids.tolist()):
        out[c].append(t)
    return out


def _random_merges(rng: random.Random, byte_ids: list[int]) -> tuple[list[int], list[tuple[int, int, int]]]:
    alphabet = rng.sample(range(97, 123), rng.randint(1, 4))
    tokens, merges = [byte_ids[b] for b in alphabet], []
    for _ in range(rng.randint(1, 30)):
        a, b = rng.choice(tokens), rng.choice(tokens)
        if any((x, y) == (a, b) for x, y, _ in merges):
            continue
        merges.append((a, b, 1000 + len(merges)))  # ids that are not training's
        tokens.append(merges[-1][2])
    return alphabet, merges


@pytest.mark.parametrize("seed", range(8))
def test_merges_kernel_equals_the_rescan_and_the_heap(seed):
    """Random merges (pairs of one byte: ties broken left to right), bytes numbered as GPT-2 does or
    as parbpe does, chunks short and long (the Python heap's side of _HEAP_BYTES), empty ones."""
    rng = random.Random(seed)
    byte_ids = list(range(256))
    if seed % 2:
        rng.shuffle(byte_ids)
    for _ in range(40):
        alphabet, merges = _random_merges(rng, byte_ids)
        tok = Tokenizer(pattern="gpt4", merges=merges, byte_ids=byte_ids)
        chunks = [bytes(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 2, 5, 12, 3 * _HEAP_BYTES])))
                  for _ in range(12)]
        expected = [tok._merge_short([byte_ids[b] for b in c]) for c in chunks]
        assert _kernel_lists(tok, chunks, "merges") == expected, merges


def test_merges_kernel_keeps_the_last_rank_of_a_repeated_pair():
    tok = Tokenizer(pattern="gpt4", merges=[(97, 98, 256), (97, 97, 257), (97, 98, 258)])
    assert _kernel_lists(tok, [b"abaab"], "merges") == [tok._merge_short(list(b"abaab"))] == [[258, 257, 98]]


def _vocab(rng: random.Random, alphabet: bytes, longest: int) -> list[bytes]:
    extra = {bytes(rng.choice(alphabet) for _ in range(rng.randint(2, longest))) for _ in range(rng.randint(1, 40))}
    return [bytes([b]) for b in range(256)] + sorted(extra)


@pytest.mark.parametrize("seed", range(30))
def test_greedy_and_shortest_equal_numpy_and_the_references(seed, monkeypatch):
    """Vocabularies with tokens of 2 to 30 bytes (past the numpy keys' 8 and 16), ids given in
    shuffled order; every chunk round-trips, greedy is the plain loop's, shortest the fewest tokens."""
    rng = random.Random(seed)
    alphabet = b"ab\x00\xff"[: rng.randint(2, 4)]
    tokens = _vocab(rng, alphabet, rng.choice([5, 30]))
    rng.shuffle(tokens)
    tok = Tokenizer.from_vocabulary(tokens, segmentation="greedy")
    vocab = set(tokens)
    chunks = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(25)]
    for method in ("greedy", "shortest"):
        got = _kernel_lists(tok, chunks, method)
        monkeypatch.setenv("PARBPE_JIT", "off")
        assert got == tok.segment_bytes(chunks, method)
        monkeypatch.setenv("PARBPE_JIT", "on")
        assert got == tok.segment_bytes(chunks, method)
        for chunk, ids in zip(chunks, got, strict=True):
            assert b"".join(tok.vocab[i] for i in ids) == chunk
            if method == "greedy":
                assert [tok.vocab[i] for i in ids] == _greedy_ref(chunk, vocab, longest=30)
            else:
                assert len(ids) == (_fewest(chunk, vocab) if chunk else 0)
    weights = np.arange(1, len(chunks) + 1)
    both = tables.token_totals(tok.kernel_tables(), ["greedy", "shortest"], *_flat(chunks), weights)
    for method, totals in both.items():  # one pass for both methods: each as when alone
        owner, ids = tables.chunk_tokens(tok.kernel_tables(), method, *_flat(chunks))
        assert totals.tolist() == np.bincount(ids, weights=weights[owner], minlength=len(totals)).tolist()


def test_shortest_ties_go_to_the_longest_last_token():
    tok = Tokenizer.from_vocabulary([bytes([b]) for b in range(256)] + [b"ab", b"bc"])
    assert [[tok.vocab[i] for i in s] for s in _kernel_lists(tok, [b"abc"], "shortest")] == [[b"a", b"bc"]]
    assert [[tok.vocab[i] for i in s] for s in _kernel_lists(tok, [b"abc"], "greedy")] == [[b"ab", b"c"]]


def test_token_totals_weigh_chunks_by_their_counts():
    tok = Tokenizer(pattern="gpt4", merges=[(97, 98, 256)])
    data, offsets = _flat([b"ab", b"abab", b"c"])
    found = tables.token_totals(tok.kernel_tables(), ["merges", "greedy", "shortest"], data, offsets,
                                 np.array([3, 2, 5]))
    for totals in found.values():
        assert totals[256] == 3 + 2 * 2 and totals[99] == 5 and totals.sum() == 12 and len(totals) == 257


def test_realmix_tokenizer_on_heldout_text_is_the_same_with_the_jit_on_and_off(realmix_run, shared_data,
                                                                            monkeypatch):
    """A realmix BPE (1,024 tokens) over held-out documents: each method's ids per chunk equal with and
    without numba, merges equal encode_ordinary's, and shortest never has more tokens than the others."""
    import pyarrow.parquet as pq

    _, _, result, _ = realmix_run
    tok = result.tokenizer
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()[:80]
    chunks = sorted({c.encode() for d in docs for c in tok._splitter.chunks(d)})
    merged = _kernel_lists(tok, chunks, "merges")
    assert merged == [tok._encode_chunk(c.decode()) for c in chunks]
    sizes = {"merges": sum(map(len, merged))}
    for method in ("greedy", "shortest"):
        monkeypatch.setenv("PARBPE_JIT", "off")
        expected = tok.segment_bytes(chunks, method)
        assert _kernel_lists(tok, chunks, method) == expected
        sizes[method] = sum(map(len, expected))
    assert sizes["shortest"] <= min(sizes["greedy"], sizes["merges"])
    text = "\n".join(docs[:20])
    plain = {m: tok.encode(text, method=m) for m in ("greedy", "shortest")}
    monkeypatch.setenv("PARBPE_JIT", "on")
    assert {m: tok.encode(text, method=m) for m in ("greedy", "shortest")} == plain

"""Greedy and shortest segmentation against slow references: exhaustive search and a plain loop."""

from __future__ import annotations

import random
from functools import lru_cache

import pytest

from parbpe.tokenizer.segment import VocabIndex, greedy, greedy_tokens, parse_hex_vocab, shortest, shortest_tokens

BYTES = [bytes([b]) for b in range(256)]


def _vocab(rng: random.Random, alphabet: bytes) -> list[bytes]:
    extra = {bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 5))) for _ in range(rng.randint(1, 25))}
    return BYTES + sorted(extra)


def _fewest(text: bytes, vocab: set[bytes]) -> int:
    @lru_cache(maxsize=None)
    def best(i: int) -> int:
        if i == len(text):
            return 0
        return min(1 + best(j) for j in range(i + 1, len(text) + 1) if text[i:j] in vocab)

    return best(0)


def _greedy_ref(text: bytes, vocab: set[bytes], longest: int = 16) -> list[bytes]:
    out, i = [], 0
    while i < len(text):
        j = max(j for j in range(i + 1, min(len(text), i + longest) + 1) if text[i:j] in vocab)
        out.append(text[i:j])
        i = j
    return out


@pytest.mark.parametrize("seed", range(30))
def test_shortest_is_fewest_and_greedy_matches_reference(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = b"abc\x00"
    tokens = _vocab(rng, alphabet)
    index, vocab = VocabIndex(tokens), set(tokens)
    chunks = [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 14))) for _ in range(20)]
    for chunk, s, g in zip(chunks, shortest(index, chunks), greedy(index, chunks), strict=True):
        assert b"".join(tokens[t] for t in s) == chunk
        assert b"".join(tokens[t] for t in g) == chunk
        assert len(s) == _fewest(chunk, vocab) <= len(g)
        assert [tokens[t] for t in g] == _greedy_ref(chunk, vocab)


def test_shortest_tie_takes_longest_last_token() -> None:
    tokens = BYTES + [b"ab", b"bc"]
    index = VocabIndex(tokens)
    assert [tokens[t] for t in shortest(index, [b"abc"])[0]] == [b"a", b"bc"]
    assert [tokens[t] for t in greedy(index, [b"abc"])[0]] == [b"ab", b"c"]


def test_hex_vocab_and_bad_ones() -> None:
    text = "\n".join(t.hex() for t in BYTES + [b"hello"])
    assert parse_hex_vocab(text)[-1] == b"hello"
    with pytest.raises(ValueError, match="not hex"):
        parse_hex_vocab(text + "\nabc")
    with pytest.raises(ValueError, match="single bytes"):
        parse_hex_vocab("\n".join(t.hex() for t in BYTES[1:]))
    with pytest.raises(ValueError, match="longer than 16"):
        parse_hex_vocab(text + "\n" + (b"x" * 17).hex())
    with pytest.raises(ValueError, match="repeated"):
        parse_hex_vocab(text + "\n" + b"hello".hex())


@pytest.mark.parametrize("seed", range(12))
def test_window_ids_equal_a_dictionary_lookup_for_tokens_of_every_length(seed: int) -> None:
    """The trie walk (a window looked up at length l only where its l-1 prefix is a token's prefix)
    finds exactly the windows a dictionary finds, for tokens of 1 to 30 bytes (three key kinds: up to
    8 bytes, 9-16, longer), inside their chunks only."""
    import numpy as np

    from parbpe.tokenizer.segment import _matrix

    rng = random.Random(seed)
    alphabet = bytes([0, 1, 97, 98, 255])
    extra = {bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 16))) for _ in range(300)}
    long = sorted({bytes(rng.choice(alphabet[:2]) for _ in range(rng.randint(17, 30))) for _ in range(40)})
    tokens = BYTES + sorted(extra | set(long))  # with BPE's long ones
    ids = {t: i for i, t in enumerate(tokens)}
    chunks = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(60)]
    chunks += [bytes([97]) + rng.choice(long) + rng.choice(long)[:rng.randint(0, 20)] for _ in range(20)]
    rows, lengths = _matrix(chunks)
    win = VocabIndex(tokens, max_len=30).window_ids(rows, lengths)
    expected = np.full(win.shape, -1)
    for c, chunk in enumerate(chunks):
        for i in range(len(chunk)):
            for length in range(1, win.shape[2] + 1):
                expected[c, i, length - 1] = ids.get(chunk[i:i + length], -1) if i + length <= len(chunk) else -1
    assert (win == expected).all()
    assert (win >= 0).sum() > len(b"".join(chunks))  # multi-byte windows were found too
    assert (win[:, :, 16:] >= 0).any()  # and windows over 16 bytes


@pytest.mark.parametrize("method", ["greedy", "shortest"])
def test_empty_chunks_alone_have_no_tokens(method: str) -> None:
    """Only empty chunks: no token (greedy's numpy path once searched a window of no bytes)."""
    index = VocabIndex([bytes([b]) for b in range(256)] + [b"ab"])
    segment = greedy_tokens if method == "greedy" else shortest_tokens
    for chunks in ([b""], [b"", b""]):
        assert all(len(part) == 0 for part in segment(index, chunks))
    chunk, token, start = segment(index, [b"", b"ab"])
    assert chunk.tolist() == [1] and token.tolist() == [256] and start.tolist() == [0]

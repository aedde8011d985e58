"""Long chunks (SuperBPE's phrases) are encoded with a heap: the same ids as the plain rescan."""

from __future__ import annotations

import random

from parbpe.patterns import SUPERWORD_PATTERN
from parbpe.tokenizer.model import _HEAP_BYTES, Tokenizer


def test_heap_encoding_equals_the_plain_rescan():
    rng = random.Random(0)
    for _ in range(300):
        alphabet = rng.sample(range(97, 123), rng.randint(1, 4))
        tokens, merges = list(alphabet), []
        for _ in range(rng.randint(1, 25)):
            a, b = rng.choice(tokens), rng.choice(tokens)
            if any((x, y) == (a, b) for x, y, _ in merges):
                continue
            merges.append((a, b, 256 + len(merges)))
            tokens.append(merges[-1][2])
        tok = Tokenizer(pattern="gpt4", merges=merges)
        for _ in range(20):
            ids = [rng.choice(alphabet) for _ in range(rng.randint(0, 3 * _HEAP_BYTES))]
            assert tok._merge_long(list(ids)) == tok._merge_short(list(ids)), (merges, ids)


def test_long_chunks_go_through_the_heap_and_round_trip():
    tok = Tokenizer(pattern=SUPERWORD_PATTERN, merges=[(97, 97, 256), (256, 256, 257), (257, 98, 258)])
    text = "a" * 200 + "b" + "a" * 7
    ids = tok.encode_ordinary(text)
    assert ids == tok._merge_short(list(text.encode())) and tok.decode(ids) == text

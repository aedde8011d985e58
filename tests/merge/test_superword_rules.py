"""SuperBPE's rules for new tokens, and learn_merges(allow=...) against the reference trainer."""

from __future__ import annotations

import random

import pytest

from parbpe.merge.coordinator import learn_merges
from parbpe.merge.superword import superword_allowed
from parbpe.merge.table import build_table
from tests.reference import reference_train


def test_superword_rules():
    assert superword_allowed(b" of the")
    assert superword_allowed(b"one two three four")
    assert superword_allowed(b" one two three four ")
    assert not superword_allowed(b"one two three four five")
    assert not superword_allowed(b"Answer: yes")
    assert not superword_allowed(b": ")
    assert superword_allowed(b"a:b") and superword_allowed(b":") and superword_allowed(b"  ")


def phrases(seed: int) -> dict[bytes, int]:
    """Chunks that are phrases (as the superword split gives): words, spaces and colons."""
    rng = random.Random(seed)
    words = [b"a", b"b", b"ab", b"ba", b"a:", b"b:"]
    counts: dict[bytes, int] = {}
    for _ in range(400):
        phrase = b" ".join(rng.choice(words) for _ in range(rng.randint(1, 7)))
        counts[phrase] = counts.get(phrase, 0) + rng.randint(1, 20)
    return counts


def two_words(token: bytes) -> bool:
    return b": " not in token and len([w for w in token.split(b" ") if w]) <= 2


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rule", [superword_allowed, two_words])
@pytest.mark.parametrize("mode", ["serial", "batched", "exact"])
def test_allow_matches_the_reference(seed, rule, mode):
    counts = phrases(seed)
    chunks = sorted(counts)
    table = build_table(chunks, [counts[c] for c in chunks], 4096)
    n = 150
    result = learn_merges(table, [bytes([b]) for b in range(256)], n, allow=rule,
                          max_batch_size=1 if mode == "serial" else 0,
                          batching="exact" if mode == "exact" else "batchbpe")
    want = reference_train(counts, n, batched=mode == "batched", allow=rule)
    assert result.merges == want
    vocab = [bytes([b]) for b in range(256)]
    for a, b in result.merges:
        vocab.append(vocab[a] + vocab[b])
        assert rule(vocab[-1])
    assert result.skipped > 0  # the rule did refuse tokens the counts wanted

"""--max-token-bytes N (max_token_bytes): no merge makes a token longer than N bytes; the pairs that
would are skipped, not the round. Serial, batched and exact merges equal the reference trainer that
never ranks such pairs, and a whole run (stop list, merge workers, SuperBPE) has no longer token."""

from __future__ import annotations

import random

import pytest
from reference import reference_counts, reference_train
from test_merge_exact import engine_merges

import parbpe
from parbpe.cli import main
from parbpe.patterns import PATTERNS


def _counts(seed: int) -> dict[bytes, int]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcd") for _ in range(rng.randint(2, 12))) for _ in range(50)]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(40)]
    return reference_counts(docs, PATTERNS["gpt4"])


def _capped(n: int):
    return lambda token: len(token) <= n


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cap", [2, 3, 5])
def test_merges_equal_the_reference_with_the_same_rule(seed, cap):
    counts = _counts(seed)
    serial = engine_merges(counts, 300, max_batch_size=1, max_token_bytes=cap)
    assert serial == reference_train(counts, 300, allow=_capped(cap))
    assert serial != reference_train(counts, 300)  # the cap changed the merges
    batched = engine_merges(counts, 300, max_token_bytes=cap)
    assert batched == reference_train(counts, 300, batched=True, allow=_capped(cap))
    assert engine_merges(counts, 300, batching="exact", max_token_bytes=cap) == serial


@pytest.mark.parametrize("workers", [1, 3])
def test_the_cap_and_superbpe_rule_together(workers):
    from parbpe.merge.superword import superword_allowed

    counts = reference_counts([f"the cat {i} sat: on the mat and the dog ran" for i in range(60)],
                              PATTERNS["superword"])
    both = engine_merges(counts, 200, allow=superword_allowed, max_token_bytes=9, workers=workers,
                         min_tokens_per_worker=1, engine="linked")
    assert both == reference_train(counts, 200, batched=True,
                                   allow=lambda t: superword_allowed(t) and len(t) <= 9)


def _corpus(tmp_path):
    rng = random.Random(7)
    long_words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(10, 30))) for _ in range(40)]
    lines = [" ".join(rng.choice(long_words + ["the", "cat", "sat"]) for _ in range(12)) for _ in range(800)]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_no_token_of_a_run_is_longer_than_the_cap(tmp_path, workers):
    corpus = _corpus(tmp_path)
    free = parbpe.train(corpus, vocab_size=340, workers=workers, stop_list_size=20)
    assert max(len(t) for t in free.tokenizer.vocab.values()) > 6  # the text has long chunks
    capped = parbpe.train(corpus, vocab_size=340, workers=workers, stop_list_size=20, max_token_bytes=6)
    assert max(len(t) for t in capped.tokenizer.vocab.values()) <= 6
    assert capped.tokenizer.n_vocab == 340  # skipped pairs, not an early stop
    assert capped.stats["config"]["max_token_bytes"] == 6
    text = corpus.read_text()[:5000]
    assert capped.tokenizer.decode(capped.tokenizer.encode(text)) == text


def test_superbpe_and_the_command_line(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    result = parbpe.train(corpus, vocab_size=340, superbpe_transition=0.6, max_token_bytes=10)
    assert max(len(t) for t in result.tokenizer.vocab.values()) <= 10
    out = tmp_path / "o"
    assert main(["train", str(corpus), "--vocab-size", "300", "--max-token-bytes", "4", "--out", str(out),
                 "--progress", "none"]) == 0
    assert max(len(t) for t in parbpe.Tokenizer.load(out).vocab.values()) <= 4
    capsys.readouterr()
    assert main(["train", str(corpus), "--max-token-bytes", "1", "--out", str(tmp_path / "x")]) == 2
    assert "--max-token-bytes must be 0 (no limit) or at least 2" in capsys.readouterr().err

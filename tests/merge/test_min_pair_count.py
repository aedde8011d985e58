"""--min-pair-count: merging stops when no pair is seen N times; serial, batched and exact merges equal
the reference trainer applying the same rule, and the early stop is said (EarlyStopWarning)."""

from __future__ import annotations

import random

import pytest
from reference import reference_counts, reference_train
from test_merge_exact import engine_merges

import parbpe
from parbpe.cli import main
from parbpe.patterns import PATTERNS
from parbpe.warnings import EarlyStopWarning


def _counts(seed: int) -> dict[bytes, int]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcde") for _ in range(rng.randint(2, 8))) for _ in range(60)]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(40)]
    return reference_counts(docs, PATTERNS["gpt4"])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_pair_count", [2, 5, 20])
def test_merges_equal_the_reference_with_the_same_rule(seed, min_pair_count):
    counts = _counts(seed)
    serial = engine_merges(counts, 400, max_batch_size=1, min_pair_count=min_pair_count)
    assert serial == reference_train(counts, 400, min_pair_count=min_pair_count)
    assert len(serial) < 400  # the rule stopped it
    assert serial == reference_train(counts, 400)[:len(serial)]  # serial BPE's first merges
    batched = engine_merges(counts, 400, min_pair_count=min_pair_count)
    assert batched == reference_train(counts, 400, batched=True, min_pair_count=min_pair_count)
    assert engine_merges(counts, 400, batching="exact", min_pair_count=min_pair_count) == serial


def test_the_early_stop_is_said_and_the_size_reached_recorded(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"line {i % 50}: the cat sat on the mat {i % 7}.\n" for i in range(400)))
    with pytest.warns(EarlyStopWarning, match=r"no pair seen 100 times \(--min-pair-count\) after"):
        result = parbpe.train(corpus, vocab_size=2000, min_pair_count=100)
    assert result.stats["vocab_size"] == result.tokenizer.n_vocab < 2000
    assert result.stats["config"]["min_pair_count"] == 100
    assert main(["train", str(corpus), "--vocab-size", "2000", "--min-pair-count", "100", "--out",
                 str(tmp_path / "o"), "--progress", "none"]) == 0
    assert "No pair seen 100 times (--min-pair-count)" in capsys.readouterr().out
    assert main(["train", str(corpus), "--vocab-size", "2000", "--min-pair-count", "100", "--out",
                 str(tmp_path / "s"), "--progress", "none", "--strict"]) == 2

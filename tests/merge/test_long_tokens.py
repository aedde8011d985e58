"""Very long chunks and tokens (runs of one letter, text without spaces): the same merges as the
reference trainer, whatever the tokens' lengths (ties are broken on their bytes as they are)."""

from __future__ import annotations

import random

import pytest
from reference import reference_train

from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table


def _letters(rng: random.Random, alphabet: str, n: int) -> bytes:
    return "".join(rng.choice(alphabet) for _ in range(n)).encode()


def _corpora() -> dict[str, tuple[dict[bytes, int], int]]:
    rng = random.Random(3)
    return {
        # Runs of one letter: tokens a, aa, aaaa, ... and ties between tokens that prefix each other.
        "runs": ({b"a" * 12000: 1, b"a" * 4999 + b"b": 2, b"b" * 4097: 1, b"=" * 3000: 3, b"ab" * 1500: 1}, 60),
        # Random letters with no space: one long chunk and a few shorter ones.
        "letters": ({_letters(rng, "abcd", 9000): 1, _letters(rng, "ab", 3000): 2, _letters(rng, "cd", 2000): 1},
                    80),
        # CJK without spaces: three bytes per character, long tokens of multi-byte text.
        "cjk": ({_letters(rng, "的一是不了人我在有他", 4000): 1, ("中文" * 800).encode(): 2}, 80),
    }


MODES = {
    "serial": {"max_batch_size": 1},
    "batchbpe": {},
    "exact": {"batching": "exact"},
}


def _merges(counts: dict[bytes, int], n: int, **kwargs) -> list[tuple[int, int]]:
    items = sorted(counts.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + n)
    return learn_merges(table, [bytes([b]) for b in range(256)], n, **kwargs).merges


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("corpus", ["runs", "letters", "cjk"])
def test_long_tokens_give_the_reference_merges(corpus, mode):
    counts, n = _corpora()[corpus]
    kwargs = MODES[mode]
    expected = reference_train(counts, n, batched=mode == "batchbpe")
    assert _merges(counts, n, **kwargs) == expected
    if mode != "serial":
        assert _merges(counts, n, workers=2, min_tokens_per_worker=1, **kwargs) == expected


def test_a_run_of_one_letter_makes_doubling_tokens():
    # 2**12 a's: each serial merge doubles the token (ties with the leftovers go to the longer bytes).
    merges = _merges({b"a" * 4096: 1}, 12, max_batch_size=1)
    assert merges == [(97, 97)] + [(256 + k, 256 + k) for k in range(11)]

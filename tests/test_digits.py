"""--digits 1|3: digits split one by one or in groups of up to three, with every named pattern; the
split regex in the exports carries it, so that HF tokenizers and tiktoken encode as parbpe does."""

from __future__ import annotations

import random

import pytest
import regex
from tokenizer.test_tokenizer import _hf_and_tiktoken

import parbpe
from parbpe.cli import main
from parbpe.config import TrainConfig
from parbpe.patterns import PATTERNS, with_digits


def _text(seed: int) -> str:
    rng = random.Random(seed)
    words = ["year", "the", "pi", "is", "x", "total", "km", "of", "v"]
    parts = []
    for _ in range(3000):
        parts.append(rng.choice(words) if rng.random() < 0.6 else str(rng.randint(0, 10 ** rng.randint(1, 9))))
        parts.append(rng.choice([" ", " ", ", ", ".\n", " $", "-"]))
    return "".join(parts)


@pytest.mark.filterwarnings("ignore::parbpe.warnings.EarlyStopWarning")  # digits one by one: few pairs left
@pytest.mark.parametrize(("pattern", "digits"), [("gpt2", 1), ("gpt2", 3), ("gpt4", 1), ("gpt4o", 1), ("gpt4", 3)])
def test_trained_tokenizers_split_digits_and_the_exports_agree(tmp_path, pattern, digits):
    corpus = tmp_path / "c.txt"
    corpus.write_text(_text(0))
    result = parbpe.train(corpus, vocab_size=600, pattern=pattern, digits=digits, special_tokens=["<|endoftext|>"],
                          out_dir=tmp_path / "out")
    tok = result.tokenizer
    digit_run = regex.compile(r"\p{N}+")
    longest = max(len(m) for t in tok.vocab.values() for m in digit_run.findall(t.decode("utf-8", "replace")) or [""])
    assert longest == digits  # no token holds more digits than the group, and the group is reached
    assert result.stats["config"]["digits"] == digits
    hf, tk = _hf_and_tiktoken(tmp_path / "out")
    held_out = _text(1)[:20000] + " 3.14159265 and 1234567890 ١٢٣٤ ５６７"
    ours = tok.encode_ordinary(held_out)
    assert tk.encode_ordinary(held_out) == ours
    assert hf.encode(held_out, add_special_tokens=False).ids == ours
    assert parbpe.Tokenizer.load(tmp_path / "out").encode_ordinary(held_out) == ours


def test_the_variants_split_as_said():
    text = "a 12345 x1234567."
    assert regex.findall(with_digits(PATTERNS["gpt4"], 1), text)[2:7] == ["1", "2", "3", "4", "5"]
    assert regex.findall(with_digits(PATTERNS["gpt2"], 1), text)[1:3] == [" 1", "2"]
    assert regex.findall(with_digits(PATTERNS["gpt2"], 3), text)[1:3] == [" 123", "45"]
    assert with_digits(PATTERNS["gpt4"], 3) == PATTERNS["gpt4"]  # GPT-4's own rule
    assert with_digits(with_digits(PATTERNS["gpt4o"], 1), 3) == PATTERNS["gpt4o"]
    assert TrainConfig(digits=1).pattern == with_digits(PATTERNS["gpt4"], 1)


def test_bad_combinations_are_one_line_errors(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a 1 b 22\n" * 10)
    with pytest.raises(ValueError, match="digits applies to the built-in patterns"):
        TrainConfig(pattern=r"\w+|\s+", digits=1)
    with pytest.raises(ValueError, match="digits cannot be combined with superbpe_transition"):
        TrainConfig(digits=1, superbpe_transition=0.8)
    with pytest.raises(ValueError, match="digits cannot be combined with init"):
        TrainConfig(digits=1, init=str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        main(["train", str(corpus), "--digits", "2", "--out", str(tmp_path / "o")])
    assert exited.value.code == 2
    assert "invalid choice: 2" in capsys.readouterr().err

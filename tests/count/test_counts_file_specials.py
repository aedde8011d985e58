"""Count once, train many: special tokens may be added to counts made without them when the counted
text cannot have held them; otherwise the error gives the recount command. A pattern mismatch names
the patterns."""

from __future__ import annotations

import pytest

import parbpe
from parbpe.config import TrainConfig


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("".join(f"line {i}: the cat sat on the mat, and the dog sat on the log.\n" for i in range(200)))
    return path


def test_specials_the_text_cannot_hold_are_added_to_counts(text, tmp_path):
    counts = tmp_path / "c.parquet"
    parbpe.count_to_file(text, str(counts), TrainConfig())
    from_counts = parbpe.train(counts, vocab_size=300, special_tokens=["<|endoftext|>"])  # no '<' in the text
    from_text = parbpe.train(text, vocab_size=300, special_tokens=["<|endoftext|>"])
    assert from_counts.tokenizer.merges == from_text.tokenizer.merges
    assert from_counts.tokenizer.special_tokens == {"<|endoftext|>": 299}


def test_specials_the_text_may_hold_give_the_recount_command(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a <|b|> c " * 50)
    counts = tmp_path / "c.parquet"
    parbpe.count_to_file(text, str(counts), TrainConfig())
    # the special tokens quoted: the command pastes into a shell
    with pytest.raises(ValueError, match=r"may hold them: recount it with them \(parbpe count INPUT "
                                         r"--special-tokens '<\|b\|>' --pattern gpt4 --out"):
        parbpe.train(counts, vocab_size=300, special_tokens=["<|b|>"])


def test_a_pattern_mismatch_names_both_patterns(text, tmp_path):
    counts = tmp_path / "c.parquet"
    parbpe.count_to_file(text, str(counts), TrainConfig(pattern="gpt2"))
    with pytest.raises(ValueError, match="counted with the pattern gpt2, but this run uses gpt4; pass --pattern gpt2"):
        parbpe.train(counts, vocab_size=300)

"""TrainConfig validation: bad values name the value and the allowed range."""

from __future__ import annotations

import pytest

from parbpe.config import TrainConfig
from parbpe.patterns import GPT2_PATTERN


def test_defaults_and_pattern_names():
    c = TrainConfig()
    assert c.vocab_size == 32768 and c.cap_divisor == 2 and c.pair_count == "overlap"
    assert TrainConfig(pattern="gpt2").pattern == GPT2_PATTERN
    assert TrainConfig(pattern=r"\w+|\s+").to_dict()["pattern_name"] is None
    config = TrainConfig(special_tokens=("<|x|>",))
    assert TrainConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"vocab_size": 200}, r"vocab_size=200 is too small: it must be at least 256"),
        ({"vocab_size": 260, "stop_list_size": 3, "special_tokens": ("a", "b")}, r"at least 261"),
        ({"pattern": "("}, r"neither a built-in name"),
        ({"pair_count": "both"}, r"pair_count must be one of"),
        ({"batching": "fast"}, r"batching must be one of"),
        ({"max_batch_size": -1}, r"max_batch_size must be >= 0"),
        ({"cap_divisor": 0}, r"cap_divisor must be >= 1"),
        ({"workers": 0}, r"workers must be >= 1"),
        ({"freq_cutoff": -2}, r"freq_cutoff must be >= 0"),
        ({"special_tokens": "<|endoftext|>"}, r"list of strings"),
        ({"special_tokens": ("a", "a")}, r"duplicates"),
        ({"vocab_size": 3.5}, r"vocab_size must be an integer"),
        ({"memory_budget": "lots"}, r"cannot read the size"),
    ],
)
def test_invalid_values_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_config_is_frozen():
    with pytest.raises(Exception):
        TrainConfig().vocab_size = 5  # type: ignore[misc]


def test_memory_budget_takes_a_size():
    assert TrainConfig(memory_budget="1GB").memory_budget == 10**9

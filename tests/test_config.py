"""TrainConfig validation: bad values name the value and the allowed range."""

from __future__ import annotations

import pytest

from parbpe.config import TrainConfig
from parbpe.patterns import GPT2_PATTERN
from parbpe.run.memory import parse_size


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


def test_parse_size():
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1.5g") == 1_500_000_000
    assert parse_size("1000") == 1000
    assert TrainConfig(memory_budget="1GB").memory_budget == 10**9


def test_worker_data_limit_follows_the_budget():
    from parbpe.run.memory import (
        HELD_FACTOR,
        MAX_WORKER_DATA,
        MIN_WORKER_DATA,
        WORKER_OVERHEAD,
        parse_size,
        worker_data_limit,
    )

    base, unit = 100 * 10**6, 5 * 10**6
    two_gb = worker_data_limit(2 * 10**9, 2, base, unit)
    assert two_gb == ((2 * 10**9 - 3 * base) // 2 - 4 * unit - WORKER_OVERHEAD) // HELD_FACTOR
    assert worker_data_limit(10**9, 2, base, unit) < two_gb < worker_data_limit(2 * 10**9, 1, base, unit)
    assert worker_data_limit(10**12, 2, base, unit) == MAX_WORKER_DATA
    with pytest.raises(ValueError, match=r"too small for 2 worker\(s\).*largest work unit \(5.0 MB of text\)") as error:
        worker_data_limit(400 * 10**6, 2, base, unit)
    suggested = parse_size("".join(str(error.value).split("use at least ")[1].split(" ")[:2]))  # "800.0 MB"
    assert worker_data_limit(suggested, 2, base, unit) >= MIN_WORKER_DATA  # the size the error names does


def test_count_layout_has_the_parent_count_under_a_tight_budget():
    from parbpe.run.memory import (
        MIN_WORKER_DATA,
        PARENT_COUNTING,
        ROOMY_WORKER_DATA,
        count_layout,
        worker_data_limit,
    )

    base, unit = 130 * 10**6, 2 * 10**6
    roomy = count_layout(4 * 10**9, 2, base, unit)  # plenty: two workers, the parent waits
    assert (roomy.shards, roomy.parent_counts) == (2, False) and roomy.data_limit >= ROOMY_WORKER_DATA
    tight = count_layout(650 * 10**6, 2, base, unit)  # one process fewer leaves each shard more
    assert (tight.shards, tight.parent_counts) == (2, True)
    assert tight.data_limit == worker_data_limit(650 * 10**6, 2, base, unit, processes=2, extra=PARENT_COUNTING)
    assert tight.data_limit > worker_data_limit(650 * 10**6, 2, base, unit)
    lean = count_layout(400 * 10**6, 2, base, unit)  # two shards do not fit: the parent counts alone
    assert (lean.shards, lean.parent_counts) == (1, True) and lean.data_limit >= MIN_WORKER_DATA
    with pytest.raises(ValueError, match=r"too small for 2 worker\(s\).*use at least"):
        count_layout(150 * 10**6, 2, base, unit)


def test_reduce_workers_follow_the_budget():
    from parbpe.run.memory import reduce_workers

    base, partition = 130 * 10**6, 10 * 10**6
    assert reduce_workers(10**10, 2, base, partition) == 2
    assert reduce_workers(400 * 10**6, 2, base, partition) == 1  # this process reduces alone
    assert reduce_workers(10**10, 1, base, partition) == 1

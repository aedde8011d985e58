"""The merge rounds' process state: Python's cyclic collector is paused while they run, and restored."""

from __future__ import annotations

import gc

import pytest

from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table

COUNTS = {b"hello": 5, b"yellow": 3, b"low": 7, b"lower": 2, b"hell": 4}


def _learn(**kwargs):
    items = sorted(COUNTS.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + 12)
    return learn_merges(table, [bytes([b]) for b in range(256)], 12, **kwargs)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_in_the_rounds_and_as_it_was_after(enabled):
    seen = []
    (gc.enable if enabled else gc.disable)()
    try:
        _learn(on_round=lambda merges, sizes, final: seen.append(gc.isenabled()))
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert seen and not any(seen)


def test_the_collector_is_on_again_after_a_round_fails():
    def fail(merges, sizes, final):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _learn(on_round=fail)
    assert gc.isenabled()


@pytest.mark.parametrize("options", [{}, {"batching": "exact"}, {"max_batch_size": 1}, {"nonoverlap": True}])
def test_the_rounds_leave_no_reference_cycles(options):
    """What pausing the collector relies on: nothing the rounds make is left for it to find."""
    gc.collect()
    _learn(**options)
    assert gc.collect() == 0

"""The merge rounds' process state: the objects made before them are frozen out of the cyclic collector's
walks while they run (gc.freeze), and let back in after; the rounds make no reference cycles."""

from __future__ import annotations

import gc
import threading

import pytest

from parbpe import jit
from parbpe.merge.coordinator import learn_merges
from parbpe.merge.table import build_table

COUNTS = {b"hello": 5, b"yellow": 3, b"low": 7, b"lower": 2, b"hell": 4}


def _learn(**kwargs):
    items = sorted(COUNTS.items())
    table = build_table([c for c, _ in items], [k for _, k in items], 256 + 12)
    return learn_merges(table, [bytes([b]) for b in range(256)], 12, **kwargs)


def test_older_objects_are_frozen_in_the_rounds_and_let_back_after():
    seen = []
    _learn(on_round=lambda merges, sizes, final: seen.append(gc.get_freeze_count()))
    assert seen and all(count > 0 for count in seen)
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_program_that_froze_objects_itself_keeps_them_frozen():
    jit.settle()  # (a kernel load in a thread would free frozen objects meanwhile: see below)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        _learn()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_the_objects_are_let_back_after_a_round_fails():
    def fail(merges, sizes, final):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _learn(on_round=fail)
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("options", [{}, {"batching": "exact"}, {"max_batch_size": 1}, {"nonoverlap": True}])
def test_the_rounds_leave_no_reference_cycles(options):
    """Nothing the rounds make is left for the collector to find (its walks are what they cost). A kernel
    load an earlier test started in a thread (jit.preload, a counts-file run) is waited for first: numba's
    import and compiles leave cycles of their own, found by this collect when they run beside it."""
    jit.settle()
    gc.collect()
    _learn(**options)
    assert gc.collect() == 0, [thread.name for thread in threading.enumerate()]

"""The merge stage's speed-ups that hold more than the fit's estimate (numba loaded while the table is
built, the engine's second thread) are used only where the budget has room for them."""

from __future__ import annotations

import pytest

import parbpe
from parbpe import jit
from parbpe.merge import engines
from parbpe.pipeline import merge as merge_stage


@pytest.fixture
def engines_made(monkeypatch):
    """The threads and room (roomy: numpy's index sorted by radix passes) of every LinkedEngine the runs
    make (not the preload's, which names its kernels)."""
    made = []
    init = engines.LinkedEngine.__init__

    def record(self, table, use_kernels=None, threads=1, roomy=False):
        if use_kernels is None:
            made.append((threads, roomy))
        init(self, table, use_kernels, threads, roomy)

    monkeypatch.setattr(engines.LinkedEngine, "__init__", record)
    monkeypatch.setattr(jit, "_preloading", {})
    return made


@pytest.mark.parametrize("roomy", [True, False])
def test_room_decides_the_preload_and_the_second_thread(monkeypatch, engines_made, roomy):
    pytest.importorskip("numba")
    monkeypatch.setenv("PARBPE_JIT", "on")
    monkeypatch.setattr(merge_stage, "_room", lambda fit, budget: "speed" if roomy else "numba")
    texts = [f"document {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(300)]
    result = parbpe.train_from_iterator(texts, vocab_size=400, workers=1)
    jit.settle()
    assert engines_made == [(2, True) if roomy else (1, False)] and bool(jit._preloading) == roomy
    monkeypatch.setattr(merge_stage, "_room", lambda fit, budget: "numba" if roomy else "speed")
    monkeypatch.setattr(jit, "_preloading", {})
    assert parbpe.train_from_iterator(texts, vocab_size=400, workers=1).tokenizer.merges == result.tokenizer.merges


def test_room_is_the_estimate_numba_and_a_quarter_of_the_merge():
    from parbpe.count.jit_lexer import JIT_RSS
    from parbpe.merge.fit import MergeFit, merge_estimate

    fit = MergeFit(min_count=1, auto_cutoff=False, chunks=10**6, tokens=10**7, estimate=800 * 10**6,
                   dropped_chunks=0, dropped_occurrences=0, workers=1)
    speed = fit.estimate + JIT_RSS + merge_estimate(10**7, 10**6) // 4
    assert merge_stage._room(fit, speed) == "speed" and merge_stage._room(fit, speed - 1) == "numba"
    assert merge_stage._room(fit, fit.estimate + JIT_RSS) == "numba"
    assert merge_stage._room(fit, fit.estimate + JIT_RSS - 1) == "numpy"


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_no_room_for_numba_merges_with_numpy_under_auto(monkeypatch, engines_made, mode, capsys):
    """A budget with no room for numba beside the merge stage's estimate: under auto the engine runs
    numpy (said in a note), with the same merges; --jit on keeps the kernels (the user's choice)."""
    pytest.importorskip("numba")
    from parbpe.merge import linked_kernels

    monkeypatch.setattr(linked_kernels, "JIT_MIN_TOKENS", 10)  # this small table counts as large
    texts = [f"document {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(300)]
    with_room = parbpe.train_from_iterator(texts, vocab_size=400, workers=1, jit=mode)
    kernels = []
    init = engines.LinkedEngine.__init__

    def record(self, table, use_kernels=None, threads=1, roomy=False):
        init(self, table, use_kernels, threads, roomy)
        kernels.append(self.jit)

    monkeypatch.setattr(engines.LinkedEngine, "__init__", record)
    monkeypatch.setattr(merge_stage, "_room", lambda fit, budget: "numpy")
    tight = parbpe.train_from_iterator(texts, vocab_size=400, workers=1, jit=mode, progress="bar")
    assert kernels == [mode == "on"] and tight.tokenizer.merges == with_room.tokenizer.merges
    assert ("merging with numpy: the" in capsys.readouterr().err) == (mode == "auto")

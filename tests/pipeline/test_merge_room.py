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


@pytest.mark.parametrize("numba_loaded", [False, True], ids=["numba-to-load", "numba-loaded"])
@pytest.mark.parametrize("table", ["as-it-is", "encoded", "numpy"])
def test_room_is_the_estimate_the_kernels_load_and_the_second_thread(monkeypatch, numba_loaded, table):
    """The kernels' load is numba with them, or only them where the count loaded numba already (its
    weight is in the estimate's base then: counted once); the second thread a 16th of the merge's need
    where the kernels merge the table as it is, a quarter where it is encoded first (an encoding in two
    threads) or numpy merges it (its index sorted by radix passes)."""
    from parbpe.merge.fit import MergeFit, merge_estimate

    if table != "numpy":
        pytest.importorskip("numba")
    monkeypatch.setattr(jit, "loaded", lambda: numba_loaded)
    load = jit.MERGE_KERNELS_RSS if numba_loaded else jit.NUMBA_RSS
    fit = MergeFit(min_count=1, auto_cutoff=False, chunks=10**6, tokens=10**7, estimate=800 * 10**6,
                   dropped_chunks=0, dropped_occurrences=0, workers=1,
                   tokens_per_byte=0.3 if table == "encoded" else None)
    share = merge_stage.SECOND_THREAD_SHARE if table == "as-it-is" else 4
    speed = fit.estimate + load + merge_estimate(10**7, 10**6) // share
    with jit.using("off" if table == "numpy" else "auto"):
        assert merge_stage._room(fit, speed) == "speed" and merge_stage._room(fit, speed - 1) == "numba"
        assert merge_stage._room(fit, fit.estimate + load) == "numba"
        assert merge_stage._room(fit, fit.estimate + load - 1) == "numpy"


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_no_room_for_numba_merges_with_numpy_under_auto(monkeypatch, engines_made, mode, capsys):
    """A budget with no room for numba beside the merge stage's estimate: under auto the engine runs
    numpy (said in a note), with the same merges; --jit on keeps the kernels (the user's choice)."""
    pytest.importorskip("numba")

    monkeypatch.setattr(jit, "MERGE_MIN_TOKENS", 10)  # this small table counts as large
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


def _counts_csv(path, rows: int = 400) -> str:
    words = [f" w{i}{'x' * (i % 7)}" for i in range(rows)]
    path.write_text("str,int\n" + "".join(f"{w},{(i * 37) % 101 + 2}\n" for i, w in enumerate(words)))
    return str(path)


@pytest.fixture
def preloads_at_count(monkeypatch):
    """The preloads started (jit._preloading's names) as each count stage begins."""
    from parbpe.pipeline import vocabulary

    seen = []
    count_stage = vocabulary.count_stage

    def record(ctx, units, *args, **kwargs):
        seen.append(sorted(jit._preloading))
        return count_stage(ctx, units, *args, **kwargs)

    monkeypatch.setattr(vocabulary, "count_stage", record)
    monkeypatch.setattr(jit, "_preloading", {})
    return seen


def test_counts_files_start_numba_before_counting_where_the_kernels_will_merge(monkeypatch, tmp_path,
                                                                               preloads_at_count):
    """A run reading counts files only starts loading the merge kernels as the count stage starts
    (preload_before_counting) when their bytes make a table past JIT_MIN_TOKENS and the budget has room:
    the same merges as numpy's; not for text, not without room, not below the size, not with --jit off."""
    pytest.importorskip("numba")

    counts = _counts_csv(tmp_path / "counts.csv")
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    monkeypatch.setattr(jit, "MERGE_MIN_TOKENS", 10**9)
    numpy_merges = parbpe.train(counts, vocab_size=280, workers=1).tokenizer.merges
    assert preloads_at_count == [[]]
    monkeypatch.setattr(jit, "MERGE_MIN_TOKENS", 1000)  # this file's 0.6 tokens a byte pass it
    monkeypatch.setattr(jit, "_preloading", {})
    assert parbpe.train(counts, vocab_size=280, workers=1).tokenizer.merges == numpy_merges
    assert preloads_at_count[-1] == ["linked-uint16"]
    for kwargs in ({"jit": "off"}, {"inputs": str(text)}):
        monkeypatch.setattr(jit, "_preloading", {})
        parbpe.train(kwargs.pop("inputs", counts), vocab_size=280, workers=1, **kwargs)
        assert preloads_at_count[-1] == []
    monkeypatch.setattr(jit, "_preloading", {})
    monkeypatch.setattr(merge_stage, "merge_estimate", lambda tokens, chunks: 10**15)  # no room beside it
    parbpe.train(counts, vocab_size=280, workers=1)
    assert preloads_at_count[-1] == []


def test_the_fit_waits_for_a_load_started_before_counting(monkeypatch, tmp_path):
    """The table stage settles the preload threads before its fit reckons numba (loaded or not): its
    reckoning may not depend on how far a thread got."""
    pytest.importorskip("numba")

    monkeypatch.setattr(jit, "MERGE_MIN_TOKENS", 1000)
    monkeypatch.setattr(jit, "_preloading", {})
    order = []
    settle, reckoned = jit.settle, merge_stage.reckoned_in_use
    monkeypatch.setattr(jit, "settle", lambda: (order.append("settle"), settle())[1])
    monkeypatch.setattr(merge_stage, "reckoned_in_use", lambda *a: (order.append("reckon"), reckoned(*a))[1])
    parbpe.train(_counts_csv(tmp_path / "counts.csv"), vocab_size=280, workers=1)
    assert "reckon" in order and "settle" in order[:order.index("reckon")]


def test_a_run_that_fails_waits_for_the_kernel_load_it_started(monkeypatch, tmp_path):
    """A kernel load started in a thread as counting starts (jit.preload) ends with the run, even one that
    fails before its merge: no thread of the run's goes on compiling in the caller's process."""
    import threading
    import time

    from parbpe.pipeline import vocabulary

    loaded = threading.Event()

    def slow_load():
        time.sleep(0.5)
        loaded.set()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(jit, "_preloading", {})
    monkeypatch.setattr(vocabulary, "preload_before_counting", lambda ctx, units: jit.preload("test-load", slow_load))
    monkeypatch.setattr(vocabulary, "count_stage", fail)
    (tmp_path / "a.txt").write_text("some text to count\n" * 100)
    with pytest.raises(OSError, match="disk full"):
        parbpe.train(str(tmp_path / "a.txt"), vocab_size=300, workers=1)
    assert loaded.is_set()

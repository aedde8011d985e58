"""A first run's kernels compiled in processes of their own (pipeline/kernels_ahead.py): the same
tokenizer whether the compiling processes finish, are killed, fail or are not started; they never
outlive the run; a warm cache or a small budget starts none; each compiles its hand of one deal of
the calls a warm-up records (jit.signatures_of, jit.deal), which are the calls the run makes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import parbpe
from parbpe import jit
from parbpe.patterns import resolve_pattern
from parbpe.pipeline import kernels_ahead

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    import random

    rng = random.Random(5)
    words = ["".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(2, 9))) for _ in range(600)]
    path = tmp_path_factory.mktemp("ahead") / "corpus.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(3000)))
    return path


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("ref") / "tok"
    parbpe.train(str(corpus), vocab_size=600, workers=1, jit="off", out_dir=out)
    return (out / "merges.txt").read_bytes()


def _train(corpus: Path, out: Path, **settings) -> dict:
    parbpe.train(str(corpus), vocab_size=600, workers=1, jit="on", out_dir=out, **settings)
    return json.loads((out / "stats.json").read_text())


@pytest.fixture
def cold(monkeypatch):
    """This process's kernels are loaded already: have the run take numba's cache as cold."""
    pytest.importorskip("numba")
    monkeypatch.setattr(kernels_ahead, "cold", lambda families: families)


def test_a_first_run_compiles_beside_the_count_and_the_run_waits_for_it(corpus, reference, tmp_path, cold):
    stats = _train(corpus, tmp_path / "tok")
    ahead = stats["kernels"]["ahead"]
    assert ahead["families"] == ["count", "reduce", "merge"]
    assert ahead["exit"] == 0 and ahead["processes"] == min(os.cpu_count(), kernels_ahead.PROCESSES)
    assert (tmp_path / "tok" / "merges.txt").read_bytes() == reference


def test_killed_compiling_processes_change_nothing(corpus, reference, tmp_path, cold, monkeypatch):
    started = []
    original = kernels_ahead.KernelsAhead.__init__

    def start_then_kill(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.extend(self.pids)
        for pid in self.pids:
            os.kill(pid, signal.SIGKILL)

    monkeypatch.setattr(kernels_ahead.KernelsAhead, "__init__", start_then_kill)
    stats = _train(corpus, tmp_path / "tok")
    assert stats["kernels"]["ahead"]["exit"] == -signal.SIGKILL
    assert (tmp_path / "tok" / "merges.txt").read_bytes() == reference
    assert started and all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                           for pid in started)


def test_a_failing_compiling_process_changes_nothing(corpus, reference, tmp_path, cold, monkeypatch):
    monkeypatch.setattr(kernels_ahead, "_CHILD", "import sys; sys.stderr.write('garbage'); sys.exit(3)")
    stats = _train(corpus, tmp_path / "tok")
    assert stats["kernels"]["ahead"]["exit"] == 3
    assert (tmp_path / "tok" / "merges.txt").read_bytes() == reference


def test_a_compiling_process_that_sends_garbage_is_stopped_not_waited_for(corpus, reference, tmp_path, cold,
                                                                          monkeypatch):
    monkeypatch.setattr(kernels_ahead, "_CHILD", "import sys, time; print('garbage', flush=True); time.sleep(600)")
    stats = _train(corpus, tmp_path / "tok")
    ahead = stats["kernels"]["ahead"]
    assert ahead["exit"] == -signal.SIGKILL and ahead["count_waited_seconds"] < 30
    assert stats["seconds"]["table"] + stats["seconds"]["merge"] < 30  # (not the merge's wait for 600 s)
    assert (tmp_path / "tok" / "merges.txt").read_bytes() == reference


def test_superbpe_waits_for_the_merge_line_past_a_count_line_nobody_read(corpus, tmp_path, cold, monkeypatch):
    """The count ran numpy (it never waited for the counting kernels, so their line is still in the
    pipe): stage 1's merge reads past it to the merge line, and stops no process."""
    reference = tmp_path / "ref"
    parbpe.train(str(corpus), vocab_size=600, workers=1, jit="off", out_dir=reference, superbpe_transition=0.8)
    monkeypatch.setattr(kernels_ahead.KernelsAhead, "wait_count", lambda self: None)
    stats = _train(corpus, tmp_path / "tok", superbpe_transition=0.8)
    ahead = stats["kernels"]["ahead"]
    assert "superbpe" in ahead["families"] and ahead["exit"] == 0
    assert (tmp_path / "tok" / "merges.txt").read_bytes() == (reference / "merges.txt").read_bytes()


def test_the_run_stops_it_when_the_run_fails(corpus, tmp_path, cold, monkeypatch):
    """A run that fails while it compiles (here: a hanging compile and a failing count) leaves no process."""
    monkeypatch.setattr(kernels_ahead, "_CHILD", "import time; time.sleep(600)")
    started = []
    original = kernels_ahead.KernelsAhead.__init__

    def remember(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.extend(self.pids)

    monkeypatch.setattr(kernels_ahead.KernelsAhead, "__init__", remember)

    def failing_count(*args, **kwargs):
        raise ValueError("the count failed")

    monkeypatch.setattr(parbpe.pipeline.vocabulary, "count_stage", failing_count)
    with pytest.raises(ValueError, match="the count failed"):
        _train(corpus, tmp_path / "tok")
    assert started and not any(psutil.pid_exists(pid) for pid in started)


def test_a_warm_cache_or_a_small_budget_starts_none(corpus, reference, tmp_path, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setattr(kernels_ahead, "cold", lambda families: [])
    assert "ahead" not in _train(corpus, tmp_path / "warm")["kernels"]
    monkeypatch.setattr(kernels_ahead, "cold", lambda families: families)
    small = _train(corpus, tmp_path / "small", memory_budget=kernels_ahead.MIN_BUDGET - 1)
    assert "ahead" not in small["kernels"]
    assert (tmp_path / "small" / "merges.txt").read_bytes() == reference


@pytest.fixture(scope="module")
def superbpe_reference(corpus, tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("ref") / "tok"
    parbpe.train(str(corpus), vocab_size=600, workers=1, jit="off", out_dir=out, superbpe_transition=0.8)
    return (out / "merges.txt").read_bytes()


@pytest.mark.parametrize("superbpe", [False, True], ids=["bpe", "superbpe"])
def test_a_real_first_run_in_an_empty_numba_cache(corpus, request, tmp_path, superbpe):
    """The command on an empty numba cache: the probe finds it cold, the compiling processes fill the
    cache, the tokenizer is the numpy path's; this process compiled the probes and its hand of the
    counting kernels, nothing else (every call recorded is a call the run made: one recorded wrong
    would be compiled again here); the next run finds the cache warm and starts none."""
    pytest.importorskip("numba")
    reference = request.getfixturevalue("superbpe_reference" if superbpe else "reference")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "parbpe", "train", str(corpus), "--vocab-size", "600",
                               "--workers", "1", "--jit", "on", "--progress", "none", "--out", str(out),
                               *(["--superbpe-transition", "0.8"] if superbpe else [])],
                              capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (out / "merges.txt").read_bytes() == reference
        runs.append(json.loads((out / "stats.json").read_text())["kernels"])
    assert runs[0]["ahead"]["exit"] == 0 and ("superbpe" in runs[0]["ahead"]["families"]) == superbpe
    assert runs[0]["ahead"]["compiled"] > 0 and runs[0]["ahead"]["compile_seconds"] > 0  # (their last lines)
    hand = jit.deal(kernels_ahead.count_calls(resolve_pattern("gpt4")), runs[0]["ahead"]["processes"] + 1)[0]
    assert set(runs[0]["compiled"]) == {"partition_hashes", "distinct_pairs"} | {name.rsplit(".", 1)[1] for name, _ in hand}
    assert "ahead" not in runs[1] and runs[1]["compiled"] == []


def test_a_run_after_one_stopped_while_compiling_compiles_what_is_missing_beside(corpus, tmp_path):
    """The counting kernels are in numba's cache (a first run stopped after its count), the merge's are
    not: the train compiles the later families in its processes, and itself only the probe of them."""
    pytest.importorskip("numba")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    counting = ("from parbpe.pipeline import kernels_ahead; from parbpe.count.chunking import load_kernels; "
                "from parbpe.patterns import resolve_pattern; from parbpe import jit; jit.set_mode('on'); "
                "assert kernels_ahead.cold(['count']) == ['count']; load_kernels(resolve_pattern('gpt4'))")
    done = subprocess.run([sys.executable, "-c", counting], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run([sys.executable, "-m", "parbpe", "train", str(corpus), "--vocab-size", "600", "--workers",
                           "1", "--jit", "on", "--progress", "none", "--out", str(tmp_path / "tok")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    kernels = json.loads((tmp_path / "tok" / "stats.json").read_text())["kernels"]
    assert kernels["ahead"]["families"] == ["reduce", "merge"] and kernels["ahead"]["exit"] == 0
    assert kernels["compiled"] == ["distinct_pairs"]


def test_a_merge_that_runs_numpy_stops_it_instead_of_waiting(corpus, reference, tmp_path, cold, monkeypatch):
    """The text's size promised a table the merge kernels take; the table came out smaller (under auto,
    numpy merges it): the compiling process is stopped, not waited for."""
    monkeypatch.setattr(kernels_ahead, "_CHILD", "import time; time.sleep(600)")
    monkeypatch.setattr(kernels_ahead, "COUNT_WAIT", 0.5)  # (the hanging processes send no counting kernels)
    monkeypatch.setattr(kernels_ahead, "TABLE_TOKENS_PER_BYTE", 10**6)  # every text "makes" a large table
    monkeypatch.setattr(kernels_ahead.jit, "COUNT_MIN_BYTES", 0)
    out = tmp_path / "tok"
    parbpe.train(str(corpus), vocab_size=600, workers=1, jit="auto", out_dir=out)
    stats = json.loads((out / "stats.json").read_text())
    ahead = stats["kernels"]["ahead"]
    assert ahead["families"] == ["count", "reduce", "merge"] and ahead["not_needed"]
    assert ahead["exit"] == -signal.SIGKILL and ahead["count_waited_seconds"] < 30
    assert stats["seconds"]["table"] < 30  # (not the child's 600 s)
    assert (out / "merges.txt").read_bytes() == reference


def test_a_warm_up_is_recorded_without_compiling_and_dealt_whole():
    """signatures_of runs the kernels as Python (nothing compiled or loaded), threads' calls included
    (the merge warm-up sorts in two threads); deal gives every call to one hand, the largest first, the
    same way each time."""
    pytest.importorskip("numba")
    before = jit.compiles.mark()
    calls = jit.signatures_of(lambda: kernels_ahead._warm_merge(600))
    calls += kernels_ahead.count_calls(resolve_pattern("gpt2"))
    assert jit.compiles.mark() == before
    names = [name for name, _ in calls]
    assert len(set(calls)) == len(calls) and {"parbpe.kernels.linked.count_seconds",
                                               "parbpe.kernels.lexer.gpt2_starts"} <= set(names)
    hands = jit.deal(calls, 3)
    assert sorted(sum(hands, []), key=repr) == sorted(calls, key=repr) and all(hands)
    assert hands == jit.deal(list(reversed(calls)), 3)
    sizes = [sum(jit.KERNELS[name].code_size() for name, _ in hand) for hand in hands]
    largest = max(jit.KERNELS[name].code_size() for name in names)
    assert max(sizes) - min(sizes) <= largest

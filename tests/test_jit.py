"""The JIT's mode: PARBPE_JIT and --jit, numba missing, and a kernel against its plain function."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from parbpe import jit
from parbpe.jit import prefetch
from parbpe.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


@jit.kernel
def _total(values):
    total = 0
    for v in values:
        total += v
    return total


@jit.helper
def _doubled(v):
    return 2 * v


@jit.kernel
def _doubled_total(values):
    total = 0
    for v in values:
        total += _doubled(v)
    return total


@jit.kernel
def _spin(rounds):
    total = 0
    for i in range(rounds):
        total += (i * 7) % 13
    return np.full(2, total), total  # a tuple: boxing it finds the handler's exception set


@pytest.fixture
def no_numba(monkeypatch):
    """This process as if numba were not installed."""
    monkeypatch.setattr(jit, "_numba", None)
    monkeypatch.setattr(jit, "_numba_checked", True)


def test_modes_from_the_environment(monkeypatch):
    monkeypatch.setenv(jit.ENV, "off")
    assert jit.mode() == "off" and not jit.enabled()
    monkeypatch.setenv(jit.ENV, "bogus")
    with pytest.raises(ValueError, match=r"--jit \(PARBPE_JIT\) must be one of auto, on, off"):
        jit.mode()


def test_auto_without_numba_runs_numpy(monkeypatch, no_numba):
    monkeypatch.setenv(jit.ENV, "auto")
    assert not jit.enabled()


def test_on_without_numba_is_a_user_error_naming_the_install(monkeypatch, no_numba):
    monkeypatch.setenv(jit.ENV, "on")
    with pytest.raises(jit.KernelsMissing, match=r"--jit on needs numba.*pip install 'numba"):
        jit.enabled()
    with pytest.raises(ValueError, match=r"pip install 'numba"):  # KernelsMissing is a ValueError: exit 2
        TrainConfig(vocab_size=300, jit="on")
    with pytest.raises(ValueError, match="jit must be one of"):
        TrainConfig(vocab_size=300, jit="fast")


def test_kernel_equals_its_python_function():
    pytest.importorskip("numba")
    values = np.arange(1000, dtype=np.int64)
    assert _total(values) == _total.python(values) == values.sum()


def test_using_sets_and_restores_the_mode(monkeypatch):
    monkeypatch.setenv(jit.ENV, "auto")
    with jit.using("off"):
        assert jit.mode() == "off"
    assert jit.mode() == "auto"
    monkeypatch.delenv(jit.ENV)
    with jit.using("off"):
        assert not jit.enabled()
    assert jit.ENV not in os.environ


def test_worth_is_the_size_rule_under_auto_only(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv(jit.ENV, "auto")
    assert jit.worth(10, 10) and not jit.worth(9, 10)
    monkeypatch.setenv(jit.ENV, "on")
    assert jit.worth(0, 10)
    monkeypatch.setenv(jit.ENV, "off")
    assert not jit.worth(100, 10)


def test_a_run_keeps_the_environments_mode_unless_it_names_one(monkeypatch):
    from parbpe.config import RunOptions
    from parbpe.pipeline.context import run_context

    monkeypatch.setenv(jit.ENV, "off")
    with run_context(TrainConfig(vocab_size=300), RunOptions(progress="none")) as ctx:
        assert jit.mode() == "off" and ctx.config.jit == "off"  # the mode Ray's tasks are given
    with run_context(TrainConfig(vocab_size=300, jit="auto"), RunOptions(progress="none")) as ctx:
        assert jit.mode() == "auto" and ctx.config.jit == "auto"
    assert jit.mode() == "off"


def test_a_kernel_calls_a_helper_compiled_before_it():
    pytest.importorskip("numba")
    values = np.arange(100, dtype=np.int64)
    assert _doubled_total.python(values) == 2 * values.sum()  # the helper as plain Python, before compiling
    assert _doubled_total(values) == 2 * values.sum()
    assert _doubled(3) == 6 and not hasattr(_doubled, "py_func")  # the module global is left as it was


def test_ctrl_c_while_a_kernel_runs_raises_keyboard_interrupt():
    """A signal handler that raises while a kernel runs (Ctrl-C) left numba's dispatcher to report a
    SystemError ("returned a result with an exception set"): a run interrupted in its merge then said
    "internal error" and exited 3, not 130. The kernel raises what the handler raised."""
    import signal
    import threading

    pytest.importorskip("numba")
    _spin(10)  # compiled: the call below spends its time in the kernel

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            _spin(600_000_000)  # 0.5-1 s in the kernel
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, before)


def test_ctrl_c_reported_inside_a_report_is_raised():
    """Ctrl-C while a kernel calls back into Python (numba unpickling a constant) came out as a
    SystemError ("returned a result with an exception set") caused by another such SystemError, whose
    cause was the KeyboardInterrupt: the fresh clone's Ctrl-C test ended with an internal error.
    A kernel call raises the innermost cause; a SystemError of another kind stays as it is."""
    def reported(cause: BaseException, depth: int) -> SystemError:
        exc: BaseException = cause
        for _ in range(depth):
            outer = SystemError("<function _numba_unpickle> returned a result with an exception set")
            outer.__cause__ = exc
            exc = outer
        return exc

    def raising(exc):
        def call(*args):
            raise exc
        return call

    kernel = jit.Kernel(lambda: 0, "", {})
    for depth in (1, 2, 3):
        kernel._compiled = raising(reported(KeyboardInterrupt(), depth))
        with pytest.raises(KeyboardInterrupt):
            kernel()
    other = SystemError("something else")
    kernel._compiled = raising(other)
    with pytest.raises(SystemError, match="something else"):
        kernel()
    kernel._compiled = raising(reported(SystemError("no cause"), 2))  # a chain that ends in no handler's exception
    with pytest.raises(SystemError, match="with an exception set"):
        kernel()


def test_the_commands_ctrl_c_waits_for_the_kernel_then_is_raised(monkeypatch):
    """The parbpe command's SIGINT handler holds a Ctrl-C that arrives while a kernel runs (or numba
    compiles one: a KeyboardInterrupt raised in LLVM's callbacks is swallowed, or ends the interpreter
    by SIGINT whatever the command returns) and the kernel's call raises it as it returns."""
    import signal
    import threading
    import time

    from parbpe import cli

    pytest.importorskip("numba")
    monkeypatch.setattr(jit, "interrupts", jit._Interrupts())
    _spin(10)  # compiled: the call below spends its time in the kernel
    before = signal.signal(signal.SIGUSR1, cli._on_sigint)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        started = time.perf_counter()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            _spin(600_000_000)  # 0.5-1 s in the kernel
        assert time.perf_counter() - started > 0.1  # raised once the kernel returned, not inside it
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, before)
    assert _spin(10)[1] == _spin.python(10)[1]  # nothing held any more


def test_the_commands_sigint_handler_raises_outside_kernels_and_holds_inside(monkeypatch):
    from parbpe import cli

    monkeypatch.setattr(jit, "interrupts", jit._Interrupts())
    with pytest.raises(KeyboardInterrupt):
        cli._on_sigint(2, None)
    with pytest.raises(KeyboardInterrupt):
        with jit.interrupts.held():
            cli._on_sigint(2, None)  # held: nothing raised here ...
            reached = True
    assert reached  # ... but as the call ends


def test_preload_runs_once_per_name_in_a_thread_and_settle_waits(monkeypatch):
    import threading
    import time

    monkeypatch.setattr(jit, "_preloading", {})
    calls, release = [], threading.Event()

    def warm():
        calls.append(threading.current_thread().name)
        release.wait(5)
        time.sleep(0.05)

    jit.preload("x", warm)
    jit.preload("x", warm)  # the same name again: nothing more
    thread = jit._preloading["x"]
    assert thread.is_alive() and thread is not threading.current_thread()
    release.set()
    jit.settle()
    assert not thread.is_alive() and calls == ["parbpe-jit-x"]


def test_a_failing_preload_is_dropped_and_the_fork_context_waits_for_it(monkeypatch):
    import time

    from parbpe.run.pool import get_context

    monkeypatch.setattr(jit, "_preloading", {})

    def warm():
        time.sleep(0.3)
        raise RuntimeError("broken numba")

    jit.preload("broken", warm)
    get_context("spawn")  # every process start goes through here: it waits for the thread
    assert not jit._preloading["broken"].is_alive()


def test_kernels_asked_from_two_threads_at_once_load_once(monkeypatch):
    """The main thread calls a kernel while a preload thread loads it: one dispatcher, equal results."""
    pytest.importorskip("numba")
    import threading

    monkeypatch.setattr(jit, "_preloading", {})
    fresh = jit.Kernel(_total.python, "", {})
    values = np.arange(10_000, dtype=np.int64)
    seen = []
    jit.preload("total", lambda: seen.append(fresh(values)))
    here = fresh(values)
    jit.settle()
    dispatcher = fresh._compiled
    other = threading.Thread(target=lambda: seen.append(fresh(values)))
    other.start()
    other.join()
    assert seen == [here, here] and here == values.sum() and fresh._compiled is dispatcher


def test_worth_imports_nothing(monkeypatch, no_numba):
    monkeypatch.setenv(jit.ENV, "auto")
    assert not jit.worth(10**9, 1) and not jit.loaded()
    monkeypatch.setattr(jit, "_numba", object())
    assert jit.worth(10, 10) and not jit.worth(9, 10)
    monkeypatch.setenv(jit.ENV, "off")
    assert not jit.worth(10**9, 1)


def test_parbpe_never_writes_the_mode_into_the_environment(monkeypatch):
    monkeypatch.delenv(jit.ENV, raising=False)
    jit.set_mode("off")
    try:
        assert jit.mode() == "off" and jit.ENV not in os.environ
    finally:
        jit.set_mode(None)
    assert jit.mode() == "auto"


def _cli_without_numba(*args: str, cwd) -> "subprocess.CompletedProcess[str]":
    """The parbpe command in a process where numba cannot be imported (sys.modules holds None for it,
    which is how Python marks a module as absent)."""
    import subprocess
    import sys

    code = "import sys; sys.modules['numba'] = None; from parbpe.cli import console; sys.exit(console())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_without_numba_the_run_says_so_in_one_line_and_on_is_an_error(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text to train on, and some more text\n" * 200)
    done = _cli_without_numba("train", str(corpus), "--vocab-size", "300", "--workers", "1", "--progress", "bar",
                              "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = done.stderr.replace("\n    ", " ")
    assert jit.MISSING_LINE in said and said.count("numba is not installed") == 1
    refused = _cli_without_numba("train", str(corpus), "--vocab-size", "300", "--jit", "on",
                                 "--out", str(tmp_path / "p"), cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--jit on needs numba" in lines[0] and "pip install 'numba" in lines[0]


@jit.kernel
def _gathered_with_prefetch(rows, table, column):
    total = 0
    for i in range(len(rows)):
        if i + 2 < len(rows):
            prefetch(table, rows[i + 2])  # a 2-D array: the row's first item (by its name, as kernels call it)
            prefetch(column, rows[i + 2])
        total += table[rows[i], 1] + column[rows[i]]
    return total


def test_prefetch_changes_nothing_and_is_the_cpus_instruction_in_a_kernel():
    """jit.prefetch: nothing as Python; in a kernel, LLVM's prefetch (declared through llvmlite's
    declare_intrinsic, so spelled for the LLVM in use), on 1-D and 2-D arrays, the result unchanged."""
    rng = np.random.default_rng(3)
    table = rng.integers(0, 100, (1000, 4)).astype(np.int32)
    column = rng.integers(0, 100, 1000).astype(np.uint16)
    rows = rng.integers(0, 1000, 500)
    expected = int(table[rows, 1].sum() + column[rows].sum())
    assert jit.prefetch(table, 3) is None
    assert _gathered_with_prefetch.python(rows, table, column) == expected
    numba = pytest.importorskip("numba")
    assert _gathered_with_prefetch(rows, table, column) == expected
    python = _gathered_with_prefetch.python  # compiled anew, uncached: a kernel loaded from the cache has no IR
    fresh = numba.njit(jit._in_namespace(python, jit._namespace(python.__module__)))
    assert fresh(rows, table, column) == expected
    assert "llvm.prefetch" in "".join(fresh.inspect_llvm().values())

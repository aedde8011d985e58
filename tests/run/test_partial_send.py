"""A worker killed half-way through sending its answer ends the stage with WorkerDied, never a hang
(issue 23, item 0): no sibling may hold that worker's pipe end, or recv() waits for the rest forever."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import os, signal, struct, sys, time
    from parbpe.run.pool import WorkerDied, get_context, parallel

    def job(task):
        if task == "die":
            conn = sys._getframe(1).f_locals["conn"]  # _serve's end of the pipe
            os.write(conn.fileno(), struct.pack("!i", 100000) + b"half an answer")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # a sibling still alive, holding whatever ends it inherited

    try:
        list(parallel(job, ["die", "sleep"], 2, get_context("fork")))
    except WorkerDied as exc:
        print("died:", exc)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and SIGKILL of a worker")
def test_worker_killed_mid_send_raises_instead_of_hanging() -> None:
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30,
                              env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        pytest.fail("the parent hung on a half-sent message from a killed worker")
    assert done.returncode == 0, done.stderr
    assert "died: worker 0 (task 0) died (signal 9" in done.stdout
    assert time.monotonic() - started < 30


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc lists a process's open pipes")
def test_each_worker_holds_only_its_own_pipe_end() -> None:
    from parbpe.run.pool import get_context, start_piped_workers, stop_workers

    procs, conns = start_piped_workers(get_context("fork"), time.sleep, lambda k, end: (30,), 3)
    try:
        ours = {os.readlink(f"/proc/self/fd/{conn.fileno()}") for conn in conns}
        for proc in procs:
            for _ in range(200):  # the worker closes what it inherited first thing: give it time to start
                if not _held(proc.pid) & ours:
                    break
                time.sleep(0.05)
            assert not _held(proc.pid) & ours, "a worker holds the parent's end of a pipe"
    finally:
        for conn in conns:
            conn.close()
        stop_workers(procs)


def _held(pid: int) -> set[str]:
    """What the process's file descriptors point to."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return held


def test_a_worker_whose_parent_stopped_listening_ends_quietly(tmp_path):
    """The kill loop's finding (2026-11-24): when a sibling died and the parent stopped the run, a
    surviving worker sending its answer met a broken pipe and printed a traceback before the run's
    one error line. It now ends quietly."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent('''
        import time
        from parbpe.run.pool import get_context, start_piped_workers

        def answer_late(conn):
            time.sleep(0.3)
            conn.send(b"x" * 1_000_000)  # the parent's end is closed by then

        if __name__ == "__main__":
            procs, conns = start_piped_workers(get_context("fork"), answer_late, lambda k, end: (end,), 1)
            for conn in conns:
                conn.close()
            procs[0].join(10)
            print(procs[0].exitcode)
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "0" and done.stderr == "", done.stderr


def _sends_then_waits(conn, k: int) -> None:
    """Worker 0 dies half-way through a message, worker 1 sends bytes that are no pickle, worker 2
    answers; then each waits."""
    import signal
    import struct

    from parbpe.run.pool import send_message

    if k == 0:
        os.write(conn.fileno(), struct.pack("!i", 100000) + b"half a message")
        os.kill(os.getpid(), signal.SIGKILL)
    elif k == 1:
        conn.send_bytes(b"no pickle at all")
    else:
        send_message(conn, ("ok", k))
    time.sleep(30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and SIGKILL of a worker")
@pytest.mark.parametrize("broken", [0, 1])
def test_merge_style_answers_half_sent_or_unreadable_end_the_wait(broken):
    """gather_answers (the merge and scoring workers' rounds, send_message's frames): a worker killed
    half-way through its answer is a WorkerDied at once, an answer that does not unpickle a one-line
    RuntimeError; never a hang."""
    from parbpe.run.pool import WorkerDied, gather_answers, get_context, start_piped_workers, stop_workers

    workers = [broken, 2]
    procs, conns = start_piped_workers(get_context("fork"), _sends_then_waits,
                                       lambda k, end: (end, workers[k]), len(workers))
    started = time.monotonic()
    try:
        if broken == 0:
            with pytest.raises(WorkerDied, match="worker 0"):
                gather_answers(conns, procs, lambda k: WorkerDied(f"worker {k} died"), poll=0.2)
        else:
            with pytest.raises(RuntimeError, match="message of 16 bytes could not be read: UnpicklingError"):
                gather_answers(conns, procs, lambda k: WorkerDied(f"worker {k} died"), poll=0.2)
        assert time.monotonic() - started < 10
    finally:
        for conn in conns:
            conn.close()
        stop_workers(procs)

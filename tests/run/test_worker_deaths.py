"""Dying workers and Ctrl-C: every run ends quickly with one line, and leaves no temporary files.

Workers really die: the test hook (PARBPE_TEST_KILL="stage:n", read by the workers) makes a
counting worker, a reducing worker or a merge worker SIGKILL itself at its n-th unit, partition
or round, as the kernel's OOM killer would.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

import parbpe.merge.workers as merge_workers
from parbpe.cli import main
from parbpe.run.faults import KILL_HOOK

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
ONE_LINE = re.compile(r"parbpe train: error: (reducing |merge )?worker \d+ \(.+\) died "
                      r"\(signal 9: probably out of memory; try --\S+.*\)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for k in range(8):
        words = (rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(3000))
        (d / f"part-{k}.txt").write_text(" ".join(words))
    return sorted(str(p) for p in d.iterdir())


# (stage, how many steps in the kill may come): 4 units per counting worker, 16 partitions per
# reducing worker, the first rounds of merging.
STAGES = [("count", 4), ("reduce", 16), ("merge", 6)]


@pytest.mark.parametrize("seed", range(24))
def test_a_killed_worker_ends_the_run_in_one_line(seed, corpus, tmp_path, monkeypatch, capsys):
    stage, steps = STAGES[seed % 3]
    step = random.Random(seed).randrange(steps)
    monkeypatch.setenv(KILL_HOOK, f"{stage}:{step}")
    monkeypatch.setattr(merge_workers, "MIN_TOKENS_PER_WORKER", 1)  # merge workers even on this small table
    monkeypatch.setattr(merge_workers, "KERNELS_MERGE_ALONE", False)
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    clock = time.monotonic()
    status = main(["train", *corpus, "--out", str(out), "--tmp-dir", str(tmp), "--workers", "2",
                   "--vocab-size", "400", "--max-batch-size", "8", "--progress", "none"])
    elapsed = time.monotonic() - clock
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert ONE_LINE.fullmatch(err.strip()), err
    assert ("reducing" in err) == (stage == "reduce") and ("merge worker" in err) == (stage == "merge")
    assert elapsed < 5, f"the run took {elapsed:.1f} s to end"
    assert list(tmp.iterdir()) == []  # no spilled runs left behind
    # No output file; the run directory for --resume, unless the worker died before any commit (then
    # --out, which the run created, is gone too: an error leaves it as it was).
    if stage == "count" and not out.exists():
        return
    assert [p.name for p in out.iterdir()] == [".parbpe-run"]


def test_debug_shows_the_traceback(corpus, tmp_path, monkeypatch):
    from parbpe.run.pool import WorkerDied

    monkeypatch.setenv(KILL_HOOK, "count:1")
    with pytest.raises(WorkerDied):
        main(["train", *corpus, "--out", str(tmp_path / "out"), "--workers", "2", "--vocab-size", "300",
              "--progress", "none", "--tmp-dir", str(tmp_path), "--debug"])


@pytest.mark.parametrize("seed", range(3))
def test_ctrl_c_prints_one_line_and_leaves_nothing(seed, tmp_path):
    corpus = tmp_path / "big.txt"
    rng = random.Random(seed)
    # Long enough that the Ctrl-C below lands within the run: with 1.5M words it ran 0.44 s past the
    # start of counting, and a Ctrl-C up to 0.5 s later could come as it exited (its status then 0,
    # or the interpreter's end by SIGINT before cli.console ignored a late one).
    corpus.write_text(" ".join(rng.choice(WORDS) + str(rng.randint(0, 9999)) for _ in range(3_000_000)))
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    # Its own session, like a shell's job: Ctrl-C goes to the whole group, workers included.
    proc = subprocess.Popen([sys.executable, "-m", "parbpe.cli", "train", str(corpus), "--out", str(out),
                             "--tmp-dir", str(tmp), "--workers", "2", "--vocab-size", "2000",
                             "--progress", "none"], stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (out / ".parbpe-run" / "count").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # counting has begun when the run directory has a count directory
    time.sleep(rng.uniform(0, 0.4))
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.strip() == "parbpe train: interrupted (the same command with --resume continues it)"
    assert list(tmp.iterdir()) == []
    # No output file; the run directory for --resume, unless nothing was committed yet.
    assert not out.exists() or [p.name for p in out.iterdir()] == [".parbpe-run"]


@pytest.mark.parametrize("stage", ["count", "merge"])
def test_workers_die_with_a_sigkilled_parent(stage, tmp_path):
    """SIGKILL only the parent `parbpe train` (no cleanup runs in it) while its counting or merge
    workers are busy: within 5 s no process it started is left (die_with_parent)."""
    import psutil

    rng = random.Random(1)
    files = []
    words = 400_000 if stage == "count" else 100_000  # counting must last; the merge's 2,700 rounds do
    for k in range(4):
        path = tmp_path / f"part-{k}.txt"
        path.write_text(" ".join(rng.choice(WORDS) + str(rng.randint(0, 99999)) for _ in range(words)))
        files.append(str(path))
    argv = ["train", *files, "--out", str(tmp_path / "out"), "--workers", "2", "--vocab-size", "3000",
            "--max-batch-size", "1", "--progress", "jsonl"]
    code = ("import sys, parbpe.merge.workers as w; w.MIN_TOKENS_PER_WORKER = 1; w.KERNELS_MERGE_ALONE = False; "
            "from parbpe.cli import main; sys.exit(main(sys.argv[1:]))")
    shm = tmp_path / "shm"  # where the merge workers' shared table is made
    shm.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "PARBPE_SHM_DIR": str(shm)})
    parent = psutil.Process(proc.pid)
    workers: list = []
    try:
        for line in proc.stderr:  # jsonl progress: at the stage's first event, wait for its workers
            if f'"stage": "{stage}"' in line and '"progress"' in line:
                deadline = time.monotonic() + 10
                while len(workers) < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
                    workers = [p for p in parent.children(recursive=True) if p.is_running()]
                break
        assert len(workers) >= 2, f"no {stage} workers seen"
        parent.kill()
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(workers, timeout=5)
        assert alive == [], f"{len(alive)} worker(s) outlived their parent by 5 s"
        # The shared table's name went once the workers had mapped it; a parent killed in between
        # leaves it, and the next block made removes it (its maker is gone).
        from parbpe.run.shared_arrays import remove_stale_blocks

        remove_stale_blocks(str(shm))
        assert list(shm.iterdir()) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

"""SuperBPE's superword count beside stage 1's merge (pipeline/count_beside.py): the same tokenizer as
the count after it, its process killed or failing, its parent killed, the budget that decides."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import parbpe
from parbpe.cli import main
from parbpe.pipeline import count_beside, vocabulary
from parbpe.run.memory import CALLER_FLOOR
from tests.test_superbpe import phrases

SETTINGS = ["--vocab-size", "700", "--superbpe-transition", "0.6", "--workers", "2", "--progress", "none"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Four parquet files of SuperBPE's material (parquet: a file broken later is a reading error)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("beside")
    paths = []
    for k in range(4):
        paths.append(d / f"part-{k}.parquet")
        pq.write_table(pa.table({"text": phrases(20 + k, 400).splitlines()}), paths[-1])
    return paths


def _files(out) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("merges.txt", "vocab.json", "tokenizer.json")}


def test_counted_beside_or_after_stage_one_the_same_tokenizer(parts, tmp_path, monkeypatch):
    beside = parbpe.train([str(p) for p in parts], vocab_size=700, superbpe_transition=0.6, workers=2,
                          out_dir=str(tmp_path / "beside"))
    assert beside.stats["superbpe"]["count_beside"]["niceness"] == count_beside.NICENESS
    assert beside.stats["superbpe"]["unique_chunks"] > 0
    monkeypatch.setattr(vocabulary, "room_beside", lambda *args: None)
    after = parbpe.train([str(p) for p in parts], vocab_size=700, superbpe_transition=0.6, workers=2,
                         out_dir=str(tmp_path / "after"))
    assert after.stats["superbpe"]["count_beside"] is None
    assert _files(tmp_path / "beside") == _files(tmp_path / "after")
    assert beside.stats["superbpe"]["chunks"] == after.stats["superbpe"]["chunks"]


def test_the_count_beside_imports_this_parbpe_whatever_the_working_directory_holds(parts, tmp_path, monkeypatch):
    """Its process is a new Python: run from a directory that holds another parbpe (a checkout, as
    bench/regress.py's baseline is), or a module named like one it imports, it still imports the
    parbpe (and the modules) its parent does."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "parbpe").mkdir(parents=True)
    (elsewhere / "parbpe" / "__init__.py").write_text("raise ImportError('the parbpe of the working directory')\n")
    (elsewhere / "psutil.py").write_text("raise ImportError('the psutil of the working directory')\n")
    monkeypatch.chdir(elsewhere)
    result = parbpe.train([str(p) for p in parts], vocab_size=700, superbpe_transition=0.6, workers=2,
                          out_dir=str(tmp_path / "out"))
    assert result.stats["superbpe"]["count_beside"]["niceness"] == count_beside.NICENESS


def test_room_beside_leaves_the_merge_its_peak():
    gb = 10**9
    assert count_beside.room_beside(8 * gb, 2 * gb, 2, 10**7) == 6 * gb
    assert count_beside.room_beside(8 * gb, 8 * gb, 2, 10**7) is None  # nothing left
    assert count_beside.room_beside(2 * gb, 2 * gb - 3 * CALLER_FLOOR, 2, 10**7) is None  # not a room each
    assert count_beside.room_beside(4 * gb, 3 * gb, 1, 10**7) == gb  # one shard: the process counts itself


def test_a_killed_count_beside_ends_the_run_in_one_line(parts, tmp_path, monkeypatch, capsys):
    started = []
    original = count_beside.CountBeside.__init__

    def start_then_kill(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.append(self.pid)
        os.kill(self.pid, signal.SIGKILL)

    monkeypatch.setattr(count_beside.CountBeside, "__init__", start_then_kill)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    status = main(["train", *map(str, parts), *SETTINGS, "--out", str(tmp_path / "o"), "--tmp-dir", str(tmp)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"SuperBPE's superword count (process {started[0]}) died (signal 9" in err, err
    assert list(tmp.iterdir()) == []  # its work directory is gone
    assert [p.name for p in (tmp_path / "o").iterdir()] == [".parbpe-run"]  # --resume continues it


def test_an_error_in_the_count_beside_comes_back_as_its_line(parts, tmp_path, monkeypatch, capsys):
    broken = tmp_path / "part-9.parquet"
    broken.write_bytes(parts[0].read_bytes())
    original = count_beside.CountBeside.__init__

    def break_input_then_start(self, *args, **kwargs):  # stage 1 read it; the count beside finds it broken
        broken.write_bytes(b"PAR1 not a parquet file any more PAR1")
        original(self, *args, **kwargs)

    monkeypatch.setattr(count_beside.CountBeside, "__init__", break_input_then_start)
    status = main(["train", *map(str, parts), str(broken), *SETTINGS, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert "part-9.parquet" in err, err


def test_a_count_beside_that_fails_before_a_word_ends_the_run_in_one_line(parts, tmp_path, monkeypatch, capfd):
    """A process that ends before it can write its error (a broken install, a garbage job): the run's
    one line says how it ended and the last line it wrote, and nothing of its stderr reaches the run's."""
    monkeypatch.setattr(count_beside, "_CHILD", "import sys; print('noise', file=sys.stderr); "
                                                "sys.exit('ImportError: no module named parbpe.broken')")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    status = main(["train", *map(str, parts), *SETTINGS, "--out", str(tmp_path / "o"), "--tmp-dir", str(tmp)])
    err = capfd.readouterr().err.strip()  # (the file descriptor's: the process's own writes too)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert "died (exit status 1): ImportError: no module named parbpe.broken" in err, err
    assert list(tmp.iterdir()) == []


def test_the_count_beside_and_its_workers_end_when_the_run_is_killed(tmp_path):
    """The run's process is killed while the count beside counts with its workers stopped (SIGSTOP, so
    that only the kernel's signal on its parent's death can end it): it ends, and its workers too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = [tmp_path / f"big-{k}.parquet" for k in range(4)]  # 10 MB: the count lasts a second or two
    for k, path in enumerate(parts):
        pq.write_table(pa.table({"text": phrases(40 + k, 60_000).splitlines()}), path)
    command = [sys.executable, "-m", "parbpe", "train", *map(str, parts), "--vocab-size", "2000",
               "--superbpe-transition", "0.9", "--workers", "2", "--progress", "jsonl", "--out", str(tmp_path / "o")]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        pid = None
        for line in proc.stderr:
            message = json.loads(line).get("message", "") if line.startswith("{") else ""
            if "beside stage 1's merge (process" in message:
                pid = int(message.split("(process ")[1].split(",")[0])
                break
        assert pid is not None, "no count beside was started"
        count = psutil.Process(pid)
        deadline = time.monotonic() + 30
        while not count.children() and time.monotonic() < deadline:  # its counting workers
            time.sleep(0.01)
        workers = []
        for worker in count.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if worker.status() != psutil.STATUS_ZOMBIE:
                    worker.suspend()
                    workers.append(worker)
        assert workers, "the count beside started no worker"
    finally:
        proc.kill()
        proc.wait()
    gone, alive = psutil.wait_procs([count], timeout=10)
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.resume()
    assert not alive, "the count beside still runs after the run was killed"
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"its workers still run: {alive}"


def test_a_process_told_its_parent_dies_when_the_parent_is_gone_already():
    """die_with_parent(pid) in a process multiprocess did not start (the count beside): its parent
    gone before it asked, it ends at once; without the check it would sleep a minute."""
    grandchild = (f"import sys, time; sys.path.insert(0, {os.getcwd()!r}); time.sleep(1); "
                  "from parbpe.run.pool import die_with_parent; die_with_parent(int(sys.argv[1])); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys; "
                               f"p = subprocess.Popen([sys.executable, '-c', {grandchild!r}, str(os.getpid())]); "
                               "print(p.pid, flush=True)"], stdout=subprocess.PIPE, text=True)
    orphan = psutil.Process(int(parent.stdout.readline()))
    parent.wait()  # gone before its child asks
    gone, alive = psutil.wait_procs([orphan], timeout=10)
    assert not alive, "the process outlived its parent"

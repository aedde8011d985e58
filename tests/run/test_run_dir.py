"""The run directory's records, and the temporary directories of runs that died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from parbpe.config import TrainConfig
from parbpe.count.counter import ShardCounter, unit_key
from parbpe.io.plan import plan
from parbpe.run import run_dir as rd
from parbpe.run import temp_dirs


def _dead_owner() -> dict:
    """An owner record of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    import socket

    return {"host": socket.gethostname(), "pid": proc.pid, "created": time.time() - 5}


def test_stale_temp_dirs_are_removed_and_reported(tmp_path):
    dead = tmp_path / "parbpe-dead"
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "w0-run00000.arrow").write_bytes(b"x" * 3_000_000)
    rd.write_json(str(dead / temp_dirs.OWNER_FILE), _dead_owner())
    with temp_dirs.temp_work_dir(str(tmp_path)) as live:  # this process's own: left alone
        old = tmp_path / "parbpe-0ld_k3x9"  # no owner record (an older parbpe): reported once it is old
        other = tmp_path / "parbpe-base"  # not a name tempfile makes (a user's checkout): left alone
        for d in (old, other):
            d.mkdir()
            os.utime(d, (time.time() - 7200, time.time() - 7200))
        (tmp_path / "parbpe-new").mkdir()  # no owner record and recent: may be starting, left alone
        notes = temp_dirs.clean_stale_temp_dirs(str(tmp_path))
        assert os.path.isdir(live)
    assert not dead.exists() and old.exists() and other.exists()
    assert len(notes) == 2
    removed = [n for n in notes if n.startswith("removed")]
    assert len(removed) == 1 and removed[0].startswith(f"removed {dead} (3.0 MB), left by a parbpe run (pid ")
    assert any(n.startswith(f"{old} (0.0 MB) has no owner record") for n in notes)


def test_a_temp_dir_that_vanishes_while_looked_at_is_passed_over(tmp_path, monkeypatch):
    """Another run on the machine removes its directory between the listing and the look (seen with
    two test processes sharing /tmp): the cleaner goes on with the others."""
    gone, old = tmp_path / "parbpe-g0ne_k3x", tmp_path / "parbpe-0ld_k3x9"
    for d in (gone, old):
        d.mkdir()
        os.utime(d, (time.time() - 7200, time.time() - 7200))
    real = os.path.getmtime

    def vanishing(path):
        if os.path.basename(path) == gone.name:
            os.rmdir(path)
        return real(path)

    monkeypatch.setattr(temp_dirs.os.path, "getmtime", vanishing)
    notes = temp_dirs.clean_stale_temp_dirs(str(tmp_path))
    assert not gone.exists() and len(notes) == 1 and notes[0].startswith(f"{old} (0.0 MB) has no owner record")


def test_a_killed_count_leaves_a_temp_dir_the_next_run_removes(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world, and more words " * 20000)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    command = [sys.executable, "-m", "parbpe.cli", "count", str(corpus), "--out", str(tmp_path / "counts.parquet"),
               "--tmp-dir", str(tmp), "--workers", "1", "--progress", "jsonl"]
    env = {**os.environ, "PARBPE_TEST_STOP": "count:1:KILL"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, start_new_session=True)
    assert killed.returncode == -signal.SIGKILL
    left = [p for p in tmp.iterdir() if p.name.startswith("parbpe-")]
    assert len(left) == 1 and (left[0] / temp_dirs.OWNER_FILE).exists()
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    notes = [json.loads(line)["message"] for line in done.stderr.splitlines() if '"note"' in line]
    assert any(n.startswith(f"removed {left[0]}") for n in notes)
    assert list(tmp.iterdir()) == []


def test_uncommitted_runs_are_ignored_and_removed(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text to count " * 1000)
    units = plan([str(corpus)])
    run = rd.RunDirectory(str(tmp_path / "run"))
    directory = run.new_count_dir()
    shard = ShardCounter(TrainConfig(vocab_size=300, workers=1), directory, "w0")
    shard.add_unit(units[0])
    shard.finish()
    # What a worker killed mid-way leaves: a run file no record names, a half-written record.
    (tmp_path / "run" / "count" / "a000" / "w1-run00000.arrow").write_bytes(b"partial")
    (tmp_path / "run" / "count" / "a000" / ".tmp-abc-commit00000.json").write_text("{")
    done, runs, stats = run.committed_units()
    assert done == {unit_key(units[0])}
    assert [os.path.basename(r) for r in runs] == ["w0-run00000.arrow"]
    assert stats["documents"] == 1 and stats["bytes"] == corpus.stat().st_size
    assert sorted(os.listdir(directory)) == ["w0-commit00000.json", "w0-run00000.arrow"]
    assert run.new_count_dir().endswith("a001")
    # A record naming a run file that is gone (a worker that outlived its run and committed late)
    # does not count: its units are counted again.
    os.unlink(os.path.join(directory, "w0-run00000.arrow"))
    assert run.committed_units()[0] == set()


def test_a_run_dir_in_use_is_refused(tmp_path):
    path = str(tmp_path / "run")
    args = {"identity": {"v": 1}, "settings": {}, "inputs": [], "resume": False}
    rd.RunDirectory.open(path, **args)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import psutil

        record = rd.read_json(os.path.join(path, rd.RUN_FILE))
        record["owner"] = {**record["owner"], "pid": sleeper.pid, "created": psutil.Process(sleeper.pid).create_time()}
        rd.write_json(os.path.join(path, rd.RUN_FILE), record)
        with pytest.raises(ValueError, match=f"in use by another parbpe run \\(pid {sleeper.pid}\\)"):
            rd.RunDirectory.open(path, **{**args, "resume": True})
    finally:
        sleeper.kill()
        sleeper.wait()
    run, notes = rd.RunDirectory.open(path, **{**args, "resume": True})
    assert run.resumed and notes[0].startswith("resuming the run started")


def test_an_unwritable_run_dir_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot write the run directory .* choose a writable one with --run-dir"):
        rd.RunDirectory.open(str(blocker / "run"), identity={}, settings={}, inputs=[], resume=False)


def test_a_fresh_run_clears_what_an_earlier_run_left_and_nothing_else(tmp_path):
    path = tmp_path / "run"
    old = rd.RunDirectory(str(path))
    stale = old.new_count_dir()
    rd.write_json(os.path.join(stale, "w0-commit00000.json"), {"units": ["x"], "runs": [], "documents": 1,
                                                              "bytes": 1, "replaced_bytes": 0, "spills": 0})
    rd.write_json(str(path / "merges.json"), {"merges": [[97, 98]], "batch_sizes": [1]})
    (path / "notes.txt").write_text("the user's")  # --run-dir may name a directory holding other files
    rd.write_json(str(path / "run.json"), {"format": rd.FORMAT, "identity": {}, "finished": True})  # the run's record
    run, _ = rd.RunDirectory.open(str(path), identity={}, settings={}, inputs=[], resume=False)
    assert run.committed_units()[0] == set() and run.load_merges() is None
    assert sorted(os.listdir(path)) == ["notes.txt", "run.json"]
    run.finish(keep=False)
    assert os.listdir(path) == ["notes.txt"]


def test_a_directory_that_is_not_a_runs_is_refused_and_links_are_not_followed(tmp_path):
    """Issue 55 items 9 and 10: a directory holding a user's files under the run's names and no run record
    is refused; in a run's directory, a link named like the run's files is left, and so is its target."""
    path = tmp_path / "run"
    (path / "count").mkdir(parents=True)
    (path / "count" / "mine.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not a parbpe run directory"):
        rd.RunDirectory.open(str(path), identity={}, settings={}, inputs=[], resume=False)
    assert (path / "count" / "mine.txt").read_text() == "mine"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "count").mkdir(parents=True)
    (elsewhere / "plan.json").write_text("mine")
    (path / "count" / "mine.txt").unlink()
    (path / "count").rmdir()
    rd.write_json(str(path / "run.json"), {"format": rd.FORMAT, "identity": {}, "finished": True})
    (path / "count").symlink_to(elsewhere / "count")
    (path / "plan.json").symlink_to(elsewhere / "plan.json")
    run, _ = rd.RunDirectory.open(str(path), identity={}, settings={}, inputs=[], resume=False)
    assert (elsewhere / "plan.json").read_text() == "mine" and (elsewhere / "count").is_dir()
    killed = tmp_path / "killed"  # a run killed while writing its first record: the directory is still the run's
    killed.mkdir()
    (killed / ".tmp-a1b2c3d4run.json").write_text('{"format"')
    rd.RunDirectory.open(str(killed), identity={}, settings={}, inputs=[], resume=False)
    assert os.listdir(killed) == ["run.json"]  # the half-written record removed with the earlier run's files


def _parts(run: rd.RunDirectory, pieces: list[list[tuple[bytes, int]]]) -> list[tuple[str, int, int]]:
    """The reduced counts a partition a file, as the reduce workers write them (count/reduce.py)."""
    directory, parts = run.reduced_parts_dir(), []
    for k, piece in enumerate(pieces):
        data = np.frombuffer(b"".join(c for c, _ in piece), dtype=np.uint8)
        offsets = np.concatenate([[0], np.cumsum([len(c) for c, _ in piece])]).astype(np.int64)
        path = os.path.join(directory, f"part-{k:05d}.arrow")
        rd.write_counts(path, data, offsets, np.array([n for _, n in piece], dtype=np.int64), durable=True)
        parts.append((path, len(piece), len(data)))
    return parts


def test_the_reduced_counts_a_partition_a_file_load_side_by_side(tmp_path):
    """SuperBPE's stage 2 keeps its reduced counts as its reduce workers wrote them (one file a
    partition, an empty one too) and a record naming them: loaded as one set of arrays, in order; the
    count files go once they are recorded; a fresh run removes them."""
    run = rd.RunDirectory(str(tmp_path / "run"))
    run.new_count_dir()
    pieces = [[(b"ab", 3), (b"x y", 1)], [], [(b"\xff\x00", 7)], [(b"q", 2), (b"", 1), (b"long chunk", 1)]]
    parts = _parts(run, pieces)
    assert not run.has_reduced() and run.load_reduced() is None  # written, not yet recorded
    run.save_reduced_parts(parts, {"stop_words": [], "unique_chunks": 6, "counted": {"bytes": 9}})
    assert run.has_reduced() and run.describe() == "counted and reduced"
    assert not os.path.exists(tmp_path / "run" / "count")
    data, offsets, counts, meta = run.load_reduced()
    chunks = [c for piece in pieces for c, _ in piece]
    assert [data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])] == chunks
    assert counts.tolist() == [n for piece in pieces for _, n in piece] and offsets[0] == 0
    assert meta == {"stop_words": [], "unique_chunks": 6, "counted": {"bytes": 9}}
    rd.write_json(str(tmp_path / "run" / "run.json"), {"format": rd.FORMAT, "identity": {}, "finished": True})
    fresh, _ = rd.RunDirectory.open(str(tmp_path / "run"), identity={}, settings={}, inputs=[], resume=False)
    assert sorted(os.listdir(tmp_path / "run")) == ["run.json"] and not fresh.has_reduced()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "other_part"])
def test_a_damaged_part_of_the_reduced_counts_is_one_clear_error(tmp_path, damage):
    run = rd.RunDirectory(str(tmp_path / "run"))
    parts = _parts(run, [[(b"ab", 3), (b"cd", 1)], [(b"ef", 2)]])
    run.save_reduced_parts(parts, {"stop_words": []})
    path = parts[1][0]
    if damage == "garbage":
        with open(path, "wb") as f:
            f.write(b"not an arrow file at all" * 10)
    elif damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif damage == "missing":
        os.unlink(path)
    else:  # a whole file, but not the one recorded (more chunks)
        with open(parts[0][0], "rb") as source, open(path, "wb") as target:
            target.write(source.read())
    with pytest.raises(ValueError) as raised:
        run.load_reduced()
    message = str(raised.value)
    assert "\n" not in message and path in message and "are damaged" in message and "to start over" in message

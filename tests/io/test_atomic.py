"""Atomic writes: a run killed while writing leaves temporary files (SIGKILL runs no cleanup); the
next write of the same files removes them, and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from parbpe.cli import main
from parbpe.io.atomic import remove_leftovers, write_files_atomically


def test_a_killed_write_leaves_temporary_files_that_the_next_write_removes(tmp_path: Path):
    out = tmp_path / "out"
    # A real kill in the middle of write_files_atomically: the second file's maker never returns.
    script = textwrap.dedent(f"""
        import os, signal
        from parbpe.io.atomic import BUFFER_BYTES, write_files_atomically

        def killed():  # a large file: written in pieces, killed after the first
            yield "x" * (BUFFER_BYTES + 1)
            yield "y"
            os.kill(os.getpid(), signal.SIGKILL)

        write_files_atomically({str(out)!r}, {{"a.json": lambda: "done", "sub/b.txt": killed}})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob(".tmp-*"))
    assert len(left) == 2 and left[0].endswith("a.json") and left[1].startswith("sub/.tmp-"), left
    assert left[1].endswith("b.txt"), left
    assert not (out / "a.json").exists() and not (out / "sub" / "b.txt").exists()
    (out / ".tmp-12345678other.txt").write_text("not ours")  # another file's temporary name: kept
    (out / "notes.tmp-a.json").write_text("not a temporary name")

    write_files_atomically(str(out), {"a.json": lambda: "A", "sub/b.txt": lambda: "B"})
    assert (out / "a.json").read_text() == "A" and (out / "sub" / "b.txt").read_text() == "B"
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [
        ".tmp-12345678other.txt", "a.json", "b.txt", "notes.tmp-a.json"]


def test_remove_leftovers_names_what_it_removed(tmp_path: Path):
    (tmp_path / ".tmp-abcdefghvocab.json").write_text("x")
    (tmp_path / ".tmp-abcdefghmerges.txt").write_text("x")
    removed = remove_leftovers(str(tmp_path), ["vocab.json"])
    assert removed == [os.path.join(str(tmp_path), ".tmp-abcdefghvocab.json")]
    assert (tmp_path / ".tmp-abcdefghmerges.txt").exists()
    assert remove_leftovers(str(tmp_path / "missing"), ["vocab.json"]) == []


def test_a_training_run_clears_what_a_killed_one_left_in_its_output(tmp_path: Path, capsys):
    (tmp_path / "c.txt").write_text("hello world, hello tokens " * 200)
    out = tmp_path / "tok"
    out.mkdir()
    (out / ".tmp-zzzzzzzzmerges.txt").write_text("half a file")
    assert main(["train", str(tmp_path / "c.txt"), "--vocab-size", "270", "--out", str(out), "--progress", "none",
                 "--workers", "1"]) == 0, capsys.readouterr().err
    assert not list(out.glob(".tmp-*"))


def test_a_durable_write_flushes_the_file_and_its_directory_and_a_failed_one_leaves_nothing(tmp_path, monkeypatch):
    import pytest

    from parbpe.io import atomic

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    target = tmp_path / "merges.json"
    atomic.write_atomically(str(target), lambda tmp: Path(tmp).write_text("[1, 2]"), durable=True)
    assert target.read_text() == "[1, 2]"
    assert len(synced) == 2 and synced[0].startswith(str(tmp_path / ".tmp-")) and synced[1] == str(tmp_path)
    synced.clear()
    atomic.write_atomically(str(tmp_path / "plain.txt"), lambda tmp: Path(tmp).write_text("x"))
    assert synced == []  # an output file is not flushed: only the run directory's checkpoints are

    def half(tmp: str) -> None:
        Path(tmp).write_text("[1,")
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="the disk went away"):
        atomic.write_atomically(str(target), half, durable=True)
    assert target.read_text() == "[1, 2]" and sorted(p.name for p in tmp_path.iterdir()) == ["merges.json",
                                                                                            "plain.txt"]

"""Shared-memory blocks: one copy seen by every process, no name left behind, one-line errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from parbpe.run.pool import get_context
from parbpe.run.shared_arrays import PREFIX, SHM_DIR_VARIABLE, BlockHandle, SharedBlock, attach, remove_stale_blocks


@pytest.fixture
def shm(tmp_path, monkeypatch):
    """Blocks made in a directory of this test's own (where the files left behind can be seen)."""
    monkeypatch.setenv(SHM_DIR_VARIABLE, str(tmp_path))
    return tmp_path


def _double_in_child(handle: BlockHandle) -> None:
    arrays = attach(handle)
    arrays["tokens"] *= 2
    arrays["counts"][0] = -7


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_another_process_edits_the_same_memory(shm, start_method):
    block = SharedBlock({"tokens": (np.uint16, 1001), "counts": (np.int64, 3), "empty": (np.int32, 0)})
    arrays = block.arrays
    arrays["tokens"][:] = np.arange(1001)
    assert arrays["empty"].shape == (0,) and all(a.ctypes.data % 64 == 0 for a in arrays.values() if len(a))
    proc = get_context(start_method).Process(target=_double_in_child, args=(block.handle,))
    proc.start()
    proc.join()
    assert proc.exitcode == 0
    assert np.array_equal(arrays["tokens"], 2 * np.arange(1001)) and arrays["counts"][0] == -7
    block.unlink()
    assert os.listdir(shm) == []
    block.drop_pages()  # this process's pages go, the contents stay
    assert np.array_equal(arrays["tokens"], 2 * np.arange(1001)) and arrays["counts"][0] == -7
    arrays["tokens"][0] = 5  # the memory lives on without its name
    assert arrays["tokens"][0] == 5


def test_a_block_gone_or_not_matching_its_handle_is_a_one_line_error(shm):
    block = SharedBlock({"a": (np.int64, 10)})
    with pytest.raises(ValueError, match="holds 80 bytes, not the 800 its handle says"):
        attach(BlockHandle(path=block.handle.path, size=800, layout=block.handle.layout))
    block.unlink()
    with pytest.raises(FileNotFoundError, match=r"shared memory block .* is gone: the process that made it ended"):
        attach(block.handle)


def test_blocks_of_dead_makers_are_removed_and_live_ones_kept(shm):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = shm / f"{PREFIX}{dead.stdout.strip()}-abc"
    live = shm / f"{PREFIX}{os.getpid()}-def"
    other = shm / "someone-else"
    for path in (stale, live, other):
        path.write_bytes(b"x")
    assert remove_stale_blocks() == [str(stale)]
    assert sorted(p.name for p in shm.iterdir()) == sorted([live.name, other.name])


def test_a_sigkilled_maker_leaves_a_name_that_the_next_block_removes(shm):
    code = ("import numpy as np, os, signal, sys; from parbpe.run.shared_arrays import SharedBlock; "
            "b = SharedBlock({'a': (np.uint8, 1 << 20)}); print(b.handle.path, flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL
    left = proc.stdout.strip()
    assert os.path.exists(left)
    block = SharedBlock({"a": (np.uint8, 10)})
    assert not os.path.exists(left) and os.listdir(shm) == [os.path.basename(block.handle.path)]
    block.unlink()


def test_no_room_is_a_one_line_error_before_any_write(shm):
    """A full /dev/shm, as a file-size limit: the space is reserved when the block is made, so the
    error comes then, with what to do, never as a SIGBUS when a worker writes."""
    code = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)); "
            "import numpy as np; from parbpe.run.shared_arrays import SharedBlock; "
            "SharedBlock({'a': (np.uint8, 50 << 20)})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1
    assert "no room for 52 MB of shared memory in" in last and "PARBPE_SHM_DIR" in last, last
    assert os.listdir(shm) == []  # the half-made block is gone

"""Numpy arrays in shared memory: one block, mapped by several processes, one copy in RAM.

A block is a file in /dev/shm (Linux's shared memory: RAM, never disk), named
`parbpe-shm-<pid>-<random>` after the process that made it. Its space is reserved when it is
made (posix_fallocate), so a full /dev/shm is a one-line error then, never a SIGBUS in a worker
later. The maker removes the name (unlink) as soon as every worker has mapped the block: the
memory lives on while some process maps it and is freed with the last one, however that process
ends (SIGKILL included). A maker killed before it unlinked leaves the name behind: the next block
made on the machine removes the blocks whose maker is gone (remove_stale_blocks).

PARBPE_SHM_DIR names another directory (where /dev/shm is missing or small; tests use it).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

SHM_DIR_VARIABLE = "PARBPE_SHM_DIR"
PREFIX = "parbpe-shm-"
_ALIGN = 64  # each array starts on a cache line


def shm_dir() -> str:
    """Where blocks are made: $PARBPE_SHM_DIR, else /dev/shm where it exists, else the temp dir."""
    chosen = os.environ.get(SHM_DIR_VARIABLE)
    if chosen:
        return chosen
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@dataclass(frozen=True)
class BlockHandle:
    """What a process needs to map a block: its path, its size and where each array lies (picklable)."""

    path: str
    size: int
    layout: tuple[tuple[str, str, int, int], ...]  # (name, dtype, length, offset)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_blocks(directory: str | None = None) -> list[str]:
    """Remove the blocks in directory (default shm_dir()) whose maker process is gone; their paths."""
    directory = directory or shm_dir()
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not name.startswith(PREFIX):
                continue
            pid = name[len(PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
                    removed.append(os.path.join(directory, name))
    return removed


def _map(path: str, size: int, flags: int) -> mmap.mmap:
    fd = os.open(path, flags, 0o600)
    try:
        if flags & os.O_CREAT:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)  # reserve the pages now: ENOSPC here, not SIGBUS on a write
            else:
                os.ftruncate(fd, size)
        elif os.fstat(fd).st_size != size:
            raise ValueError(f"shared memory block {path} holds {os.fstat(fd).st_size:,} bytes, not the "
                             f"{size:,} its handle says: it is not the block this handle was made for")
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def _views(buffer: mmap.mmap, layout: tuple[tuple[str, str, int, int], ...]) -> dict[str, np.ndarray]:
    return {name: np.frombuffer(buffer, dtype=np.dtype(dtype), count=length, offset=offset)
            for name, dtype, length, offset in layout}


class SharedBlock:
    """Arrays made in one shared-memory block: `arrays` (writable views), `handle` for attach().

    The block's memory is freed when the last view of it, in any process, is gone."""

    def __init__(self, specs: Mapping[str, tuple[np.dtype | str, int]]) -> None:
        layout, offset = [], 0
        for name, (dtype, length) in specs.items():
            dtype = np.dtype(dtype)
            offset = -(-offset // _ALIGN) * _ALIGN
            layout.append((name, dtype.str, int(length), offset))
            offset += dtype.itemsize * int(length)
        size = max(offset, 1)
        directory = shm_dir()
        remove_stale_blocks(directory)
        path = os.path.join(directory, f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
        try:
            buffer = _map(path, size, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)
            if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                raise OSError(exc.errno, f"no room for {size / 1e6:,.0f} MB of shared memory in {directory} "
                              f"({os.strerror(exc.errno)}): free some, or set {SHM_DIR_VARIABLE} to a "
                              "directory with room, or use --workers 1") from None
            raise OSError(exc.errno, f"cannot make shared memory in {directory} ({os.strerror(exc.errno)}): "
                          f"set {SHM_DIR_VARIABLE} to a writable directory, or use --workers 1") from None
        self.handle = BlockHandle(path=path, size=size, layout=tuple(layout))
        self.arrays = _views(buffer, self.handle.layout)
        self._buffer = buffer
        self._linked = True

    def drop_pages(self) -> None:
        """Unmap this process's pages of the block, keeping its contents (the next read maps them
        again): the maker wrote the block for workers that hold their slices; its own RSS would
        count every page a second time."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._buffer.madvise(mmap.MADV_DONTNEED)

    def unlink(self) -> None:
        """Remove the block's name (every process that will map it has done so); idempotent."""
        if self._linked:
            self._linked = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.handle.path)


def attach(handle: BlockHandle) -> dict[str, np.ndarray]:
    """The arrays of a block made by another process (writable; changes are seen by every process)."""
    try:
        buffer = _map(handle.path, handle.size, os.O_RDWR)
    except FileNotFoundError:
        raise FileNotFoundError(f"shared memory block {handle.path} is gone: the process that made it "
                                "ended or removed it before this process mapped it") from None
    return _views(buffer, handle.layout)

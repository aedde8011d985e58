"""Writing a file under its real name only when it is complete: a temporary name beside it, then a rename.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .filesystems import is_remote, local_path, write_remote


def write_atomically(path: str, write: Callable[[str], object], *, durable: bool = False) -> None:
    """Call write(temporary path) next to path, then rename it into place.

    durable: flush the file to disk before the rename and the directory's entry after it, so that
    not even a power cut leaves it empty (the run directory's checkpoints). For an object-store URI
    (no rename there), write to a local temporary file and upload it to the final key only when
    complete.
    """
    if is_remote(path):
        write_remote(path, write)
        return
    path = local_path(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = _write_beside(path, write)
    try:
        if durable:
            sync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        sync_file(directory)


def sync_file(path: str) -> None:
    """Flush a file (or a directory's entries) to disk, so a power cut cannot leave it empty."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_TMP_HEAD = len(".tmp-") + 8


def remove_leftovers(directory: str, names: list[str]) -> list[str]:
    """Remove the temporary files (_write_beside's `.tmp-XXXXXXXX<name>`) that a write of these names
    into directory left when it was killed (SIGKILL runs no cleanup); returns their paths. Only
    temporary names of the files about to be written go: nothing else in the directory is touched."""
    removed = []
    for folder, bases in _by_folder(directory, names).items():
        try:
            entries = os.listdir(folder)
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.startswith(".tmp-") and entry[_TMP_HEAD:] in bases:  # ".tmp-" and mkstemp's 8 characters
                os.unlink(os.path.join(folder, entry))
                removed.append(os.path.join(folder, entry))
    return removed


def _by_folder(directory: str, names: list[str]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for name in names:
        path = os.path.join(directory, name)
        folders.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
    return folders


def _write_beside(path: str, write: Callable[[str], object], needed: int | None = None) -> str:
    """write(a temporary name beside path); returns that name. On any failure the temporary file
    is removed, and a full disk becomes one message naming path (and what it needed)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes private files; outputs get the usual mode
    except BaseException as exc:
        written = os.path.getsize(tmp) if os.path.exists(tmp) else 0
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise disk_full(path, needed=needed, written=written) from None
        raise
    return tmp


def disk_full(path: str, *, needed: int | None = None, written: int | None = None,
              hint: str = "free some space there or write elsewhere") -> OSError:
    """The one-line error for a full disk: the path, how much it needed or had written, what is free."""
    parts = []
    if needed is not None:
        parts.append(f"it needs {_mb(needed)}")
    elif written:
        parts.append(f"{_mb(written)} were written before the disk filled")
    try:
        parts.append(f"{_mb(shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free)} free")
    except OSError:
        pass
    return OSError(errno.ENOSPC, f"no space left on device writing {path} ({', '.join(parts)}); {hint}")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} bytes"


# A file made in pieces is buffered up to this many bytes: below it, a full disk is reported with the
# size the file needed; a larger file is written as its pieces come (the message gives what was written).
BUFFER_BYTES = 1 << 24


def write_files_atomically(directory: str, makers: dict[str, Callable[[], str | Iterable[str | bytes]]],
                           digests: dict[str, str] | None = None) -> None:
    """Write every file of directory or none: each text is made and written to a temporary name in
    turn, and only when all are written are they renamed into place (a full disk leaves nothing).
    A maker returns the text, or its pieces (str, or bytes already UTF-8): a large file (a
    vocabulary of multi-megabyte tokens) is then never held whole. digests, when given, gets each
    file's digest (file_digest's form) once it is written, so a later maker can record those before it."""
    if is_remote(directory):
        for name, make_text in makers.items():
            text = make_text()
            if not isinstance(text, str):
                text = "".join(p if isinstance(p, str) else p.decode("utf-8") for p in text)
            write_text_atomically(f"{directory.rstrip('/')}/{name}", text)
            if digests is not None:
                digests[name] = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
        return
    directory = local_path(directory)
    os.makedirs(directory, exist_ok=True)
    remove_leftovers(directory, list(makers))
    done: dict[str, str] = {}
    try:
        for name, make_text in makers.items():
            text = make_text()
            pieces = iter([text] if isinstance(text, str) else text)
            head, size = [], 0
            for piece in pieces:  # the first BUFFER_BYTES, to know a small file's size
                head.append(piece.encode("utf-8") if isinstance(piece, str) else piece)
                size += len(head[-1])
                if size > BUFFER_BYTES:
                    break
            else:
                pieces = None
            path = os.path.join(directory, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)  # a name may hold a subdirectory (vocab-8192/...)
            hasher = hashlib.sha256()
            done[path] = _write_beside(path, lambda tmp, head=head, rest=pieces, h=hasher: _write_pieces(tmp, head,
                                                                                                          rest, h),
                                       needed=size if pieces is None else None)
            if digests is not None:
                digests[name] = "sha256:" + hasher.hexdigest()
            del head, pieces, text
    except BaseException:
        for tmp in done.values():
            os.unlink(tmp)
        raise
    for path, tmp in done.items():
        os.replace(tmp, path)


def _write_pieces(path: str, head: list[bytes], rest: Iterator[str | bytes] | None, hasher: Any) -> None:
    with open(path, "wb") as f:
        for data in head:
            f.write(data)
            hasher.update(data)
        for piece in rest or ():
            data = piece.encode("utf-8") if isinstance(piece, str) else piece
            f.write(data)
            hasher.update(data)


def file_digest(path: str) -> str | None:
    """'sha256:' and the hex digest of the bytes of the regular file at path, read without following a
    symbolic link; None when path is a link, not a regular file, or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def check_output_dir(path: str, option: str = "--out") -> None:
    """Refuse, before any work, an output directory that is a file or cannot be written."""
    if is_remote(path):
        return
    path = local_path(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{option} {path} is an existing file, not a directory; give a directory (new or "
                         "existing) for the output files")
    _check_can_create(path, option)


def check_output_file(path: str, option: str = "--out") -> None:
    """Refuse, before any work, an output file that is a directory or cannot be written."""
    if is_remote(path):
        return
    path = local_path(path)
    if os.path.isdir(path):
        raise ValueError(f"{option} {path} is a directory; give the name of the file to write")
    _check_can_create(os.path.dirname(os.path.abspath(path)), option)


def check_work_dir(path: str, option: str = "--tmp-dir") -> None:
    """Refuse, before any work, a working directory that does not exist or cannot be written."""
    if not os.path.isdir(path):
        what = "is a file" if os.path.exists(path) else "does not exist"
        raise ValueError(f"{option} {path} {what}; give an existing directory")
    _check_can_create(path, option)


def _check_can_create(path: str, option: str) -> None:
    """Create and remove a file in path (or, if path does not exist yet, in its nearest existing
    parent): the real test, which os.access is not for root or read-only mounts."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ValueError(f"{option} {path} cannot be created: {probe} is a file")
    try:
        fd, name = tempfile.mkstemp(prefix=".parbpe-probe-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise ValueError(f"{option} {path} is not writable ({exc.strerror} in {probe}); choose another "
                         "directory or fix its permissions") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomically(path: str, text: str) -> None:
    """Write text to a temporary name beside path, then rename it into place."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomically(path, write)

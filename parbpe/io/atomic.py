"""Writing a file under its real name only when it is complete: a temporary name beside it, then a rename.
"""

from __future__ import annotations

import os
import tempfile

from .filesystems import is_remote, local_path, write_remote


def write_atomically(path: str, write) -> None:
    """Call write(temporary path) next to path, then rename it into place.

    For an object-store URI (no rename there), write to a local temporary file and upload it to
    the final key only when complete.
    """
    if is_remote(path):
        write_remote(path, write)
        return
    path = local_path(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes private files; outputs get the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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

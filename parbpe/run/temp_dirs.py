"""Temporary work directories (`parbpe-*`, spilled counts of runs without a run directory): each
records its owner, so that a later run can tell one left by a process that died and remove it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator

from .run_dir import RUN_FILE, RunDirectory, owner_alive, owner_record, read_json, write_json

OWNER_FILE = "owner.json"  # in a parbpe-* temporary directory
TEMP_PREFIX = "parbpe-"


@contextlib.contextmanager
def temp_work_dir(parent: str | None) -> Iterator[str]:
    """A `parbpe-*` temporary directory recording its owner (so a later run can tell it is stale),
    removed on exit."""
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX, dir=parent) as path:
        write_json(os.path.join(path, OWNER_FILE), owner_record())
        yield path


def _tree_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def clean_stale_temp_dirs(parent: str | None) -> list[str]:
    """Remove the `parbpe-*` directories in parent (default: the system temp dir) whose owner process
    is gone, and report them; directories without an owner record (older parbpe) are only reported."""
    parent = parent or tempfile.gettempdir()
    notes = []
    try:
        names = sorted(n for n in os.listdir(parent) if n.startswith(TEMP_PREFIX))
    except OSError:
        return notes
    for name in names:
        path = os.path.join(parent, name)
        try:
            note = _stale_note(path, name)
        except FileNotFoundError:  # gone while looked at: another run on this machine finished with it
            continue
        if note:
            notes.append(note)
    return notes


def _stale_note(path: str, name: str) -> str | None:
    """What clean_stale_temp_dirs says of one parbpe-* entry of the temp dir (removing it if its owner
    died), or None."""
    if not os.path.isdir(path) or os.path.islink(path):
        return None
    if os.path.exists(os.path.join(path, RUN_FILE)):  # a training run's directory (--tmp-dir): resumable
        with contextlib.suppress(OSError, ValueError):
            record = read_json(os.path.join(path, RUN_FILE))
            if not record.get("finished") and not owner_alive(record.get("owner")):
                return (f"{path} holds an unfinished training run ({RunDirectory(path).describe()}): "
                        f"continue it with its command and --resume, or remove it (rm -r '{path}')")
        return None
    try:
        owner = read_json(os.path.join(path, OWNER_FILE))
    except (OSError, ValueError):
        owner = None
    if owner is None:  # only names tempfile makes (parbpe- and 8 characters): not a user's parbpe-base
        if re.fullmatch(r"parbpe-[a-z0-9_]{8}", name) and time.time() - os.path.getmtime(path) > 3600:
            return (f"{path} ({_tree_size(path) / 1e6:.1f} MB) has no owner record (an older parbpe's?) "
                    "and is over an hour old: remove it if no parbpe run uses it")
        return None
    if owner.get("host") != socket.gethostname() or owner_alive(owner):
        return None
    size = _tree_size(path)
    shutil.rmtree(path, ignore_errors=True)
    return f"removed {path} ({size / 1e6:.1f} MB), left by a parbpe run (pid {owner.get('pid')}) that died"

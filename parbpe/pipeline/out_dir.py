"""The output directory holds exactly one run: what an earlier parbpe run wrote there is recognized and
removed once the new files are in place; a directory holding anything else is refused before work.
A run that fails leaves --out as it was: a directory it created and left empty is removed.

A file is an earlier run's only when that run's stats.json records its name with the digest of its
bytes ("file_digests") and the file still has those bytes: a regular file directly in --out or in a
vocab-SIZE/ folder of it, never reached through a symbolic link. Names alone (the export names,
stats.json's "files" list) prove nothing: a user's vocab.json or a forged stats.json is never removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator

from ..io.atomic import file_digest
from ..io.filesystems import is_remote, local_path

STATS = "stats.json"
DIGESTS = "file_digests"  # stats.json's record: each file the run wrote (but stats.json) and its digest
_SMALLER = re.compile(r"vocab-\d+")


def earlier_outputs(out_dir: str) -> tuple[list[str], list[str]]:
    """(files an earlier parbpe run wrote, other entries) in out_dir, as paths relative to it.
    Hidden entries (the run directory .parbpe-run, temporary files) are neither: they are the run's own."""
    ours, foreign = _sorted_out(local_path(out_dir))
    return sorted(ours), foreign


def _sorted_out(out_dir: str) -> tuple[dict[str, str], list[str]]:
    """({earlier run's file: its digest}, other entries) in out_dir (see the module docstring)."""
    if not os.path.isdir(out_dir):
        return {}, []
    record = _record(out_dir)
    ours: dict[str, str] = {}
    foreign: list[str] = []
    for entry in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, entry)
        if entry.startswith("."):
            continue
        if entry == STATS and record is not None:
            ours[entry] = ""  # replaced by this run's, never removed
        elif _SMALLER.fullmatch(entry) and os.path.isdir(path) and not os.path.islink(path):
            for inner in sorted(os.listdir(path)):
                if not inner.startswith("."):
                    _sort(os.path.join(path, inner), f"{entry}/{inner}", record, ours, foreign)
        else:
            _sort(path, entry, record, ours, foreign)
    return ours, foreign


def _sort(path: str, name: str, record: dict[str, str] | None, ours: dict[str, str], foreign: list[str]) -> None:
    """ours[name] = digest when the record names it with the file's digest; else name is foreign."""
    digest = record.get(name) if record is not None else None
    if digest is not None and file_digest(path) == digest:
        ours[name] = digest
    else:
        foreign.append(name)


def _record(out_dir: str) -> dict[str, str] | None:
    """An earlier run's record of the files it wrote and their digests (stats.json, a regular file), or
    None when there is none."""
    path = os.path.join(out_dir, STATS)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            digests = json.load(f).get(DIGESTS)
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(digests, dict):
        return None
    return {k: v for k, v in digests.items() if isinstance(k, str) and isinstance(v, str)}


def check_out_dir_reusable(out_dir: str) -> None:
    """Refuse, before work, an --out that holds files parbpe did not write: a new run replaces an
    earlier run's files, and must not mix with (or later remove) anything else."""
    if is_remote(out_dir):
        return
    _, foreign = earlier_outputs(out_dir)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        older = (" (its stats.json records no digests of the files it wrote, as parbpe's before this one: "
                 "remove them to write there)") if STATS in foreign else ""
        raise ValueError(f"--out {out_dir} holds files parbpe did not write ({shown}){older}: give a new or empty "
                         "directory, or one an earlier parbpe run wrote, unchanged since (its files are then "
                         "replaced)")


def earlier_files(out_dir: str, written: list[str]) -> dict[str, str]:
    """The files an earlier parbpe run wrote to out_dir that a run writing `written` (paths relative to
    out_dir) does not replace, with their digests: they go once the new files are in place (remove_stale)."""
    if is_remote(out_dir):
        return {}
    ours, _ = _sorted_out(local_path(out_dir))
    return {name: ours[name] for name in sorted(set(ours) - set(written))}


def remove_stale(out_dir: str, stale: dict[str, str]) -> None:
    """Remove those files, each only if it still has the bytes recorded (never through a link), and
    vocab-SIZE/ folders they leave empty."""
    root = local_path(out_dir)
    for name, digest in stale.items():
        path = os.path.join(root, name)
        if digest and file_digest(path) == digest:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    for folder in {name.split("/")[0] for name in stale if "/" in name}:
        path = os.path.join(root, folder)
        if not os.path.islink(path):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only when empty


@contextlib.contextmanager
def left_as_it_was(out_dir: str | None) -> Iterator[None]:
    """On an error, remove out_dir if this run created it and it is empty (a kept run directory, which
    --resume needs, keeps it)."""
    created = out_dir is not None and not is_remote(out_dir) and not os.path.exists(local_path(out_dir))
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(local_path(out_dir))
        raise

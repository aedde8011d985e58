"""The output directory holds exactly one run: what an earlier parbpe run wrote there is recognized
(the names it records in stats.json's "files", the export names, vocab-SIZE/ folders of them) and
removed once the new files are in place; a directory holding anything else is refused before work.
A run that fails leaves --out as it was: a directory it created and left empty is removed."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator

from ..io.filesystems import is_remote, local_path
from ..tokenizer.exports import EXPORT_NAMES

STATS = "stats.json"
_SMALLER = re.compile(r"vocab-\d+")


def earlier_outputs(out_dir: str) -> tuple[list[str], list[str]]:
    """(files an earlier parbpe run wrote, other entries) in out_dir, as paths relative to it.
    Hidden entries (the run directory .parbpe-run, temporary files) are neither: they are the run's own."""
    out_dir = local_path(out_dir)
    if not os.path.isdir(out_dir):
        return [], []
    ours, foreign = [], []
    for entry in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path) and _SMALLER.fullmatch(entry):
            inner_ours, inner_foreign = earlier_outputs(path)
            ours += [f"{entry}/{name}" for name in inner_ours]
            foreign += [f"{entry}/{name}" for name in inner_foreign]
        elif os.path.isfile(path) and (entry in EXPORT_NAMES or entry == STATS or entry in _recorded(out_dir)):
            ours.append(entry)
        else:
            foreign.append(entry)
    return ours, foreign


def _recorded(out_dir: str) -> set[str]:
    """The top-level names an earlier run's stats.json says it wrote (a format added since is still ours)."""
    try:
        with open(os.path.join(out_dir, STATS), encoding="utf-8") as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError, AttributeError):
        return set()
    return {name for name in files if isinstance(name, str) and "/" not in name} if isinstance(files, dict) else set()


def check_out_dir_reusable(out_dir: str) -> None:
    """Refuse, before work, an --out that holds files parbpe did not write: a new run replaces an
    earlier run's files, and must not mix with (or later remove) anything else."""
    if is_remote(out_dir):
        return
    _, foreign = earlier_outputs(out_dir)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"--out {out_dir} holds files parbpe did not write ({shown}): give a new or empty "
                         "directory, or one an earlier parbpe run wrote (its files are then replaced)")


def earlier_files(out_dir: str, written: list[str]) -> list[str]:
    """The files an earlier parbpe run wrote to out_dir that a run writing `written` (paths relative to
    out_dir) does not replace: they go once the new files are in place (remove_stale)."""
    if is_remote(out_dir):
        return []
    ours, _ = earlier_outputs(out_dir)
    return sorted(set(ours) - set(written))


def remove_stale(out_dir: str, stale: list[str]) -> None:
    """Remove those files, and vocab-SIZE/ folders they leave empty."""
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(local_path(out_dir), name))
    for folder in {name.split("/")[0] for name in stale if "/" in name}:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(local_path(out_dir), folder))  # only when empty


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

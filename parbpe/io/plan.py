"""Stage 1, plan: inputs (paths, globs, directories) become sorted work units.

Text inputs become work units: one parquet row group, or a byte range of an uncompressed
text/jsonl file (cut where no split pattern can match across, so the counts equal those of the
whole file), or a whole compressed file. Counts files (parbpe's parquet, BatchBPE's CSV) are one
unit each. The built-in default corpus (the Python standard library's sources) is planned here too.
"""

from __future__ import annotations

import glob
import os
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from .counts_files import COUNTS_MAGIC
from .filesystems import check_scheme, expand_remote, file_size, is_remote, local_path
from .readers import BATCH_BYTES, READ_BLOCK, arrow_batch_sizes, check_text_column, open_parquet
from .units import SNIFF_BYTES, WorkUnit, binary_reason, compression, has_text_suffix, kind_of

RANGE_BYTES = 64 << 20  # uncompressed text/jsonl files larger than this become several units
ARROW_RANGE_BYTES = 8 << 20  # record batches of an Arrow file (memory-mapped, all columns) per unit


OUTPUT_MARKER = "parbpe.json"  # a directory holding it is a parbpe output directory: never read as input
Skipped = list[tuple[str, str]]  # (path, reason) of files a directory or glob held but parbpe did not read


def expand_inputs(inputs: Sequence[str], skipped: Skipped | None = None, outputs: Sequence[str] = ()) -> list[str]:
    """Files named by paths, globs and directories (recursively), sorted and without duplicates.

    One rule for directories and globs: every file they hold is read, except hidden ones (a name
    starting with '.'), those that are not text (binary_reason), and those in a parbpe output
    directory (one holding parbpe.json, or one of `outputs`: this run's --out and --run-dir), which
    are appended to skipped with the reason. A file named on its own is always read, or refused
    with the reason.
    URIs (s3://, gs://, hf://) are listed on their filesystem (hidden files left out, no sniffing);
    file:// URIs are local paths.
    """
    skipped = [] if skipped is None else skipped
    files: set[str] = set()
    for item in map(os.fspath, inputs):
        check_scheme(item)
        if is_remote(item):
            files.update(expand_remote(item, _not_hidden))
            continue
        item = local_path(item)
        if os.path.isdir(item):
            _check_not_saved_dataset(item)
            listed = sorted(str(p) for p in Path(item).rglob("*") if p.is_file())
            found = _found_files(item, listed, skipped, outputs)
            if not found:
                raise FileNotFoundError(f"directory {item!r} holds no readable input"
                                        + (f" (skipped: {_skip_summary(skipped)})" if skipped else ""))
            files.update(found)
        elif os.path.isfile(item):
            why = _not_text(item)
            if why:
                raise ValueError(f"{item}: {why}, not text; parbpe reads parquet, arrow, jsonl and text files "
                                 "(any other extension is read as UTF-8 text)")
            files.add(item)
        else:
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise FileNotFoundError(f"no such file, directory or glob match: {item!r}")
            files.update(_found_files(None, [m for m in matches if os.path.isfile(m)], skipped, outputs))
            for m in matches:
                if os.path.isdir(m):
                    files.update(expand_inputs([m], skipped, outputs))
    return sorted(files)


def _found_files(root: str | None, paths: list[str], skipped: Skipped, outputs: Sequence[str] = ()) -> list[str]:
    """The files of a directory listing or glob match that are read; the others go to skipped."""
    found = []
    this_run = [os.path.abspath(local_path(o)) for o in outputs if not is_remote(o)]
    written = {os.path.dirname(os.path.abspath(p)) for p in paths if os.path.basename(p) == OUTPUT_MARKER}
    for path in paths:
        parts = Path(os.path.relpath(path, root)).parts if root else (os.path.basename(path),)
        if any(part.startswith(".") and part not in (".", "..") for part in parts):
            skipped.append((path, "hidden"))
            continue
        where = _inside(os.path.abspath(path), this_run)
        if where or _inside(os.path.abspath(path), written):
            exact = os.path.abspath(path) in this_run
            skipped.append((path, "this run's output file" if exact else "this run's output directory" if where
                            else "a parbpe output directory"))
            continue
        why = _not_text(path)
        if why:
            skipped.append((path, why))
            continue
        found.append(path)
    return found


def _inside(path: str, folders: Sequence[str] | set[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def _not_hidden(path: str) -> bool:
    return not any(part.startswith(".") for part in path.split("/"))


def _skip_summary(skipped: Skipped, limit: int = 5) -> str:
    shown = "; ".join(f"{p} ({why})" for p, why in skipped[:limit])
    return shown + (f"; and {len(skipped) - limit} more" if len(skipped) > limit else "")


def _not_text(path: str) -> str | None:
    """Why a text-kind file cannot be read as text (binary data, a JSON array), or None."""
    if kind_of(path) not in ("text", "jsonl") or compression(path) is not None:
        return None
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    why = binary_reason(head, known_text=has_text_suffix(path))
    if why is None and kind_of(path) == "jsonl" and head.lstrip()[:1] == b"[":
        why = ("a JSON array, not JSON lines (one object per line): convert it with "
               f"`jq -c '.[]' {path} > {Path(path).with_suffix('.jsonl')}`, or load it in Python and pass "
               "the texts to parbpe.train_from_iterator")
    return why


def _check_not_saved_dataset(directory: str) -> None:
    """Refuse a Hugging Face `datasets.save_to_disk` directory, saying how to pass it."""
    if os.path.isfile(os.path.join(directory, "dataset_info.json")) and (
        os.path.isfile(os.path.join(directory, "state.json"))
        or os.path.isfile(os.path.join(directory, "dataset_dict.json"))
    ):
        raise ValueError(
            f"{directory} is a Hugging Face datasets directory (made by save_to_disk): load it with "
            f"datasets.load_from_disk({directory!r}) and pass the Dataset (or one split of a DatasetDict) to "
            "parbpe.train, which reads its Arrow files in parallel"
        )


def plan(inputs: Sequence[str], range_bytes: int = RANGE_BYTES, skipped: Skipped | None = None,
         outputs: Sequence[str] = (), text_column: str | None = None) -> list[WorkUnit]:
    """Expand inputs into sorted work units: one per parquet row group, byte ranges of about
    range_bytes for uncompressed text and jsonl files, record-batch ranges of Arrow files, one per
    other file. Files a directory or glob held but that are not read are appended to skipped."""
    units = []
    for path in expand_inputs(inputs, skipped, outputs):
        kind = kind_of(path)
        if kind == "arrow":
            units.extend(arrow_units(path, ARROW_RANGE_BYTES))
        elif kind == "parquet":
            pf = open_parquet(path)
            metadata = pf.schema_arrow.metadata or {}
            if COUNTS_MAGIC in metadata:
                units.append(WorkUnit(path, "counts-parquet"))
            else:
                if text_column is not None:
                    check_text_column(pf.schema_arrow, path, text_column)  # now, not in a worker later
                meta = pf.metadata
                units.extend(WorkUnit(path, "parquet", rg, size=max(meta.row_group(rg).total_byte_size, 1))
                             for rg in range(meta.num_row_groups))
        elif kind in ("text", "jsonl") and compression(path) is None:
            size = file_size(path)
            starts = range(0, max(size, 1), range_bytes)
            units.extend(WorkUnit(path, kind, start=a, end=a + range_bytes if a + range_bytes < size else -1)
                         for a in starts)
        else:
            units.append(WorkUnit(path, kind))
    return sorted(units)


def arrow_units(path: str, range_bytes: int) -> list[WorkUnit]:
    """Units of consecutive record batches of an Arrow file, about range_bytes of data each."""
    units, first, size = [], 0, 0
    sizes = arrow_batch_sizes(path)
    for i, nbytes in enumerate(sizes):
        size += nbytes
        if size >= range_bytes or i == len(sizes) - 1:
            units.append(WorkUnit(path, "arrow", start=first, end=i + 1))
            first, size = i + 1, 0
    return units


def unit_text_bytes(unit: WorkUnit) -> int:
    """The most text bytes reading this unit holds at once (for the memory budget's floor)."""
    if unit.kind == "parquet" and unit.size:
        return unit.size
    if unit.kind == "parquet":
        try:
            meta = open_parquet(unit.path).metadata
            return max(meta.row_group(unit.row_group).total_byte_size, 1)
        except (pa.ArrowInvalid, OSError, ValueError):
            return 1
    if unit.kind == "text":
        return 2 * READ_BLOCK
    if unit.kind == "jsonl":
        return 2 * BATCH_BYTES
    if unit.kind == "arrow":
        return 1  # memory-mapped: pages are the OS's to drop
    return file_size(unit.path)  # a counts file is read whole


COMPRESSED_TEXT_RATIO = 4  # text bytes a byte of a .gz or .zst file holds, about (text_size)


def text_size(units: Sequence[WorkUnit]) -> int:
    """The bytes of text the units hold, about: what a job's size is judged by (whether kernels repay
    numba's start), not its memory (unit_text_bytes). A row group's uncompressed size, a byte range's
    length (times COMPRESSED_TEXT_RATIO compressed), a whole Arrow or counts file once."""
    total, whole = 0, set()
    for unit in units:
        if unit.kind == "parquet":
            total += unit_text_bytes(unit)
        elif unit.kind in ("text", "jsonl"):
            end = file_size(unit.path) if unit.end == -1 else unit.end
            total += max(end - unit.start, 0) * (COMPRESSED_TEXT_RATIO if compression(unit.path) else 1)
        elif unit.path not in whole:
            whole.add(unit.path)
            total += file_size(unit.path)
    return total


def default_corpus_files() -> list[str]:
    """The Python standard library's own sources: text every machine with Python already has.

    Test suites, site-packages and idle's data are left out; the result is sorted so it is the
    same on every run of the same Python.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    files = [
        str(p)
        for p in stdlib.rglob("*.py")
        if not skip.intersection(p.relative_to(stdlib).parts) and p.is_file()
    ]
    if not files:
        raise FileNotFoundError(f"no standard-library sources found under {stdlib}")
    return sorted(files)

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
from .readers import BATCH_BYTES, READ_BLOCK, open_parquet
from .units import WorkUnit, compression, kind_of

RANGE_BYTES = 64 << 20  # uncompressed text/jsonl files larger than this become several units


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Files named by paths, globs and directories (recursively), sorted and without duplicates.

    URIs (s3://, gs://, hf://) are listed on their filesystem; file:// URIs are local paths.
    """
    files: set[str] = set()
    for item in inputs:
        check_scheme(item)
        if is_remote(item):
            files.update(expand_remote(item, kind_of))
            continue
        item = local_path(item)
        if os.path.isdir(item):
            found = [str(p) for p in Path(item).rglob("*") if p.is_file() and kind_of(str(p))]
            if not found:
                raise FileNotFoundError(f"directory {item!r} holds no readable input (.parquet, .txt, .jsonl, .csv)")
            files.update(found)
        elif os.path.isfile(item):
            files.add(item)
        else:
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise FileNotFoundError(f"no such file, directory or glob match: {item!r}")
            for m in matches:
                if os.path.isdir(m):
                    files.update(expand_inputs([m]))
                else:
                    files.add(m)
    return sorted(files)


def plan(inputs: Sequence[str], range_bytes: int = RANGE_BYTES) -> list[WorkUnit]:
    """Expand inputs into sorted work units: one per parquet row group, byte ranges of about
    range_bytes for uncompressed text and jsonl files, one per other file."""
    units = []
    for path in expand_inputs(inputs):
        kind = kind_of(path)
        if kind is None:
            raise ValueError(
                f"cannot tell how to read {path!r}: use .parquet, .txt, .jsonl (optionally .gz/.zst) "
                "or a counts file (.parquet made by `parbpe count`, or BatchBPE's .csv)"
            )
        if kind == "parquet":
            pf = open_parquet(path)
            metadata = pf.schema_arrow.metadata or {}
            if COUNTS_MAGIC in metadata:
                units.append(WorkUnit(path, "counts-parquet"))
            else:
                units.extend(WorkUnit(path, "parquet", rg) for rg in range(pf.metadata.num_row_groups))
        elif kind in ("text", "jsonl") and compression(path) is None:
            size = file_size(path)
            starts = range(0, max(size, 1), range_bytes)
            units.extend(WorkUnit(path, kind, start=a, end=a + range_bytes if a + range_bytes < size else -1)
                         for a in starts)
        else:
            units.append(WorkUnit(path, kind))
    return sorted(units)


def unit_text_bytes(unit: WorkUnit) -> int:
    """The most text bytes reading this unit holds at once (for the memory budget's floor)."""
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
    return file_size(unit.path)  # a counts file is read whole


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

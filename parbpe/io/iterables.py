"""Text that does not come from files parbpe plans: Python iterables, standard input, and Hugging
Face `datasets` objects, turned into what the count stage takes.

An iterable (of strings, of lists of strings, of pyarrow string arrays, or of `datasets` rows) is
consumed in the parent process in batches of a few MB (`text_batches`), which the count stage
hands to its workers. A `datasets.Dataset` backed by its Arrow cache files becomes ordinary work
units (record-batch ranges of those files), read in parallel like any file; other `datasets`
objects go through the iterator path. `datasets` itself is never imported here: its objects are
recognised by their class, so the extra is needed only by those who pass one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa

from .plan import ARROW_RANGE_BYTES, arrow_units
from .readers import (
    READ_BLOCK,
    ReadStats,
    _decode,
    _record_batches,
    find_last_safe_cut,
    replace_surrogates,
    text_strings,
)
from .units import WorkUnit

STREAM_BATCH_BYTES = 4 << 20  # documents handed to a counting worker together


@dataclass
class TextStream:
    """Documents from Python, consumed once. length (if known) is how many items the iterable
    yields, as in HF tokenizers' train_from_iterator: it only drives the progress bar."""

    texts: Iterable[Any]
    length: int | None = None
    description: str = "a Python iterable"
    read_stats: ReadStats | None = None  # what producing texts saw (invalid UTF-8 of standard input)


def is_datasets_object(obj: Any) -> bool:
    """True for objects of the Hugging Face `datasets` library (without importing it)."""
    return type(obj).__module__.split(".")[0] == "datasets"


def is_text_source(obj: Any) -> bool:
    """True if obj holds texts rather than names paths: an iterator or generator, a pyarrow array,
    a `datasets` object, or a TextStream. Strings, paths and lists or tuples of them name files."""
    if isinstance(obj, (str, bytes, os.PathLike)) or obj is None:
        return False
    if isinstance(obj, (TextStream, pa.Array, pa.ChunkedArray)) or is_datasets_object(obj):
        return True
    if isinstance(obj, (list, tuple)):
        return False
    return isinstance(obj, Iterable)


def dataset_source(obj: Any, text_column: str) -> list[WorkUnit] | TextStream:
    """Work units for a `datasets.Dataset` read straight from its Arrow cache files, or a
    TextStream for any other `datasets` object (streaming, in memory, filtered or shuffled)."""
    kind = type(obj).__name__
    if kind in ("DatasetDict", "IterableDatasetDict"):
        raise ValueError(f"a {kind} holds several splits ({', '.join(obj)}): pass one, e.g. ds[{next(iter(obj))!r}]")
    columns = getattr(obj, "column_names", None)
    if columns is not None and text_column not in columns:
        raise ValueError(f"the dataset has no column {text_column!r}; its columns are {columns}. "
                         "Choose one with text_column=...")
    if kind == "Dataset":
        files = [f["filename"] for f in obj.cache_files]
        if files and obj._indices is None and sum(_arrow_rows(f) for f in files) == obj.num_rows:
            return [unit for f in files for unit in arrow_units(f, ARROW_RANGE_BYTES)]
        batches = obj.select_columns([text_column]).with_format("arrow").iter(batch_size=1024)
        return TextStream((b.column(0) for b in batches), obj.num_rows // 1024 + 1, "an in-memory Dataset")
    if kind == "IterableDataset":
        rows = obj.select_columns([text_column]) if columns is not None else obj
        return TextStream((row[text_column] for row in rows), None, "an IterableDataset")
    raise ValueError(f"cannot read a datasets.{kind}: pass a Dataset, one split of a DatasetDict, "
                     "or an IterableDataset")


def _arrow_rows(path: str) -> int:
    with pa.memory_map(path) as source:
        return sum(b.num_rows for b in _record_batches(source, path))


def text_batches(items: Iterable[Any], stats: ReadStats, text_column: str = "text",
                 batch_bytes: int = STREAM_BATCH_BYTES, on_item=None) -> Iterator[pa.Array]:
    """String arrays of documents of about batch_bytes from an iterable of strings, lists of
    strings, pyarrow string arrays or dict rows; None documents are skipped like null rows.
    on_item() is called after each item is taken (progress). stats counts documents and bytes."""
    pending: list[str] = []
    size = 0

    def flush() -> pa.Array:
        nonlocal pending, size
        try:
            array = pa.array(pending, pa.string())
        except (UnicodeEncodeError, pa.ArrowException):  # lone surrogates are not UTF-8
            array = pa.array([replace_surrogates(t, stats) for t in pending], pa.string())
        pending, size = [], 0
        return _counted(array, stats)

    for item in items:
        if isinstance(item, dict):
            item = item.get(text_column)
        if isinstance(item, str):
            pending.append(item)
            size += len(item)
        elif isinstance(item, (pa.Array, pa.ChunkedArray)):
            if pending:
                yield flush()
            yield from _slices(text_strings(item, "an array from the iterable", text_column), batch_bytes, stats)
        elif isinstance(item, (list, tuple)):
            for text in item:
                if text is None:
                    continue
                if not isinstance(text, str):
                    raise ValueError(f"the iterable yielded a list holding a {type(text).__name__}, not a str")
                pending.append(text)
                size += len(text)
        elif item is not None:
            raise ValueError(f"the iterable yielded a {type(item).__name__}: expected str, a list of str or a "
                             "pyarrow string array (to train on files, pass their paths to parbpe.train)")
        if on_item is not None:
            on_item()
        if size >= batch_bytes:
            yield flush()
    if pending:
        yield flush()


def _counted(array: pa.Array, stats: ReadStats) -> pa.Array:
    import pyarrow.compute as pc

    stats.documents += len(array)
    stats.bytes += pc.sum(pc.binary_length(array)).as_py() or 0
    return array


def _slices(array: pa.Array, batch_bytes: int, stats: ReadStats) -> Iterator[pa.Array]:
    parts = max(1, -(-array.nbytes // batch_bytes))
    step = max(1, -(-len(array) // parts))
    for start in range(0, len(array), step):
        yield _counted(array.slice(start, step), stats)


def stdin_source(stream: BinaryIO | None = None) -> TextStream:
    """Standard input (`-`) as a TextStream: one text document, like a .txt file."""
    stats = ReadStats()
    return TextStream(stdin_texts(stats, stream if stream is not None else sys.stdin.buffer), None,
                      "standard input", stats)


def stdin_texts(scratch: ReadStats, stream: BinaryIO, block: int = READ_BLOCK) -> Iterator[str]:
    """A binary stream as one text document, in pieces cut only at safe places (like a .txt file),
    with invalid UTF-8 replaced and counted in scratch."""
    buffer = b""
    while True:
        data = stream.read(block)
        if not data:
            break
        buffer += data
        cut = find_last_safe_cut(buffer, max(len(buffer) - len(data), 2))
        if cut > 0:
            yield _decode(buffer[:cut], scratch)
            buffer = buffer[cut:]
    if buffer:
        yield _decode(buffer, scratch)

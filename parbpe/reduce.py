"""Reducing: partial counts become the global chunk counts, then freq_cutoff and the stop list.

Also reads and writes counts files (parquet: chunk as binary, count as int64, with the pattern and
special tokens in the metadata). Counts files of the same pattern add up.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from .config import TrainConfig
from .read import COUNTS_MAGIC, WorkUnit, read_counts


@dataclass
class TrainingChunks:
    """What the merge stage trains on: chunks (UTF-8 bytes, sorted) and counts, plus the stop list."""

    chunks: list[bytes]
    counts: list[int]
    stop_words: list[bytes]  # in token order: stop word k is token 256 + k
    unique_chunks: int  # before freq_cutoff and the stop list
    total_chunks: int  # occurrences, before freq_cutoff and the stop list
    dropped_by_cutoff: int


def add_counts_files(total: Counter[str], units: Iterable[WorkUnit], config: TrainConfig) -> None:
    """Add counts files into total, checking they were made with the same pattern and specials."""
    for unit in units:
        counts = read_counts(unit)
        if counts.pattern is not None and counts.pattern != config.pattern:
            raise ValueError(
                f"{unit.path} was counted with the pattern {counts.pattern!r}, but this run uses "
                f"{config.pattern!r}; pass the same pattern (--pattern) or recount the text"
            )
        if counts.special_tokens is not None and tuple(counts.special_tokens) != config.special_tokens:
            raise ValueError(
                f"{unit.path} was counted with special tokens {list(counts.special_tokens)}, but this "
                f"run uses {list(config.special_tokens)}; pass the same --special-tokens"
            )
        try:
            for chunk, count in zip(counts.chunks, counts.counts):
                total[chunk.decode("utf-8")] += count
        except UnicodeDecodeError:
            raise ValueError(f"{unit.path}: a chunk is not valid UTF-8; the counts file is damaged") from None


def select_training_chunks(total: Counter[str], config: TrainConfig) -> TrainingChunks:
    """Apply the stop list and freq_cutoff to the global counts; sort for determinism.

    Stop list (BatchBPE): the stop_list_size most frequent chunks longer than one character
    get whole-chunk tokens and leave training; ties go to the greater chunk bytes, as for pairs.
    freq_cutoff drops chunks seen fewer than freq_cutoff times in the whole corpus.
    """
    stop_words: list[bytes] = []
    if config.stop_list_size:
        candidates = ((count, chunk.encode("utf-8"))
                      for chunk, count in total.items() if len(chunk) > 1)
        top = sorted(candidates, reverse=True)[: config.stop_list_size]
        stop_words = [chunk for _, chunk in top]
    stop = set(stop_words)
    cutoff = config.freq_cutoff
    chunks, counts = [], []
    dropped = 0
    for chunk, count in total.items():
        data = chunk.encode("utf-8")
        if data in stop:
            continue
        if count < cutoff:
            dropped += 1
            continue
        chunks.append(data)
        counts.append(count)
    order = sorted(range(len(chunks)), key=chunks.__getitem__)
    return TrainingChunks(
        chunks=[chunks[i] for i in order],
        counts=[counts[i] for i in order],
        stop_words=stop_words,
        unique_chunks=len(total),
        total_chunks=sum(total.values()),
        dropped_by_cutoff=dropped,
    )


def write_counts_file(path: str, total: Counter[str], config: TrainConfig, freq_cutoff: int = 0) -> int:
    """Write counts as parquet (sorted by chunk bytes), atomically; returns the number of rows."""
    items = sorted((chunk.encode("utf-8"), count)
                   for chunk, count in total.items() if count >= freq_cutoff)
    table = pa.table(
        {
            "chunk": pa.array([c for c, _ in items], type=pa.binary()),
            "count": pa.array([n for _, n in items], type=pa.int64()),
        }
    )
    meta = {"pattern": config.pattern, "special_tokens": list(config.special_tokens),
            "freq_cutoff": freq_cutoff, "format": 1}
    table = table.replace_schema_metadata({COUNTS_MAGIC: json.dumps(meta).encode()})
    write_atomically(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    return len(items)


def write_atomically(path: str, write) -> None:
    """Call write(temporary path) next to path, then rename it into place."""
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

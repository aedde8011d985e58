"""Counts files as counts tables, and writing them.

A counts file (parquet: chunk as binary, count as int64, pattern and special tokens in the
metadata) is a valid training input; files made with the same pattern add up. Rows are written
grouped by hash partition and sorted by chunk bytes within each, so a counts file is the same
whether the run spilled or not.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config import TrainConfig
from ..io.atomic import write_atomically
from ..io.counts_files import COUNTS_MAGIC, read_counts
from ..io.units import WorkUnit
from ..patterns import pattern_name
from .partitions import sort_by_chunk
from .pieces import COUNT_LIMIT, SCHEMA, check_counts, sum_tables


def counts_file_table(unit: WorkUnit, config: TrainConfig) -> pa.Table:
    """A counts file as a counts table, checking it was made with this run's pattern and specials
    (special tokens may be added when the counted text cannot have held them: added_specials_absent)."""
    counts = read_counts(unit)
    if counts.pattern is not None and counts.pattern != config.pattern:
        raise ValueError(
            f"{unit.path} was counted with the pattern {_named(counts.pattern)}, but this run uses "
            f"{_named(config.pattern)}; pass --pattern {pattern_name(counts.pattern) or 'REGEX'} or recount the text"
        )
    if counts.special_tokens is not None and tuple(counts.special_tokens) != config.special_tokens:
        added = [t for t in config.special_tokens if t not in counts.special_tokens]
        if set(counts.special_tokens) - set(config.special_tokens) or not added_specials_absent(counts.chunks, added):
            raise ValueError(
                f"{unit.path} was counted with special tokens {list(counts.special_tokens)}, but this run uses "
                f"{list(config.special_tokens)}, and its text may hold them: recount it with them (parbpe count "
                f"INPUT --special-tokens {shlex.quote(','.join(config.special_tokens))} --pattern "
                f"{shlex.quote(pattern_name(config.pattern) or 'REGEX')} --out {shlex.quote(unit.path)}), or pass "
                "the same --special-tokens"
            )
    try:
        chunks = pa.array(counts.chunks, pa.large_binary()).cast(pa.string())
    except pa.ArrowInvalid:
        raise ValueError(f"{unit.path}: a chunk is not valid UTF-8; the counts file is damaged") from None
    try:
        numbers = pa.array(counts.counts, pa.int64())
    except (pa.ArrowInvalid, OverflowError):
        raise ValueError(f"{unit.path}: a count is not a 64-bit integer (at most {COUNT_LIMIT:,} is taken)") from None
    check_counts(numbers, unit.path)
    return sum_tables([pa.table({"chunk": chunks, "count": numbers}, schema=SCHEMA)])


def _named(pattern: str) -> str:
    name = pattern_name(pattern)
    return name if name else f"a custom regex {pattern[:60]!r}{'...' if len(pattern) > 60 else ''}"


def added_specials_absent(chunks: list[bytes] | pa.Array, added: list[str]) -> bool:
    """Whether special tokens missing from a counts file's own can be added to it: each has a
    character that no counted chunk holds, so the counted text held none of them (a special token
    occurring in the text is split into chunks that hold all its characters)."""
    chunks = pa.array(chunks, pa.large_binary()) if not isinstance(chunks, pa.Array) else chunks
    for token in added:
        if all(pc.any(pc.match_substring(chunks, char)).as_py() for char in set(token)):
            return False
    return True


def load_counts_files(units: Iterable[WorkUnit], config: TrainConfig) -> pa.Table:
    """Counts files added up into one counts table (for tools that start from counts)."""
    return sum_tables([counts_file_table(u, config) for u in units])


def write_counts_file(path: str, partitions: Iterable[pa.Table], config: TrainConfig, freq_cutoff: int = 0) -> int:
    """Write counts as parquet, one row group per partition in order (rows sorted by chunk bytes
    within each), atomically; partitions come from read_partition or split_partitions. Returns rows."""
    schema = pa.schema([("chunk", pa.binary()), ("count", pa.int64())])
    meta = {"pattern": config.pattern, "special_tokens": list(config.special_tokens),
            "freq_cutoff": freq_cutoff, "format": 1}
    schema = schema.with_metadata({COUNTS_MAGIC: json.dumps(meta).encode()})
    rows = 0

    def write(tmp: str) -> None:
        nonlocal rows
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for table in partitions:
                if freq_cutoff > 1:
                    table = table.filter(pc.greater_equal(table.column("count"), freq_cutoff))
                table = sort_by_chunk(table)
                out = pa.table([table.column("chunk").cast(pa.binary()), table.column("count")], schema=schema)
                writer.write_table(out)
                rows += out.num_rows

    write_atomically(path, write)
    return rows

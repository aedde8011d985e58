"""parbpe eval at corpus scale: the text is counted once by the counting stage (workers, the memory
budget, any input train reads), then each unique chunk is segmented once per tokenizer and method and
its tokens are weighted by the chunk's count.

With the JIT on, the three methods are kernels/segment.py's kernels (tokenizer/tables.py) over the chunk
table (per-token counts directly; merges with a stop list excepted). Without it, numpy:
- merges: the chunk table is encoded with the tokenizer's merges by merge/encode.py (BPE's rank
  order, merges applied a safe batch at a time, vectorized over chunks). A tokenizer with a stop
  list (whole chunks as tokens) is encoded chunk by chunk instead;
- greedy and shortest: tokenizer/segment.py over padded batches of chunks of equal length.
Either way every chunk gets the ids Tokenizer.encode_ordinary gives it (tested), so the token count
equals document-by-document encoding of the same text.

The work is cut into slices of the chunk table, a task per (tokenizer, slice) for all its methods,
spread over the workers: threads when only kernels run (they release the GIL), else forked
processes (they share the table); each returns per-token counts, which are added up. Special-token
strings are text here, as in encode_ordinary. Chunk tables of tokenizers with another split pattern
are counted separately.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .. import jit
from ..config import RunOptions, TrainConfig
from ..io.plan import plan
from ..merge.encode import encode_byte_table, rank_order_batches
from ..merge.table import table_from_arrays
from ..patterns import encoding_split
from ..run.pool import default_start_method, get_context, parallel
from ..run.run_dir import counts_arrays
from ..run.temp_dirs import temp_work_dir
from ..tokenizer import tables
from ..tokenizer.evaluate import is_superword
from ..tokenizer.inherit import inherit
from ..tokenizer.model import Tokenizer
from ..tokenizer.score import METHODS, renyi_efficiency
from .context import RunContext, reporter_of, run_context
from .count import count_units, nothing_counted, reduce_partitions

# The keys of every row (parbpe eval --json, parbpe.evaluate); superword_share and documents follow.
ROW_KEYS = ("tokenizer", "method", "tokens", "bytes", "bytes_per_token", "tokens_per_word", "renyi_efficiency",
            "vocab_unused_share")
SLICE_BYTES = 4 << 20  # chunk bytes per task: a worker's segmentation temporaries stay small
JIT_SLICE_BYTES = 1 << 20  # with the kernels (no temporaries): smaller tasks, the workers finish together


@dataclass
class CountedText:
    """The text as unique chunks (chunk k is data[offsets[k]:offsets[k + 1]], seen counts[k] times)."""

    data: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray
    documents: int
    words: int

    @property
    def bytes(self) -> int:
        return int(np.dot(np.diff(self.offsets), self.counts))


def count_text(inputs: Sequence[str], pattern: str, normalize: str | None, config: TrainConfig,
               options: RunOptions) -> CountedText:
    """The chunk counts of inputs in the normal form `normalize`, split by pattern (no special tokens:
    their strings are text), with the documents and whitespace words read, in a run of their own."""
    with run_context(config, options) as ctx:
        return count_text_in(ctx, inputs, pattern, normalize, nested=False)


def count_text_in(ctx: RunContext, inputs: Sequence[str], pattern: str, normalize: str | None,
                  nested: bool = True) -> CountedText:
    """count_text within a run (train's --heldout: nested in its evaluate stage, which times it): all
    of the text, whatever sample the run trained on. The stages 2-3 of `parbpe count`: the partitions'
    counts are taken as they come (no selection, no sort: the rows are sums over chunks). The chunks
    are encoding's: the superword split runs over whole documents, not line by line as training
    counts it (patterns.encoding_split)."""
    config = dataclasses.replace(ctx.config, pattern=encoding_split(pattern), special_tokens=(), eos_token=None,
                                 bos_token=None, pad_token=None, freq_cutoff=0, stop_list_size=0, digits=None,
                                 normalize=normalize, sample_docs=None, sample_bytes=None, sample_share=None,
                                 count_words=True, superbpe_transition=None, init=None)
    units = [u for u in plan([str(p) for p in inputs], text_column=config.text_column)]
    if any(u.kind.startswith("counts") for u in units):
        raise ValueError("eval reads text (parquet, arrow, jsonl, txt), not counts files: their words are unknown")
    with temp_work_dir(config.tmp_dir) as run_dir:
        with contextlib.nullcontext() if nested else ctx.stage("count"):
            counted = count_units(ctx, units, config, run_dir)
        with contextlib.nullcontext() if nested else ctx.stage("reduce"):
            data, offsets, counts = counts_arrays(pa.concat_tables(reduce_partitions(ctx, counted, config)))
    if not len(counts):
        raise ValueError(nothing_counted(counted.stats.bytes, config))
    return CountedText(data, offsets, counts, counted.stats.documents, counted.stats.words)


def token_counts(tok: Tokenizer, methods: Sequence[str], data: np.ndarray, offsets: np.ndarray,
                 counts: np.ndarray) -> dict[str, np.ndarray]:
    """Per method, the occurrences of each token id (index) when chunks offsets[k]:offsets[k + 1] of
    data, seen counts[k] times, are segmented by it: by the numba kernels when the JIT is on (not
    merges with a stop list), else by numpy."""
    fast = [m for m in methods if jit.enabled() and not (m == "merges" and tok.stop_words)]
    found = tables.token_totals(tok.kernel_tables(), fast, data, offsets, counts) if fast else {}
    return {m: found[m] if m in found else _numpy_counts(tok, m, data, offsets, counts) for m in methods}


def _numpy_counts(tok: Tokenizer, method: str, data: np.ndarray, offsets: np.ndarray,
                  counts: np.ndarray) -> np.ndarray:
    """token_counts of one method without the kernels."""
    size = max([*tok.vocab, *tok.special_tokens.values()]) + 1
    if method == "merges" and not tok.stop_words:
        return _merges_counts(tok, data, offsets, counts, size)
    chunks = [data[a:b].tobytes() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    if method != "merges":
        owner, ids = tok.segment_arrays(chunks, method)
        return np.bincount(ids, weights=counts[owner], minlength=size)
    segments = [tok._encode_chunk(c.decode("utf-8")) for c in chunks]  # a stop list: chunk by chunk
    lengths = np.fromiter(map(len, segments), dtype=np.int64, count=len(segments))
    ids = np.fromiter((i for s in segments for i in s), dtype=np.int64, count=int(lengths.sum()))
    return np.bincount(ids, weights=np.repeat(counts, lengths), minlength=size)


def _merges_counts(tok: Tokenizer, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                   size: int) -> np.ndarray:
    """token_counts by the merges, the chunks encoded as a table in training's ids (merge/encode.py)."""
    inherited = inherit(tok, "the tokenizer evaluated")
    to_external = np.array([*tok.byte_ids, *(new for _, _, new in tok.merges)], dtype=np.int64)
    lengths = np.diff(offsets)
    single = lengths == 1  # one byte: its byte token (the table leaves these chunks out)
    out = np.bincount(to_external[data[offsets[:-1][single]]], weights=counts[single], minlength=size)
    base = int(offsets[0])
    table = table_from_arrays(data[base:int(offsets[-1])], offsets - base, counts, 256 + len(inherited.merges))
    if not table.n_chunks:
        return out
    encoded = encode_byte_table(table, inherited.merges, rank_order_batches(inherited.merges))
    n = encoded.lengths
    within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    ids = encoded.tokens[np.repeat(encoded.starts[:-1], n) + within].astype(np.int64)
    return out + np.bincount(to_external[ids], weights=np.repeat(encoded.counts, n), minlength=size)


_SHARED: dict[str, Any] = {}  # the text and the tokenizers, for the workers (nothing is pickled)


def _task(task: tuple[int, list[str], int, int]) -> dict[str, np.ndarray]:
    t, methods, c0, c1 = task
    text = _SHARED["text"]
    return token_counts(_SHARED["tokenizers"][t], methods, text.data, text.offsets[c0:c1 + 1], text.counts[c0:c1])


def _slices(offsets: np.ndarray, slice_bytes: int) -> list[tuple[int, int]]:
    """Chunk ranges of about slice_bytes of chunk bytes each."""
    cuts = np.searchsorted(offsets, np.arange(slice_bytes, int(offsets[-1]), slice_bytes))
    bounds = sorted({0, *cuts.tolist(), len(offsets) - 1})
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def score_text(text: CountedText, tokenizers: Sequence[Tokenizer], methods: Sequence[str] | Sequence[Sequence[str]],
               workers: int, start_method: str | None = None,
               slice_bytes: int | None = None,
               on_task: Callable[[int, int], None] | None = None) -> dict[tuple[int, str], np.ndarray]:
    """Per-token counts of the text for every (tokenizer index, method); methods: the same for every
    tokenizer, or a list of them per tokenizer. A task is a slice of the chunks for one tokenizer and
    all its methods; on_task(done, total) as tasks finish (the segmentation's progress)."""
    per = [[methods] if isinstance(methods, str) else list(methods)] * len(tokenizers)
    if methods and not isinstance(methods[0], str):
        per = [list(m) for m in methods]
    if not jit.worth(int(text.offsets[-1] - text.offsets[0]), jit.SEGMENT_MIN_BYTES):
        with jit.using("off"):  # a small text: numpy's segmentation costs less than loading numba
            return _score(text, tokenizers, per, workers, start_method, slice_bytes, on_task)
    return _score(text, tokenizers, per, workers, start_method, slice_bytes, on_task)


def _score(text: CountedText, tokenizers: Sequence[Tokenizer], per: list[list[str]], workers: int,
           start_method: str | None, slice_bytes: int | None,
           on_task: Callable[[int, int], None] | None = None) -> dict[tuple[int, str], np.ndarray]:
    """score_text with the JIT mode settled."""
    if jit.enabled():  # the tables and kernels made here, before any worker starts: they share them
        for tok, mine in zip(tokenizers, per):
            tables.load(tok.kernel_tables(), [m for m in mine if m != "merges" or not tok.stop_words])
    slices = _slices(text.offsets, slice_bytes or (JIT_SLICE_BYTES if jit.enabled() else SLICE_BYTES))
    tasks = [(t, per[t], a, b) for t in range(len(tokenizers)) for a, b in slices]
    kernels_only = jit.enabled() and not any(tok.stop_words and "merges" in m for tok, m in zip(tokenizers, per))
    totals: dict[tuple[int, str], np.ndarray] = {}
    _SHARED.update(text=text, tokenizers=list(tokenizers))
    try:
        if workers > 1 and len(tasks) > 1 and kernels_only:  # the kernels release the GIL: threads, no fork
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(_task, tasks))
        elif workers > 1 and len(tasks) > 1:
            results = parallel(_task, tasks, workers, get_context(start_method or default_start_method()),
                               stage="eval", describe=lambda k, i: _describe_task(k, tasks[i] if i is not None and
                                                                               i >= 0 else None),
                               hint="try fewer --workers: each holds a slice of the chunk table and its "
                                    "segmentation, outside the counting's memory budget")
        else:
            results = map(_task, tasks)
        for done, ((t, _, _, _), found) in enumerate(zip(tasks, results), start=1):
            for m, counts in found.items():
                totals[t, m] = counts if (t, m) not in totals else totals[t, m] + counts
            if on_task is not None:
                on_task(done, len(tasks))
    finally:
        _SHARED.clear()
    return totals


def _describe_task(k: int, task: tuple[int, list[str], int, int] | None) -> str:
    """An eval worker and what it was doing, for the message of its death."""
    if task is None:
        return f"eval worker {k}"
    t, methods, c0, c1 = task
    return f"eval worker {k} (segmenting chunks {c0}-{c1} with tokenizer {t + 1}, {'/'.join(methods)})"


def row(name: str, tok: Tokenizer, method: str, counts: np.ndarray, text: CountedText, alpha: float) -> dict:
    """One row of the report: tokenizer x method over the counted text."""
    counts = np.rint(counts).astype(np.int64)
    special = set(tok.special_tokens.values())
    regular = np.array(sorted(i for i in tok.vocab if i not in special), dtype=np.int64)
    tokens = int(counts.sum())
    superword = np.array([is_superword(tok.vocab[int(i)]) for i in regular], dtype=bool)
    n_bytes = text.bytes
    return {
        "tokenizer": name, "method": method, "tokens": tokens, "bytes": n_bytes,
        "bytes_per_token": n_bytes / tokens if tokens else 0.0,
        "tokens_per_word": tokens / text.words if text.words else 0.0,
        "renyi_efficiency": renyi_efficiency(counts[regular], len(regular), alpha),
        "vocab_unused_share": float(np.mean(counts[regular] == 0)) if len(regular) else 0.0,
        "superword_share": int(counts[regular][superword].sum()) / tokens if tokens else 0.0,
        "superword_vocab": int(superword.sum()), "documents": text.documents, "words": text.words,
        "vocab_size": tok.n_vocab,
    }


def check_renyi_alpha(alpha: float) -> float:
    """The order of the Renyi entropy: a positive, finite number (1: Shannon's)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"renyi_alpha (--renyi-alpha) must be a positive number (2.5 by default, 1 for Shannon's "
                         f"entropy), got {alpha!r}")
    return float(alpha)


def evaluate_corpus(tokenizers: Sequence[Tokenizer], inputs: Sequence[str], *, names: Sequence[str] | None = None,
                    methods: Sequence[str] | None = None, alpha: float = 2.5, config: TrainConfig | None = None,
                    options: RunOptions | None = None) -> list[dict]:
    """Rows tokenizer x method (ROW_KEYS and more) for the text of inputs, counted once per split
    pattern. methods: None gives each tokenizer its own segmentation (merges, or shortest for a
    vocabulary without merges). config: the counting's workers, memory budget and text column;
    options: its progress."""
    check_renyi_alpha(alpha)
    unknown = [m for m in methods or () if m not in METHODS]
    if unknown or (methods is not None and not methods):
        raise ValueError(f"unknown segmentation method(s) {unknown}: use {', '.join(METHODS)}")
    per = [list(methods) if methods else [tok.segmentation] for tok in tokenizers]
    for k, tok in enumerate(tokenizers):
        if tok.tokens and "merges" in per[k]:
            raise ValueError(f"{names[k] if names else f'tokenizer {k + 1}'} is a vocabulary without merges: "
                             "evaluate it with --method greedy or shortest")
    config, options = config or TrainConfig(), options or RunOptions()
    names = list(names) if names is not None else [f"tokenizer {k + 1}" for k in range(len(tokenizers))]
    rows: dict[tuple[int, str], dict] = {}
    for pattern, normalize in dict.fromkeys((tok.pattern, tok.normalize) for tok in tokenizers):
        mine = [k for k, tok in enumerate(tokenizers) if (tok.pattern, tok.normalize) == (pattern, normalize)]
        text = count_text(inputs, pattern, normalize, config, options)
        reporter = reporter_of(options.progress)
        totals = score_text(text, [tokenizers[k] for k in mine], [per[k] for k in mine], config.workers,
                            options.start_method, on_task=lambda done, total: reporter.update(
                                "segment", done, total, force=done == total))
        reporter.close()
        for (t, method), counts in totals.items():
            k = mine[t]
            rows[k, method] = row(names[k], tokenizers[k], method, counts, text, alpha)
    return [rows[k, m] for k in range(len(tokenizers)) for m in per[k]]

"""Training, as numbered stages on a run context (parbpe/pipeline/): inputs, count, vocabulary,
assemble, evaluate, write. The library's entry points: train, train_from_iterator, count_to_file."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .config import RunOptions, TrainConfig
from .io.iterables import TextStream, is_datasets_object, is_text_source
from .io.plan import default_corpus_files
from .pipeline.assemble import assemble_stats, warn_if_short
from .pipeline.context import run_context
from .pipeline.counts_file import counts_file_stage
from .pipeline.evaluate import evaluate_stage
from .pipeline.inputs import check_count_job, check_job, plan_stage, settings_of
from .pipeline.out_dir import left_as_it_was
from .pipeline.vocabulary import algorithm_for
from .pipeline.write import finish, write_stage
from .tokenizer.model import Tokenizer


@dataclass
class TrainResult:
    tokenizer: Tokenizer
    stats: dict[str, Any]
    files: dict[str, str] | None = None  # what was written where, when out_dir was given


def train(inputs: Any, config: TrainConfig | None = None, *, out_dir: str | os.PathLike | None = None,
          sample_corpus: bool = False, heldout: Sequence[str | os.PathLike] | None = None,
          also_save: Sequence[int] = (), options: RunOptions | None = None, **settings: Any) -> TrainResult:
    """Train a tokenizer on inputs and return it with the run's stats.

    inputs: a path, glob or directory (str or pathlib.Path), a list of them, or "-" for standard
    input; or texts: an iterator of strings (see train_from_iterator), a pyarrow string array, or a
    Hugging Face `datasets` Dataset (read from its Arrow files in parallel) or IterableDataset.
    With no inputs, sample_corpus=True trains on the built-in sample corpus (the Python standard
    library's sources); otherwise no input is an error.
    Settings come from config, or from keyword arguments (parbpe.train(files, vocab_size=8192));
    how the run runs (progress, start_method, data_limit, executor, ray_address, run_dir, resume,
    keep_run_dir: config.RunOptions, never the result) from options or keyword arguments too.
    With out_dir, every output file is written there. heldout (paths of text) is encoded at the end:
    bytes/token, tokens/word and unused vocabulary go to stats["heldout"].
    also_save: smaller vocabulary sizes; for each, out_dir/vocab-SIZE/ gets the complete tokenizer
    of the run's first merges (the prefix that makes that size), its files and a stats.json.
    config.init continues an existing tokenizer (TrainConfig, tokenizer/inherit.py): the chunks are
    encoded with its merges, then merging goes on; its tokens keep their ids.

    With out_dir (or run_dir), the run keeps its working files in run_dir (default
    out_dir/.parbpe-run): the plan, counted work units, the reduced counts, merge checkpoints.
    resume=True continues a run that stopped, from its last checkpoint, and writes the same files
    an uninterrupted run writes; the run directory is removed on success unless keep_run_dir.
    Texts from Python (an iterator, standard input) are consumed once: such a run keeps no run
    directory and cannot be resumed.
    """
    config, options = settings_of(config, options, settings)
    job = check_job(inputs, config, options, out_dir=out_dir, sample_corpus=sample_corpus, heldout=heldout,
                    also_save=also_save)  # 1. inputs: every check that needs no work
    algorithm = algorithm_for(job.config)
    with left_as_it_was(job.out_dir):  # an error leaves --out as it was
        with run_context(job.config, options) as ctx:
            ctx.reporter.event("config", message="training", inputs=job.described,
                               **{k: v for k, v in ctx.config.to_dict().items() if k != "pattern"})
            plan_stage(ctx, job)  # 1. inputs -> sorted work units; the run directory
            with ctx.executor():
                counted = algorithm.count(ctx, job)  # 2-3. count and reduce: chunk counts (SuperBPE: twice)
            built = algorithm.build(ctx, job, counted)  # 4-5. table, encoding, merge rounds
            warn_if_short(ctx, built, counted)
            tokenizer = built.tokenizer(ctx.config)
        stats = assemble_stats(ctx, job, counted, built, tokenizer)  # 6. assemble
        smaller = evaluate_stage(ctx, job, built, tokenizer, stats)  # 7. evaluate: held-out text, --also-save
        files = write_stage(ctx, job.out_dir, tokenizer, smaller, stats) if job.out_dir else None  # 8. write
        finish(ctx, tokenizer, stats)
    return TrainResult(tokenizer=tokenizer, stats=stats, files=files)


def train_from_iterator(texts: Iterable[Any], config: TrainConfig | None = None, *, length: int | None = None,
                        **keywords: Any) -> TrainResult:
    """Train on texts from an iterable, as Hugging Face tokenizers' train_from_iterator does.

    texts yields strings, lists of strings or pyarrow string arrays (or is a `datasets` object);
    each string is one document. length (how many items texts yields) drives the progress bar.
    The iterable is consumed once, in this process, in batches of a few MB that counting workers
    count in parallel; the result equals train() on a file holding the same documents.
    Keywords are those of train().
    """
    if isinstance(texts, (str, bytes, os.PathLike)):
        raise ValueError("train_from_iterator takes texts, not a path: iterate over strings, or pass paths "
                         "to parbpe.train")
    if not is_text_source(texts):  # a list or tuple of strings: documents here, not paths
        texts = TextStream(list(texts) if not isinstance(texts, (list, tuple)) else texts,
                           length if length is not None else len(texts))
    elif isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = TextStream([texts], length)
    elif not isinstance(texts, TextStream) and not is_datasets_object(texts):
        texts = TextStream(texts, length)
    return train(texts, config, **keywords)


def count_to_file(inputs: Any, out_path: str, config: TrainConfig, *, freq_cutoff: int = 0,
                  sample_corpus: bool = False, options: RunOptions | None = None, **option_keywords: Any
                  ) -> dict[str, Any]:
    """Count chunks of inputs and write them as a counts file (stages 1-3 without cutoff/stop list).
    Rows are grouped by hash partition and sorted by chunk bytes within each (see count/counts_file.py).
    option_keywords: RunOptions' fields (progress, start_method, data_limit, executor, ray_address)."""
    config, options = settings_of(config, options, option_keywords)
    job = check_count_job(inputs, config, options, out_path, sample_corpus)
    with run_context(job.config, options) as ctx:
        return counts_file_stage(ctx, job, out_path, freq_cutoff)


def evaluate(tokenizers: Any, inputs: Any, *, methods: Sequence[str] | None = None, renyi_alpha: float = 2.5,
             names: Sequence[str] | None = None, config: TrainConfig | None = None, options: RunOptions | None = None,
             **settings: Any) -> list[dict[str, Any]]:
    """Measure tokenizers on text at corpus scale: one row per tokenizer x segmentation method.

    tokenizers: a Tokenizer or a path any format of it (see Tokenizer.load), or a list of them;
    inputs: what train reads (paths, globs, directories), but counts files. The text is counted once
    by the counting stage (settings: workers, memory_budget, text_column; options: progress), each
    unique chunk segmented once per method ("merges", "greedy", "shortest"; None: each tokenizer's
    own segmentation: merges, or shortest for a vocabulary without merges). Each row has tokenizer,
    method, tokens (the corpus token count), bytes, bytes_per_token, tokens_per_word,
    renyi_efficiency (of order renyi_alpha over the non-special vocabulary), vocab_unused_share,
    superword_share, documents, words and vocab_size. The merges rows equal document-by-document
    encoding with encode_ordinary.
    """
    from .pipeline.corpus_eval import evaluate_corpus

    single = isinstance(tokenizers, (Tokenizer, str, os.PathLike))
    given = [tokenizers] if single else list(tokenizers)
    loaded = [t if isinstance(t, Tokenizer) else Tokenizer.load(os.fspath(t)) for t in given]
    if names is None:
        names = [os.fspath(t) if not isinstance(t, Tokenizer) else f"tokenizer {k + 1}" for k, t in enumerate(given)]
    paths = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    config, options = settings_of(config, options, settings)
    return evaluate_corpus(loaded, paths, names=names, methods=methods, alpha=renyi_alpha, config=config,
                           options=options)


def sample_corpus_files() -> list[str]:
    """The files of the built-in sample corpus: the Python standard library's sources."""
    return default_corpus_files()

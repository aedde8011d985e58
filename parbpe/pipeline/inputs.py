"""Stage 1, inputs: every check that can be made before work, then the plan and the run directory.

check_job runs before any process starts or any file is read in full: the output and work
directories, the init tokenizer, --also-save's sizes, the held-out paths, SuperBPE's and
streamed texts' limits. plan_stage turns the inputs into sorted work units (none for texts
streamed from Python) and opens the run directory (resuming one when asked).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .. import __version__
from ..config import RunOptions, TrainConfig, continuing, free_settings
from ..count.counter import unit_key
from ..io.atomic import check_output_dir, check_output_file, check_work_dir
from ..io.filesystems import file_info, is_remote, local_path
from ..io.iterables import TextStream, dataset_source, is_datasets_object, is_text_source, stdin_source
from ..io.plan import default_corpus_files, expand_inputs, plan
from ..io.sample import share_for_bytes
from ..io.units import WorkUnit
from ..run.run_dir import RunDirectory, check_run_dir_ours
from ..run.temp_dirs import clean_stale_temp_dirs
from ..tokenizer.inherit import Inherited, inherit
from ..tokenizer.load import read_any
from ..tokenizer.model import Tokenizer
from ..warnings import HeldoutOverlapWarning
from .context import RunContext
from .out_dir import check_out_dir_reusable

SAMPLE_CORPUS = "the built-in sample corpus (the Python standard library's sources)"


@dataclass
class Inputs:
    """A checked job: what is read (paths, work units or a TextStream; units after plan_stage), how it
    is described, the tokenizer continued (init), the sizes also saved, the held-out text, the output."""

    source: Any
    described: str
    config: TrainConfig  # the settings, an --init tokenizer's pattern and special tokens taken
    out_dir: str | None = None
    inherited: Inherited | None = None
    also_save: list[int] = field(default_factory=list)
    heldout: list[str] = field(default_factory=list)
    units: list[WorkUnit] | TextStream = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    heldout_overlap: list[str] = field(default_factory=list)  # held-out files that are training input too

    @property
    def default_corpus(self) -> bool:
        return self.described == SAMPLE_CORPUS

    @property
    def streamed(self) -> bool:
        return isinstance(self.units, TextStream)


def check_job(inputs: Any, config: TrainConfig, options: RunOptions, *, out_dir: str | os.PathLike | None,
              sample_corpus: bool, heldout: Sequence[str | os.PathLike] | None, also_save: Sequence[int]) -> Inputs:
    """Every check that needs no work: a mistake found here costs the user nothing."""
    out_dir = os.fspath(out_dir) if out_dir is not None else None
    if out_dir is not None:
        check_output_dir(out_dir)  # a run must not be lost for want of a place to write
        check_out_dir_reusable(out_dir)  # one run per directory: an earlier run's files are replaced
    if config.tmp_dir is not None:
        check_work_dir(config.tmp_dir)
    if options.run_dir is not None:
        check_output_dir(options.run_dir, "--run-dir")
    config, inherited = init_stage(config)
    if also_save and config.algorithm == "pathpiece":
        raise ValueError("also_save (--also-save) takes the first merges of a BPE run; PathPiece's vocabularies "
                         "are pruned, not grown: train each size with its own run")
    sizes = check_also_save(also_save, config, inherited, out_dir)
    if sizes and options.strict and prefixes_differ(config):
        raise ValueError(f"{prefix_message(sizes)}; failing as --strict (strict=True) asks")
    heldout = [os.fspath(p) for p in heldout or ()]
    if heldout:
        try:
            expand_inputs(heldout)  # a missing held-out file fails now, not after training
        except (FileNotFoundError, ValueError) as exc:
            raise type(exc)(f"--heldout: {exc}") from None
    source, described = resolve_inputs(inputs, config, sample_corpus)
    job = Inputs(source=source, described=described, config=config, out_dir=out_dir, inherited=inherited,
                 also_save=sizes, heldout=heldout)
    check_executor(source, options)
    if not isinstance(source, TextStream) and (where := options.run_dir or (default_run_dir(out_dir) if out_dir
                                                                            else None)):
        check_run_dir_ours(where, "--run-dir" if options.run_dir else "the run directory")
    if isinstance(source, TextStream) and config.sample_bytes is not None:
        raise ValueError(f"sample_bytes needs the input's size, which texts from {source.description} do not "
                         "have: use sample_docs (a share of the documents)")
    if isinstance(source, TextStream) and (options.resume or options.run_dir is not None):
        raise ValueError(f"texts from {source.description} are consumed once: such a run cannot be resumed and "
                         "keeps no run directory")
    if options.resume and out_dir is None and options.run_dir is None:
        raise ValueError("resume needs the run directory: give out_dir (or run_dir) as the run that stopped did")
    return job


def prefixes_differ(config: TrainConfig) -> bool:
    """Whether a smaller size taken from this run's first merges may differ from a run to that size:
    BatchBPE's batches depend on the vocabulary size (serial and exact merges do not)."""
    return config.batching == "batchbpe" and config.max_batch_size != 1


def prefix_message(sizes: list[int]) -> str:
    return (f"--also-save {','.join(map(str, sizes))}: each is this run's first merges, not a run of its own "
            "(BatchBPE's batches depend on the vocabulary size; realmix at 8,192: 2.4% more held-out tokens "
            "than a direct run, docs/USAGE.md); --batching exact makes them equal")


def check_count_job(inputs: Any, config: TrainConfig, options: RunOptions, out_path: str,
                    sample_corpus: bool) -> Inputs:
    """count_to_file's checks before work: the output file, the work directory, the inputs."""
    check_output_file(out_path)
    if not os.fspath(out_path).lower().endswith(".parquet"):
        raise ValueError(f"--out {out_path}: count writes a parquet counts file, which train knows by its .parquet "
                         "name: give a name ending in .parquet")
    if config.tmp_dir is not None:
        check_work_dir(config.tmp_dir)
    config, _ = init_stage(config)
    source, described = resolve_inputs(inputs, config, sample_corpus)
    if isinstance(source, list) and not is_remote(out_path):
        target = os.path.abspath(local_path(out_path))
        if any(isinstance(p, str) and not is_remote(p) and os.path.abspath(local_path(p)) == target for p in source):
            raise ValueError(f"--out {out_path} is also an input: count would read the counts it replaces; "
                             "write them to another file")
    check_executor(source, options)
    return Inputs(source=source, described=described, config=config)


def check_executor(source: Any, options: RunOptions) -> None:
    """Ray is installed when asked for; texts from Python are counted where they are: by local processes."""
    if options.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ValueError("--executor ray needs Ray: pip install 'parbpe[ray]'")
    if isinstance(source, TextStream) and options.executor != "local":
        raise ValueError("texts from Python (an iterator, standard input, a streamed dataset) are counted "
                         "by local processes: use the default executor (local)")


def init_stage(config: TrainConfig) -> tuple[TrainConfig, Inherited | None]:
    """--init: the tokenizer read (once) and the config that continues it (its pattern and special
    tokens); a config without init as it is."""
    if config.init is None:
        return config, None
    found = read_any(config.init)
    if config.algorithm == "pathpiece":  # its tokens are pruned, not continued: any vocabulary will do
        return continuing(config, found), Inherited(tokenizer=Tokenizer(**found), source=config.init, merges=[])
    return continuing(config, found), inherit(Tokenizer(**found), config.init)


def plan_stage(ctx: RunContext, job: Inputs) -> None:
    """Stage 1: the sorted work units (none for streamed texts), warnings for skipped files, stale
    temporary directories cleaned, and the run directory opened (or resumed)."""
    with ctx.stage("plan", report=False):
        source = job.source
        outputs = [o for o in (job.out_dir, ctx.options.run_dir) if o is not None]
        job.units = source if isinstance(source, TextStream) or is_unit_list(source) else plan(
            source, skipped=job.skipped, outputs=outputs, text_column=ctx.config.text_column)
    if not job.streamed:
        warn_counts_beside_text(ctx, job.units)
        check_heldout_overlap(ctx, job)
    if job.skipped:
        skipped = job.skipped
        ctx.warn(f"skipped {len(skipped)} file(s): " + "; ".join(f"{p} ({why})" for p, why in skipped[:5])
                 + (f"; and {len(skipped) - 5} more (see stats.json)" if len(skipped) > 5 else ""))
    for note in clean_stale_temp_dirs(ctx.config.tmp_dir):
        ctx.note(note)
    if ctx.config.superbpe_transition is not None:
        check_superbpe_inputs(job.units)
    sample_stage(ctx, job.units)
    if not job.streamed and (where := ctx.options.run_dir or (default_run_dir(job.out_dir) if job.out_dir else None)):
        ctx.run, notes = open_run_dir(where, job.units, ctx.config, ctx.options.resume, job.inherited)
        for note in notes:
            ctx.note(note)


def check_heldout_overlap(ctx: RunContext, job: Inputs) -> None:
    """A --heldout file that is also training input (`train realmix/ --heldout realmix/heldout.parquet`):
    the held-out numbers would measure training text. Refused with --strict, before any work; else a
    warning, and stats.json's heldout says which (job.heldout_overlap)."""
    if not job.heldout:
        return
    training = {_same_file(u.path) for u in job.units}
    both = [p for p in expand_inputs(job.heldout) if _same_file(p) in training]
    if not both:
        return
    shown = ", ".join(both[:3]) + (f" and {len(both) - 3} more" if len(both) > 3 else "")
    message = (f"--heldout {shown} is also training input: the held-out numbers measure training text; "
               "train on the other files (e.g. a glob that leaves it out)")
    if ctx.options.strict:
        raise ValueError(f"{message}; failing as --strict (strict=True) asks")
    job.heldout_overlap = both
    warnings.warn(message, HeldoutOverlapWarning, stacklevel=3)
    ctx.warn(message)


def _same_file(path: str) -> str:
    """A path as one file has one name (links resolved), for comparing inputs."""
    return path if is_remote(path) else os.path.realpath(local_path(path))


def warn_counts_beside_text(ctx: RunContext, units: list[WorkUnit]) -> None:
    """A counts file read beside text (often `parbpe count DIR --out DIR/c.parquet`, then `train DIR`): its
    chunk counts add to the text's, which is right only when they count other text; said, not silent."""
    counts = sorted({u.path for u in units if u.kind.startswith("counts")})
    if counts and any(not u.kind.startswith("counts") for u in units):
        ctx.warn(f"the inputs hold {len(counts)} counts file(s) beside text ({', '.join(counts[:3])}"
                 + (f" and {len(counts) - 3} more" if len(counts) > 3 else "") + "): their chunk counts are added "
                 "to the text's; if they count the same text, name the text files only")


def sample_stage(ctx: RunContext, units: list[WorkUnit] | TextStream) -> None:
    """--sample-docs/--sample-bytes: refused for counts files (no documents left); --sample-bytes
    made the share of documents that holds about that many bytes of the input's text (ctx.config's
    sample_share, which the counting workers apply)."""
    config = ctx.config
    if config.sample_bytes is None and config.sample_share is None:
        return
    if not isinstance(units, TextStream):
        counts = sorted({u.path for u in units if u.kind.startswith("counts")})
        if counts:
            raise ValueError(f"sampling takes documents, which a counts file no longer has ({counts[0]}): "
                             "sample the text itself")
    if config.sample_bytes is not None:
        share = share_for_bytes(units, config.sample_bytes, config.text_column)
        ctx.config = dataclasses.replace(config, sample_share=share)


def check_superbpe_inputs(units: Any) -> None:
    """SuperBPE reads its text twice: refuse what it cannot read twice, before any work."""
    if isinstance(units, TextStream):
        raise ValueError(f"SuperBPE (--superbpe-transition) reads its text twice, but texts from {units.description} "
                         "are consumed once: write them to files (text, jsonl or parquet) and train on those")
    counts = sorted({u.path for u in units if u.kind.startswith("counts")})
    if counts:
        raise ValueError(f"SuperBPE (--superbpe-transition) re-counts the text with its superword split, which a "
                         f"counts file cannot give ({counts[0]}): train on the text itself")


def check_also_save(sizes: Sequence[int], config: TrainConfig, inherited: Inherited | None,
                    out_dir: str | None) -> list[int]:
    """also_save's sizes, sorted, checked before any work: each smaller than vocab_size and larger
    than the tokens the run starts with (bytes, stop list, inherited tokens, special tokens)."""
    sizes = sorted(set(sizes))
    if not sizes:
        return []
    if out_dir is None:
        raise ValueError("also_save (--also-save) writes directories into the output directory: give out_dir (--out)")
    inherited_merges = len(inherited.merges) if inherited is not None else 0
    least = config.vocab_size - config.merges_for(config.vocab_size, inherited_merges)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or not least < size < config.vocab_size:
            raise ValueError(f"--also-save size {size!r} must be an integer between {least} (the tokens the run "
                             f"starts with) and vocab_size {config.vocab_size}, both excluded")
    return sizes


def is_unit_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], WorkUnit)


def resolve_inputs(inputs: Any, config: TrainConfig, sample_corpus: bool) -> tuple[Any, str]:
    """Inputs as paths (a list of str), work units (a cached Dataset) or a TextStream, and how to
    describe them; refuses what is none of these with a message saying what to pass."""
    if is_text_source(inputs):
        if isinstance(inputs, TextStream):
            return inputs, inputs.description
        if is_datasets_object(inputs):
            source = dataset_source(inputs, config.text_column)
            if isinstance(source, TextStream):
                return source, source.description
            return source, f"a Dataset's {len({u.path for u in source})} Arrow file(s)"
        return TextStream([inputs] if isinstance(inputs, (pa.Array, pa.ChunkedArray)) else inputs), \
            "a Python iterable"
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if inputs is None or not len(inputs):
        if sample_corpus:
            return default_corpus_files(), SAMPLE_CORPUS
        raise ValueError("no input given: pass files, directories or globs (or texts with "
                         "parbpe.train_from_iterator); for the built-in sample corpus (the Python standard "
                         "library's sources) pass sample_corpus=True (CLI: --sample-corpus)")
    if sample_corpus:
        raise ValueError("give INPUT files or --sample-corpus, not both")
    bad = [x for x in inputs if not isinstance(x, (str, os.PathLike))]
    if bad:
        raise ValueError(f"inputs must be paths (str or pathlib.Path), got a {type(bad[0]).__name__}; "
                         "to train on texts use parbpe.train_from_iterator")
    paths = [os.fspath(x) for x in inputs]
    if "-" in paths:
        if len(paths) > 1:
            raise ValueError("'-' (standard input) cannot be mixed with other inputs")
        return stdin_source(), "standard input"
    return paths, f"{len(paths)} path(s)"


def default_run_dir(out_dir: str) -> str:
    """OUT/.parbpe-run; for a remote OUT, a directory in the system's temporary directory named after
    OUT (the same for the same command, so --resume finds it)."""
    if not is_remote(out_dir):
        return os.path.join(local_path(out_dir), ".parbpe-run")
    name = hashlib.sha256(out_dir.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"parbpe-run-{name}")


def input_fingerprint(units: list[WorkUnit]) -> list[dict[str, Any]]:
    """Each input file's path, size and modification time: what a resumed run checks is unchanged."""
    out = []
    for path in sorted({u.path for u in units}):
        if is_remote(path):
            info = file_info(path)[2]
            size, mtime = info.size, info.mtime_ns
        else:
            st = os.stat(path)
            path, size, mtime = os.path.abspath(path), st.st_size, st.st_mtime_ns
        out.append({"path": path, "size": size, "mtime_ns": mtime})
    return out


def open_run_dir(path: str, units: list[WorkUnit], config: TrainConfig, resume: bool,
                 inherited: Inherited | None = None) -> tuple[RunDirectory, list[str]]:
    """The run directory for this run: new, or (resume) the one a stopped run of the same command left.
    With --init, the tokenizer continued is part of the identity by its content, not its path."""
    settings = config.to_dict()
    free = free_settings()
    identity = {"parbpe_version": __version__, **{k: v for k, v in settings.items() if k not in free}}
    if inherited is not None:  # the same tokenizer moved elsewhere resumes; another one at the same path does not
        identity.pop("init", None)
        identity["init_digest"] = tokenizer_digest(inherited)
    run, notes = RunDirectory.open(path, identity=identity, settings={k: settings[k] for k in free},
                                   inputs=input_fingerprint(units), resume=resume)
    run.save_plan([unit_key(u) for u in units])
    return run, notes


def tokenizer_digest(inherited: Inherited) -> str:
    """What an --init tokenizer is, whatever file holds it: its merges, specials and pattern, hashed."""
    tok = inherited.tokenizer
    text = json.dumps([inherited.merges, sorted(tok.special_tokens.items()), tok.pattern])
    return hashlib.sha256(text.encode()).hexdigest()


def settings_of(config: TrainConfig | None, options: RunOptions | None,
                keywords: dict[str, Any]) -> tuple[TrainConfig, RunOptions]:
    """The run's settings and options from a TrainConfig and RunOptions or keyword arguments (a
    keyword naming a RunOptions field is an option, any other a TrainConfig field)."""
    option_names = {f.name for f in dataclasses.fields(RunOptions)}
    given = {k: v for k, v in keywords.items() if k in option_names}
    rest = {k: v for k, v in keywords.items() if k not in option_names}
    if options is None:
        options = RunOptions(**given)
    elif given:
        raise ValueError(f"pass either options (RunOptions) or keyword options, not both (got {sorted(given)})")
    if config is None:
        config = TrainConfig(**rest)
    elif rest:
        raise ValueError(f"pass either a TrainConfig or keyword settings, not both (got {sorted(rest)})")
    return config, options

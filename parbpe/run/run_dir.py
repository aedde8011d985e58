"""The run directory: what a training run has finished, so that a killed run resumes where it stopped.

A run directory (default OUT/.parbpe-run) holds:

- run.json: the format, the parbpe version, the settings that decide the result, the other settings,
  each input's size and mtime (the fingerprint), and the owner (host, pid and its start time);
- plan.json: the work units, in order;
- count/aNNN/: one directory per counting attempt, with its run files and the workers' commit
  records (`wR-commitNNNNN.json`: these units are counted, wholly, in these run files);
- reduced.arrow: the training chunks and counts after freq_cutoff and the stop list, with the
  counting stats in its metadata (the count files are removed once it is written); or, where the
  reduce workers wrote them a partition each (SuperBPE's stage 2), reduced-parts/part-NNNNN.arrow
  and reduced-parts.json, which names them in order, with the stats;
- merges.json: the merges made so far and the batch sizes of their rounds (a checkpoint);
- superword/: SuperBPE's stage 2 (its counts and merges), a run directory of the same layout.
- pathpiece.json: PathPiece's vocabulary after its last iteration, with the run's digest (run_digest).

Every file is written to a temporary name, flushed to disk and renamed into place, so a kill at any
moment leaves each file whole or absent; run files that no commit record names are ignored. This
module knows files and JSON only: train.py decides what goes in them.

The `parbpe-*` temporary directories of runs whose process is gone are found by run/temp_dirs.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.ipc as ipc

from ..io.atomic import sync_file, write_atomically
from .faults import test_stop

__all__ = ["COUNT_COMMIT_SECONDS", "RunDirectory", "checkpoint_seconds", "sync_file", "test_stop", "write_json"]

FORMAT = 1
RUN_FILE = "run.json"
STAGE2 = "superword"  # SuperBPE's stage 2: a run directory of its own inside the run's (RunDirectory.stage2)
PARTS, PARTS_RECORD = "reduced-parts", "reduced-parts.json"  # the reduced counts a partition a file
PRUNED = "pathpiece.json"  # PathPiece's checkpoint
_RUN_FOLDERS = ("count", STAGE2, PARTS)
_RUN_FILES = (RUN_FILE, "plan.json", "reduced.arrow", PARTS_RECORD, "table.json", "merges.json", PRUNED)


# Seconds of work a checkpoint may lose. A counting commit writes the counts a worker holds to a run
# file (and a record); committing after every unit cost no measurable counting time, but makes a run
# file per unit: units shorter than this share one. A merge checkpoint rewrites the merge list.
COUNT_COMMIT_SECONDS = 10.0
MERGE_CHECKPOINT_SECONDS = 5.0


def checkpoint_seconds(default: float) -> float:
    """default, or PARBPE_CHECKPOINT_SECONDS when set (0 = after every unit and every round: for tests)."""
    value = os.environ.get("PARBPE_CHECKPOINT_SECONDS", "")
    try:
        return max(float(value), 0.0) if value else default
    except ValueError:
        raise ValueError(f"PARBPE_CHECKPOINT_SECONDS must be a number of seconds, got {value!r}") from None


def write_json(path: str, data: Any) -> None:
    def write(tmp: str) -> None:
        text = json.dumps(data)  # json.dump writes piece by piece: several times slower on a merge checkpoint
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomically(path, write, durable=True)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_counts(path: str, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                 meta: dict[str, Any] | None = None, durable: bool = False) -> None:
    """Chunks (chunk k is data[offsets[k]:offsets[k + 1]]) and their counts as an Arrow file at path
    (meta in its schema's metadata); durable: flushed to disk before this returns."""
    chunks = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(counts),
                                              [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    table = pa.table({"chunk": chunks, "count": pa.array(counts, pa.int64())})
    if meta is not None:
        table = table.replace_schema_metadata({"parbpe": json.dumps(meta)})
    with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    if durable:
        sync_file(path)


def counts_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, offsets from 0, counts) of a (chunk, count) table (write_counts' files, the reduce's
    selections): the bytes of its chunk column and their boundaries, read from the Arrow buffers
    without a Python object per chunk (and without a copy where the column is one large_binary chunk)."""
    column = table.column("chunk").cast(pa.large_binary()).combine_chunks()
    if isinstance(column, pa.ChunkedArray):  # an empty table has no chunk to combine
        column = pa.array([], type=pa.large_binary())
    n = len(column)
    _, offset_buffer, data_buffer = column.buffers()
    offsets = (np.frombuffer(offset_buffer, dtype=np.int64)[column.offset:column.offset + n + 1]
               if offset_buffer is not None else np.zeros(1, dtype=np.int64))
    start, end = int(offsets[0]), int(offsets[-1])
    data = (np.frombuffer(data_buffer, dtype=np.uint8)[start:end]
            if data_buffer is not None else np.zeros(0, dtype=np.uint8))
    counts = table.column("count").to_numpy().astype(np.int64, copy=False)
    return data, offsets - start, counts


def owner_record() -> dict[str, Any]:
    """This process: host, pid and start time (owner_alive tells whether it still runs)."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "created": me.create_time()}


def owner_alive(owner: dict[str, Any] | None) -> bool:
    """Whether the process that recorded `owner` still runs (same host, pid and start time)."""
    if not owner or owner.get("host") != socket.gethostname():
        return False
    try:
        return abs(psutil.Process(int(owner["pid"])).create_time() - float(owner["created"])) < 1.0
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


class RunDirectory:
    """One training run's working files; see the module docstring for the layout."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.resumed = False
        self.digest: str | None = None  # this run's identity and inputs, hashed (open): what its state is for

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @classmethod
    def open(cls, path: str, *, identity: dict[str, Any], settings: dict[str, Any], inputs: list[dict[str, Any]],
             resume: bool) -> tuple[RunDirectory, list[str]]:
        """Start a run directory at path, or, with resume, take up the one there.

        identity: what must be equal to resume (version, result settings); settings: the others;
        inputs: each input file's path, size and mtime. Refuses a directory another live process uses, a stale run
        when not resuming (saying how to resume or remove it), and a resume whose identity or
        inputs differ (saying what differs). Returns the directory and notes for the user.
        """
        run = cls(path)
        run.digest = run_digest(identity, inputs)
        notes: list[str] = []
        check_run_dir_ours(path, "the run directory")
        record = run._record()
        if record is not None and record.get("clearing"):  # a finished run killed while removing its files
            record = None
        owner = record.get("owner") if record is not None else None
        if owner_alive(owner) and owner["pid"] != os.getpid():  # (this process: a run of it that stopped)
            raise ValueError(f"the run directory {path} is in use by another parbpe run (pid "
                             f"{record['owner']['pid']}); wait for it, or give this run another --run-dir")
        if record is not None and record.get("finished") and not resume:
            notes.append(f"replacing the finished run kept in {path}")
            record = None
        elif record is not None and not resume:
            raise ValueError(
                f"{path} holds an unfinished run (started {_when(record.get('started', 0))}, "
                f"{run.describe()}): continue it with the same command and --resume, or remove it "
                f"(rm -r '{path}') to start over"
            )
        if record is None and resume:
            notes.append(f"nothing to resume in {path}: starting from the beginning")
        if record is not None and resume:
            differences = _differences(record, identity, inputs)
            if differences:
                raise ValueError(
                    f"cannot resume the run in {path}: " + "; ".join(differences) + ". Run the original "
                    f"command with --resume, or remove {path} (rm -r '{path}') to start over"
                )
            run.resumed = True
            notes.append(f"resuming the run started {_when(record.get('started', 0))}: {run.describe()}")
        try:
            if record is None:
                run._clear()
            os.makedirs(path, exist_ok=True)
            started = record["started"] if record else time.time()
            write_json(run._file(RUN_FILE), {"format": FORMAT, "identity": identity, "settings": settings,
                                             "inputs": inputs, "owner": owner_record(), "started": started})
        except OSError as exc:
            raise ValueError(f"cannot write the run directory {path} ({exc.strerror or exc}): "
                             "choose a writable one with --run-dir") from None
        return run, notes

    def stage2(self) -> RunDirectory:
        """SuperBPE's stage-2 run directory, inside this one, with this run's record (identity, inputs):
        resumed when this run is, started afresh otherwise."""
        record = read_json(self._file(RUN_FILE))
        child = RunDirectory(self._file(STAGE2))
        if not self.resumed:
            shutil.rmtree(child.path, ignore_errors=True)
        os.makedirs(child.path, exist_ok=True)
        write_json(child._file(RUN_FILE), record)
        child.resumed, child.digest = self.resumed, self.digest
        return child

    def _clear(self, keep_record: bool = False) -> None:
        """Remove what an earlier run left here: only the run's own names, never through a symbolic link
        (check_run_dir_ours has made sure the directory is a run's)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for name in os.listdir(self.path):
                target = self._file(name)
                if os.path.islink(target) or (keep_record and name == RUN_FILE):
                    continue  # a link is not a name parbpe makes: what it points to is not the run's
                if name in _RUN_FOLDERS:
                    shutil.rmtree(target)
                elif name in _RUN_FILES or name.startswith(".tmp-"):
                    os.unlink(target)

    def _record(self) -> dict[str, Any] | None:
        try:
            return read_json(self._file(RUN_FILE))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self._file(RUN_FILE)} is unreadable ({exc}): remove {self.path} "
                             f"(rm -r '{self.path}') to start over") from None

    def describe(self) -> str:
        """Where the run stands, in words (for messages)."""
        done = self.load_merges()
        if done is not None:
            return f"{len(done[0])} merges made"
        if self.has_reduced():
            return "counted and reduced"
        try:
            total = len(read_json(self._file("plan.json")))
        except (OSError, ValueError):
            return "nothing finished yet"
        return f"{len(self.committed_units()[0])} of {total} work units counted"

    # plan -----------------------------------------------------------------------------------
    def save_plan(self, units: list[list[Any]]) -> None:
        """Record the plan; on resume, check that it is still the one recorded."""
        path = self._file("plan.json")
        if self.resumed and os.path.exists(path):
            if read_json(path) != units:
                raise ValueError(f"cannot resume the run in {self.path}: the inputs now plan into other work "
                                 f"units; remove {self.path} (rm -r '{self.path}') to start over")
            return
        write_json(path, units)

    # count ----------------------------------------------------------------------------------
    def new_count_dir(self) -> str:
        """A fresh directory for this counting attempt's run files and commit records."""
        root = self._file("count")
        os.makedirs(root, exist_ok=True)
        attempt = len([d for d in os.listdir(root) if d.startswith("a")])
        path = os.path.join(root, f"a{attempt:03d}")
        os.makedirs(path)
        return path

    def committed_units(self) -> tuple[set[str], list[str], dict[str, int]]:
        """What earlier counting attempts finished: unit keys, their run files, and summed stats
        (documents, bytes, replaced_bytes, spills). Run files no record names are removed."""
        units: set[str] = set()
        runs: list[str] = []
        stats = {"documents": 0, "bytes": 0, "replaced_bytes": 0, "spills": 0, "sampled_documents": 0,
                 "sampled_bytes": 0}
        root = self._file("count")
        if not os.path.isdir(root):
            return units, runs, stats
        for attempt in sorted(os.listdir(root)):
            directory = os.path.join(root, attempt)
            named: set[str] = set()
            records = sorted(n for n in os.listdir(directory) if _is_commit(n))
            for name in records:
                record = read_json(os.path.join(directory, name))
                if not all(os.path.exists(os.path.join(directory, r)) for r in record["runs"]):
                    continue  # its runs were removed as uncommitted (a worker outlived its run): recount
                units.update(record["units"])
                runs += [os.path.join(directory, r) for r in record["runs"]]
                named.update(record["runs"])
                for key in stats:
                    stats[key] += record.get(key, 0)  # (the sample's keys came later)
            for name in os.listdir(directory):  # half-written or uncommitted: never used
                if name not in named and name not in records:
                    os.unlink(os.path.join(directory, name))
        return units, runs, stats

    # reduce ---------------------------------------------------------------------------------
    def save_reduced(self, data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, meta: dict[str, Any]) -> None:
        """The training chunks (chunk k is data[offsets[k]:offsets[k + 1]]) and their counts (and meta:
        stop words, counting stats); then the count files are no longer needed and are removed."""
        write_atomically(self._file("reduced.arrow"), lambda tmp: write_counts(tmp, data, offsets, counts, meta),
                         durable=True)
        shutil.rmtree(self._file("count"), ignore_errors=True)

    def reduced_parts_dir(self) -> str:
        """An empty directory for the reduced counts a partition a file (write_counts, each file flushed to
        disk by its writer; then save_reduced_parts)."""
        path = self._file(PARTS)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def save_reduced_parts(self, parts: list[tuple[str, int, int]], meta: dict[str, Any]) -> None:
        """The reduced counts as the files of reduced_parts_dir hold them: parts, in order, as (path, chunks,
        bytes of chunks); meta as save_reduced's. Recorded, then the count files are removed."""
        write_json(self._file(PARTS_RECORD), {"meta": meta, "parts": [[os.path.basename(path), chunks, size]
                                                                       for path, chunks, size in parts]})
        shutil.rmtree(self._file("count"), ignore_errors=True)

    def has_reduced(self) -> bool:
        """Whether the reduced counts are saved (load_reduced would give them)."""
        return os.path.exists(self._file("reduced.arrow")) or os.path.exists(self._file(PARTS_RECORD))

    def load_reduced(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]] | None:
        """(data, offsets, counts, meta) as save_reduced or save_reduced_parts got them, or None when
        there are none yet."""
        path = self._file("reduced.arrow")
        if os.path.exists(path):
            with pa.OSFile(path) as source:
                table = ipc.open_file(source).read_all()
            meta = json.loads(table.schema.metadata[b"parbpe"])
            data, offsets, counts = counts_arrays(table)
            return data, offsets, counts, meta
        if os.path.exists(self._file(PARTS_RECORD)):
            return self._load_parts(read_json(self._file(PARTS_RECORD)))
        return None

    def _load_parts(self, record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The parts' counts side by side in arrays made once: each part mapped and copied into its place
        (the only copy of its bytes)."""
        parts = record["parts"]
        n, size = sum(p[1] for p in parts), sum(p[2] for p in parts)
        data, offsets, counts = np.empty(size, np.uint8), np.empty(n + 1, np.int64), np.empty(n, np.int64)
        row = at = 0
        for name, chunks, nbytes in parts:
            path = os.path.join(self._file(PARTS), name)
            try:
                with pa.memory_map(path) as source:
                    part_data, part_offsets, part_counts = counts_arrays(ipc.open_file(source).read_all())
                    if (len(part_counts), len(part_data)) != (chunks, nbytes):
                        raise ValueError(f"{len(part_counts)} chunks in {len(part_data)} bytes, not {chunks} in "
                                         f"{nbytes}")
                    data[at:at + nbytes] = part_data
                    np.add(part_offsets[:-1], at, out=offsets[row:row + chunks])
                    counts[row:row + chunks] = part_counts
            except (OSError, ValueError, pa.ArrowException) as exc:
                said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ValueError(f"the reduced counts in {path} are damaged ({said}); remove {self.path} "
                                 f"(rm -r '{self.path}') to start over") from None
            row, at = row + chunks, at + nbytes
        offsets[n] = size
        return data, offsets, counts, record["meta"]

    # merge ----------------------------------------------------------------------------------
    def save_table_cutoff(self, min_count: int) -> None:
        """The merge table's min_count, as its fit chose it: a resumed run keeps it (its process holds
        less than the one that counted, and would fit a larger table the checkpoint's merges were not
        made on)."""
        write_json(self._file("table.json"), {"min_count": min_count})

    def load_table_cutoff(self) -> int | None:
        try:
            return int(read_json(self._file("table.json"))["min_count"])
        except FileNotFoundError:
            return None

    def drop_merges(self) -> None:
        """Remove the merge checkpoint (it was made on another table)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file("merges.json"))

    def load_merges(self) -> tuple[list[tuple[int, int]], list[int]] | None:
        """The merges of the last checkpoint and the batch sizes of their rounds, if any."""
        try:
            data = read_json(self._file("merges.json"))
        except FileNotFoundError:
            return None
        return [(a, b) for a, b in data["merges"]], data["batch_sizes"]

    def merge_checkpointer(self) -> Callable[[list[tuple[int, int]], list[int], bool], None]:
        """on_round(merges, batch_sizes, final): writes a checkpoint every few seconds and at the end."""
        every = checkpoint_seconds(MERGE_CHECKPOINT_SECONDS)
        last = [time.monotonic()]

        def on_round(merges: list[tuple[int, int]], batch_sizes: list[int], final: bool = False) -> None:
            now = time.monotonic()
            if final or now - last[0] >= every:
                write_json(self._file("merges.json"), {"merges": merges, "batch_sizes": batch_sizes})
                last[0] = time.monotonic()
            if not final:
                test_stop("superword_merge" if os.path.basename(self.path) == STAGE2 else "merge", len(batch_sizes))

        return on_round

    def save_pruned(self, iteration: int, tokens: list[bytes], facts: dict[str, Any]) -> None:
        """PathPiece's checkpoint after an iteration: the vocabulary left (hex) and the run's facts so far,
        with the run's digest (load_pruned reads it back only for the same run); then the test hook
        "pathpiece" (a kill between iterations)."""
        write_json(self._file(PRUNED), {"run": self.digest, "iteration": iteration,
                                        "tokens": [t.hex() for t in tokens], "facts": facts})
        test_stop("pathpiece", iteration)

    def load_pruned(self) -> tuple[int, list[bytes], dict[str, Any]] | None:
        """PathPiece's last checkpoint (iteration, tokens, facts) when this run resumes the run that wrote it
        (its digest is this run's); None otherwise: another run's vocabulary is never this run's start."""
        if not self.resumed or self.digest is None:
            return None
        try:
            data = read_json(self._file(PRUNED))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self._file(PRUNED)} is unreadable ({exc}): remove {self.path} "
                             f"(rm -r '{self.path}') to start over") from None
        if not isinstance(data, dict) or data.get("run") != self.digest:
            return None
        return data["iteration"], [bytes.fromhex(t) for t in data["tokens"]], data["facts"]

    def discard_unless_resumable(self, error: type[BaseException] | None) -> None:
        """After counting or reducing stopped on `error` (None: no error, nothing to do): remove the
        directory when nothing was committed, or when the error was bad input (ValueError), since
        resuming needs the inputs unchanged. A dead worker, a full disk or an interrupt keep it."""
        if error is None:
            return
        committed = os.path.exists(self._file("reduced.arrow")) or bool(self.committed_units()[0])
        if issubclass(error, ValueError) or not committed:
            self.finish(keep=False)

    def finish(self, keep: bool) -> None:
        """The run succeeded: remove the directory, or mark it finished when kept."""
        if keep:
            record = read_json(self._file(RUN_FILE))
            record["finished"] = True
            record["owner"] = None
            write_json(self._file(RUN_FILE), record)
        else:  # marked first: what a kill leaves from here on is a finished run, replaced by the next
            record = read_json(self._file(RUN_FILE))
            write_json(self._file(RUN_FILE), {**record, "finished": True, "clearing": True, "owner": None})
            self._clear(keep_record=True)
            os.unlink(self._file(RUN_FILE))
            with contextlib.suppress(OSError):
                os.rmdir(self.path)  # unless --run-dir named a directory holding other files


def is_run_record(data: Any) -> bool:
    """Whether data (run.json's content) is a parbpe run record (RunDirectory.open writes it)."""
    return isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("identity"), dict)


def check_run_dir_ours(path: str, option: str = "--run-dir") -> None:
    """Refuse, before any work, a run directory that is neither absent, empty, nor a parbpe run's (a run
    record in it): a run clears and removes the run's names there (count/, plan.json, ...), and a
    user's files under those names must never go."""
    try:
        entries = sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return
    # a record being written when the run was killed (write_atomically's .tmp-XXXXXXXX<name>) is the run's
    entries = [e for e in entries if not (e.startswith(".tmp-") and e[len(".tmp-") + 8:] in _RUN_FILES)]
    if not entries:
        return
    record = None
    run_file = os.path.join(path, RUN_FILE)
    if not os.path.islink(run_file):
        with contextlib.suppress(OSError, ValueError):
            record = read_json(run_file)
    if is_run_record(record):
        return
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    raise ValueError(f"{option} {path} is not a parbpe run directory (it holds {shown} and no parbpe run "
                     f"record, {RUN_FILE}): give an empty or new directory, or remove those files")


def run_digest(identity: dict[str, Any], inputs: list[dict[str, Any]]) -> str:
    """A run's settings that decide the result and its inputs' fingerprints, hashed: the state a run
    directory holds is used only by a run of the same digest."""
    text = json.dumps({"identity": identity, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _is_commit(name: str) -> bool:
    """A commit record's name (temporary names start with .tmp-)."""
    return not name.startswith(".") and "-commit" in name and name.endswith(".json")


def _differences(record: dict[str, Any], identity: dict[str, Any], inputs: list[dict[str, Any]]) -> list[str]:
    """What differs between the recorded run and this command, in words."""
    out = []
    before = record.get("identity", {})
    for key in sorted(set(before) | set(identity)):
        if key == "init_digest" and before.get(key) != identity.get(key):
            out.append("the --init tokenizer is not the one the run continued (its merges, specials or pattern "
                       "differ)")
        elif before.get(key) != identity.get(key):
            out.append(f"{key} was {before.get(key)!r}, now {identity.get(key)!r}")
    old = {f["path"]: f for f in record.get("inputs", [])}
    new = {f["path"]: f for f in inputs}
    for path in sorted(set(old) - set(new)):
        out.append(f"input {path} is no longer given")
    for path in sorted(set(new) - set(old)):
        out.append(f"input {path} was not part of the run")
    for path in sorted(set(old) & set(new)):
        a, b = old[path], new[path]
        if a["size"] != b["size"]:
            out.append(f"input {path} changed (size {a['size']} -> {b['size']} bytes)")
        elif a["mtime_ns"] != b["mtime_ns"]:
            out.append(f"input {path} changed (modified {_when(b['mtime_ns'] / 1e9)})")
    return out

"""Kill loop (issue 23, item 0): SIGKILL a random worker of `parbpe train` at a random moment, many
times, and check that every run ends within 5 s of the kill: exit 2 with one line on stderr, or
exit 0 with outputs identical to an undisturbed run (a kill that does not stop the run, of a worker
already on its way out, lets it finish: "exit0-late"). A hang is a run still alive 5 s after the
kill that does not end as the undisturbed run would have.

Setups: 2 and 3 workers (with 1, no worker process runs), with and without spills (--data-limit
2MB: every counting worker spills many times), text on standard input (the stream path's
workers), PathPiece (from a 4x BPE start: its scoring workers), on --shards shards of realmix; and
SuperBPE on all eight shards (its stage-2 table is
large enough for merge workers, which encode it first); and a first run ("cold": all eight shards,
each run on an empty numba cache, so that the processes compiling its kernels are among the workers
killed: the run then goes on and compiles what it lacks). The moment is drawn over the undisturbed
run's duration; if no worker is alive then, the first worker to appear is killed. The stage killed
in is named from the undisturbed run's stage times (stats.json).

    python bench/kill_loop.py --kills 100 --data /work/shared/data/realmix --shards 4
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

LIMIT = 5.0
STDIN_TEXT = Path(tempfile.gettempdir()) / "kill_loop_stdin.txt"  # the stream setup's text (made by main)


def descendants(pid: int) -> list[int]:
    """Every process below pid (parent links from /proc/*/stat)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, up in parents.items() if up == parent]
        found += children
        todo += children
    return found


def command(corpus: Path, out: Path, workers: int, setup: str, vocab: int) -> list[str]:
    """The `parbpe train` command line of one run (stream: the text comes on standard input, counted
    by the stream path's workers, count/stream.py)."""
    args = [sys.executable, "-m", "parbpe.cli", "train", "-" if setup == "stream" else str(corpus), "--vocab-size",
            str(vocab), "--workers", str(workers), "--out", str(out), "--progress", "none"]
    return args + {"plain": [], "stream": [], "spill": ["--data-limit", "2MB"], "cold": [],
                   # numpy's engine: the kernels encode and merge stage 2 in this process, no worker to kill
                   "superbpe": ["--superbpe-transition", "0.5", "--jit", "off"],
                   "pathpiece": ["--algorithm", "pathpiece", "--initial-vocab-size", str(4 * vocab)]}[setup]


def worker_pids(pid: int) -> list[int]:
    """The run's workers: its descendants but multiprocess's resource tracker (not a worker: the run
    goes on without it)."""
    found = []
    for child in descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmdline:
            found.append(child)
    return found


def holders(fd: int) -> list[int]:
    """Processes that hold the pipe behind this process's fd (its other end's writers)."""
    target = os.readlink(f"/proc/self/fd/{fd}")
    found = []
    for link in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(link) == target and int(link.parts[2]) != os.getpid():
                found.append(int(link.parts[2]))
        except OSError:
            continue
    return found


def orphans_of(args: list[str]) -> list[int]:
    """Processes of parbpe left without their parent (adopted by init) while the loop runs: a run's
    workers that outlived it."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[1]) == 1 and "python" in cmdline and ("multiprocess" in cmdline or "parbpe" in cmdline):
            found.append(int(stat.parent.name))
    return found


def stage_at(stats: dict, seconds: float) -> str:
    """The stage an undisturbed run was in, seconds after it started (its stages' times in order)."""
    elapsed = 0.6  # the interpreter's start and imports, before the first stage
    if seconds < elapsed:
        return "start"
    for name, took in stats["seconds"].items():
        elapsed += took
        if seconds < elapsed:
            return name
    return "end"


def same_outputs(a: Path, b: Path) -> bool:
    """Whether two output directories hold the same tokenizer files (stats.json aside: it has times)."""
    names = sorted(p.name for p in a.iterdir() if p.is_file() and p.name != "stats.json")
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names) and bool(names)


def one_kill(args: list[str], out: Path, reference: Path, duration: float,
             rng: random.Random) -> tuple[str, float, float]:
    """Run once, SIGKILL a random worker at a random moment; ('exit2'|'exit0'|'nokill'|failure,
    seconds to exit after the kill, seconds into the run of the kill)."""
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    stdin = open(STDIN_TEXT, "rb") if "-" in args else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(args, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if stdin is not subprocess.DEVNULL:
        stdin.close()
    time.sleep(rng.uniform(0.3, duration))
    workers = worker_pids(proc.pid)
    while not workers and proc.poll() is None:  # between pools: the next worker to start is killed
        time.sleep(0.02)
        workers = worker_pids(proc.pid)
    if not workers or proc.poll() is not None:
        proc.wait()
        return "nokill", 0.0, 0.0
    victim = rng.choice(workers)
    try:
        os.kill(victim, signal.SIGKILL)
    except ProcessLookupError:  # it ended by itself just now
        proc.wait()
        return "nokill", 0.0, 0.0
    killed = time.monotonic()
    try:
        try:
            _, err = proc.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:  # a kill that did not stop the run (a worker already exiting) lets
            # it finish: it must then end as an undisturbed run would, in about the time that run had left
            _, err = proc.communicate(timeout=max(duration - (killed - started), 0) * 2 + LIMIT)
            late = time.monotonic() - killed
            ok = proc.returncode == 0 and same_outputs(out, reference)
            return ("exit0-late" if ok else f"LATE rc={proc.returncode} {err.strip()[-300:]!r}"), late, \
                killed - started
    except subprocess.TimeoutExpired:
        print(f"HANG: pid {proc.pid} (status {proc.poll()}), killed {victim}; its tree and what holds its stderr:",
              flush=True)
        for pid in sorted({proc.pid, *descendants(proc.pid), *orphans_of(args), *holders(proc.stderr.fileno())}):
            subprocess.run(["py-spy", "dump", "--pid", str(pid)], stderr=subprocess.STDOUT)
        time.sleep(float(os.environ.get("KILL_LOOP_HANG_WAIT", "0")))  # time to look at it
        proc.kill()
        proc.communicate()
        return "HANG", LIMIT, killed - started
    seconds = time.monotonic() - killed
    errors = [line for line in err.splitlines() if "error" in line]
    if proc.returncode == 2 and len(errors) == 1 and errors[0] == err.strip().splitlines()[-1]:
        return "exit2", seconds, killed - started
    if proc.returncode == 0 and same_outputs(out, reference):
        return "exit0", seconds, killed - started
    return f"BAD rc={proc.returncode} {err.strip()[-300:]!r}", seconds, killed - started


@contextlib.contextmanager
def numba_cache(kind: str, work: Path) -> Iterator[None]:
    """For the cold setup, runs started meanwhile get an empty numba cache of their own."""
    if kind != "cold":
        yield
        return
    cache = Path(tempfile.mkdtemp(prefix="numba-", dir=work))
    before = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(cache)
    try:
        yield
    finally:
        if before is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = before
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/realmix"))
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default="plain,spill,superbpe,stream,pathpiece",
                        help="which setups to draw from (plain, spill, superbpe, stream, pathpiece, cold)")
    options = parser.parse_args()
    rng = random.Random(options.seed)
    work = Path(tempfile.mkdtemp(prefix="kill_loop_"))
    corpus = work / "corpus"
    corpus.mkdir()
    for shard in sorted(options.data.glob("train-*.parquet"))[:options.shards]:
        os.symlink(shard, corpus / shard.name)
    full = work / "full"
    full.mkdir()
    for shard in sorted(options.data.glob("train-*.parquet")):
        os.symlink(shard, full / shard.name)
    kinds = options.kinds.split(",")
    # --workers 1 starts no worker process (count, reduce and merge run in the parent): nothing to kill
    setups = [(w, kind) for w in (2, 3) for kind in ("plain", "spill", "stream") if kind in kinds]
    setups += [(w, "superbpe") for w in (2, 3) if "superbpe" in kinds]
    setups += [(w, "pathpiece") for w in (2, 3) if "pathpiece" in kinds]  # its scoring workers too
    setups += [(2, "cold")] if "cold" in kinds else []  # (its compiling processes too)
    if "stream" in kinds:
        import pyarrow.parquet as pq

        with open(STDIN_TEXT, "w", encoding="utf-8") as f:
            for shard in sorted(corpus.iterdir()):
                for text in pq.read_table(shard, columns=["text"]).column("text").to_pylist():
                    f.write(text.replace("\n", " ") + "\n")
    references = {}
    for workers, kind in setups:
        ref = work / f"ref-{workers}-{kind}"
        started = time.monotonic()
        with open(STDIN_TEXT if kind == "stream" else os.devnull, "rb") as stdin, numba_cache(kind, work):
            subprocess.run(command(full if kind in ("superbpe", "cold") else corpus, ref, workers, kind,
                                   options.vocab_size),
                           check=True, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stats = json.loads((ref / "stats.json").read_text())
        references[workers, kind] = (ref, time.monotonic() - started, stats)
        print(f"reference workers={workers} {kind}: {references[workers, kind][1]:.1f} s", flush=True)
    tally: dict[tuple[str, str], int] = {}
    slowest = 0.0
    n = 0
    while n < options.kills:
        workers, kind = rng.choice(setups)
        ref, duration, stats = references[workers, kind]
        args = command(full if kind in ("superbpe", "cold") else corpus, work / "out", workers, kind,
                       options.vocab_size)
        with numba_cache(kind, work):
            outcome, seconds, at = one_kill(args, work / "out", ref, duration, rng)
        if outcome == "nokill":
            continue
        n += 1
        stage = stage_at(stats, at)
        key = (stage, outcome.split(" ")[0])
        tally[key] = tally.get(key, 0) + 1
        slowest = max(slowest, seconds)
        print(f"{n}: workers={workers} {kind} at {at:.2f} s ({stage}) {outcome} {seconds:.2f} s", flush=True)
    print(f"kills={n} max seconds to exit after the kill={slowest:.2f}")
    for (stage, outcome), count in sorted(tally.items()):
        print(f"  {stage:16s} {outcome:6s} {count}")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if any(o in ("HANG", "BAD", "LATE") for _, o in tally) else 0)


if __name__ == "__main__":
    main()

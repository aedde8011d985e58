"""Kill loop (issue 23, item 0): SIGKILL a random worker of `parbpe train` at a random moment, many
times, and check that every run ends within 5 s of the kill: exit 2 with one line on stderr, or
exit 0 with outputs identical to an undisturbed run. A hang is a run still alive 5 s after the kill.

    python bench/kill_loop.py --kills 100 --data /work/shared/data/realmix --shards 1
"""

from __future__ import annotations

import argparse
import filecmp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT = 5.0


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


def command(corpus: Path, out: Path, workers: int, budget: str | None, vocab: int) -> list[str]:
    """The `parbpe train` command line of one run."""
    args = [sys.executable, "-m", "parbpe.cli", "train", str(corpus), "--vocab-size", str(vocab),
            "--workers", str(workers), "--out", str(out)]
    return args + (["--memory-budget", budget] if budget else [])


def same_outputs(a: Path, b: Path) -> bool:
    """Whether two output directories hold the same tokenizer files (stats.json aside: it has times)."""
    names = sorted(p.name for p in a.iterdir() if p.is_file() and p.name != "stats.json")
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names) and bool(names)


def one_kill(args: list[str], out: Path, reference: Path, duration: float, rng: random.Random) -> tuple[str, float]:
    """Run once, SIGKILL a random worker at a random moment; ('exit2'|'exit0'|'nokill'|failure, s to exit)."""
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(rng.uniform(0.2, duration))
    workers = descendants(proc.pid)
    if not workers or proc.poll() is not None:
        proc.wait()
        return "nokill", 0.0
    os.kill(rng.choice(workers), signal.SIGKILL)
    killed = time.monotonic()
    try:
        _, err = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "HANG", LIMIT
    seconds = time.monotonic() - killed
    errors = [line for line in err.splitlines() if "error" in line]
    if proc.returncode == 2 and len(errors) == 1 and errors[0] == err.strip().splitlines()[-1]:
        return "exit2", seconds
    if proc.returncode == 0 and same_outputs(out, reference):
        return "exit0", seconds
    return f"BAD rc={proc.returncode} {err.strip()[-300:]!r}", seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/realmix"))
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    work = Path(tempfile.mkdtemp(prefix="kill_loop_"))
    corpus = work / "corpus"
    corpus.mkdir()
    for shard in sorted(options.data.glob("train-*.parquet"))[:options.shards]:
        os.symlink(shard, corpus / shard.name)
    setups = [(w, b) for w in (1, 2, 3) for b in (None, "400MB")]
    references = {}
    for workers, budget in setups:
        ref = work / f"ref-{workers}-{budget}"
        started = time.monotonic()
        subprocess.run(command(corpus, ref, workers, budget, options.vocab_size), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        references[workers, budget] = (ref, time.monotonic() - started)
    tally: dict[str, int] = {}
    slowest = 0.0
    n = 0
    while n < options.kills:
        workers, budget = rng.choice(setups)
        ref, duration = references[workers, budget]
        args = command(corpus, work / "out", workers, budget, options.vocab_size)
        outcome, seconds = one_kill(args, work / "out", ref, duration, rng)
        tally[outcome.split(" ")[0]] = tally.get(outcome.split(" ")[0], 0) + 1
        slowest = max(slowest, seconds)
        n += outcome != "nokill"
        print(f"{n}: workers={workers} budget={budget} {outcome} {seconds:.2f} s", flush=True)
    print(f"kills={n} {tally} max seconds to exit after the kill={slowest:.2f}")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if any(k in tally for k in ("HANG", "BAD")) else 0)


if __name__ == "__main__":
    main()

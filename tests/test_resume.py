"""Whole runs killed (SIGKILL, SIGINT) in counting, reducing and merging resume to the same bytes.

Each run is `parbpe train` in its own process group; it is stopped either by itself at a chosen
point (PARBPE_TEST_STOP=stage:N:SIGNAL, which signals its whole group) or by the test after a
random delay. Then the same command with --resume must write files byte-identical to an
uninterrupted run (stats.json: equal but for times, peaks and the machine-dependent fields below).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# stats.json fields that differ between any two runs (times, peaks, what the free memory allowed).
VOLATILE = {"seconds", "merge_seconds", "peak_rss_bytes", "memory_budget", "worker_data_limit", "spills",
            "caller_held_bytes", "peak_rss_by_stage", "merge_fit",  # merge_fit: estimated from the RSS then
            "kernels"}  # kernels: those this process loaded (a resumed run skips stages), compiled or from the cache
SETTINGS = {
    "plain": [],
    "exact": ["--batching", "exact"],
    "stoplist": ["--stop-list-size", "4", "--freq-cutoff", "2", "--special-tokens", "<|end|>"],
    "nonoverlap": ["--pair-count", "nonoverlap", "--max-batch-size", "32"],
    "superbpe": ["--superbpe-transition", "0.8"],  # its own test: stage 2 keeps a run directory of its own
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Six text files (six work units) of random words: about 70 merge rounds to 1,000 tokens."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(1500)]
    for i in range(6):
        text = " ".join(rng.choice(words) for _ in range(6000))
        (root / f"part{i}.txt").write_text(text.replace(" q", " <|end|>q"), encoding="utf-8")
    return root


def _command(corpus: Path, out: Path, setting: str, *extra: str, vocab_size: int = 1000) -> list[str]:
    return [sys.executable, "-m", "parbpe.cli", "train", *sorted(map(str, corpus.glob("*.txt"))),
            "--vocab-size", str(vocab_size), "--out", str(out), "--progress", "none", *SETTINGS[setting], *extra]


def _run(command: list[str], env: dict[str, str] | None = None, kill_after: float | None = None,
         sig: int = signal.SIGKILL) -> subprocess.CompletedProcess:
    """Run a command in its own process group; after kill_after seconds, signal the whole group."""
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    _wait_group(proc.pid)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _in_process(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The same command run by parbpe.cli.main in this process: no interpreter to start, so faster
    (for runs that are not killed)."""
    from parbpe.cli import main

    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(command[3:])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(command, status, out.getvalue(), err.getvalue())


def _wait_group(pgid: int) -> None:
    """Wait until no process of the group is left (workers of a killed run die with it)."""
    for _ in range(200):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def _stable_stats(raw: bytes) -> dict:
    stats = json.loads(raw)
    stats["config"].pop("workers")
    if "superbpe" in stats:  # its stage 2's own times, peaks and worker counts, its count's process
        stats["superbpe"] = {k: v for k, v in stats["superbpe"].items()
                             if k not in VOLATILE | {"merge_workers", "encode_workers", "count_beside"}}
    return {k: v for k, v in stats.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """Uninterrupted runs' outputs, one per setting, made when first asked for."""
    made: dict[str, dict[str, bytes]] = {}

    def get(setting: str) -> dict[str, bytes]:
        if setting not in made:
            out = tmp_path_factory.mktemp("reference") / "tok"
            done = _in_process(_command(corpus, out, setting, "--workers", "2"))
            assert done.returncode == 0, done.stderr
            assert not (out / ".parbpe-run").exists()
            made[setting] = _outputs(out)
        return made[setting]

    return get


def _assert_same_as(reference: dict[str, bytes], out: Path) -> None:
    got = _outputs(out)
    assert sorted(got) == sorted(reference)
    for name in reference:
        if name == "stats.json":
            assert _stable_stats(got[name]) == _stable_stats(reference[name])
        else:
            assert got[name] == reference[name], name


@pytest.mark.parametrize("seed", range(12))
def test_killed_runs_resume_to_identical_files(seed, corpus, reference, tmp_path):
    rng = random.Random(seed)
    setting = sorted(set(SETTINGS) - {"superbpe"})[seed % 4]
    sig = (signal.SIGKILL, signal.SIGINT)[(seed + seed // 4) % 2]
    out = tmp_path / "tok"
    # Checkpoints after every unit and round, or (a few seeds) the default: none in so short a run.
    env = {} if seed in (0, 4, 8, 10) else {"PARBPE_CHECKPOINT_SECONDS": "0"}
    workers = ["--workers", str(rng.choice([1, 2]))]
    if seed < 9:  # stopped by itself at a chosen point of a chosen stage
        stage, n = [("count", rng.randint(1, 3)), ("reduce", rng.randint(1, 31)),
                    ("merge", rng.randint(1, 60))][seed % 3]
        env["PARBPE_TEST_STOP"] = f"{stage}:{n}:{signal.Signals(sig).name[3:]}"
        stopped = _run(_command(corpus, out, setting, *workers), env)
        assert stopped.returncode != 0, f"the run was not stopped at {stage}:{n}"
    else:  # stopped from outside after a random delay
        stopped = _run(_command(corpus, out, setting, *workers), env, kill_after=rng.uniform(0.3, 2.5), sig=sig)
    if stopped.returncode != 0:
        if seed < 9:
            assert stopped.returncode in (-signal.SIGKILL, 130), stopped.stderr
            assert (out / ".parbpe-run" / "run.json").exists()
        else:  # a random delay may also hit the interpreter's start or exit, outside parbpe's handler
            assert stopped.returncode in (-signal.SIGKILL, -signal.SIGINT, 130), stopped.stderr
        if stopped.returncode == 130:
            assert stopped.stderr.strip().endswith("interrupted (the same command with --resume continues it)")
        again = ["--workers", str(rng.choice([1, 2]))]  # the worker count may change on resume
        resumed = _in_process(_command(corpus, out, setting, *again, "--resume"), {"PARBPE_CHECKPOINT_SECONDS": "0"})
        assert resumed.returncode == 0, resumed.stderr
    _assert_same_as(reference(setting), out)
    assert not (out / ".parbpe-run").exists()


@pytest.mark.parametrize("stop", ["count:2:INT", "merge:20:KILL", "superword_count:3:INT", "superword_count:2:KILL",
                                  "superword_merge:5:KILL", "superword_merge:8:INT"])
def test_superbpe_runs_stopped_in_either_stage_resume_to_identical_files(stop, corpus, reference, tmp_path):
    out = tmp_path / "tok"
    env = {"PARBPE_CHECKPOINT_SECONDS": "0", "PARBPE_TEST_STOP": stop}
    stopped = _run(_command(corpus, out, "superbpe", "--workers", "2"), env)
    assert stopped.returncode in (-signal.SIGKILL, 130), f"not stopped at {stop}: {stopped.stderr}"
    if stop.startswith("superword"):
        assert (out / ".parbpe-run" / "superword" / "run.json").exists()
    if stopped.returncode == 130:
        assert stopped.stderr.strip().endswith("interrupted (the same command with --resume continues it)")
    resumed = _in_process(_command(corpus, out, "superbpe", "--workers", "1", "--resume"),
                          {"PARBPE_CHECKPOINT_SECONDS": "0"})
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming the run" in resumed.stderr or resumed.stderr == ""
    _assert_same_as(reference("superbpe"), out)
    assert not (out / ".parbpe-run").exists()


def test_a_resumed_run_killed_again_resumes(corpus, reference, tmp_path):
    out = tmp_path / "tok"
    env = {"PARBPE_CHECKPOINT_SECONDS": "0"}
    for stop in ("count:2:KILL", "merge:20:KILL", "merge:50:INT"):
        stopped = _run(_command(corpus, out, "plain", "--workers", "2", "--resume"), {**env, "PARBPE_TEST_STOP": stop})
        assert stopped.returncode in (-signal.SIGKILL, 130), stopped.stderr
    resumed = _in_process(_command(corpus, out, "plain", "--workers", "2", "--resume"), env)
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_as(reference("plain"), out)


def test_resume_with_other_settings_or_inputs_is_refused(corpus, tmp_path):
    out = tmp_path / "tok"
    stopped = _run(_command(corpus, out, "plain", "--workers", "1"),
                   {"PARBPE_CHECKPOINT_SECONDS": "0", "PARBPE_TEST_STOP": "merge:5:KILL"})
    assert stopped.returncode == -signal.SIGKILL
    run_dir = out / ".parbpe-run"

    fresh = _in_process(_command(corpus, out, "plain"))  # not resuming: told how to resume or start over
    assert fresh.returncode == 2
    line = fresh.stderr.strip()
    assert line.startswith(f"parbpe train: error: {run_dir} holds an unfinished run") and "\n" not in line
    assert "--resume" in line and f"rm -r '{run_dir}'" in line and "merges made" in line

    other = _in_process(_command(corpus, out, "plain", "--resume", vocab_size=1300))
    assert other.returncode == 2
    assert "cannot resume" in other.stderr and "--vocab-size was 1000, now 1300" in other.stderr

    pattern = _in_process(_command(corpus, out, "plain", "--pattern", "gpt2", "--resume"))
    assert pattern.returncode == 2 and "pattern was" in pattern.stderr and "pattern_name was 'gpt4'" in pattern.stderr

    for flags, said in ((["--max-token-bytes", "8"], "--max-token-bytes was 0, now 8"),
                        (["--normalize", "nfc"], "normalize was None, now 'nfc'"),
                        (["--digits", "1"], "digits was None, now 1"),
                        (["--sample-docs", "0.5"], "--sample-docs was None, now 0.5"),
                        (["--sample-docs", "0.5", "--seed", "3"], "seed was 0, now 3")):
        refused = _in_process(_command(corpus, out, "plain", *flags, "--resume"))
        assert refused.returncode == 2 and said in refused.stderr, (flags, refused.stderr)

    touched = corpus / "part3.txt"
    st = touched.stat()
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        changed = _in_process(_command(corpus, out, "plain", "--resume"))
    finally:
        os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert changed.returncode == 2
    assert f"input {touched} changed (modified" in changed.stderr and "Traceback" not in changed.stderr
    assert run_dir.exists()  # a refused resume leaves the run as it was
    assert _in_process(_command(corpus, out, "plain", "--resume")).returncode == 0
    assert not run_dir.exists()


def test_run_dir_option_and_keep(corpus, reference, tmp_path):
    out, run_dir = tmp_path / "tok", tmp_path / "work"
    stopped = _run(_command(corpus, out, "plain", "--run-dir", str(run_dir)),
                   {"PARBPE_CHECKPOINT_SECONDS": "0", "PARBPE_TEST_STOP": "reduce:4:KILL"})
    assert stopped.returncode == -signal.SIGKILL
    assert (run_dir / "run.json").exists() and not (out / ".parbpe-run").exists()
    resumed = _in_process(_command(corpus, out, "plain", "--run-dir", str(run_dir), "--resume", "--keep-run-dir"))
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run_dir / "run.json").read_text())["finished"] is True
    _assert_same_as(reference("plain"), out)
    again = _in_process(_command(corpus, out, "plain", "--run-dir", str(run_dir)))  # a finished one is replaced
    assert again.returncode == 0, again.stderr
    assert not run_dir.exists()


def test_library_resume_of_a_kept_run_replays_it(corpus, tmp_path):
    import parbpe

    files = sorted(map(str, corpus.glob("*.txt")))
    first = parbpe.train(files, vocab_size=700, workers=1, out_dir=str(tmp_path / "a"), keep_run_dir=True)
    kept = tmp_path / "a" / ".parbpe-run"
    assert (kept / "merges.json").exists() and (kept / "reduced.arrow").exists()
    for written in (tmp_path / "a").iterdir():
        if written.is_file():
            written.unlink()
    again = parbpe.train(files, vocab_size=700, workers=1, out_dir=str(tmp_path / "a"), resume=True)
    assert again.stats["merge_seconds"]["replaying"] > 0 and again.stats["batch_sizes"] == first.stats["batch_sizes"]
    assert not kept.exists()
    parbpe.train(files, vocab_size=700, workers=1, out_dir=str(tmp_path / "b"))
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken", "parbpe.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with pytest.raises(ValueError, match="resume needs the run directory"):
        parbpe.train(files, vocab_size=700, workers=1, resume=True)


def test_bad_input_leaves_no_run_directory_to_trip_over(tmp_path, monkeypatch):
    monkeypatch.setenv("PARBPE_CHECKPOINT_SECONDS", "0")  # the good file is committed before the bad one fails
    (tmp_path / "a.jsonl").write_text('{"text": "some good text here"}\n' * 50)
    (tmp_path / "b.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    out = tmp_path / "tok"
    command = [sys.executable, "-m", "parbpe.cli", "train", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"),
               "--vocab-size", "300", "--out", str(out), "--workers", "1", "--progress", "none"]
    failed = _in_process(command)
    assert failed.returncode == 2 and "b.jsonl" in failed.stderr, failed.stderr
    assert not (out / ".parbpe-run").exists()  # resuming would need the inputs unchanged: nothing to keep
    (tmp_path / "b.jsonl").write_text('{"text": "fine"}\n')
    assert _in_process(command).returncode == 0


def test_a_run_refused_for_its_budget_keeps_only_the_counts_and_says_so(corpus, reference, tmp_path, monkeypatch):
    """The merge stage's estimate refuses the budget after counting: OUT holds the run directory and
    nothing else, the message names it, and --resume with a larger budget (the default, as the
    reference run's) writes the files of an uninterrupted run."""
    import parbpe.merge.fit as fit

    out = tmp_path / "tok"
    with monkeypatch.context() as patched:  # an estimate no budget of this machine meets: refused
        patched.setattr(fit, "MERGE_BYTES_PER_TOKEN", 10**6)
        patched.setattr(fit, "CHUNK_BYTES_PER_TOKEN", 10**6)
        refused = _in_process(_command(corpus, out, "plain", "--workers", "2", "--memory-budget", "2GB"))
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "too small for the merge stage" in line
    assert f"kept in {out / '.parbpe-run'}" in line and "--resume" in line and "rm -r" in line
    assert [p.name for p in out.iterdir()] == [".parbpe-run"]
    again = _in_process(_command(corpus, out, "plain", "--workers", "2", "--resume"))  # the default budget
    assert again.returncode == 0, again.stderr
    _assert_same_as(reference("plain"), out)
    assert not (out / ".parbpe-run").exists()


def test_a_resumed_init_run_compares_the_tokenizer_not_its_path(corpus, tmp_path):
    import shutil

    import parbpe

    files = sorted(map(str, corpus.glob("*.txt")))
    parbpe.train(files[:1], vocab_size=400, out_dir=tmp_path / "a", progress="none")
    parbpe.train(files[:1], vocab_size=420, out_dir=tmp_path / "b", progress="none")
    init = tmp_path / "init"
    shutil.copytree(tmp_path / "a", init)

    def command(out):
        return _command(corpus, out, "plain", "--init", str(init), "--workers", "1")

    reference = tmp_path / "ref"
    assert _in_process(command(reference)).returncode == 0
    out = tmp_path / "tok"
    env = {"PARBPE_CHECKPOINT_SECONDS": "0", "PARBPE_TEST_STOP": "merge:5:KILL"}
    assert _run(command(out), env).returncode == -signal.SIGKILL
    shutil.rmtree(init)
    shutil.copytree(tmp_path / "b", init)  # another tokenizer at the same path
    refused = _in_process([*command(out), "--resume"])
    assert refused.returncode == 2 and "the --init tokenizer is not the one the run continued" in refused.stderr
    shutil.rmtree(init)
    shutil.copytree(tmp_path / "a", init)  # the same one, rewritten (new mtimes)
    resumed = _in_process([*command(out), "--resume"], {"PARBPE_CHECKPOINT_SECONDS": "0"})
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "tokenizer.json").read_bytes() == (reference / "tokenizer.json").read_bytes()

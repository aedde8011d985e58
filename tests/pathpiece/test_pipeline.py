"""parbpe train --algorithm pathpiece: a BPE start pruned top-down to the vocabulary size; the same
vocabulary for 1, 2 and 3 workers and after a kill between iterations and --resume; a scoring worker
killed mid-iteration is a one-line error with no shared memory left; tokenizer.json (a Unigram model
of equal scores) gives stock `tokenizers` the same token count as parbpe on every held-out document."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest
from tokenizer.test_tokenizer import _hf_and_tiktoken  # noqa: F401  (the tokenizer test helpers' import path)

import parbpe
from parbpe.cli import main
from parbpe.run.shared_arrays import SHM_DIR_VARIABLE

WORDS_SEED = 11


def _documents(n: int, seed: int) -> list[str]:
    rng = random.Random(WORDS_SEED)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 11))) for _ in range(400)]
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + ". 12,345!" for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("pp")
    (d / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in _documents(1500, 1)))
    (d / "heldout.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in _documents(200, 2)))
    return d


def _train(corpus, out, *extra, workers=2):
    return [sys.executable, "-m", "parbpe", "train", str(corpus / "train.jsonl"), "--algorithm", "pathpiece",
            "--vocab-size", "700", "--initial-vocab-size", "2000", "--special-tokens", "<|endoftext|>",
            "--workers", str(workers), "--out", str(out), "--progress", "none", *extra]


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ppout") / "tok"
    assert main(_train(corpus, out, "--heldout", str(corpus / "heldout.jsonl"))[3:]) == 0
    return out


def test_the_vocabulary_and_its_files(trained, corpus):
    tok = parbpe.Tokenizer.load(str(trained))
    assert tok.n_vocab == 700 and tok.segmentation == "shortest" and not tok.merges
    assert all(bytes([b]) in tok.vocab.values() for b in range(256))
    assert max(len(t) for i, t in tok.vocab.items() if i not in tok.special_tokens.values()) <= 16
    stats = json.loads((trained / "stats.json").read_text())
    pp = stats["pathpiece"]
    assert pp["initial"] == "bpe" and pp["initial_tokens"] == 2000 and pp["sizes"][-1] == 699
    assert pp["iterations"] == len(pp["sizes"]) and stats["config"]["max_token_bytes"] == 16
    assert stats["files"]["merges.txt"].startswith("not written: a vocabulary without merges")
    assert (trained / "vocab.hex").read_text().count("\n") == 699
    text = (corpus / "heldout.jsonl").read_text()
    docs = [json.loads(line)["text"] for line in text.splitlines()]
    assert stats["heldout"]["tokens"] == sum(len(tok.encode_ordinary(d)) for d in docs)
    bpe = parbpe.train(str(corpus / "train.jsonl"), vocab_size=700, special_tokens=["<|endoftext|>"], workers=1)
    assert stats["heldout"]["tokens"] < sum(len(bpe.tokenizer.encode_ordinary(d)) for d in docs)


def test_stock_tokenizers_give_the_same_count_on_every_document(trained, corpus):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = parbpe.Tokenizer.load(str(trained))
    hf = tokenizers.Tokenizer.from_file(str(trained / "tokenizer.json"))
    fast = transformers.AutoTokenizer.from_pretrained(str(trained))
    docs = [json.loads(line)["text"] for line in (corpus / "heldout.jsonl").read_text().splitlines()]
    docs += ["héllo wörld 中文 <|endoftext|> abc", "  \n\t x"]
    for doc in docs:
        ours = tok.encode(doc, allowed_special="all")
        theirs = hf.encode(doc, add_special_tokens=False).ids
        assert len(theirs) == len(ours) and hf.decode(theirs, skip_special_tokens=False) == doc
        assert len(fast.encode(doc, add_special_tokens=False)) == len(ours)


@pytest.mark.parametrize("workers", [1, 3])
def test_any_worker_count_gives_the_same_vocabulary(trained, corpus, tmp_path, workers):
    assert main(_train(corpus, tmp_path / "o", workers=workers)[3:]) == 0
    ours = json.loads((tmp_path / "o" / "parbpe.json").read_text())
    theirs = json.loads((trained / "parbpe.json").read_text())
    assert ours["tokens"] == theirs["tokens"]


def test_a_run_killed_between_iterations_resumes_to_the_same_vocabulary(trained, corpus, tmp_path):
    out = tmp_path / "o"
    killed = subprocess.run(_train(corpus, out), env={**os.environ, "PARBPE_TEST_STOP": "pathpiece:2:KILL"},
                            capture_output=True, text=True, start_new_session=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((out / ".parbpe-run" / "pathpiece.json").read_text())["iteration"] == 2
    resumed = subprocess.run(_train(corpus, out, "--resume"), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    for name in ("parbpe.json", "tokenizer.json", "vocab.hex"):
        assert (out / name).read_bytes() == (trained / name).read_bytes(), name
    assert json.loads((out / "stats.json").read_text())["pathpiece"]["iterations"] == json.loads(
        (trained / "stats.json").read_text())["pathpiece"]["iterations"]


def test_a_scoring_worker_killed_mid_iteration_is_one_line(corpus, tmp_path):
    env = {**os.environ, "PARBPE_TEST_KILL": "pathpiece:2", SHM_DIR_VARIABLE: str(tmp_path / "shm")}
    (tmp_path / "shm").mkdir()
    run = subprocess.run(_train(corpus, tmp_path / "o"), env=env, capture_output=True, text=True, timeout=300)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "pathpiece scoring worker" in lines[0] and "died (signal 9" in lines[0]
    assert list((tmp_path / "shm").iterdir()) == []
    assert [p.name for p in (tmp_path / "o").iterdir()] == [".parbpe-run"]  # --resume continues it


def test_init_from_a_hex_vocabulary_and_the_refusals(trained, corpus, tmp_path, capsys):
    small = parbpe.train(str(corpus / "train.jsonl"), algorithm="pathpiece", vocab_size=400,
                         init=str(trained / "vocab.hex"), workers=1)
    assert small.tokenizer.n_vocab == 400 and small.stats["pathpiece"]["initial"] == "init"
    kept = set(parbpe.Tokenizer.load(str(trained)).vocab.values())
    assert set(small.tokenizer.vocab.values()) <= kept
    for extra, said in ((["--also-save", "500"], "PathPiece's vocabularies are pruned"),
                        (["--stop-list-size", "5"], "--stop-list-size is BPE's"),
                        (["--superbpe-transition", "0.8"], "--superbpe-transition is BPE's"),
                        (["--max-token-bytes", "20"], "at most 16 bytes"),
                        (["--initial-vocab-size", "600"], "must be an integer above --vocab-size 700"),
                        (["--init", str(trained / "vocab.hex"), "--vocab-size", "800"], "leaves nothing to prune")):
        assert main(_train(corpus, tmp_path / "x", *extra)[3:]) == 2, extra
        assert said in capsys.readouterr().err, extra


def test_the_budget_decides_the_scoring_workers(trained, corpus, tmp_path, monkeypatch):
    """Two scoring workers that would not fit the budget become one (the same vocabulary); if one does
    not fit, the run stops before its BPE start with what it would need."""
    import parbpe.pipeline.prune as prune

    settings = dict(algorithm="pathpiece", vocab_size=700, initial_vocab_size=2000, special_tokens=["<|endoftext|>"],
                    workers=2, memory_budget="3GB")
    monkeypatch.setattr(prune, "WORKER_FIXED", 1600 << 20)  # 2 x 1.6 GB > 3 GB > 1 x 1.6 GB + this process
    one = parbpe.train(str(corpus / "train.jsonl"), **settings)
    assert one.stats["pathpiece"]["workers"] == 1
    assert [one.tokenizer.vocab[i] for i in sorted(one.tokenizer.vocab)] == [
        t for _, t in sorted(parbpe.Tokenizer.load(str(trained)).vocab.items())]
    monkeypatch.setattr(prune, "WORKER_FIXED", 4 << 30)
    with pytest.raises(ValueError, match=r"PathPiece's prune stage needs about .* over the memory budget of 3.0 GB"):
        parbpe.train(str(corpus / "train.jsonl"), **settings)


def test_a_finished_run_leaves_no_state_for_the_next_run(trained, corpus, tmp_path):
    """Issue 55 item 1: a second PathPiece run into the same --out, with another size and another text,
    prunes its own vocabulary: the first run's pathpiece.json is neither left behind nor read."""
    out = tmp_path / "o"
    assert main(_train(corpus, out, "--keep-run-dir")[3:]) == 0
    assert (out / ".parbpe-run" / "pathpiece.json").exists()  # kept, marked finished
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"text": t.upper()}) + "\n" for t in _documents(1500, 5)))
    args = ["train", str(other), "--algorithm", "pathpiece", "--vocab-size", "600", "--initial-vocab-size", "1500",
            "--workers", "1", "--progress", "none"]
    assert main([*args, "--out", str(out)]) == 0
    assert not (out / ".parbpe-run").exists()  # a finished run leaves no state behind
    assert main([*args, "--out", str(tmp_path / "fresh")]) == 0
    for name in ("parbpe.json", "tokenizer.json", "vocab.hex"):
        assert (out / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name
    assert parbpe.Tokenizer.load(str(out)).n_vocab == 600


def test_a_planted_pathpiece_checkpoint_is_not_used(trained, corpus, tmp_path):
    """A pathpiece.json that is not this run's (copied from another run's directory) is not read: not
    without --resume, and not under --resume when it was written for other settings or inputs."""
    out = tmp_path / "o"
    killed = subprocess.run(_train(corpus, out, "--keep-run-dir"), env={**os.environ,
                            "PARBPE_TEST_STOP": "pathpiece:2:KILL"}, capture_output=True, text=True,
                            start_new_session=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    planted = (out / ".parbpe-run" / "pathpiece.json").read_bytes()
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"text": t.upper()}) + "\n" for t in _documents(1500, 5)))
    args = ["train", str(other), "--algorithm", "pathpiece", "--vocab-size", "600", "--initial-vocab-size", "1500",
            "--workers", "1", "--progress", "none"]
    assert main([*args, "--out", str(tmp_path / "fresh")]) == 0
    for resume in ([], ["--resume"]):  # alone in a run directory, it is not a run's: refused, left as it was
        run_dir = tmp_path / f"rd{len(resume)}"
        run_dir.mkdir()
        (run_dir / "pathpiece.json").write_bytes(planted)
        out2 = tmp_path / f"o{len(resume)}"
        assert main([*args, "--out", str(out2), "--run-dir", str(run_dir), *resume]) == 2
        assert (run_dir / "pathpiece.json").read_bytes() == planted and not (out2 / "parbpe.json").exists()
    # Under --resume of a run whose record matches, a checkpoint written by another run is not used either.
    out3 = tmp_path / "o3"
    stopped = subprocess.run([sys.executable, "-m", "parbpe", *args, "--out", str(out3)],
                             env={**os.environ, "PARBPE_TEST_STOP": "pathpiece:1:KILL"}, capture_output=True,
                             text=True, start_new_session=True, timeout=300)
    assert stopped.returncode == -signal.SIGKILL
    (out3 / ".parbpe-run" / "pathpiece.json").write_bytes(planted)
    assert main([*args, "--out", str(out3), "--resume"]) == 0
    for name in ("parbpe.json", "vocab.hex"):
        assert (out3 / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_kernels_give_the_vocabulary_numpy_gives(trained, corpus, tmp_path, workers):
    """--jit on scores with the kernel (this small table scores with numpy under auto): the same files."""
    assert main(_train(corpus, tmp_path / "o", "--jit", "on", workers=workers)[3:]) == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["pathpiece"]["scoring"] == "kernel"
    assert json.loads((trained / "stats.json").read_text())["pathpiece"]["scoring"] == "numpy"
    for name in ("parbpe.json", "tokenizer.json", "vocab.hex"):
        assert (tmp_path / "o" / name).read_bytes() == (trained / name).read_bytes(), name


def test_a_run_with_kernels_killed_between_iterations_resumes_with_numpy(trained, corpus, tmp_path):
    out = tmp_path / "o"
    env = {**os.environ, "PARBPE_TEST_STOP": "pathpiece:3:KILL"}
    killed = subprocess.run(_train(corpus, out, "--jit", "on"), env=env, capture_output=True, text=True,
                            start_new_session=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((out / ".parbpe-run" / "pathpiece.json").read_text())["iteration"] == 3
    resumed = subprocess.run(_train(corpus, out, "--resume", "--jit", "off"), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    for name in ("parbpe.json", "tokenizer.json", "vocab.hex"):
        assert (out / name).read_bytes() == (trained / name).read_bytes(), name


@pytest.mark.parametrize("jit_mode", ["on", "off"])
def test_a_run_killed_within_an_iteration_resumes_to_the_same_files(trained, corpus, tmp_path, jit_mode):
    """A scoring worker killed in its third scoring (iteration 3): the run stops with two iterations saved;
    --resume scores from there and writes what the run that was never killed wrote."""
    out = tmp_path / "o"
    env = {**os.environ, "PARBPE_TEST_KILL": "pathpiece:3"}
    killed = subprocess.run(_train(corpus, out, "--jit", jit_mode), env=env, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == 2 and "pathpiece scoring worker" in killed.stderr, killed.stderr
    assert json.loads((out / ".parbpe-run" / "pathpiece.json").read_text())["iteration"] == 2
    resumed = subprocess.run(_train(corpus, out, "--resume", "--jit", jit_mode), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["pathpiece"]["scoring"] == ("kernel" if jit_mode == "on" else "numpy")
    for name in ("parbpe.json", "tokenizer.json", "vocab.hex"):
        assert (out / name).read_bytes() == (trained / name).read_bytes(), name


def test_each_iteration_reports_the_tokens_left_and_the_heldout_tokens(trained, corpus, tmp_path):
    """--progress jsonl: a prune line per iteration with the tokens left and, with --heldout, the held-out
    text's tokens with them (the kernel's count here, numpy's in `trained`): the last is stats' held-out number."""
    run = subprocess.run([*_train(corpus, tmp_path / "o", "--heldout", str(corpus / "heldout.jsonl"), "--jit", "on"),
                          "--progress", "jsonl"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    pruned = [x for x in lines if x["event"] == "progress" and x["stage"] == "prune"]
    stats = json.loads((trained / "stats.json").read_text())
    pp = stats["pathpiece"]
    assert [x["tokens"] for x in pruned] == pp["sizes"] and [x["iteration"] for x in pruned] == list(
        range(1, pp["iterations"] + 1))
    assert [x["heldout"] for x in pruned] == pp["heldout_tokens"]
    assert pp["heldout_tokens"][-1] == stats["heldout"]["tokens"]
    assert pp["heldout_tokens"] == sorted(pp["heldout_tokens"])  # fewer tokens to choose from: never fewer tokens

"""What a new user tries first: each surprise found that way, and the behaviour that replaced it."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import parbpe
from parbpe.cli import build_parser, main

TEXT = "Hello world. <|endoftext|> The cat sat on the mat, and the dog sat on the log.\n" * 50
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def data(tmp_path) -> Path:
    (tmp_path / "data.txt").write_text(TEXT)
    return tmp_path / "data.txt"


def _stats(out: Path) -> dict:
    import json

    return json.loads((out / "stats.json").read_text())


def test_special_tokens_take_one_value_per_flag_or_a_comma_list(data, tmp_path, capsys):
    # The old nargs="*" swallowed data.txt as a special token and trained on the default corpus, exit 0.
    out = tmp_path / "a"
    assert main(["train", "--special-tokens", "<|endoftext|>", str(data), "--vocab-size", "300", "--out", str(out),
                 "--workers", "1", "--progress", "none"]) == 0
    config = _stats(out)["config"]
    assert config["special_tokens"] == ["<|endoftext|>"] and _stats(out)["inputs"]["files_read"] == [str(data)]
    out = tmp_path / "b"
    assert main(["train", str(data), "--special-tokens", "<|a|>,<|b|>", "--special-tokens", "<|c|>",
                 "--vocab-size", "300", "--out", str(out), "--workers", "1", "--progress", "none"]) == 0
    assert _stats(out)["config"]["special_tokens"] == ["<|a|>", "<|b|>", "<|c|>"]


def test_no_input_is_an_error_naming_the_sample_corpus_flag(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["train", "--special-tokens", "<|endoftext|>", "--vocab-size", "300", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: no input given" in err and "--sample-corpus" in err and not out.exists()
    with pytest.raises(ValueError, match="sample_corpus=True"):
        parbpe.train([], vocab_size=300)


@pytest.mark.parametrize("name", ["cl100k_base", "CL100K_BASE", "GPT4", "o200k_base", "gpt-4o", "r50k_base"])
def test_tiktoken_pattern_names_are_accepted_in_any_case(data, name):
    from parbpe.patterns import PATTERNS

    config = parbpe.TrainConfig(pattern=name, vocab_size=300)
    assert config.pattern in (PATTERNS["gpt4"], PATTERNS["gpt4o"], PATTERNS["gpt2"])
    assert config.to_dict()["pattern_name"] in ("gpt2", "gpt4", "gpt4o")


def test_an_unknown_bare_pattern_name_lists_the_known_names(tmp_path, data, capsys):
    assert main(["train", str(data), "--pattern", "p99k_base", "--vocab-size", "300",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown pattern name 'p99k_base'" in err and "cl100k_base" in err and "o200k_base" in err
    assert parbpe.TrainConfig(pattern=r"(?:word)|\s+").pattern == r"(?:word)|\s+"  # a real regex still works


def test_train_takes_a_str_a_path_and_a_list_and_refuses_a_missing_path(data, tmp_path):
    by_str = parbpe.train(str(data), vocab_size=300, workers=1)
    by_path = parbpe.train(data, vocab_size=300, workers=1)
    by_list = parbpe.train([data], vocab_size=300, workers=1)
    assert by_str.tokenizer.merges == by_path.tokenizer.merges == by_list.tokenizer.merges
    assert by_str.stats["documents"] == 1
    with pytest.raises(FileNotFoundError, match="no such file, directory or glob match: 'hello world'"):
        parbpe.train("hello world", vocab_size=300)
    with pytest.raises(ValueError, match="train_from_iterator"):
        parbpe.train([b"bytes"], vocab_size=300)


def test_version_decode_and_sizes_like_32k(data, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"parbpe {parbpe.__version__}"
    from parbpe.cli import parse_count

    assert parse_count("32k") == 32768 and parse_count("50_304") == 50304 and parse_count("50,304") == 50304
    with pytest.raises(argparse.ArgumentTypeError, match="32k"):
        parse_count("lots")
    out = tmp_path / "tok"
    assert main(["train", str(data), "--vocab-size", "0_300", "--out", str(out), "--workers", "1",
                 "--progress", "none"]) == 0
    capsys.readouterr()
    assert main(["encode", "--tokenizer", str(out), "The cat sat"]) == 0
    ids = capsys.readouterr().out.split()
    assert main(["decode", "--tokenizer", str(out), *ids]) == 0
    assert capsys.readouterr().out == "The cat sat"
    assert main(["decode", "--tokenizer", str(out), "99999"]) == 2
    assert "not a token id: '99999'" in capsys.readouterr().err


def test_encode_many_files_in_parallel_in_input_order(data, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "tok"
    result = parbpe.train(data, vocab_size=300, workers=1, out_dir=out)
    docs = [f"document {i}: " + TEXT[: 50 * i] for i in range(1, 30)]
    for k in range(3):
        pq.write_table(pa.table({"text": docs[k::3]}), tmp_path / f"part{k}.parquet", row_group_size=3)
    (tmp_path / "z.txt").write_text("last one")
    files = [str(tmp_path / f"part{k}.parquet") for k in range(3)] + [str(tmp_path / "z.txt")]
    assert main(["encode", "--tokenizer", str(out), "--files", *files, "--workers", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = [d for k in range(3) for d in docs[k::3]] + ["last one"]
    assert lines == [" ".join(map(str, result.tokenizer.encode_ordinary(d))) for d in expected]


def test_every_option_has_help_text():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {action.dest}" for name, sub in [("parbpe", parser), *subparsers.choices.items()]
               for action in sub._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help]
    assert not missing, missing


def test_the_license_field_is_an_spdx_string():
    # A TOML table made setuptools print ~100 lines of deprecation warnings on every install.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])


def _big_corpus(path: Path) -> None:
    """8 MB of words of random letters: a run of ~10 s (1.3 million distinct chunks), generated in 0.2 s."""
    import numpy as np

    codes = np.random.default_rng(0).integers(0, 9, size=8_000_000, dtype=np.uint8)
    lines = np.frombuffer(b" abcdefgh", dtype=np.uint8)[codes]
    lines[::4000] = ord("\n")
    path.write_bytes(lines.tobytes())


@pytest.mark.parametrize("seconds", [0.2, 2.0])
def test_ctrl_c_to_the_process_group_prints_one_line(tmp_path, seconds):
    import json

    _big_corpus(tmp_path / "big.txt")
    command = [sys.executable, "-m", "parbpe.cli", "train", str(tmp_path / "big.txt"), "--vocab-size", "20000",
               "--workers", "2", "--out", str(tmp_path / "o"), "--progress", "jsonl"]
    # A terminal's Ctrl-C goes to the whole process group, workers included.
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    first = proc.stderr.readline()  # the config event: the run has started
    assert json.loads(first)["event"] == "config"
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    lines = [line for line in err.decode().splitlines() if not line.startswith("{")]  # progress events are JSON
    assert len(lines) == 1 and lines[0].startswith("parbpe train: interrupted"), lines


def test_heldout_is_evaluated_at_the_end(data, tmp_path, capsys):
    (tmp_path / "held.txt").write_text("The dog sat on the mat. A cat sat on the log.\n" * 20)
    out = tmp_path / "tok"
    assert main(["train", str(data), "--vocab-size", "300", "--out", str(out), "--workers", "1", "--progress", "none",
                 "--heldout", str(tmp_path / "held.txt")]) == 0
    printed = capsys.readouterr().out
    row = _stats(out)["heldout"]
    from parbpe.tokenizer.evaluate import evaluate

    expected = evaluate(parbpe.Tokenizer.load(str(out)), [str(tmp_path / "held.txt")])
    assert row["vocab_size"] == _stats(out)["vocab_size"]  # the small corpus may stop early
    assert {k: row[k] for k in expected if k != "vocab_size"} == pytest.approx(
        {k: v for k, v in expected.items() if k != "vocab_size"}, rel=1e-12)  # the slow reference, document by document
    assert 0 < row["renyi_efficiency"] < 1
    assert f"Held-out (1 documents, 0.0 MB): {expected['bytes_per_token']:.4f} bytes/token" in printed


@pytest.mark.parametrize("jit_mode", ["on", "off"])
def test_the_command_ends_with_its_output_and_exit_functions_whether_numba_ran_or_not(data, tmp_path, jit_mode):
    """With numba loaded, `parbpe` ends with its objects frozen out of the last collection (cli.console's
    gc.freeze): what the teardown does must still happen. Here its whole summary reaches a pipe, an atexit function
    registered before the command runs (and printing) is run, and the exit status is the command's."""
    if jit_mode == "on":
        pytest.importorskip("numba")
    code = ("import atexit, sys; atexit.register(lambda: print('exit functions ran', file=sys.stderr)); "
            "from parbpe.cli import console; sys.exit(console())")
    out = tmp_path / "o"
    done = subprocess.run([sys.executable, "-c", code, "train", str(data), "--vocab-size", "300", "--workers", "1",
                           "--jit", jit_mode, "--progress", "none", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Trained ") and "stats.json" in done.stdout.splitlines()[-1]
    assert done.stderr.rstrip().endswith("exit functions ran")
    assert (out / "merges.txt").exists()
    bad = subprocess.run([sys.executable, "-c", code, "train", str(tmp_path / "missing.txt"), "--jit", jit_mode],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and "exit functions ran" in bad.stderr


def test_count_never_reads_its_own_output_and_train_says_when_counts_join_text(tmp_path, capsys):
    """Issue 55 item 3: `parbpe count DIR --out DIR/c.parquet` run twice counts DIR's text twice alike
    (not the first run's counts as well); `train DIR` then warns that a counts file joins the text."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.txt").write_text(TEXT)
    out = folder / "c.parquet"
    args = ["count", str(folder), "--out", str(out), "--workers", "1", "--progress", "none"]
    assert main(args) == 0
    first = out.read_bytes()
    capsys.readouterr()
    assert main(args) == 0
    assert out.read_bytes() == first
    assert main(["count", str(out), "--out", str(out), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "also an input" in err
    assert main(["train", str(folder), "--vocab-size", "300", "--workers", "1", "--out", str(tmp_path / "tok")]) == 0
    err = capsys.readouterr().err
    assert "counts file" in err and str(out) in err


def test_heldout_text_that_is_also_training_input_is_said_or_refused_with_strict(tmp_path, capsys):
    """Issue 55 item 4: `train DIR --heldout DIR/heldout.txt` measures training text: said on the summary,
    in stats.json and as a warning; refused before any work with --strict."""
    from parbpe.warnings import HeldoutOverlapWarning

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "train.txt").write_text(TEXT)
    held = folder / "heldout.txt"
    held.write_text("The dog sat on the mat. A cat sat on the log.\n" * 20)
    out = tmp_path / "tok"
    args = ["train", str(folder), "--vocab-size", "280", "--out", str(out), "--workers", "1", "--progress", "none",
            "--heldout", str(held)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "also training input" in printed and str(held) in printed
    assert _stats(out)["heldout"]["also_training"] == [str(held)]
    with pytest.warns(HeldoutOverlapWarning, match="also training input"):
        parbpe.train(str(folder), vocab_size=280, workers=1, heldout=[str(held)], progress="none")
    assert main([*args, "--strict"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--heldout" in err and str(held) in err and "--strict" in err
    assert main(["train", str(folder / "train.txt"), "--vocab-size", "280", "--out", str(tmp_path / "t2"),
                 "--workers", "1", "--progress", "none", "--heldout", str(held), "--strict"]) == 0


def _exit_and_err(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("args", "flag"), [
    (["--normalize", "bogus"], "--normalize"), (["--digits", "2"], "--digits"),
    (["--max-token-bytes", "-1"], "--max-token-bytes"), (["--min-pair-count", "-1"], "--min-pair-count"),
    (["--sample-bytes", "-5"], "--sample-bytes"), (["--superbpe-transition", "nan"], "--superbpe-transition"),
    (["--memory-budget", "1PB"], "--memory-budget"), (["--vocab-size", "10"], "--vocab-size"),
    (["--max-token-bytes", "1"], "--max-token-bytes"), (["--sample-docs", "2"], "--sample-docs"),
    (["--superbpe-transition", "0.8", "--stop-list-size", "5"], "--stop-list-size"),
])
def test_a_bad_option_value_is_one_line_naming_the_flag(data, tmp_path, capsys, args, flag):
    """Issue 55 item 13: one line (no usage), exit 2, the flag as the CLI spells it, no Python parameter name."""
    code, err = _exit_and_err(["train", str(data), "--out", str(tmp_path / "o"), "--progress", "none", *args], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("parbpe train: error:"), err
    assert flag in lines[0], err
    assert not any(f"{name}" in lines[0] for name in ("vocab_size", "sample_bytes", "sample_docs", "max_token_bytes",
                                                      "stop_list_size", "min_pair_count", "superbpe_transition")), err


def test_encode_tells_a_cli_user_the_flag_for_special_tokens(data, tmp_path, capsys):
    out = tmp_path / "tok"
    assert main(["train", str(data), "--vocab-size", "280", "--special-tokens", "<|endoftext|>", "--out", str(out),
                 "--workers", "1", "--progress", "none"]) == 0
    capsys.readouterr()
    code, err = _exit_and_err(["encode", "--tokenizer", str(out), "a <|endoftext|> b"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--allow-special" in err and "allowed_special" not in err, err


@pytest.fixture
def small_tok(data, tmp_path, capsys) -> Path:
    out = tmp_path / "small"
    assert main(["train", str(data), "--vocab-size", "280", "--out", str(out), "--workers", "1",
                 "--progress", "none"]) == 0
    capsys.readouterr()
    return out


@pytest.mark.parametrize("alpha", ["nan", "-3", "0", "inf"])
def test_a_renyi_order_that_is_not_a_positive_number_is_refused(small_tok, data, capsys, alpha):
    """Issue 55 item 14: --renyi-alpha nan and -3 gave an efficiency of nan and 1.26."""
    code, err = _exit_and_err(["eval", "--tokenizer", str(small_tok), str(data), "--renyi-alpha", alpha], capsys)
    assert code == 2 and err.count("\n") == 1 and "--renyi-alpha" in err, err
    with pytest.raises(ValueError, match="renyi_alpha"):
        parbpe.evaluate(str(small_tok), [str(data)], renyi_alpha=float(alpha))


def test_eval_plot_without_matplotlib_fails_before_the_evaluation(small_tok, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where the plot extra is not installed
    code, err = _exit_and_err(["eval", "--tokenizer", str(small_tok), str(tmp_path / "not-read-yet.txt"), "--plot",
                               str(tmp_path / "p.png")], capsys)
    assert code == 2 and err.count("\n") == 1 and "matplotlib" in err, err


def test_an_empty_sample_is_said_to_be_the_sample(data, tmp_path, capsys):
    code, err = _exit_and_err(["train", str(data), "--vocab-size", "280", "--out", str(tmp_path / "o"),
                               "--sample-docs", "1e-300", "--progress", "none"], capsys)
    assert code == 2 and err.count("\n") == 1 and "sample" in err and "--sample-docs" in err, err
    assert "split pattern" not in err


def test_the_sample_line_shows_the_share_taken(tmp_path, capsys):
    (tmp_path / "d.txt").write_text("".join(f"line {k} of the text, a cat and a dog\n" for k in range(2000)))
    out = tmp_path / "o"
    assert main(["train", str(tmp_path / "d.txt"), "--vocab-size", "280", "--out", str(out), "--sample-docs", "0.3",
                 "--workers", "1", "--progress", "none"]) == 0
    sample = _stats(out)["sample"]
    taken = sample["documents"] / _stats(out)["documents"]
    assert taken != 0.3 and sample["taken_share"] == taken
    assert f"Sampled {100 * taken:.2f}% of the documents" in capsys.readouterr().out


def test_count_out_must_be_a_parquet_name(data, tmp_path, capsys):
    code, err = _exit_and_err(["count", str(data), "--out", str(tmp_path / "x.txt"), "--progress", "none"], capsys)
    assert code == 2 and err.count("\n") == 1 and ".parquet" in err and not (tmp_path / "x.txt").exists(), err


def test_pathpiece_summary_says_what_pathpiece_did(data, tmp_path, capsys):
    assert main(["train", str(data), "--algorithm", "pathpiece", "--vocab-size", "270", "--initial-vocab-size", "290",
                 "--out", str(tmp_path / "pp"), "--workers", "1", "--progress", "none"]) == 0
    out = capsys.readouterr().out
    assert "0 merges in 0 rounds" not in out and "iterations" in out, out


def test_the_recount_command_for_counts_without_special_tokens_can_be_pasted(data, tmp_path, capsys):
    import shlex

    counts = tmp_path / "c.parquet"
    assert main(["count", str(data), "--out", str(counts), "--progress", "none"]) == 0
    capsys.readouterr()
    code, err = _exit_and_err(["train", str(counts), "--vocab-size", "280", "--special-tokens", "<|endoftext|>",
                               "--out", str(tmp_path / "o"), "--progress", "none"], capsys)
    assert code == 2, err
    command = err[err.index("(parbpe count"):].split(")", 1)[0][1:] if "(parbpe count" in err else ""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)  # as a shell reads it: < and | are operators
    lexer.whitespace_split = True
    words = list(lexer)
    assert words[:2] == ["parbpe", "count"] and "<|endoftext|>" in words, (command, err)


def test_a_hex_vocabulary_is_known_by_its_content(small_tok, data, tmp_path, capsys):
    """PathPiece's published vocabularies (vdump_32768.vocab: hex tokens one a line) are not tiktoken files."""
    tok = parbpe.Tokenizer.load(str(small_tok))
    path = tmp_path / "vdump_300.vocab"
    path.write_text("".join(tok.vocab[i].hex() + "\n" for i in sorted(tok.vocab)))
    loaded = parbpe.Tokenizer.load(str(path))
    assert loaded.segmentation == "shortest" and loaded.n_vocab == tok.n_vocab
    assert main(["eval", "--tokenizer", str(path), str(data)]) == 0


def test_a_special_token_holding_a_comma_is_not_split_silently(data, tmp_path, capsys):
    code, err = _exit_and_err(["train", str(data), "--vocab-size", "280", "--special-tokens", "<|a,b|>", "--out",
                               str(tmp_path / "a"), "--progress", "none"], capsys)
    assert code == 2 and err.count("\n") == 1 and "\\," in err and "--special-tokens" in err, err
    out = tmp_path / "b"
    assert main(["train", str(data), "--vocab-size", "280", "--special-tokens", "<|a\\,b|>,<|c|>", "--out", str(out),
                 "--workers", "1", "--progress", "none"]) == 0
    assert _stats(out)["config"]["special_tokens"] == ["<|a,b|>", "<|c|>"]


def test_gpt2_files_say_they_lose_the_split_and_pattern_applies_to_them(data, tmp_path, capsys):
    """Issue 55 item 5: vocab.json + merges.txt cannot carry the GPT-4 split: the summary and stats.json say
    so, and --pattern (ignored for them before) applies to them in eval and encode."""
    import shutil

    out = tmp_path / "tok"
    assert main(["train", str(data), "--vocab-size", "280", "--out", str(out), "--workers", "1",
                 "--progress", "none"]) == 0
    printed = capsys.readouterr().out
    for name in ("vocab.json", "merges.txt"):
        assert "split pattern" in _stats(out)["files"][name] and "--pattern gpt4" in _stats(out)["files"][name]
    assert printed.count("without the split pattern") == 2
    gpt2_files = tmp_path / "gpt2files"
    gpt2_files.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(out / name, gpt2_files / name)
    text = "Hello   world.\n\n  The cat's mat, 123456 dogs!"
    (tmp_path / "t.txt").write_text(text)

    def tokens(*args: str) -> int:
        assert main(["eval", *args, str(tmp_path / "t.txt"), "--json"]) == 0
        return json.loads(capsys.readouterr().out)[0]["tokens"]

    ours = tokens("--tokenizer", str(out))
    assert tokens("--tokenizer", str(gpt2_files), "--pattern", "gpt4") == ours
    assert tokens("--tokenizer", str(gpt2_files / "vocab.json"), "--pattern", "gpt4") == ours
    assert main(["encode", "--tokenizer", str(gpt2_files), "--pattern", "gpt4", text]) == 0
    assert main(["encode", "--tokenizer", str(out), text]) == 0
    first, second = capsys.readouterr().out.strip().splitlines()
    assert first == second

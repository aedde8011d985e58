"""Settings are declared once (config.py): every field is one CLI flag, with its default in --help;
the parsers refuse abbreviations and suggest the nearest option."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from parbpe.cli import build_parser, main, settings_from
from parbpe.config import GROUPS, Job, RunOptions, TrainConfig, free_settings


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[name]


@pytest.mark.parametrize("command", ["train", "count"])
def test_every_setting_of_a_command_is_exactly_one_option_showing_its_default(command):
    parser = _subparser(command)
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.dest != "debug"]
    for cls in (Job, TrainConfig, RunOptions):
        for f in dataclasses.fields(cls):
            mine = [a for a in actions if a.dest == f.name]
            offered = command in f.metadata["commands"]
            assert len(mine) == (1 if offered else 0), (cls.__name__, f.name, [a.option_strings for a in mine])
            if offered:
                assert mine[0].option_strings in ([], ["--" + f.name.replace("_", "-")]), mine[0].option_strings
                assert ("(default: " in mine[0].help) != (mine[0].required and mine[0].help.endswith("(required)")), \
                    f.name
    declared = {f.name for cls in (Job, TrainConfig, RunOptions) for f in dataclasses.fields(cls)}
    assert {a.dest for a in actions} <= declared  # no option that is not a declared setting


def test_train_help_has_groups_and_shows_every_default(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    titles = [title for title in GROUPS.values() if f"\n{title}:\n" in text]
    assert len(titles) >= 4, titles
    assert text.index("--vocab-size") < text.index("--workers") and text.index("--out") < text.index("--workers")
    options = re.findall(r"^  (--[a-z-]+|INPUT)", text, re.M)
    assert len(options) >= 30
    helps = re.split(r"\n  (?=--[a-z]|INPUT)", text.split("input: ", 1)[1])
    assert all("(default: " in " ".join(h.split()) or h.startswith("--out PATH") for h in helps[1:]), helps


def test_a_mistyped_option_is_refused_with_the_nearest_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "corpus.txt", "--special-token", "X", "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --special-token" in err and "did you mean --special-tokens?" in err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "corpus.txt", "--vocab", "300", "--out", str(tmp_path / "o")])  # no abbreviations
    assert exit_.value.code == 2 and "did you mean --vocab-size?" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_option_of_another_command_is_named_as_such(tmp_path, capsys):
    """count's --stats given to train: not "did you mean --stats?" (the nearest of every command's
    options was the option itself) but which command has it; near misses are train's own."""
    with pytest.raises(SystemExit) as exit_:
        main(["train", "corpus.txt", "--stats", "s.json", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2
    assert err == "parbpe: error: unrecognized arguments: --stats s.json; --stats is an option of parbpe count, " \
                  "not of parbpe train"
    with pytest.raises(SystemExit):
        main(["count", "corpus.txt", "--stat", "s.json", "--out", str(tmp_path / "c.parquet")])
    assert "--stat: did you mean --stats?" in capsys.readouterr().err


def test_parsed_options_become_the_dataclasses_they_were_generated_from(tmp_path):
    args = build_parser().parse_args(["train", "a.txt", "b.txt", "--vocab-size", "32k", "--special-tokens",
                                      "<|a|>,<|b|>", "--memory-budget", "2GB", "--resume", "--out", str(tmp_path),
                                      "--also-save", "1k,2048", "--superbpe-transition", "80%", "--progress", "jsonl"])
    job, config, options = settings_from(args)
    assert job.inputs == ["a.txt", "b.txt"] and job.also_save == [1024, 2048] and job.out == str(tmp_path)
    assert config.vocab_size == 32768 and config.special_tokens == ("<|a|>", "<|b|>")
    assert config.memory_budget == 2 * 10**9 and config.superbpe_transition == 0.8
    assert options.resume and options.progress == "jsonl" and options.executor == "local"
    default = settings_from(build_parser().parse_args(["train", "a.txt", "--out", str(tmp_path)]))
    assert default[1] == TrainConfig() and default[2] == RunOptions(progress="bar")


def test_bad_values_are_one_line_errors(tmp_path, capsys):
    for argv, message in [(["--vocab-size", "lots"], "cannot read 'lots' as a size"),
                          (["--superbpe-transition", "most"], "cannot read 'most' as a transition"),
                          (["--pair-count", "some"], "invalid choice: 'some'")]:
        with pytest.raises(SystemExit) as exit_:
            main(["train", "a.txt", "--out", str(tmp_path / "o"), *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_settings_that_never_change_the_result_are_declared_so():
    assert free_settings() == ("workers", "memory_budget", "jit", "count_words", "tmp_dir")
    assert set(TrainConfig().result_settings()) & set(free_settings()) == set()
    with pytest.raises(ValueError, match="--ray-address needs --executor ray"):
        RunOptions(ray_address="auto")

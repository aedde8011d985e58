"""The stages: checks before work (inputs), one merge stage for every algorithm (vocabulary), the
settings split between TrainConfig and RunOptions (train's keywords)."""

from __future__ import annotations

import pytest

import parbpe
from parbpe.cli import main
from parbpe.config import RunOptions, TrainConfig
from parbpe.pipeline import inputs as inputs_module
from parbpe.pipeline import vocabulary
from parbpe.pipeline.inputs import settings_of


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(f"line {i}: the cat sat on the mat, and the dog sat on the log.\n" for i in range(300)))
    return path


def _no_counting(monkeypatch):
    monkeypatch.setattr(inputs_module, "plan", lambda *a, **k: pytest.fail("planning began"))


def test_a_missing_heldout_file_fails_before_counting(corpus, tmp_path, monkeypatch, capsys):
    _no_counting(monkeypatch)
    missing = tmp_path / "nowhere.parquet"
    assert main(["train", str(corpus), "--heldout", str(missing), "--out", str(tmp_path / "o"), "--progress",
                 "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parbpe train: error:") and str(missing) in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("keywords, message", [
    ({"resume": True}, "resume needs the run directory"),
    ({"also_save": [280]}, "writes directories into the output directory"),
])
def test_what_a_run_cannot_do_fails_before_counting(corpus, monkeypatch, keywords, message):
    _no_counting(monkeypatch)
    with pytest.raises(ValueError, match=message):
        parbpe.train(corpus, vocab_size=300, **keywords)


def test_texts_from_python_cannot_resume_nor_go_to_ray(monkeypatch, tmp_path):
    _no_counting(monkeypatch)
    with pytest.raises(ValueError, match="consumed once"):
        parbpe.train_from_iterator(["some text"] * 10, vocab_size=300, out_dir=tmp_path / "o", resume=True)
    for run in (lambda: parbpe.train_from_iterator(["some text"] * 10, vocab_size=300, executor="ray"),
                lambda: parbpe.count_to_file(iter(["some text"]), str(tmp_path / "c.parquet"), TrainConfig(),
                                             executor="ray")):
        with pytest.raises(ValueError, match="counted by local processes"):
            run()


def test_keywords_are_split_into_settings_and_options():
    config, options = settings_of(None, None, {"vocab_size": 300, "progress": "jsonl", "workers": 1})
    assert config == TrainConfig(vocab_size=300, workers=1) and options == RunOptions(progress="jsonl")
    config, options = settings_of(TrainConfig(vocab_size=400), None, {"start_method": "spawn"})
    assert config.vocab_size == 400 and options.start_method == "spawn"
    with pytest.raises(ValueError, match="not both"):
        settings_of(TrainConfig(), None, {"vocab_size": 300})
    with pytest.raises(ValueError, match="not both"):
        settings_of(None, RunOptions(), {"progress": "none"})
    with pytest.raises(ValueError, match="progress must be one of"):
        settings_of(None, None, {"progress": "loud"})


def test_every_algorithm_merges_through_the_one_merge_stage(corpus, tmp_path, monkeypatch):
    calls = []
    merge_stage = vocabulary.merge_stage

    def recorded(ctx, chunks, job):
        calls.append((job.names, job.encode is not None, job.n_merges))
        return merge_stage(ctx, chunks, job)

    monkeypatch.setattr(vocabulary, "merge_stage", recorded)
    plain = parbpe.train(corpus, vocab_size=320, workers=1, out_dir=tmp_path / "plain")
    assert calls == [(("table", "init", "merge"), False, 64)]
    calls.clear()
    superbpe = parbpe.train(corpus, vocab_size=320, workers=1, superbpe_transition=40)
    assert calls == [(("table", "init", "merge"), False, 40),
                     (("superbpe_table", "superbpe_encode", "superbpe_merge"), True, 24)]
    stage1 = parbpe.train(corpus, vocab_size=296, workers=1)  # (batches depend on the merges left: same count)
    assert superbpe.tokenizer.merges[:40] == stage1.tokenizer.merges
    calls.clear()
    continued = parbpe.train(corpus, vocab_size=330, workers=1, init=str(tmp_path / "plain"))
    assert calls == [(("table", "init", "merge"), True, 10)]
    assert continued.tokenizer.merges[:64] == plain.tokenizer.merges


def test_init_is_read_by_the_inputs_stage_not_by_the_settings(tmp_path):
    from parbpe.patterns import GPT2_PATTERN
    from parbpe.pipeline.inputs import init_stage
    from parbpe.tokenizer.model import Tokenizer

    config = TrainConfig(vocab_size=400, init=str(tmp_path / "not-yet"), special_tokens=("<|pad|>",))
    assert config.pattern is None  # nothing was read: the path need not exist yet
    Tokenizer(pattern=GPT2_PATTERN, merges=[(104, 105, 256)],
              special_tokens={"<|endoftext|>": 257}).save(str(tmp_path / "not-yet"))
    resolved, inherited = init_stage(config)
    assert resolved.special_tokens == ("<|endoftext|>", "<|pad|>") and resolved.eos_token == "<|endoftext|>"
    assert resolved.pattern == GPT2_PATTERN and inherited.merges == [(104, 105)]
    assert resolved.n_merges == 400 - 256 - 2 and init_stage(TrainConfig()) == (TrainConfig(), None)
    with pytest.raises(ValueError, match="bos_token '<|x|>' is not one of the special tokens"):
        init_stage(TrainConfig(vocab_size=400, init=str(tmp_path / "not-yet"), bos_token="<|x|>"))


def test_a_missing_ray_fails_before_counting(corpus, monkeypatch):
    import importlib.util

    _no_counting(monkeypatch)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(ValueError, match=r"--executor ray needs Ray: pip install 'parbpe\[ray\]'"):
        parbpe.train(corpus, vocab_size=300, executor="ray")

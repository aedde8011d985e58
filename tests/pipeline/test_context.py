"""The run context: one budget reading per run, stages timed and reported, and progress per merge
round that costs nothing in proportion to the machine (no walk of the process tree)."""

from __future__ import annotations

import io
import json
import sys

import pytest

import parbpe
from parbpe.config import RunOptions, TrainConfig
from parbpe.pipeline import context as context_module
from parbpe.pipeline.context import RunContext, run_context
from parbpe.run import memory
from parbpe.run.memory import PeakSampler
from parbpe.run.progress import Progress


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("the cat sat on the mat; the dog sat on the log.\n" * 200)
    return path


def test_the_budget_is_read_once_per_run_and_every_stage_sees_it(corpus, tmp_path, monkeypatch):
    calls = []

    def budget() -> int:
        calls.append(1)
        return 3 * 10**9

    monkeypatch.setattr(context_module, "default_budget", budget)
    monkeypatch.setattr(memory, "default_budget", lambda: pytest.fail("a stage read the machine's budget again"))
    for name, module in list(sys.modules.items()):
        if name.startswith("parbpe.") and module is not context_module and hasattr(module, "default_budget"):
            monkeypatch.setattr(module, "default_budget", lambda name=name: pytest.fail(f"{name} read the budget"))
    result = parbpe.train(corpus, vocab_size=300, workers=2, out_dir=tmp_path / "out", superbpe_transition=0.9)
    assert calls == [1]
    assert result.stats["memory_budget"] == 3 * 10**9 and result.stats["config"]["memory_budget"] is None
    assert result.stats["merge_fit"]["estimate_bytes"] < 3 * 10**9


def test_a_stage_is_timed_sampled_and_reported():
    stream = io.StringIO()
    with PeakSampler(interval=3600) as sampler:
        ctx = RunContext(config=TrainConfig(), options=RunOptions(), reporter=Progress("jsonl", stream),
                         sampler=sampler, given=TrainConfig())
        with ctx.stage("count"):
            block = bytearray(50 * 10**6)
            sampler.sample()
            del block
        with ctx.stage("quiet", report=False):
            pass
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["message"] for e in events] == ["count"] and events[0]["event"] == "stage"
    assert set(ctx.times) == {"count", "quiet"} and ctx.times["count"] >= 0
    assert sampler.by_stage["count"] >= 50 * 10**6 and events[0]["peak_rss_MB"] >= 50


def test_merge_progress_never_walks_the_process_tree(monkeypatch):
    stream = io.StringIO()
    with PeakSampler(interval=3600) as sampler:
        monkeypatch.setattr(memory, "tree_processes", lambda pid=None: pytest.fail("a progress line read the tree"))
        ctx = RunContext(config=TrainConfig(), options=RunOptions(), reporter=Progress("jsonl", stream, interval=0),
                         sampler=sampler, given=TrainConfig())
        report = ctx.progress("merge", offset=100)
        for done in range(1, 11):
            report(done, 10)
        quiet = RunContext(config=TrainConfig(), options=RunOptions(), reporter=Progress("none"), sampler=sampler,
                           given=TrainConfig()).progress("merge")
        quiet(1, 10)
        monkeypatch.undo()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[-1]["done"] == 110 and lines[-1]["total"] == 110
    assert all(line["rss_MB"] == sampler.latest / 1e6 or line["rss_MB"] > 0 for line in lines)


def test_the_run_context_resolves_the_budget_into_the_config(monkeypatch):
    monkeypatch.setattr(context_module, "default_budget", lambda: 123 * 10**6)
    with run_context(TrainConfig(workers=1), RunOptions()) as ctx:
        assert ctx.budget == ctx.config.memory_budget == 123 * 10**6 and ctx.given.memory_budget is None
        with ctx.executor():
            assert ctx.cluster is None
    with run_context(TrainConfig(workers=1, memory_budget="2GB"), RunOptions()) as ctx:
        assert ctx.budget == 2 * 10**9


def test_what_the_caller_holds_when_a_run_starts_is_not_counted_against_the_budget():
    """train_from_iterator's texts (or a notebook's data) are the caller's: the stages' memory models
    start from the tree's RSS less them, so the same documents give train's decisions."""
    from parbpe.run.memory import CALLER_FLOOR, process_rss

    before = process_rss()
    held = bytearray(300 * 10**6)  # the caller's data, resident
    held[::4096] = b"x" * len(held[::4096])
    with run_context(TrainConfig(memory_budget=10**9), RunOptions()) as ctx:
        expected = before + 300 * 10**6 - CALLER_FLOOR
        assert ctx.caller_held >= expected - 20 * 10**6 and ctx.caller_held >= 200 * 10**6
        assert ctx.in_use() <= ctx.sampler.sample() - ctx.caller_held + 20 * 10**6  # (a fresh sample may grow)
    del held

"""Progress on a terminal: a tqdm bar per stage with rate and ETA, never past 80 columns, each
finished stage left on its own line; plain lines elsewhere; JSON lines for tools."""

from __future__ import annotations

import io
import json

from parbpe.run.progress import Progress


class Terminal(io.StringIO):
    """A stream that says it is a terminal (tqdm redraws it with carriage returns)."""

    def isatty(self) -> bool:
        return True


def _screen_lines(text: str) -> list[str]:
    """What stays on screen: for each line, the last redraw after a carriage return."""
    return [line.split("\r")[-1] for line in text.split("\n")]


def _run_stages(progress: Progress) -> None:
    progress.event("config", message="training", vocab_size=32768, special_tokens=["<|endoftext|>"], workers=2,
                   memory_budget=None, text_column="text", inputs="8 path(s)", pattern_name="gpt4")
    for done in range(1, 25):
        progress.update("count", done, 24, force=done == 24, MB=done * 6.4, MB_s=21.3, rss_MB=310.0, spills=0)
    progress.event("warning", message="replaced 3 invalid UTF-8 sequences with U+FFFD")
    for done in range(1, 9):
        progress.update("reduce", done, 8, force=done == 8)
    for done in range(0, 32513, 512):
        progress.update("merge", done, 32512)
    progress.update("merge", 32512, 32512, force=True)
    progress.event("done", vocab_size=32768, rounds=123)
    progress.close()


def test_bars_fit_80_columns_and_each_stage_keeps_its_line():
    screen = Terminal()
    _run_stages(Progress("bar", screen, interval=0))
    lines = [line for line in _screen_lines(screen.getvalue()) if line.strip()]
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    bars = [line for line in lines if "|" in line and not line.startswith("[parbpe]")]
    assert [b.split(":")[0] for b in bars] == ["count", "reduce", "merge"]
    assert bars[0].startswith("count: 100%") and "24/24" in bars[0] and "MB/s" in bars[0] and "units/s" in bars[0]
    assert bars[2].startswith("merge: 100%") and "merges/s" in bars[2]
    assert any(line.startswith("[parbpe] warning: replaced 3") for line in lines)
    assert lines[0].startswith("[parbpe] config: training") and lines[-1].startswith("[parbpe] done")


def test_a_narrow_terminal_gets_narrower_bars(monkeypatch):
    import os

    screen = Terminal()
    monkeypatch.setattr(screen, "fileno", lambda: 2, raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((50, 20)))
    _run_stages(Progress("bar", screen, interval=0))
    assert all(len(line) <= 50 for line in _screen_lines(screen.getvalue()))


def test_a_pipe_gets_plain_lines_and_tools_get_json():
    log = io.StringIO()
    _run_stages(Progress("bar", log))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and all(len(line) <= 80 for line in lines)
    assert "[parbpe] count: 24/24 100% 154 MB, 21.3 MB/s, rss 310 MB" in lines
    tool = io.StringIO()
    _run_stages(Progress("jsonl", tool))
    events = [json.loads(line) for line in tool.getvalue().splitlines()]
    assert events[0]["event"] == "config" and events[-1]["event"] == "done"
    assert {"event": "progress", "stage": "merge", "done": 32512, "total": 32512} == {
        k: v for k, v in events[-2].items() if k != "time"} and isinstance(events[-2]["time"], float)


def _a_few_milliseconds(task: int) -> int:
    import time

    time.sleep(0.004)
    return task


def test_progress_is_read_while_workers_answer_often():
    """Issue 55 item 15: the count bar sat at 0% and jumped to 100%: the pool read progress (tick) only
    after half a second without a worker's message, so tasks that finish often never moved it. Here 2
    workers answer every few milliseconds for about a second: tick runs on the way, every poll."""
    import time

    from parbpe.run.pool import get_context, parallel

    ticks: list[float] = []
    started = time.monotonic()
    results = list(parallel(_a_few_milliseconds, list(range(400)), 2, get_context("fork"),
                            tick=lambda: ticks.append(time.monotonic() - started), poll=0.2))
    elapsed = time.monotonic() - started
    assert results == list(range(400))
    assert elapsed > 0.6, f"the tasks took {elapsed:.2f} s: too fast to tell"
    times = [0.0, *ticks, elapsed]
    assert len(ticks) >= 2 and max(b - a for a, b in zip(times, times[1:])) < 0.5, (ticks, elapsed)


def test_the_superword_counts_progress_closes_each_stages_bar():
    """Issue 55 item 15: SuperBPE on a terminal left 'count 0/24' and 'reduce 1/32' bars on screen: the count
    beside stage 1's merge forwarded only its latest line per look, unforced. Each stage's last report of a
    look now goes through, forced at the stage's end, and stage 2's merge bar counts merges."""
    from parbpe.pipeline.count_beside import forward_progress

    lines = [{"event": "progress", "stage": "count", "done": d, "total": 24, "MB": d * 6.0} for d in range(0, 25, 6)]
    lines += [{"event": "note", "message": "counted"}]
    lines += [{"event": "progress", "stage": "reduce", "done": d, "total": 32} for d in range(1, 33)]
    screen = Terminal()
    progress = Progress("bar", screen, interval=10.0)  # a slow terminal rate: only forced reports draw at once
    text = "".join(json.dumps({"time": 0.0, **e}) + "\n" for e in lines).encode()
    forward_progress(text[: len(text) // 3].rsplit(b"\n", 1)[0] + b"\n", progress)  # one look, mid-count
    forward_progress(text[len(text[: len(text) // 3].rsplit(b"\n", 1)[0]) + 1:], progress)  # the rest
    progress.update("superbpe_merge", 25958, 32512)
    progress.update("superbpe_merge", 32512, 32512, force=True)
    progress.close()
    bars = [line for line in _screen_lines(screen.getvalue()) if "|" in line and not line.startswith("[parbpe]")]
    assert [b.split(":")[0] for b in bars] == ["count", "reduce", "superbpe_merge"], bars
    assert "24/24" in bars[0] and "32/32" in bars[1] and "merges" in bars[2] and "steps" not in bars[2], bars

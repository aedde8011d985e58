"""Progress reports for long stages: bars for people, JSON lines for tools, or nothing.

`bar` on a terminal draws one tqdm bar per stage (counting in work units with MB and MB/s,
reducing in partitions, merging in merges/s), each with its rate and ETA, never wider than the
terminal nor than 80 columns; a finished stage's bar stays on its own line, and messages print
above the bar in use. tqdm rather than hand-drawn bars or rich: it is what HF tokenizers and
datasets users already see, a small pure-Python package, and costs nothing measurable here (bars
are redrawn at most twice a second). `bar` elsewhere (a pipe, a log file)
writes a plain line every 5 s. `jsonl` writes one JSON object per event, for tools; `none` is silent.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from typing import Any, TextIO

MODES = ("bar", "jsonl", "none")
MAX_WIDTH = 80
UNITS = {"count": " units", "reduce": " parts", "merge": " merges", "superbpe_merge": " merges",
         "prune": " iterations", "segment": " slices"}  # what a stage's bar counts


class Progress:
    """Reports stage progress to a stream (stderr by default); see the module docstring."""

    def __init__(self, mode: str = "bar", stream: TextIO | None = None, interval: float = 0.5) -> None:
        if mode not in MODES:
            raise ValueError(f"progress must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream)
        self.interval = interval if self.tty else max(interval, 5.0)
        self.width = _width(self.stream)
        self._last = 0.0
        self._last_stage: str | None = None  # a new stage is shown at once
        self._bar = None  # the tqdm bar of the stage in progress (terminal only)
        self._stage: str | None = None

    def event(self, kind: str, **fields: Any) -> None:
        """A one-off message (config echo, stage start or end, warning)."""
        if self.mode == "none":
            return
        if self.mode == "jsonl":
            self._write(json.dumps({"event": kind, "time": round(time.time(), 3), **fields}) + "\n")
            return
        text = fields.pop("message", "")
        extra = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
        line = f"[parbpe] {kind}: {text}{' ' if text and extra else ''}{extra}"
        wrapped = textwrap.fill(line, self.width, subsequent_indent="    ", break_on_hyphens=False,
                                break_long_words=False)
        if self._bar is not None:
            self._bar.write(wrapped, file=self.stream)
        else:
            self._write(wrapped + "\n")

    def update(self, stage: str, done: float, total: float | None = None, force: bool = False, **fields: Any) -> None:
        """Progress within a stage; rate-limited unless force (a stage reports force=True when done)."""
        if self.mode == "none":
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval and stage == self._last_stage:
            return
        self._last, self._last_stage = now, stage
        if self.mode == "bar" and self.tty:
            self._draw(stage, done, total, force, fields)
            return
        if self.mode == "jsonl":
            payload = {"event": "progress", "time": round(time.time(), 3), "stage": stage, "done": done,
                       "total": total, **fields}
            self._write(json.dumps(payload) + "\n")
            return
        share = f" {100 * done / total:.0f}%" if total else ""
        line = f"[parbpe] {stage}: {_fmt(done)}{'/' + _fmt(total) if total else ''}{share} {_postfix(fields)}"
        self._write(line.rstrip()[: self.width] + "\n")

    def _draw(self, stage: str, done: float, total: float | None, force: bool, fields: dict[str, Any]) -> None:
        from tqdm import tqdm

        if stage != self._stage:
            self._finish()
            self._stage = stage
            self._bar = tqdm(total=total, desc=stage, unit=UNITS.get(stage, " steps"), file=self.stream,
                             unit_scale=UNITS.get(stage) == " merges",
                             ncols=self.width, mininterval=self.interval, leave=True, dynamic_ncols=False,
                             smoothing=0.1)
        bar = self._bar
        if total is not None and bar.total != total:
            bar.total = total
        postfix = _postfix(fields)
        if postfix:
            bar.set_postfix_str(postfix, refresh=False)
        bar.update(done - bar.n)  # tqdm redraws at most every mininterval
        if force:
            bar.refresh()
            if total is not None and done >= total:
                self._finish()

    def _finish(self) -> None:
        """Close the current stage's bar, leaving it on its own line."""
        if self._bar is not None:
            self._bar.close()
            self._bar, self._stage = None, None

    def close(self) -> None:
        if self.mode == "bar":
            self._finish()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _width(stream: TextIO) -> int:
    """The terminal's width, at most MAX_WIDTH (MAX_WIDTH when it cannot be told)."""
    try:
        return max(20, min(os.get_terminal_size(stream.fileno()).columns, MAX_WIDTH))
    except (AttributeError, ValueError, OSError):
        return MAX_WIDTH


def _postfix(fields: dict[str, Any]) -> str:
    """The extra numbers of a progress report, short: '152 MB, 23.1 MB/s, rss 310 MB, 2 spills'."""
    parts = []
    if "MB" in fields:
        parts.append(f"{fields['MB']:,.0f} MB")
    if "MB_s" in fields:
        parts.append(f"{fields['MB_s']:.1f} MB/s")
    if "rss_MB" in fields:
        parts.append(f"rss {fields['rss_MB']:,.0f} MB")
    if fields.get("spills"):
        parts.append(f"{fields['spills']} spills")
    parts += [f"{k}={_fmt(v)}" for k, v in fields.items() if k not in ("MB", "MB_s", "rss_MB", "spills")]
    return ", ".join(parts)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)

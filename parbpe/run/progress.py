"""Progress reports for long stages: a bar for people, JSON lines for tools, or nothing."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

MODES = ("bar", "jsonl", "none")


class Progress:
    """Reports stage progress to a stream (stderr by default).

    `bar` redraws one line on a terminal and prints a line every few seconds elsewhere;
    `jsonl` writes one JSON object per event, for tools; `none` is silent.
    """

    def __init__(self, mode: str = "bar", stream: TextIO | None = None, interval: float = 0.5) -> None:
        if mode not in MODES:
            raise ValueError(f"progress must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.stream = stream or sys.stderr
        self.interval = interval if self.stream.isatty() else max(interval, 5.0)
        self._last = 0.0
        self._open_line = False

    def event(self, kind: str, **fields: Any) -> None:
        """A one-off message (config echo, stage start or end, warning)."""
        if self.mode == "none":
            return
        if self.mode == "jsonl":
            self._write(json.dumps({"event": kind, "time": round(time.time(), 3), **fields}) + "\n")
            return
        self._end_line()
        text = fields.pop("message", "")
        extra = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
        self._write(f"[parbpe] {kind}: {text}{' ' if text and extra else ''}{extra}\n")

    def update(self, stage: str, done: float, total: float | None = None, force: bool = False, **fields: Any) -> None:
        """Progress within a stage; rate-limited unless force."""
        if self.mode == "none":
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        if self.mode == "jsonl":
            payload = {"event": "progress", "stage": stage, "done": done, "total": total, **fields}
            self._write(json.dumps(payload) + "\n")
            return
        share = f" {100 * done / total:5.1f}%" if total else ""
        extra = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
        line = f"[parbpe] {stage}: {_fmt(done)}{'/' + _fmt(total) if total else ''}{share} {extra}"
        if self.stream.isatty():
            self._write("\r" + line.ljust(100))
            self._open_line = True
        else:
            self._write(line + "\n")

    def _end_line(self) -> None:
        if self._open_line:
            self._write("\n")
            self._open_line = False

    def close(self) -> None:
        if self.mode == "bar":
            self._end_line()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)

"""Two threads at once: kernels and numpy's sorts release the GIL, so halves of a job run side by side."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Beside:
    """fn(*args) in a new thread, beside this one; wait() joins it and returns its result, or raises
    its exception in the waiting thread."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn, self._args, self._box = fn, args, {}
        self._thread = threading.Thread(target=self._run, name="parbpe-beside", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._box["value"] = self._fn(*self._args)
        except BaseException as exc:  # noqa: BLE001 (raised again by wait, in the waiting thread)
            self._box["error"] = exc

    def wait(self) -> Any:
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


def in_two(left: Callable[[], Any], right: Callable[[], Any]) -> tuple[Any, Any]:
    """left() in a new thread while this one runs right(); both results. An exception in either is
    raised here, once both are done."""
    beside = Beside(left)
    try:
        right_value = right()
    finally:
        left_value = beside.wait()
    return left_value, right_value


def one_or_two(calls: list[Callable[[], Any]]) -> list[Any]:
    """The results of one call (run in this thread) or two (side by side, in_two)."""
    if len(calls) == 1:
        return [calls[0]()]
    left, right = calls
    return list(in_two(left, right))

"""Imports refused for one question: a library that asks whether an optional module is there (and
pays its import when it is) is told it is not, in a process that is parbpe's alone, where parbpe
never gives that library such a module's objects. The module stays importable for everyone after."""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator


class _Refuse(importlib.abc.MetaPathFinder):
    """An import finder that says one module is not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name, path, target=None):
        if name == self.name:
            raise ModuleNotFoundError(f"{name} is kept out of this check in this process", name=name)
        return None


@contextlib.contextmanager
def refused(name: str) -> Iterator[None]:
    """While inside: `import name` fails as if the module were not installed (unless it is loaded already)."""
    finder = _Refuse(name)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)

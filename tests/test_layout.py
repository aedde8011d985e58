"""The package layout is a contract: stages import only what lies below them, and nothing imports in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "parbpe"

# What each part of parbpe may import (besides itself). Stages come in pipeline order; `run` and
# `io` serve every stage; `patterns` and `config` are the settings every stage reads.
ALLOWED = {
    "run": {"io", "jit"},  # the run directory writes through io/atomic; a fork waits for the kernels' loading
    "patterns": set(),
    "warnings": set(),  # parbpe's warning categories: any part may warn
    "jit": set(),  # the kernel seam: any numeric part may declare kernels
    "io": set(),
    "config": {"jit", "run", "patterns"},  # an --init tokenizer is read by the inputs stage, not by the settings
    "count": {"jit", "config", "patterns", "run", "io"},
    "merge": {"jit", "run"},
    "tokenizer": {"jit", "patterns", "io"},
    "pathpiece": {"jit", "tokenizer", "run"},  # PathPiece's vocabulary construction: segmentation kernels, workers
    "pipeline": {"jit", "config", "patterns", "run", "io", "count", "merge", "tokenizer", "pathpiece", "warnings",
                 "__init__"},
    "train": {"jit", "config", "patterns", "run", "io", "count", "merge", "tokenizer", "pathpiece", "pipeline",
              "warnings", "__init__"},
    "cli": {"jit", "config", "patterns", "run", "io", "count", "merge", "tokenizer", "pathpiece", "pipeline", "train",
            "warnings"},
    "__init__": {"config", "tokenizer", "train", "warnings"},
    "__main__": {"cli"},  # python -m parbpe
}


def _part(module: str) -> str:
    """parbpe.count.pieces -> count; parbpe.train -> train; parbpe -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports() -> dict[str, set[str]]:
    """Each parbpe module -> what it imports of parbpe (anywhere in its source, functions included)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "parbpe")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                if base.split(".")[0] == "parbpe":
                    targets.update(f"{base}.{a.name}" for a in node.names)  # a module, or a name in base
        graph[module] = targets
    modules = set(graph)

    def resolve(target: str) -> str:
        while target not in modules:  # a name imported from a module stands for that module
            target = target.rpartition(".")[0]
        return target

    return {m: {resolve(t) for t in targets} - {m} for m, targets in graph.items()}


def test_every_part_of_parbpe_is_in_the_layering():
    parts = {_part(m) for m in _imports()}
    assert parts == set(ALLOWED), "a new top-level module or package needs its place in ALLOWED (and ARCHITECTURE.md)"


def test_no_module_imports_above_its_stage():
    wrong = []
    for module, targets in _imports().items():
        part = _part(module)
        for target in targets:
            other = _part(target)
            if other != part and other not in ALLOWED[part]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(wrong))


def test_no_import_circles():
    # A package's __init__ importing its own modules is no circle by itself (as in import_cycles.py).
    edges = {m: {t for t in targets if not t.startswith(m + ".")} for m, targets in _imports().items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges[m]):
            assert state.get(t) != 1, "import circle: " + " -> ".join(path[path.index(t):] + [m, t])
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])


def test_subpackage_inits_hold_only_a_docstring():
    # A subpackage __init__ that imported its modules would run them (and their imports) whenever any
    # sibling is imported, and would make the layering depend on import order.
    for init in PACKAGE.glob("*/__init__.py"):
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{init} should hold only its docstring"

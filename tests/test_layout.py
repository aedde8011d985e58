"""The package layout is a contract: stages import only what lies below them, nothing imports in a circle,
each package's docstring says what it imports (a line `Imports: a, b.`, checked against its real imports),
and comments and docstrings say what and why, not what a run measured on which day."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "parbpe"

# What each part of parbpe may import (besides itself). Stages come in pipeline order; `run` and
# `io` serve every stage; `patterns` and `config` are the settings every stage reads.
ALLOWED = {
    "run": {"io", "jit"},  # the run directory writes through io/atomic; a fork waits for the kernels' loading
    "patterns": set(),
    "warnings": set(),  # parbpe's warning categories: any part may warn
    "jit": set(),  # the kernel seam: any numeric part may declare kernels
    "kernels": {"jit"},  # every numba kernel: numpy and jit only, so any stage may call them
    "io": set(),
    "config": {"jit", "run", "patterns"},  # an --init tokenizer is read by the inputs stage, not by the settings
    "count": {"jit", "kernels", "config", "patterns", "run", "io"},
    "merge": {"jit", "kernels", "run"},
    "tokenizer": {"jit", "kernels", "patterns", "io"},
    "pathpiece": {"jit", "kernels", "tokenizer", "run"},  # PathPiece's construction: segmentation tables, workers
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


def _imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each parbpe module -> what it imports of parbpe (anywhere in its source, functions included)."""
    graph: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
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


# --- each package's docstring states its imports ----------------------------------------------------------
IMPORTS_PREFIX = "Imports: "  # the docstring's line: "Imports: io, jit." or "Imports: nothing."


def stated_imports(docstring: str) -> set[str] | None:
    """The parts of parbpe a package docstring's one `Imports: a, b.` line names ("parbpe": the top package,
    for its __init__), or None where the docstring has no such line, or more than one."""
    lines = [line.strip() for line in docstring.splitlines() if line.strip().startswith(IMPORTS_PREFIX)]
    if len(lines) != 1 or not lines[0].endswith("."):
        return None
    names = lines[0][len(IMPORTS_PREFIX):-1].strip()
    if names == "nothing":
        return set()
    return {"__init__" if name.strip() == "parbpe" else name.strip() for name in names.split(",")}


def docstring_problems(package: str, docstring: str, imported: set[str]) -> list[str]:
    """Where a package's docstring and the parts of parbpe its modules import (imported) disagree."""
    stated = stated_imports(docstring)
    if stated is None:
        return [f"{package}/__init__.py: its docstring needs one line '{IMPORTS_PREFIX}a, b.' "
                f"(or '{IMPORTS_PREFIX}nothing.'); it imports {', '.join(sorted(imported)) or 'nothing'}"]
    problems = []
    if stated - imported:
        names = ", ".join(sorted(stated - imported))
        problems.append(f"{package}/__init__.py states {names}, which it does not import")
    if imported - stated:
        names = ", ".join(sorted(imported - stated))
        problems.append(f"{package}/__init__.py does not state {names}, which it imports")
    return problems


def package_docstring_problems(package: Path = PACKAGE) -> list[str]:
    """Every subpackage of package whose docstring's Imports line differs from what its modules import."""
    imported: dict[str, set[str]] = {}
    for module, targets in _imports(package).items():
        imported.setdefault(_part(module), set()).update(_part(t) for t in targets)
    problems = []
    for init in sorted(package.glob("*/__init__.py")):
        part = init.parent.name
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        problems += docstring_problems(part, docstring, imported.get(part, set()) - {part})
    return problems


def test_package_docstrings_state_their_imports():
    problems = package_docstring_problems()
    assert not problems, "package docstrings against their imports:\n" + "\n".join(problems)


def test_stated_imports_lie_within_the_layering():
    # What a package states it imports is what it imports (above), and that stays within ALLOWED.
    for init in PACKAGE.glob("*/__init__.py"):
        stated = stated_imports(ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or "")
        assert stated is not None and stated <= ALLOWED[init.parent.name], init


@pytest.mark.parametrize("docstring, imported, wrong", [
    ("Owns things.\n\nImports: io, jit.", {"io", "jit"}, None),
    ("Imports: nothing.", set(), None),
    ("Imports: parbpe, io.", {"__init__", "io"}, None),
    ("Imports: io, jit, merge.", {"io", "jit"}, "states merge"),  # stated, not imported
    ("Imports: io.", {"io", "jit"}, "does not state jit"),  # imported, not stated
    ("Imports: nothing.", {"run"}, "does not state run"),
    ("Owns things; imports io only.", {"io"}, "needs one line"),  # no Imports line
    ("Imports: io\nImports: io.", {"io"}, "needs one line"),  # two lines, one without its period
])
def test_the_docstring_check_bites(docstring, imported, wrong):
    problems = docstring_problems("run", docstring, imported)
    if wrong is None:
        assert problems == []
    else:
        assert len(problems) == 1 and wrong in problems[0], problems


def test_the_docstring_check_reads_a_packages_real_imports(tmp_path):
    # A fake parbpe whose package a says it imports nothing, and whose module imports b: the check fails,
    # and passes once the docstring says so.
    root = tmp_path / "parbpe"
    for part in ("a", "b"):
        (root / part).mkdir(parents=True)
        (root / part / "__init__.py").write_text('"""Part.\n\nImports: nothing.\n"""\n')
    (root / "__init__.py").write_text('"""Top."""\n')
    (root / "b" / "thing.py").write_text("X = 1\n")
    (root / "a" / "user.py").write_text("def f():\n    from ..b.thing import X\n    return X\n")
    assert package_docstring_problems(root) == ["a/__init__.py does not state b, which it imports"]
    (root / "a" / "__init__.py").write_text('"""Part.\n\nImports: b.\n"""\n')
    assert package_docstring_problems(root) == []


# --- comments and docstrings without measured seconds, dates or benchmark sections ---------------------
# They go stale with the next change: the results are docs/BENCHMARKS.md's, the history is git's.
MEASURED = re.compile(r"20[0-9]{2}-[0-9]{2}-[0-9]{2}|BENCHMARKS|[0-9]+\.[0-9]+ s\b")


def commentary(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring (module, class, function) of a module's source."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((first.lineno, value.value))
    return sorted(found)


def measured_in_commentary(source: str) -> list[str]:
    """Each measured time, date or BENCHMARKS reference in a module's comments and docstrings, as 'line: match'.
    Strings the program shows are not commentary and are not looked at."""
    return [f"{line + text[:m.start()].count(chr(10))}: {m.group()}"
            for line, text in commentary(source) for m in MEASURED.finditer(text)]


def test_comments_and_docstrings_hold_no_timings_dates_or_benchmark_sections():
    found = [f"{path.relative_to(PACKAGE.parent)}:{hit}" for path in sorted(PACKAGE.rglob("*.py"))
             for hit in measured_in_commentary(path.read_text(encoding="utf-8"))]
    assert not found, ("comments and docstrings say what and why; measured seconds, dates and BENCHMARKS "
                       "sections go to docs/BENCHMARKS.md, docs/DECISIONS.md or a commit message:\n" + "\n".join(found))


def test_the_commentary_check_bites():
    source = '''"""A module (1.5 s on realmix)."""
# kept at 3 (2026-11-25)
X = "took 1.5 s"  # shown to users: not commentary


def f():
    """What and why.

    More: BENCHMARKS 29."""
    return "2026-11-25"
'''
    assert measured_in_commentary(source) == ["1: 1.5 s", "2: 2026-11-25", "9: BENCHMARKS"]
    assert measured_in_commentary('"""What: a 16-bit key, 2 s a round at most."""\n') == []

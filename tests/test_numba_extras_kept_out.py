"""numba's first kernel imports cffi (and pycparser) where cffi is installed, and its import yaml where
PyYAML is: the parbpe command and its workers keep both out (jit.keep_extras_out_of_numba), yaml only
where no .numba_config.yaml asks for it, and both still import for whoever asks."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")
needs_cffi = pytest.mark.skipif(importlib.util.find_spec("cffi") is None, reason="cffi is not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL_CALL = """
import sys
import numpy as np
from parbpe import jit
{keep}
from parbpe.count.key_tables import KeyCounts
table = KeyCounts(1)
table.add((np.array([5, 7, 5], np.uint64),))
assert sorted(zip(*[a.tolist() for a in table.items()])) == [(5, 2), (7, 1)]
print("cffi" in sys.modules)
import cffi
cffi.FFI()
"""


def _cffi_loaded_by_a_kernel(keep: str) -> bool:
    done = subprocess.run([sys.executable, "-c", KERNEL_CALL.format(keep=keep)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PARBPE_JIT": "on"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() == "True"


@needs_cffi
def test_kernels_run_without_cffi_and_cffi_still_imports():
    assert not _cffi_loaded_by_a_kernel("jit.keep_extras_out_of_numba()")


@needs_cffi
def test_kept_out_after_numba_is_loaded_too():
    assert not _cffi_loaded_by_a_kernel("jit.numba_module(); jit.keep_extras_out_of_numba()")


@needs_cffi
def test_without_the_call_a_kernel_does_import_cffi():
    # The premise of the tests above: numba's typing imports cffi (if it stops, the call can go).
    assert _cffi_loaded_by_a_kernel("")


@needs_cffi
def test_the_parbpe_command_keeps_cffi_and_yaml_out(tmp_path):
    (tmp_path / "a.txt").write_text("kept out of it " * 5000)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "parbpe.cli", "train", str(tmp_path / "a.txt"),
                           "--vocab-size", "300", "--out", str(tmp_path / "tok"), "--jit", "on", "--progress", "none"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "numba.core.typing.cffi_utils" in imported  # numba's typing was loaded: the listing is there
    # A refused import is listed as "cffi" alone; a real one loads cffi.api and pycparser.
    assert not [name for name in imported if name.startswith(("cffi.", "pycparser"))]
    assert not [name for name in imported if name.startswith("yaml.")]  # (the same: "yaml" alone if refused)


YAML_CHECK = """
import sys
from parbpe import jit
{keep}
numba = jit.numba_module()
print("yaml" in sys.modules, numba.config.BOUNDSCHECK)
import yaml
yaml.safe_load("a: 1")
"""


def _yaml_after_numba(keep: str, cwd) -> tuple[bool, str]:
    """Whether numba's import loaded yaml, and its BOUNDSCHECK setting, in a new process in cwd."""
    done = subprocess.run([sys.executable, "-c", YAML_CHECK.format(keep=keep)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, boundscheck = done.stdout.split()
    return loaded == "True", boundscheck


def test_numba_imports_without_yaml_unless_a_config_file_asks(tmp_path):
    pytest.importorskip("yaml")
    assert _yaml_after_numba("", tmp_path)[0]  # the premise: numba's import loads yaml
    assert not _yaml_after_numba("jit.keep_extras_out_of_numba()", tmp_path)[0]  # and yaml still imports after
    (tmp_path / ".numba_config.yaml").write_text("boundscheck: 1\n")
    assert _yaml_after_numba("jit.keep_extras_out_of_numba()", tmp_path) == (True, "1")  # the file is read


CACHE_LOAD = """
import sys
import numpy as np
from parbpe import jit
{keep}
from parbpe.count.key_tables import KeyCounts
table = KeyCounts(1)
table.add((np.array([5, 7, 5], np.uint64),))
assert sorted(zip(*[a.tolist() for a in table.items()])) == [(5, 2), (7, 1)]
registries = "numba.np.arraymath" in sys.modules  # numpy's lowering: what compiling reads
numba = jit.numba_module()
sort_sum = numba.njit(lambda a: np.sort(a)[:2].sum())  # compiled here (never cached): it needs the registries
assert sort_sum(np.array([9, 3, 4])) == 7
print(registries)
"""


def _registries_loaded_by_cache_loads(keep: str, cache_dir) -> bool:
    """Run CACHE_LOAD twice in new processes with numba's cache in cache_dir (the first fills it, the
    second loads from it): whether the second loaded numba's registries for its kernels."""
    env = {**os.environ, "PARBPE_JIT": "on", "NUMBA_CACHE_DIR": str(cache_dir), "PYTHONPATH": ROOT}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CACHE_LOAD.format(keep=keep)], capture_output=True, text=True,
                              timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() == "True"


def test_kernels_load_from_the_cache_without_the_registries_and_compiling_still_works(tmp_path):
    assert not _registries_loaded_by_cache_loads("jit.keep_extras_out_of_numba()", tmp_path)


def test_without_the_call_numba_loads_its_registries_at_every_cache_load(tmp_path):
    # The premise of the test above: numba's own cache load refreshes its contexts (if it stops, the patch can go).
    assert _registries_loaded_by_cache_loads("", tmp_path)

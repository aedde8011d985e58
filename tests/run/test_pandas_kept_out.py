"""pyarrow's first pa.array/pa.table call imports pandas (about 50 MB of RSS a process): the
parbpe command and its workers keep it out, and pandas still works for whoever imports it."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = """
import sys
import pyarrow as pa
from parbpe.run.pool import keep_pandas_out_of_pyarrow
keep_pandas_out_of_pyarrow()
table = pa.table({"a": pa.array([1, 2, 3]), "s": pa.array(["x", "y", "z"], pa.string())})
assert "pandas" not in sys.modules, "pyarrow imported pandas"
import pandas
assert table.to_pandas()["a"].tolist() == [1, 2, 3]
print("ok")
"""


def test_pyarrow_works_without_pandas_and_pandas_still_imports():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_without_the_call_pyarrow_does_import_pandas():
    # The premise of the test above: pa.array alone loads pandas (if pyarrow stops doing so, the
    # call can go).
    code = "import sys, pyarrow as pa; pa.array([1]); print('pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_no_process_of_a_parbpe_run_imports_pandas(tmp_path: Path, workers: int):
    rng = random.Random(3)
    for k in range(3):
        (tmp_path / f"part{k}.txt").write_text(" ".join(rng.choice(["pandas", "kept", "out", "of", "it", "2026"])
                                                        for _ in range(20_000)))
    # -X importtime: every process of the tree (forked workers inherit it) lists its imports on stderr.
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "parbpe.cli", "train",
                           *sorted(map(str, tmp_path.glob("*.txt"))), "--vocab-size", "300",
                           "--out", str(tmp_path / "tok"), "--workers", str(workers), "--progress", "none"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "parbpe.count.counter" in imported  # the listing is there
    # A refused import is listed as "pandas" alone; a real one loads pandas.core and the rest.
    assert not [name for name in imported if name.startswith("pandas.")]

"""bench/regress.py: the tree against a baseline checkout, and its one-line refusals of bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REGRESS = ROOT / "bench" / "regress.py"
HELDOUT = Path("/work/shared/data/realmix/heldout.parquet")


def _regress(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REGRESS), *args], capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not HELDOUT.exists(), reason="needs the shared realmix held-out file")
def test_regress_serial_case_against_the_same_checkout_is_identical(tmp_path):
    done = _regress("--baseline", str(ROOT), "--cases", "serial", "--repeat", "1", "--json", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    (result,) = json.loads((tmp_path / "r.json").read_text())
    assert result["case"] == "serial" and result["identical"] is True
    assert {"wall", "merge", "merge.selection", "merge.applying"} <= set(result["ratios"])
    assert "byte-identical" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--baseline", "/nonexistent-checkout"], "is not a parbpe checkout"),
    (["--baseline", str(ROOT), "--repeat", "0"], "--repeat must be at least 1"),
    (["--baseline", str(ROOT), "--cases", "serial,bogus"], "unknown case 'bogus'"),
])
def test_regress_refuses_bad_arguments_in_one_line(args, message):
    done = _regress(*args)
    assert done.returncode != 0 and message in done.stderr

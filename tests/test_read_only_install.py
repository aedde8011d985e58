"""A read-only installation with no writable home: parbpe's kernels still run (numba's cache moves to
the system's temporary folder, said in one line), and the result is the writable install's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _can_bind_mount() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_bind_mount(), reason="needs unshare -m (root, Linux) for read-only bind mounts")
def test_a_read_only_package_and_home_train_with_kernels(tmp_path):
    pytest.importorskip("numba")
    package, home, temp, out = tmp_path / "site", tmp_path / "home", tmp_path / "tmp", tmp_path / "out"
    shutil.copytree(ROOT / "parbpe", package / "parbpe", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in (home, temp, out):
        folder.mkdir()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of the read-only test, token {i % 97} again\n" for i in range(3000)))
    train = [sys.executable, "-m", "parbpe", "train", str(corpus), "--vocab-size", "400", "--workers", "1",
             "--jit", "on", "--progress", "bar"]
    script = (f"set -e; for d in {package} {home}; do mount --bind $d $d; mount -o remount,bind,ro $d; done; "
              f"touch {package}/parbpe/x 2>/dev/null && exit 9; cd {out}; "
              + " ".join(f"'{a}'" for a in train) + f" --out {out / 'ro'}")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TMPDIR=str(temp), PYTHONPATH=str(package), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"numba caches kernels in {temp}" in done.stderr.replace("\n    ", " ")
    assert any(name.startswith("parbpe-numba-cache-") for name in os.listdir(temp))
    reference = subprocess.run(train + ["--out", str(out / "rw")], capture_output=True, text=True, timeout=600,
                               cwd=ROOT)
    assert reference.returncode == 0, reference.stderr[-2000:]
    assert (out / "ro" / "merges.txt").read_bytes() == (out / "rw" / "merges.txt").read_bytes()

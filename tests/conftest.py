from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# Ray reads this when it is imported: nodes started by tests (tests/run/test_ray_executor.py) then
# listen on 127.0.0.1 only, as every server a test starts must.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

# ../shared/data beside the checkout; PARBPE_SHARED_DATA names it for a checkout elsewhere (a git worktree).
SHARED_DATA = Path(os.environ.get("PARBPE_SHARED_DATA")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")

# A shell without job control starts background commands with SIGINT ignored, and an ignored
# signal stays ignored in every program they start: `make test &` would hand each `parbpe train`
# a test starts a Ctrl-C it never sees, and the Ctrl-C and resume tests would fail (exit 0) for
# the way the suite was started. A terminal's Ctrl-C reaches programs with the default handling.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """Tests marked heavy_imports (datasets, transformers) run late: those imports add hundreds of MB
    to this process, which tests of the memory budget (sized from the process tree's RSS) would count.
    Tests marked ray run last of all: a Ray driver leaves gRPC threads in this process, and a process
    forked from one with such threads (every local worker pool of a later test) can crash or hang."""
    items.sort(key=lambda item: (item.get_closest_marker("ray") is not None,
                                 item.get_closest_marker("heavy_imports") is not None))


@pytest.fixture
def shared_data() -> Path:
    """../shared/data, or skip the test when it is not there."""
    if not (SHARED_DATA / "realmix").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def realmix_run(tmp_path_factory):
    """One realmix shard (3 row groups, 19 MB of text) trained once to 1,024 tokens with workers=2:
    (files, settings, result, out_dir), the reference that iterator, datasets and transformers tests
    compare with (outputs are identical for every worker count)."""
    if not (SHARED_DATA / "realmix").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    import parbpe

    files = [str(SHARED_DATA / "realmix" / "train-00000-of-00008.parquet")]
    settings = dict(vocab_size=1024, special_tokens=("<|endoftext|>",))
    out = tmp_path_factory.mktemp("realmix") / "parquet"
    return files, settings, parbpe.train(files, out_dir=out, workers=2, **settings), out

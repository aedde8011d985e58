from __future__ import annotations

import os
from pathlib import Path

import pytest

# Ray reads this when it is imported: nodes started by tests (tests/run/test_ray_executor.py) then
# listen on 127.0.0.1 only, as every server a test starts must.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """../shared/data, or skip the test when it is not there."""
    if not (SHARED_DATA / "realmix").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA

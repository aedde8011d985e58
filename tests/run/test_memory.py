"""run/memory.py: sizes, and what the memory budget gives the counting and reducing workers."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from parbpe.run.memory import PeakSampler, parse_size


def test_parse_size():
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1.5g") == 1_500_000_000
    assert parse_size("1000") == 1000


def test_worker_data_limit_follows_the_budget():
    from parbpe.run.memory import (
        HELD_FACTOR,
        MAX_WORKER_DATA,
        MIN_WORKER_DATA,
        WORKER_OVERHEAD,
        parse_size,
        worker_data_limit,
    )

    base, unit = 100 * 10**6, 5 * 10**6
    two_gb = worker_data_limit(2 * 10**9, 2, base, unit)
    assert two_gb == ((2 * 10**9 - 3 * base) // 2 - 4 * unit - WORKER_OVERHEAD) // HELD_FACTOR
    assert worker_data_limit(10**9, 2, base, unit) < two_gb < worker_data_limit(2 * 10**9, 1, base, unit)
    assert worker_data_limit(10**12, 2, base, unit) == MAX_WORKER_DATA
    with pytest.raises(ValueError, match=r"too small for 2 worker\(s\).*largest work unit \(5.0 MB of text\)") as error:
        worker_data_limit(400 * 10**6, 2, base, unit)
    suggested = parse_size("".join(str(error.value).split("use at least ")[1].split(" ")[:2]))  # "800.0 MB"
    assert worker_data_limit(suggested, 2, base, unit) >= MIN_WORKER_DATA  # the size the error names does


def test_count_layout_has_the_parent_count_under_a_tight_budget():
    from parbpe.run.memory import (
        MIN_WORKER_DATA,
        PARENT_COUNTING,
        ROOMY_WORKER_DATA,
        count_layout,
        worker_data_limit,
    )

    base, unit = 130 * 10**6, 2 * 10**6
    roomy = count_layout(4 * 10**9, 2, base, unit)  # plenty: two workers, the parent waits
    assert (roomy.shards, roomy.parent_counts) == (2, False) and roomy.data_limit >= ROOMY_WORKER_DATA
    tight = count_layout(650 * 10**6, 2, base, unit)  # one process fewer leaves each shard more
    assert (tight.shards, tight.parent_counts) == (2, True)
    assert tight.data_limit == worker_data_limit(650 * 10**6, 2, base, unit, processes=2, extra=PARENT_COUNTING)
    assert tight.data_limit > worker_data_limit(650 * 10**6, 2, base, unit)
    lean = count_layout(400 * 10**6, 2, base, unit)  # two shards do not fit: the parent counts alone
    assert (lean.shards, lean.parent_counts) == (1, True) and lean.data_limit >= MIN_WORKER_DATA
    with pytest.raises(ValueError, match=r"too small for 2 worker\(s\).*use at least"):
        count_layout(150 * 10**6, 2, base, unit)


def test_reduce_workers_follow_the_budget():
    from parbpe.run.memory import reduce_workers

    base, partition = 130 * 10**6, 10 * 10**6
    assert reduce_workers(10**10, 2, base, partition) == 2
    assert reduce_workers(400 * 10**6, 2, base, partition) == 1  # this process reduces alone
    assert reduce_workers(10**10, 1, base, partition) == 1


def test_the_sampler_keeps_its_latest_sample_and_peaks_by_stage():
    with PeakSampler(interval=3600) as sampler:
        start = sampler.latest
        sampler.stage("big")
        block = bytearray(80 * 10**6)
        block[::4096] = b"x" * len(block[::4096])  # touched: resident
        assert sampler.sample() == sampler.latest >= start + 70 * 10**6
        del block
        sampler.stage("small")
    assert sampler.by_stage["big"] >= start + 70 * 10**6 > sampler.by_stage["small"] - 10 * 10**6
    assert sampler.peak >= sampler.by_stage["big"]


def test_the_sampler_finds_the_tree_again_every_refresh_seconds_and_at_each_stage(monkeypatch):
    """Finding the tree's processes reads /proc of every process on the machine: between refreshes
    a sample reads only the RSS of the processes found; a child started since is found at the next."""
    from parbpe.run import memory

    calls = []
    real = memory.tree_processes
    monkeypatch.setattr(memory, "tree_processes", lambda pid=None: calls.append(pid) or real(pid))
    child = None
    try:
        with PeakSampler(interval=3600) as sampler:
            found = len(calls)
            sampler._found = time.monotonic()  # (a refresh just now: a slow host takes no refresh's time)
            for _ in range(20):
                sampler.sample()
            assert len(calls) == found
            child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(60 * 10**6); "
                                      "b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); time.sleep(60)"],
                                     stdout=subprocess.PIPE, text=True)
            assert child.stdout.readline().strip() == "ready"
            sampler._found = time.monotonic()  # the child's start may take longer than REFRESH_SECONDS
            before = sampler.sample()
            assert len(calls) == found  # the child is not known yet
            sampler._found -= PeakSampler.REFRESH_SECONDS
            assert sampler.sample() >= before + 50 * 10**6 and len(calls) == found + 1
            sampler.stage("next")
            assert len(calls) == found + 2
    finally:
        if child is not None:
            child.kill()
            child.wait()

"""PathPiece scoring on worker processes: the same int64 sums as one process, the same pruned
vocabulary, and a killed or failing worker as a one-line error with no hang and no shared memory left."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest

from parbpe.pathpiece.prune import prune
from parbpe.pathpiece.score import IRREPLACEABLE, token_scores
from parbpe.pathpiece.workers import ScoringPool, chunk_arrays, slice_bounds
from parbpe.run.faults import KILL_HOOK
from parbpe.run.pool import WorkerDied
from parbpe.run.shared_arrays import SHM_DIR_VARIABLE
from parbpe.tokenizer.segment import VocabIndex

BYTES = [bytes([b]) for b in range(256)]
DIED = r"^pathpiece scoring worker {k} \(chunks \d+-\d+, pid \d+\) died \(signal 9: probably out of memory; try fewer"


@pytest.fixture
def shm(tmp_path, monkeypatch):
    """Blocks made in a directory of this test's own (where the files left behind can be seen)."""
    monkeypatch.setenv(SHM_DIR_VARIABLE, str(tmp_path))
    return tmp_path


@pytest.fixture
def deadline():
    """The test fails with TimeoutError after 20 s instead of hanging (SIGALRM interrupts any wait)."""

    def expire(signum, frame):
        raise TimeoutError("the test ran 20 s: a wait for a worker hung")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _corpus(seed: int, n: int = 150) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """(vocabulary, chunks, counts): random chunks of a small alphabet (empty and long ones among
    them), a vocabulary of their substrings, counts up to a million (large sums)."""
    rng = random.Random(seed)
    chunks = [bytes(rng.choice(b"abcdef") for _ in range(rng.randint(0, 12))) for _ in range(n)]
    chunks += [b"ab" * 30, b"", bytes(range(200, 216))]
    pieces = {c[i:i + rng.randint(2, 6)] for c in chunks for i in range(0, len(c) - 1, 3)}
    vocab = BYTES + sorted(p for p in pieces if len(p) > 1)
    counts = np.array([rng.randint(1, 1_000_000) for _ in chunks], dtype=np.int64)
    return vocab, chunks, counts


def _pool(chunks: list[bytes], counts: np.ndarray, workers: int) -> ScoringPool:
    return ScoringPool(*chunk_arrays(chunks), counts, workers, start_method="fork")


def test_slices_cut_the_table_into_about_equal_bytes() -> None:
    offsets = np.concatenate([[0], np.cumsum([10, 1, 1, 10, 1, 1, 10])])
    assert slice_bounds(offsets, 3) == [0, 2, 4, 7]  # 11, 11, 12 bytes
    assert slice_bounds(offsets, 1) == [0, 7]
    many = slice_bounds(offsets, 20)  # more workers than chunks: fewer slices, never an empty one
    assert many[0] == 0 and many[-1] == 7 and all(a < b for a, b in zip(many, many[1:]))
    assert slice_bounds(np.zeros(1, dtype=np.int64), 4) == [0]


@pytest.mark.parametrize("seed", range(3))
def test_sums_equal_one_process_for_every_worker_count(seed: int, shm) -> None:
    vocab, chunks, counts = _corpus(seed)
    smaller = vocab[:256] + vocab[256::2]
    expected = [token_scores(VocabIndex(v), chunks, counts, len(v)) for v in (vocab, smaller)]
    assert (expected[0][0] == IRREPLACEABLE).sum() > 1  # single bytes no window covers: a mark, not a sum
    for workers in (1, 2, 3):
        with _pool(chunks, counts, workers) as pool:
            assert pool.workers == (0 if workers == 1 else workers)
            for v, (scores, usage) in zip((vocab, smaller), expected):  # two iterations of one pool
                got_scores, got_usage = pool.scores(v)
                assert got_scores.dtype == np.int64 and np.array_equal(got_scores, scores), workers
                assert np.array_equal(got_usage, usage), workers
        assert os.listdir(shm) == []


def test_prune_is_the_same_for_one_two_three_workers_and_a_given_scorer(shm) -> None:
    vocab, chunks, counts = _corpus(5, n=80)
    target = 256 + 20
    one = prune(vocab, chunks, counts, target, share=0.3)
    assert len(one) == target
    assert prune(vocab, chunks, counts, target, share=0.3, workers=2) == one  # spawned workers, the default
    assert prune(vocab, chunks, counts, target, share=0.3, workers=3, start_method="fork") == one
    calls: list[int] = []
    with _pool(chunks, counts, 2) as pool:
        def scorer(tokens: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
            calls.append(len(tokens))
            return pool.scores(tokens)

        assert prune(vocab, chunks, counts, target, share=0.3, scorer=scorer) == one
    assert calls[0] == len(vocab) and len(calls) > 1
    assert os.listdir(shm) == []


def test_a_worker_killed_while_scoring_is_a_one_line_error_at_once(shm, deadline, monkeypatch) -> None:
    vocab, chunks, counts = _corpus(1)
    monkeypatch.setenv(KILL_HOOK, "pathpiece:2")  # the workers SIGKILL themselves on the second vocabulary
    with _pool(chunks, counts, 2) as pool:
        pool.scores(vocab)
        clock = time.monotonic()
        with pytest.raises(WorkerDied, match=DIED.format(k=r"\d")) as caught:
            pool.scores(vocab[:300])
        assert time.monotonic() - clock < 5 and "\n" not in str(caught.value)
        procs = pool._procs
    assert not any(proc.is_alive() for proc in procs) and os.listdir(shm) == []


def test_the_worker_killed_between_iterations_is_named(shm, deadline) -> None:
    vocab, chunks, counts = _corpus(2)
    with _pool(chunks, counts, 3) as pool:
        pool.scores(vocab)
        os.kill(pool._procs[1].pid, signal.SIGKILL)
        with pytest.raises(WorkerDied, match=DIED.format(k=1)):
            pool.scores(vocab)
    assert os.listdir(shm) == []


def test_workers_killed_at_their_start_leave_no_shared_memory(shm, deadline, monkeypatch) -> None:
    vocab, chunks, counts = _corpus(3)
    monkeypatch.setenv(KILL_HOOK, "pathpiece:0")  # before they map the block: its name is still there
    with pytest.raises(WorkerDied, match=DIED.format(k=r"\d")):
        _pool(chunks, counts, 2)
    assert os.listdir(shm) == []


def test_a_worker_exception_is_a_one_line_error_and_the_pool_goes_on(shm, deadline) -> None:
    vocab, chunks, counts = _corpus(4)
    with _pool(chunks, counts, 2) as pool:
        with pytest.raises(RuntimeError, match=r"^pathpiece scoring worker 0 \(chunks 0-\d+, pid \d+\) failed: "
                           r"ValueError: vocabulary lacks single bytes \[0\]") as caught:
            pool.scores(vocab[1:])
        assert "\n" not in str(caught.value) and "Traceback" in caught.value.__notes__[0]
        with pytest.raises(RuntimeError, match=r"failed: ValueError: token b'a{17}' is empty or longer than 16"):
            pool.scores(vocab + [b"a" * 17])
        scores, usage = pool.scores(vocab)  # the workers serve the next vocabulary
        expected = token_scores(VocabIndex(vocab), chunks, counts, len(vocab))
        assert np.array_equal(scores, expected[0]) and np.array_equal(usage, expected[1])
    assert os.listdir(shm) == []


def test_a_table_that_does_not_fit_together_or_no_workers_is_a_one_line_error(shm) -> None:
    data, offsets = chunk_arrays([b"ab", b"c"])
    with pytest.raises(ValueError, match="2 counts need 3 offsets"):
        ScoringPool(data, offsets[:2], [1, 1], 2)
    with pytest.raises(ValueError, match="offsets must rise from 0 to len"):
        ScoringPool(data, offsets[::-1], [1, 1], 2)
    with pytest.raises(ValueError, match="workers=0"):
        ScoringPool(data, offsets, [1, 1], 0)
    with pytest.raises(ValueError, match="workers=0"):
        prune(BYTES + [b"ab"], [b"ab", b"c"], [1, 1], 256, workers=0)
    assert os.listdir(shm) == []


def test_close_stops_the_workers_and_can_be_called_again(shm) -> None:
    _, chunks, counts = _corpus(6)
    pool = _pool(chunks, counts, 2)
    procs = pool._procs
    assert all(proc.is_alive() for proc in procs) and os.listdir(shm) == []  # the name went once both mapped it
    pool.close()
    pool.close()
    assert not any(proc.is_alive() for proc in procs) and pool.workers == 0
    with pytest.raises(RuntimeError, match="this ScoringPool is closed"):
        pool.scores(BYTES)

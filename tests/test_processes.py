"""pytorch_memo.processes: thread_contention and receive_shared, checked against plain torch."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from pytorch_memo._procs import descendants
from pytorch_memo.processes import (
    MAX_OPEN_FILES,
    ContentionRow,
    receive_shared,
    thread_contention,
)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, forks")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _children() -> set[int]:
    """This process's descendants, but for Python's resource tracker, which stays."""
    found = set()
    for pid in descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in command:
            found.add(pid)
    return found


# -- thread_contention --------------------------------------------------------------------


@pytest.fixture(scope="module")
def contention() -> list[ContentionRow]:
    before = _children()
    rows = thread_contention([1, 2], processes=2, size=64, repeats=3)
    assert _children() <= before  # every process joined
    return rows


def test_contention_rows_follow_the_thread_counts(contention: list[ContentionRow]) -> None:
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    assert [(r.processes, r.threads, r.cores) for r in contention] == [(2, 1, cores), (2, 2, cores)]
    assert all(r.wall > 0 and r.cpu > 0 for r in contention)
    for row in contention:
        assert row.oversubscribed == (row.processes * row.threads > cores)


@linux_only
def test_each_process_ran_the_threads_torch_was_given(contention: list[ContentionRow]) -> None:
    # torch.set_num_threads(n) in a fresh process: Linux lists at least n threads, and
    # one more thread with 2 than with 1 (the queue's feeder thread not counted)
    assert all(row.os_threads >= row.threads for row in contention)
    assert contention[1].os_threads - contention[0].os_threads >= 1


def test_oversubscribed_is_threads_against_cores() -> None:
    row = ContentionRow(processes=2, threads=2, cores=4, wall=1.0, cpu=1.0, os_threads=2)
    assert not row.oversubscribed
    assert ContentionRow(2, 3, 4, 1.0, 1.0, 3).oversubscribed


def test_contention_timeout_leaves_no_process() -> None:
    before = _children()
    with pytest.raises(TimeoutError, match="did not finish within the timeout"):
        thread_contention([1], processes=2, size=2048, repeats=10_000, timeout=0.5)
    assert _children() <= before


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"threads": []}, ValueError, "threads must hold 1 to 8 thread counts, got 0"),
        ({"threads": [1] * 9}, ValueError, "threads must hold 1 to 8"),
        ({"threads": [0]}, ValueError, r"threads\[0\] must be >= 1, got 0"),
        ({"threads": [True]}, TypeError, r"threads\[0\] must be an int, got bool"),
        ({"threads": "1"}, TypeError, "threads must be a sequence of ints, got str"),
        ({"threads": [1], "processes": 0}, ValueError, "processes must be >= 1"),
        ({"threads": [1], "processes": 17}, ValueError, "processes must be <= 16"),
        ({"threads": [1], "size": 0}, ValueError, "size must be >= 1"),
        ({"threads": [1], "repeats": 1.5}, TypeError, "repeats must be an int"),
        ({"threads": [1], "timeout": float("nan")}, ValueError, "timeout must be > 0"),
    ],
)
def test_contention_refuses_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        thread_contention(**kwargs)  # type: ignore[arg-type]


# -- receive_shared -----------------------------------------------------------------------


def _send_five(queue: object, done: object) -> None:
    for i in range(5):
        queue.put(torch.full((4,), i))  # type: ignore[attr-defined]
    done.wait(60)  # type: ignore[attr-defined]


@linux_only
def test_a_received_shared_tensor_holds_a_descriptor() -> None:
    # What receive_shared counts on, in plain torch: under file_descriptor, each tensor
    # taken from a torch.multiprocessing queue, sent by another process, keeps an open
    # file descriptor until it is freed.
    assert mp.get_sharing_strategy() == "file_descriptor"
    fork = mp.get_context("fork")
    queue, done = fork.Queue(), fork.Event()
    sender = fork.Process(target=_send_five, args=(queue, done))
    sender.start()
    try:
        first = queue.get(timeout=60)  # the queue's own descriptors are open now
        before = _open_fds()
        received = [queue.get(timeout=60) for _ in range(4)]
        assert _open_fds() >= before + 4
        assert [int(t[0]) for t in [first, *received]] == [0, 1, 2, 3, 4]
        del received
        assert _open_fds() == before
    finally:
        done.set()
        sender.join()
        queue.close()
        queue.join_thread()


@linux_only
def test_too_many_kept_tensors_fail_and_copies_do_not() -> None:
    fds, strategy = _open_fds(), mp.get_sharing_strategy()
    before = _children()
    with pytest.raises(RuntimeError, match="received 0 items of ancdata"):
        receive_shared(100, free_files=16)
    assert receive_shared(100, free_files=16, copy=True) == 100
    assert receive_shared(100, free_files=16, strategy="file_system") == 100
    assert receive_shared(100, free_files=256) == 100
    assert mp.get_sharing_strategy() == strategy  # the caller's strategy is untouched
    assert _open_fds() == fds  # nothing left open here
    assert _children() <= before  # both processes joined


@linux_only
def test_free_files_beyond_the_hard_limit_are_refused() -> None:
    import resource  # POSIX only

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard >= MAX_OPEN_FILES:
        pytest.skip(f"the hard open-file limit ({hard}) allows every free_files")
    with pytest.raises(ValueError, match=f"free_files={MAX_OPEN_FILES} would need"):
        receive_shared(1, free_files=MAX_OPEN_FILES)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"count": 0}, ValueError, "count must be >= 1"),
        ({"count": 10_001}, ValueError, "count must be <= 10000"),
        ({"count": 1, "free_files": 15}, ValueError, "free_files must be >= 16"),
        ({"count": 1, "free_files": True}, TypeError, "free_files must be an int"),
        ({"count": 1, "copy": 1}, TypeError, "copy must be a bool"),
        (
            {"count": 1, "strategy": "shared"},
            ValueError,
            "strategy must be .file_descriptor. or .file_system., got .shared.",
        ),
        ({"count": 1, "timeout": 0}, ValueError, "timeout must be > 0"),
    ],
)
def test_receive_shared_refuses_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        receive_shared(**kwargs)  # type: ignore[arg-type]

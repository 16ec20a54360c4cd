"""Measure what intra-op threads cost when several processes each run their own.

:func:`thread_contention` starts a few fresh processes (``spawn``) that run the same
fixed work, float32 matrix products, at the same moment, once per thread count it is
given, and reports for each count the wall time of the slowest process and the CPU
time of all of them together. Several processes that each use every core compete for
the cores (oversubscription); comparing the rows shows what it costs on the machine
that ran them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import queue
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from pytorch_memo._checks import check_choice, check_int, check_ints, check_seconds, check_type
from pytorch_memo._procs import kill_tree

__all__ = [
    "MAX_OPEN_FILES",
    "MAX_PROCESSES",
    "MAX_REPEATS",
    "MAX_SIZE",
    "MAX_TENSORS",
    "MAX_THREADS",
    "ContentionRow",
    "receive_shared",
    "thread_contention",
]

MAX_PROCESSES = 16
"""The most processes :func:`thread_contention` starts."""
MAX_THREADS = 1024
"""The most intra-op threads one of its processes is given."""
MAX_SIZE = 2048
"""The largest matrix side (a product of two is 2 * size**3 floating-point operations)."""
MAX_REPEATS = 10_000
"""The most products each process computes per thread count."""
MAX_OPEN_FILES = 1 << 20
"""The most files :func:`receive_shared` lets its receiver open."""
_DONE, _FAILED = "done", "failed"


@dataclass(frozen=True)
class ContentionRow:
    """One thread count of :func:`thread_contention`: every process ran the same work.

    Attributes:
        processes: how many processes ran it, side by side.
        threads: the intra-op threads each process was given (``torch.set_num_threads``).
        cores: the CPUs the processes could run on (``os.sched_getaffinity`` where the
            platform has it, else ``os.cpu_count()``).
        wall: seconds from the common start until the last process finished.
        cpu: CPU seconds of all the processes together, every thread counted.
        os_threads: the most threads one process had while it worked, as Linux's
            ``/proc/self/task`` lists them, less the Python threads other than the main
            one (a queue's feeder thread, which is not torch's); 0 where there is no
            ``/proc``.
    """

    processes: int
    threads: int
    cores: int
    wall: float
    cpu: float
    os_threads: int

    @property
    def oversubscribed(self) -> bool:
        """Whether the processes' intra-op threads outnumber the cores."""
        return self.processes * self.threads > self.cores


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - macOS, Windows


def _os_threads() -> int:
    """This process's threads but its Python threads other than the main one."""
    try:
        listed = len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - no /proc
        return 0
    return listed - (threading.active_count() - 1)


def _contend(
    index: int,
    counts: tuple[int, ...],
    size: int,
    repeats: int,
    barrier: Any,
    results: Any,
    timeout: float,
) -> None:
    """One process: for each thread count, wait for the others, then do the work."""
    try:
        generator = torch.Generator().manual_seed(index)
        a = torch.randn(size, size, generator=generator)
        for threads in counts:
            torch.set_num_threads(threads)
            a @ a  # starts this count's threads before the clock does
            barrier.wait(timeout)
            wall, cpu = time.perf_counter(), time.process_time()
            seen = 0
            for _ in range(repeats):
                a @ a
                seen = max(seen, _os_threads())
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            results.put((index, _DONE, (threads, wall, cpu, seen)))
            barrier.wait(timeout)  # no one starts the next count while others time
    except BaseException:  # noqa: BLE001 - any failure is reported to the parent
        results.put((index, _FAILED, traceback.format_exc()))


def thread_contention(
    threads: Sequence[int],
    *,
    processes: int = 2,
    size: int = 256,
    repeats: int = 40,
    timeout: float = 120.0,
) -> list[ContentionRow]:
    """Run the same matrix products in ``processes`` processes at once, per thread count.

    Each process is started fresh (``spawn``: a process forked from one that has run
    OpenMP threads may hang in its own), makes a ``size`` x ``size`` float32 matrix
    and, for each count in ``threads`` in turn, sets ``torch.set_num_threads(count)``,
    computes one product to start its threads, waits for the others at a barrier, and
    times ``repeats`` products. The processes go on to the next count together.

    Args:
        threads: the intra-op thread counts to compare, each at least 1 (at most
            :data:`MAX_THREADS`); one to eight of them.
        processes: how many processes run side by side, 1 to :data:`MAX_PROCESSES`.
        size: the matrices' side, 1 to :data:`MAX_SIZE`.
        repeats: the products each process times per count, 1 to :data:`MAX_REPEATS`.
        timeout: seconds for the whole run (starting the processes included: each
            imports torch).

    Returns:
        One row per count, in the order given.

    Every process is joined before this returns or raises; one still running at the
    timeout, or after another failed, is killed with anything it started.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range.
        RuntimeError: a process failed (the message holds its traceback) or died.
        TimeoutError: the processes did not finish within ``timeout``.

    Example:
        >>> rows = thread_contention([1], processes=2, size=32, repeats=2)
        >>> [(row.processes, row.threads) for row in rows]
        [(2, 1)]
    """
    counts = check_ints("threads", threads, minimum=1, maximum=MAX_THREADS)
    if not 1 <= len(counts) <= 8:
        msg = f"threads must hold 1 to 8 thread counts, got {len(counts)}"
        raise ValueError(msg)
    check_int("processes", processes, minimum=1, maximum=MAX_PROCESSES)
    check_int("size", size, minimum=1, maximum=MAX_SIZE)
    check_int("repeats", repeats, minimum=1, maximum=MAX_REPEATS)
    check_seconds("timeout", timeout)
    deadline = time.monotonic() + timeout
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(
            target=_contend,
            args=(i, counts, size, repeats, barrier, results, timeout),
            daemon=True,
        )
        for i in range(processes)
    ]
    reports: dict[int, list[tuple[int, float, float, int]]] = {}
    try:
        for proc in procs:
            proc.start()
        _collect(procs, results, reports, len(counts) * processes, deadline)
    finally:
        for proc in procs:
            if proc.pid is not None:
                proc.join(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                if proc.is_alive():
                    kill_tree(proc.pid)
                proc.join()
                proc.close()  # its sentinel, an open pipe, with it
        results.close()
        results.join_thread()
    cores = _cores()
    rows = []
    for k, count in enumerate(counts):
        runs = [reports[i][k] for i in range(processes)]
        assert all(run[0] == count for run in runs)  # each process reports in order
        rows.append(
            ContentionRow(
                processes=processes,
                threads=count,
                cores=cores,
                wall=max(run[1] for run in runs),
                cpu=math.fsum(run[2] for run in runs),
                os_threads=max(run[3] for run in runs),
            )
        )
    return rows


def _collect(
    procs: list[Any],
    results: Any,
    reports: dict[int, list[tuple[int, float, float, int]]],
    expected: int,
    deadline: float,
) -> None:
    got = 0
    while got < expected:
        left = deadline - time.monotonic()
        if left <= 0:
            msg = f"the {len(procs)} processes did not finish within the timeout"
            raise TimeoutError(msg)
        try:
            index, status, payload = results.get(timeout=min(left, 0.5))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                msg = f"a process exited with code {dead[0].exitcode} before reporting"
                raise RuntimeError(msg) from None
            continue
        if status == _FAILED:
            msg = f"process {index} failed:\n{payload}"
            raise RuntimeError(msg)
        reports.setdefault(index, []).append(payload)
        got += 1


MAX_TENSORS = 10_000
"""The most tensors :func:`receive_shared` sends."""


def _receive(
    inbox: Any, results: Any, count: int, copy: bool, free_files: int, timeout: float
) -> None:
    """The receiving process: leave itself ``free_files`` more files, keep what arrives."""
    try:
        import resource  # POSIX only, checked by the caller

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        # A new descriptor takes the lowest free number below the limit: choose the
        # limit that leaves exactly ``free_files`` numbers free below it.
        taken, limit, free = set(_open_fds()), 0, 0
        while free < free_files:
            free += limit not in taken
            limit += 1
        if hard != resource.RLIM_INFINITY and limit > hard:
            msg = (
                f"free_files={free_files} would need an open-file limit of {limit}, "
                f"above this process's hard limit {hard}"
            )
            raise ValueError(msg)  # sent to the parent like any failure
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        kept = []
        for _ in range(count):
            tensor = inbox.get(timeout=timeout)
            kept.append(tensor.clone() if copy else tensor)
        results.put((_DONE, len(kept)))
    except Exception as error:  # noqa: BLE001 - sent to the parent, which raises it
        results.put((_FAILED, error))


def _open_fds() -> list[int]:
    """The open file descriptors of this process (Linux's /proc, else /dev/fd)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return [int(name) for name in os.listdir(folder)]
    return [0, 1, 2]  # pragma: no cover - neither


def _send(inbox: Any, count: int, strategy: str, done: Any, timeout: float) -> None:
    """The sending process: share ``count`` small tensors, stay until the parent says."""
    inbox.cancel_join_thread()  # what the receiver did not take must not keep us alive
    mp.set_sharing_strategy(strategy)  # type: ignore[no-untyped-call]
    for i in range(count):
        inbox.put(torch.full((4,), i))
    done.wait(timeout)  # under file_descriptor, the receiver fetches each fd from here


def receive_shared(
    count: int,
    *,
    free_files: int = 64,
    copy: bool = False,
    strategy: str = "file_descriptor",
    timeout: float = 60.0,
) -> int:
    """Send ``count`` small tensors between two child processes; return how many arrived.

    Two processes are forked for the call. One sends ``torch.full((4,), i)`` for ``i``
    in ``range(count)`` through a ``torch.multiprocessing`` queue, under the sharing
    strategy ``strategy``; the other lowers its own open-file limit (``RLIMIT_NOFILE``)
    so that it can open ``free_files`` more files (it inherits this process's open
    files), and keeps every tensor it receives, or a ``clone()`` of it with
    ``copy=True``. This process's own limit and sharing strategy are not touched.

    Args:
        count: how many tensors to send, 1 to :data:`MAX_TENSORS`.
        free_files: how many more files the receiver may open, 16 to
            :data:`MAX_OPEN_FILES` (its limit must stay within this process's hard
            limit).
        copy: keep a copy of each tensor (ordinary memory) instead of the tensor received.
        strategy: one of ``torch.multiprocessing.get_all_sharing_strategies()``.
        timeout: seconds to wait for each tensor, and for the receiver's answer.

    Returns:
        The number of tensors the receiver kept, ``count``.

    Both processes are joined before this returns or raises (killed, with anything they
    started, if they do not end within a few seconds).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range, an unknown strategy, or ``free_files``
            beyond what the hard limit allows.
        RuntimeError: the platform has no ``fork`` or no ``resource`` module, the
            receiver died, or what the receiver raised (``received 0 items of ancdata``
            when it runs out of file descriptors).
        TimeoutError: the receiver did not answer within ``timeout``.

    Example:
        >>> receive_shared(10, free_files=64)
        10
    """
    check_int("count", count, minimum=1, maximum=MAX_TENSORS)
    check_type("copy", copy, bool, "a bool")
    strategies = sorted(mp.get_all_sharing_strategies())  # type: ignore[no-untyped-call]
    check_choice("strategy", strategy, strategies)
    check_seconds("timeout", timeout)
    if importlib.util.find_spec("resource") is None:  # pragma: no cover - Windows
        msg = "receive_shared needs the resource module (POSIX)"
        raise RuntimeError(msg)
    check_int("free_files", free_files, minimum=16, maximum=MAX_OPEN_FILES)
    if "fork" not in mp.get_all_start_methods():  # pragma: no cover - Windows
        msg = "receive_shared needs the fork start method"
        raise RuntimeError(msg)
    status, payload = _run_pair(count, copy, free_files, strategy, timeout)
    if status == _FAILED:
        raise payload
    return int(payload)


def _run_pair(
    count: int, copy: bool, free_files: int, strategy: str, timeout: float
) -> tuple[str, Any]:
    """Fork the receiver and the sender, wait for the receiver's answer, join both.

    A function of its own, so that its queues (a queue this process never wrote to
    keeps its pipe open until it is freed) are freed when it returns, even when the
    caller then raises what the receiver sent.
    """
    ctx = mp.get_context("fork")
    inbox, results, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_receive,
            args=(inbox, results, count, copy, free_files, timeout),
            daemon=True,
        ),
        ctx.Process(target=_send, args=(inbox, count, strategy, done, timeout), daemon=True),
    ]
    try:
        for proc in procs:
            proc.start()
        status, payload = _answer(procs[0], results, timeout)
    finally:
        done.set()
        for proc in procs:
            if proc.pid is not None:
                proc.join(timeout=min(timeout, 5.0))
                if proc.is_alive():
                    kill_tree(proc.pid)
                proc.join()
                proc.close()  # its sentinel, an open pipe, with it
        for q in (inbox, results):
            q.close()
            q.join_thread()
    return status, payload


def _answer(child: Any, results: Any, timeout: float) -> tuple[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer: tuple[str, Any] = results.get(timeout=0.5)
        except queue.Empty:
            if child.exitcode is not None:
                msg = f"the receiving process exited with code {child.exitcode}"
                raise RuntimeError(msg) from None
            if time.monotonic() > deadline:
                msg = f"the receiving process did not answer within {timeout} s"
                raise TimeoutError(msg) from None
            continue
        return answer

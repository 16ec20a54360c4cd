"""Orphan checks for the tests of timeouts, kills and interrupts (Linux).

An orphan is re-parented to init and escapes a look at this process's descendants, so
:func:`no_orphans` makes the test process a *child subreaper* for the block
(``PR_SET_CHILD_SUBREAPER``): every process started inside it that loses its parent is
re-parented to the test process instead, and stays in sight. When the block ends, every
descendant that was not there before it must be gone within a grace period; the
survivors are killed, reaped and reported.

The fork server and resource tracker of ``multiprocessing`` are long-lived helpers of
the test process, not leaks: they are left alone (their children are not).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pytorch_memo._procs import descendants, kill_tree

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")


def _is_subreaper() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


def _reap_zombies() -> None:
    """Reap exited children that no Popen waits for (re-parented orphans)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry.name), os.WNOHANG)


def _survivors(before: set[int]) -> list[int]:
    found = []
    for pid in descendants(os.getpid()):
        if pid in before:
            continue
        if any(helper in _cmdline(pid) for helper in HELPERS):
            continue
        found.append(pid)
    return found


@contextlib.contextmanager
def no_orphans(*, grace: float = 2.0) -> Iterator[None]:
    """Fail when a process started inside the block outlives it by more than ``grace`` s."""
    if not sys.platform.startswith("linux"):  # pragma: no cover
        yield
        return
    was = _is_subreaper()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    before = set(descendants(os.getpid()))
    try:
        yield
    finally:
        deadline = time.monotonic() + grace
        left = _survivors(before)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            _reap_zombies()
            left = _survivors(before)
        described = [f"{pid}: {_cmdline(pid)}" for pid in left]
        for pid in left:
            kill_tree(pid)
        time.sleep(0.1)
        _reap_zombies()
        _prctl(PR_SET_CHILD_SUBREAPER, int(was))
    assert not described, f"processes outlived the block by {grace} s: {described}"

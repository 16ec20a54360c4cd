"""Other processes for the file tests: a forked call bounded in time and memory, file
permissions enforced even for root, and the processes left in a process group."""

from __future__ import annotations

import ctypes
import os
import pickle
import resource
import select
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

_DAC_CAPABILITIES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def forked(
    call: Callable[[], Any], *, timeout: float = 60.0, memory: int = 1 << 30
) -> tuple[str, Any]:
    """Run ``call`` in a forked child that may map ``memory`` more bytes and run
    ``timeout`` seconds at most (then it is killed).

    Returns ``("returned", value)``, ``("raised", (type name, message, errno))``,
    ``("timeout", None)`` or ``("died", wait status)``. The child is always reaped.
    """
    reader, writer = os.pipe()
    with warnings.catch_warnings():  # 3.12+ warns about forking a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(reader)
            _limit_memory(memory)
            try:
                outcome: tuple[str, Any] = ("returned", call())
            except BaseException as error:  # noqa: BLE001 - reported to the parent
                detail = "".join(traceback.format_exception_only(error)).strip()
                outcome = ("raised", (type(error).__name__, str(error) or detail, _errno(error)))
            data = pickle.dumps(outcome)
            while data:
                data = data[os.write(writer, data) :]
        finally:
            os._exit(0)
    os.close(writer)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([reader], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return ("timeout", None)
            chunk = os.read(reader, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(reader)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return ("died", status)
    result: tuple[str, Any] = pickle.loads(b"".join(chunks))
    return result


def _errno(error: BaseException) -> int | None:
    return error.errno if isinstance(error, OSError) else None


def _limit_memory(extra: int) -> None:
    """Cap the address space at what it is now plus ``extra`` bytes."""
    status = Path("/proc/self/status")
    if not status.exists():
        return
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmSize:"))
    size = int(line.split()[1]) * 1024
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    soft = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def drop_file_capabilities() -> None:
    """Make file permissions apply to this (single-threaded, forked) process even as root.

    Root passes permission checks through CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and
    CAP_FOWNER; dropping them (capset, Linux) leaves root bound by the mode bits like
    anyone else. A process without them is unchanged.
    """
    if not sys.platform.startswith("linux"):
        return

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    libc = ctypes.CDLL(None, use_errno=True)
    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    mask = 0xFFFFFFFF
    for bit in _DAC_CAPABILITIES:
        mask &= ~(1 << bit)
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[0], field, getattr(data[0], field) & mask)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def permissions_enforced(directory: Path, *, refused: str = "write") -> bool:
    """Whether a process with its file capabilities dropped is refused to ``"write"``
    into or ``"list"`` ``directory`` (whose mode must forbid it). False where nothing
    can enforce it."""

    def probe() -> bool:
        drop_file_capabilities()
        try:
            if refused == "write":
                (directory / "probe").write_bytes(b"")
            else:
                os.listdir(directory)
        except PermissionError:
            return True
        return False

    kind, value = forked(probe, timeout=30)
    return kind == "returned" and bool(value)


def group_members(group: int) -> list[int]:
    """The processes (zombies included) whose process group is ``group`` (Linux /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = status.rpartition(b")")[2].split()
        if len(fields) > 2 and int(fields[2]) == group:
            members.append(int(entry.name))
    return members

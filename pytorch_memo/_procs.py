"""Processes and their descendants: find them, and stop a whole tree (private).

Killing a process does not kill its children: they are re-parented (to init, or to the
nearest "subreaper") and run on. ``torchrun`` starts each worker in a session of its
own, and ninja each compiler in a process group of its own, so neither a process group
kill nor a session kill of the launcher reaches them. :func:`kill_tree` stops the whole
tree instead: it freezes every descendant with ``SIGSTOP`` (a frozen process cannot
fork), looks again until no new one appears, then kills them all.

Linux reads ``/proc``; other POSIX systems ask ``ps``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, session..."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rfind(")") + 2 :].split()


def _table() -> dict[int, tuple[int, int, str]]:
    """Every process: pid -> (parent pid, session id, state letter)."""
    found: dict[int, tuple[int, int, str]] = {}
    if sys.platform.startswith("linux") and _PROC.is_dir():
        for entry in os.scandir(_PROC):
            if entry.name.isdigit():
                fields = _stat_fields(int(entry.name))
                if fields is not None:
                    found[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[0])
        return found
    out = subprocess.run(  # pragma: no cover - macOS and other POSIX systems
        ["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "sess=", "-o", "stat="],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for line in out.splitlines():  # pragma: no cover
        pid, ppid, sess, stat = line.split()[:4]
        found[int(pid)] = (int(ppid), int(sess), stat[:1])
    return found


def descendants(pid: int) -> list[int]:
    """The living (non-zombie) descendants of ``pid``, parents before their children."""
    table = _table()
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        if table[child][2] != "Z":
            found.append(child)
        todo.extend(children.get(child, []))
    return found


def session_members(session: int) -> list[int]:
    """The living processes whose session id is ``session``."""
    return [pid for pid, (_, sid, state) in _table().items() if sid == session and state != "Z"]


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def kill_tree(pid: int, *, include_root: bool = True) -> list[int]:
    """Kill ``pid`` (unless ``include_root`` is false) and every descendant; return them.

    The tree is frozen first so that nothing in it can start a process that escapes,
    then killed with ``SIGKILL``. The caller reaps its own children (``wait``).
    """
    frozen: list[int] = []
    if include_root:
        _signal(pid, signal.SIGSTOP)
        frozen.append(pid)
    for _ in range(50):  # a process forking as we look: look again, until nothing is new
        new = [p for p in descendants(pid) if p not in frozen]
        if not new:
            break
        for child in new:
            _signal(child, signal.SIGSTOP)
        frozen.extend(new)
    for target in frozen:
        _signal(target, signal.SIGKILL)
    return frozen


def kill_session(session: int) -> list[int]:
    """Kill every process of ``session`` (frozen first, as :func:`kill_tree` does)."""
    frozen: list[int] = []
    for _ in range(50):
        new = [p for p in session_members(session) if p not in frozen and p != os.getpid()]
        if not new:
            break
        for member in new:
            _signal(member, signal.SIGSTOP)
        frozen.extend(new)
    for target in frozen:
        _signal(target, signal.SIGKILL)
    return frozen


def wait_gone(pids: list[int], *, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` to be gone (or zombies); return those left."""
    deadline = time.monotonic() + seconds
    while True:
        table = _table()
        left = [p for p in pids if p in table and table[p][2] != "Z"]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)

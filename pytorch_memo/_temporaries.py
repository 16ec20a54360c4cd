"""Temporary files beside a target, and the cleaning up of those killed writers left.

Standard library only: the book's author tools (:mod:`memobook._guard`) use it before any
heavy package is imported, and :mod:`pytorch_memo._files` builds its atomic writes on it.
A temporary file is named ``.NAME.PID.XXXXXXXX.tmp`` (``.NAME`` shortened so the whole
name fits NAME_MAX) and locked with ``flock`` while its writer lives.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import sys
from contextlib import suppress
from pathlib import Path

__all__ = ["create_temporary", "remove_stale_temporaries"]

_NAME_MAX = 255  # bytes in one file name, on every common file system
_PID_DIGITS = 10  # room for any PID (Linux's pid_max is at most 2**22)
_TEMPORARY_EXTRA = len(".") + len(".") + _PID_DIGITS + len(".") + 8 + len(".tmp")


def _temporary_prefix(target: Path) -> str:
    """``.NAME`` shortened, if need be, so that the whole temporary name fits NAME_MAX."""
    name = os.fsencode(target.name)
    room = _NAME_MAX - _TEMPORARY_EXTRA
    if len(name) > room:
        name = name[: room - 1] + b"~"
    return "." + os.fsdecode(name)


def _stale_pattern(target: Path) -> re.Pattern[str]:
    return re.compile(re.escape(_temporary_prefix(target)) + r"\.(\d{1,10})\.[0-9a-f]{8}\.tmp")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except (OverflowError, OSError):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            status = file.read()
    except OSError:
        return True  # no /proc: trust kill
    fields = status.rpartition(b")")[2].split()
    return not fields or fields[0] not in (b"Z", b"X")


def remove_stale_temporaries(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that killed writers left for ``target``; return them.

    Only files named ``.NAME.PID.XXXXXXXX.tmp`` for this target, whose process is gone
    and whose lock can be taken, are removed; anything else is left, and errors (a file
    removed meanwhile, no permission) are ignored.
    """
    if sys.platform == "win32":
        return []
    import fcntl

    target = Path(target)
    pattern = _stale_pattern(target)
    removed = []
    try:
        with os.scandir(target.parent) as entries:
            candidates = [
                (Path(entry.path), int(match[1]))
                for entry in entries
                if (match := pattern.fullmatch(entry.name)) is not None
            ]
    except OSError:
        return []
    for path, pid in candidates:
        if _alive(pid):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while a writer holds it
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                path.unlink()
                removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def create_temporary(target: Path, permissions: int = 0o666) -> tuple[int, Path]:
    """Create and lock ``.NAME.PID.XXXXXXXX.tmp`` beside ``target``, with ``permissions``
    (less the umask, as any new file)."""
    prefix = _temporary_prefix(target)
    temporary = target.parent / f"{prefix}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(temporary, flags, permissions)
    if sys.platform != "win32":
        import fcntl

        # Without flock (some network file systems) cleaners cannot lock it either.
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd, temporary

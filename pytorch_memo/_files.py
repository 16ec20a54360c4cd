"""Files written whole or not at all, and files read only when they are regular (private).

The new content goes to a temporary file beside the target, is flushed and fsynced,
then renamed over the target with :func:`os.replace` (atomic on POSIX and Windows); the
directory is fsynced so the rename itself survives a crash. Until the rename the old
file is untouched; if anything fails, the temporary file is removed.

A process killed mid-write (SIGKILL, a power cut) cannot remove its temporary file, so
the next write to the same target does: the temporary file is named
``.NAME.PID.XXXXXXXX.tmp`` after the writer's process id and held under an exclusive
:func:`fcntl.flock` lock until it is renamed. A temporary file of the target is stale,
and removed, only when the process named in it no longer runs *and* its lock is free:
a live writer's file is never touched, whether it belongs to another thread of this
process, another process, or a process of another PID namespace that holds its lock
(POSIX only; on Windows stale files are left). A PID reused by an unrelated process
keeps its stale file until that process ends.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

from pytorch_memo._checks import check_path
from pytorch_memo._temporaries import create_temporary, remove_stale_temporaries

_PERMISSIONS = 0o777  # read, write and execute for owner, group and others
_REASONS = {
    errno.EFBIG: "a file size limit was reached (ulimit -f, or the file system's largest file)",
    errno.ENOSPC: "the device is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
}


# -------------------------------------------------------------------------- checks


def check_file_path(name: str, value: Any) -> Path:
    """``value`` as a Path if it is a non-empty str or os.PathLike without a NUL byte."""
    path = check_path(name, value)
    if os.fspath(value) == "":
        msg = f"{name} must name a file, got an empty path"
        raise ValueError(msg)
    return path


def _special_kind(mode: int) -> str | None:
    kinds = [
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    for test, kind in kinds:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "not a regular file"


def _refuse_special(mode: int, shown: str, doing: str) -> None:
    kind = _special_kind(mode)
    if kind is not None:
        msg = f"path {shown!r} is {kind}, not a regular file; refusing to {doing} it"
        raise shutil.SpecialFileError(msg)


def check_target(target: Path, shown: str) -> int | None:
    """Raise unless ``target`` is a regular file (or a link to one) or absent in a folder.

    A directory gives IsADirectoryError, a FIFO, device or socket
    :class:`shutil.SpecialFileError` (an OSError), a missing folder FileNotFoundError.

    Returns:
        The permission bits (``0o777`` at most) of the regular file ``target`` names, or
        None if it names none (absent, or a dangling link or a loop of links).
    """
    try:
        mode = os.stat(target).st_mode  # follows a symbolic link to what it names
    except FileNotFoundError:
        if not target.parent.is_dir():
            msg = f"path {shown!r}: its directory does not exist"
            raise FileNotFoundError(msg) from None
        return None  # nothing there yet, or a dangling link (which is replaced)
    except OSError as error:
        if error.errno == errno.ELOOP and target.is_symlink():
            return None  # a link in a loop of links names nothing: replaced, like a dangling one
        raise _named(error, f"path {shown!r} cannot be written") from error  # ENOTDIR, ...
    if stat.S_ISDIR(mode):
        msg = f"path {shown!r} is a directory; expected a file name"
        raise IsADirectoryError(msg)
    _refuse_special(mode, shown, "replace")
    return stat.S_IMODE(mode) & _PERMISSIONS


@contextmanager
def open_regular(source: Path, shown: str, *, expected: str) -> Iterator[BinaryIO]:
    """Open ``source`` for reading if it is a regular file (or a link to one).

    Checked before opening (opening a FIFO blocks, a device may have side effects) and
    again on the open file. ``expected`` says what the file should be, for messages.
    """
    try:
        mode = os.stat(source).st_mode
    except FileNotFoundError:
        msg = f"path {shown!r} does not exist"
        raise FileNotFoundError(msg) from None
    except OSError as error:
        raise _named(error, f"path {shown!r} cannot be read") from error
    if stat.S_ISDIR(mode):
        msg = f"path {shown!r} is a directory; expected {expected}"
        raise IsADirectoryError(msg)
    _refuse_special(mode, shown, "read")
    try:
        fd = os.open(
            source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        )
    except OSError as error:
        raise _named(error, f"path {shown!r} cannot be read") from error
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode  # what was opened, if the name changed meanwhile
        if stat.S_ISDIR(mode):
            msg = f"path {shown!r} is a directory; expected {expected}"
            raise IsADirectoryError(msg)
        _refuse_special(mode, shown, "read")
        yield file


def _named(error: OSError, what: str) -> OSError:
    """An OSError of ``error``'s class (by errno) whose message starts with ``what``."""
    if error.errno is None:
        return OSError(f"{what}: {error}")
    code = errno.errorcode.get(error.errno, str(error.errno))
    reason = error.strerror or os.strerror(error.errno)
    return OSError(error.errno, f"{what}: {reason} ({code})")


# ---------------------------------------------------------------- temporary files


def _failed(error: OSError, shown: str, doing: str, *, unchanged: bool = True) -> OSError:
    """``error`` as an OSError of the same class naming the caller's path and the cause."""
    number = error.errno or errno.EIO
    code = errno.errorcode.get(number, str(number))
    reason = error.strerror or os.strerror(number)
    why = _REASONS.get(number)
    cause = f"{reason} ({code}{': ' + why if why else ''})"
    after = f"; {shown!r} is unchanged" if unchanged else ""
    return OSError(number, f"could not write {shown!r}: {cause} while {doing}{after}")


@contextmanager
def atomic_file(
    target: str | os.PathLike[str], *, shown: str | None = None
) -> Iterator[tuple[BinaryIO, Path]]:
    """Yield ``(file, temporary_path)`` to write; on success the file replaces ``target``.

    An exception inside the block (raised by the writer, or on purpose after checking
    the temporary file) leaves ``target`` as it was and no temporary file behind.

    Permissions are kept as writing the file in place (``open(target, "wb")``) keeps
    them: a new file gets the usual ones (``0o666`` less the umask), and an existing one
    keeps its permission bits (read, write and execute for owner, group and others: a
    private ``0o600`` checkpoint stays private; a symbolic link is replaced by a file
    with the bits of the file it named). The temporary file is created with the same
    bits for others (less the umask), so it is never more open to others than the file
    it replaces, not even for an instant, but stays readable and writable by its owner
    until the block ends. The old file's owner, group,
    set-user-ID and set-group-ID bits, ACLs and extended attributes are not copied: the
    new file belongs to this process's user.

    ``target`` must be absent, a regular file, or a symbolic link (the link itself is
    replaced, as ``os.replace`` and ``mv`` do; the file it named is left as it was). A
    directory, FIFO, device or socket is refused before anything is written. An OSError
    while creating, writing or renaming the temporary file is raised again as an OSError
    of the same class and errno (``ENOSPC``, ``EFBIG``, ``EACCES``: PermissionError...)
    whose message names ``shown`` (default: ``target``), the cause and the step. Stale
    temporary files of killed writers of ``target`` are removed first.
    """
    target = Path(target)
    shown = os.fspath(target) if shown is None else shown
    kept = check_target(target, shown)
    remove_stale_temporaries(target)
    # Created no more open to others than the file it replaces (a new file: 0o666, less
    # the umask), and readable and writable by its writer until it is whole.
    created = 0o666 if kept is None else kept | stat.S_IRUSR | stat.S_IWUSR
    try:
        fd, temporary = create_temporary(target, created)
    except OSError as error:
        if error.errno is None:
            raise
        doing = f"creating a temporary file in its directory {os.fspath(target.parent)!r}"
        raise _failed(error, shown, doing) from error
    file = os.fdopen(fd, "wb")
    doing = f"writing its temporary file {temporary.name!r}"
    try:
        if kept is not None:  # the umask may have narrowed the bits it was created with
            doing = f"giving its temporary file {temporary.name!r} the mode {kept:#o}"
            _set_permissions(fd, temporary, kept | stat.S_IRUSR | stat.S_IWUSR)
            doing = f"writing its temporary file {temporary.name!r}"
        yield file, temporary
        file.flush()
        if kept is not None:
            doing = f"giving its temporary file {temporary.name!r} the mode {kept:#o}"
            _set_permissions(fd, temporary, kept)
            doing = f"writing its temporary file {temporary.name!r}"
        os.fsync(file.fileno())
        doing = f"renaming its temporary file {temporary.name!r} over it"
        if sys.platform == "win32":  # Windows cannot rename an open file
            file.close()
        os.replace(temporary, target)  # while the lock is held, on POSIX
        file.close()
    except BaseException as error:
        with suppress(OSError):
            file.close()
        with suppress(OSError):
            temporary.unlink()
        if isinstance(error, OSError) and error.errno is not None:
            raise _failed(error, shown, doing) from error
        raise
    fsync_directory(target.parent, shown=shown)


def _set_permissions(fd: int, path: Path, permissions: int) -> None:
    """Give the open file ``fd`` (at ``path``) these permission bits, unless it has them
    (a file system whose files all share one mode may refuse any change)."""
    if stat.S_IMODE(os.fstat(fd).st_mode) & _PERMISSIONS == permissions:
        return
    if hasattr(os, "fchmod"):  # POSIX (Windows from Python 3.13)
        os.fchmod(fd, permissions)
    else:
        os.chmod(path, permissions)


def write_text(target: str | os.PathLike[str], text: str) -> None:
    """Replace ``target`` with ``text`` (UTF-8) atomically."""
    with atomic_file(target) as (file, _):
        file.write(text.encode("utf-8"))


def fsync_directory(directory: Path, *, shown: str | None = None) -> None:
    """Make a rename durable. POSIX only: Windows cannot open a directory this way.

    A directory that cannot be opened for reading (mode ``-wx``: the rename worked) or
    a file system that cannot fsync directories is skipped; any other failure (an I/O
    error) is raised, saying that the file was replaced but may not survive a crash.
    """
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except (PermissionError, FileNotFoundError):
        return
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EACCES):
            return
        what = shown if shown is not None else os.fspath(directory)
        doing = "syncing its directory (the new file is in place, but may not survive a crash)"
        raise _failed(error, what, doing, unchanged=False) from error
    finally:
        os.close(fd)

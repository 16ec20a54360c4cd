"""What keeps the author tools from losing work: careful writes, a book lock, signals.

Standard library only, and :mod:`pytorch_memo._temporaries`, which is too (``nox -s
chapter`` and ``nox -s execute`` import it before any heavy package; private).

- :func:`replace_if_unchanged` writes a file only if it still holds the bytes the tool
  read: an edit saved meanwhile is never overwritten (:class:`FileChangedError`). It
  writes through a symbolic link to the file it names, keeps the file's mode, and
  writes *into* a file with several hard links, as editors do (the links keep sharing
  it); a file with one link is replaced atomically by a rename.
- :func:`create_new` creates a file whole or not at all, never replacing one.
- :func:`book_lock` serializes the tools that change a book's files (an ``fcntl`` lock).
- :func:`interruptible` turns SIGINT and SIGTERM into :class:`Interrupted`, so that a
  tool rolls back before it exits; :func:`signals_blocked` holds them off a step that
  must finish once begun.

The race that remains: the check that the file is unchanged and the rename (or, for a
hard-linked file, the write) are two steps, a few system calls apart (the file's status
is compared just before the rename); an edit saved in those microseconds is lost. An
in-place write of a hard-linked file is not atomic: a SIGKILL or a crash between its
write and its truncation (microseconds) can leave the old file's tail after the new
content, where the new content is the shorter. Temporary files are made by
:mod:`pytorch_memo._temporaries`, as the package's own writes make them
(``.NAME.PID.XXXXXXXX.tmp``), and those of killed writers are removed by the next write
to the same file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from pytorch_memo._temporaries import create_temporary, remove_stale_temporaries

PR_SET_PDEATHSIG = 1

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a tool rolls back on (SIGKILL cannot be caught: see the journal of
:mod:`memobook.scaffold` and the watchdog of :mod:`memobook.execute`)."""


class FileChangedError(RuntimeError):
    """A file changed (or vanished) after the tool read it; it was left as it is."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which (a KeyboardInterrupt, so that
    asyncio and nbclient let it through as they let Ctrl-C through)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.written = False
        """Whether the write it interrupted was complete (the signal came at its end)."""

    @property
    def name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """A shell's status for a process ended by this signal: 128 + its number."""
        return 128 + self.signum


def digest(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------ signals


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Hold SIGINT and SIGTERM off the block (they arrive after it); POSIX only."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - Windows
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _committing() -> Iterator[list[bool]]:
    """:func:`signals_blocked` for a write: the block sets ``done[0]`` once the write is
    complete, and a signal that arrived meanwhile is an :class:`Interrupted` whose
    ``written`` says so."""
    done = [False]
    try:
        with signals_blocked():
            yield done
    except Interrupted as stop:
        stop.written = done[0]
        raise


@contextlib.contextmanager
def interruptible(on_signal: list[Callable[[], object]] | None = None) -> Iterator[None]:
    """Raise :class:`Interrupted` in the main thread on SIGINT or SIGTERM inside the block.

    Each callable of ``on_signal`` (in order) runs first, inside the signal handler: it
    must be quick and must not raise (the execute step kills its kernel there). A signal
    that arrives while an earlier one unwinds the block runs ``on_signal`` again and
    nothing else: the roll back of the first goes on (``nox`` follows SIGINT with
    SIGTERM, then SIGKILL). Outside the main thread the block runs unguarded.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    calls = list(on_signal or [])
    handling: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        for call in calls:
            with contextlib.suppress(Exception):
                call()
        if handling:  # a second signal while the first unwinds: let it finish
            return
        handling.append(signum)
        raise Interrupted(signum)

    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def die_with_parent() -> None:
    """Get SIGTERM when the parent process dies (Linux; elsewhere nothing happens)."""
    if not sys.platform.startswith("linux"):  # pragma: no cover
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    if os.getppid() != parent:  # it died before the request took hold
        os.kill(os.getpid(), signal.SIGTERM)


# ---------------------------------------------------------------------------- the lock


@contextlib.contextmanager
def book_lock(lock: Path, *, waiting: str) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``lock`` (created, with its folder) for the
    block; print ``waiting`` to stderr first when another process holds it."""
    import fcntl

    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(waiting, file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# ------------------------------------------------------------------------------ writes


@contextlib.contextmanager
def _temporary(target: Path, data: bytes) -> Iterator[tuple[int, Path]]:
    """A locked temporary file beside ``target`` holding ``data`` (flushed to disk);
    removed after the block unless the block renamed or linked it away."""
    remove_stale_temporaries(target)
    fd, temporary = create_temporary(target)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        yield fd, temporary
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new link in ``directory`` durable (POSIX; skipped where the
    file system cannot)."""
    if os.name != "posix":  # pragma: no cover
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _status(path: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def replace_if_unchanged(path: Path, data: bytes, *, expected: bytes) -> None:
    """Write ``data`` to ``path`` if ``path`` still holds ``expected``, else raise
    :class:`FileChangedError` and leave it as it is (see the module's docstring).

    SIGINT and SIGTERM are held off from the check to the end of the write.
    """
    target = Path(os.path.realpath(path))  # through a symbolic link, as editors write
    with _temporary(target, data) as (fd, temporary), _committing() as done:
        before = _status(target)
        current = _read(target)
        if before is None or current is None:
            msg = f"{os.fspath(path)!r} was removed after it was read; it was not written"
            raise FileChangedError(msg)
        if current != expected:
            msg = f"{os.fspath(path)!r} changed after it was read (an edit saved meanwhile?)"
            raise FileChangedError(msg)
        st = os.stat(target)
        if st.st_nlink > 1:  # keep the hard links: write into the file, as editors do
            _write_in_place(target, data, before)
            done[0] = True
            return
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        if hasattr(os, "fchown") and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            with contextlib.suppress(OSError):
                os.fchown(fd, st.st_uid, st.st_gid)
        if _status(target) != before:  # the last look, just before the rename
            msg = f"{os.fspath(path)!r} changed after it was read (an edit saved meanwhile?)"
            raise FileChangedError(msg)
        os.replace(temporary, target)
        done[0] = True
    fsync_directory(target.parent)


def _write_in_place(target: Path, data: bytes, before: tuple[int, ...] | None) -> None:
    fd = os.open(target, os.O_WRONLY)
    try:
        if _status(target) != before:
            msg = f"{os.fspath(target)!r} changed after it was read (an edit saved meanwhile?)"
            raise FileChangedError(msg)
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def create_new(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``, whole or not at all; FileExistsError if it
    exists (it is never replaced)."""
    with _temporary(path, data) as (_, temporary), _committing() as done:
        try:
            os.link(temporary, path)  # fails if path exists, atomically
        except OSError as error:
            if error.errno == errno.EEXIST:
                msg = f"{os.fspath(path)!r} exists; it was not replaced"
                raise FileExistsError(errno.EEXIST, msg) from None
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            if os.path.lexists(path):  # a file system without hard links
                msg = f"{os.fspath(path)!r} exists; it was not replaced"
                raise FileExistsError(errno.EEXIST, msg) from None
            os.replace(temporary, path)
        done[0] = True
    fsync_directory(path.parent)


def replace(path: Path, data: bytes) -> None:
    """Replace (or create) ``path`` with ``data`` atomically, whatever it holds; its
    mode is kept."""
    with _temporary(path, data) as (fd, temporary), _committing() as done:
        with contextlib.suppress(FileNotFoundError):
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(temporary, path)
        done[0] = True
    fsync_directory(path.parent)


def remove(path: Path) -> bool:
    """Remove ``path`` if it exists; whether it did."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True

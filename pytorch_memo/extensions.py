"""Build C++ extensions with ``load_inline`` without getting stuck on a killed build's lock.


``torch.utils.cpp_extension`` builds in one directory per extension and guards it with
a file named ``lock``. Up to torch 2.13 that guard was a ``FileBaton``: the file's mere
existence meant "a build is running", so a build killed midway (Ctrl-C in the wrong
place, SIGKILL, an out-of-memory kill, a batch job's time limit) left the file behind
and every later build waited for it forever. Torch 2.14 holds an OS lock on the file
instead (the kernel drops it when the holder dies), and the file stays after every
build, blocking nothing.

:func:`build_extension` is safe under both. Builds through it take turns on an OS lock
of their own (``lock.memo``, which also records who is building); the next one to get
the turn sees the record a killed build left, removes the dead build's ``lock`` and
says so with a :class:`StaleLockWarning` that names the path, then builds. A ``lock``
that may be a live build's, outside these turns (a plain ``load_inline`` of torch
<= 2.13, whose file is its only mark: a fresh file, or one whose folder a process of
this user works in, as ninja and the compilers do), is left alone: the build waits for
it to go, up to its timeout, then says which file to delete.

A killed build must not leave its compilers running either: ninja starts each command
in a process group of its own, so killing the build (or its process group) used to
leave the compiler and linker running as orphans, competing with the next build. Builds
through :func:`build_extension` run ninja under a guard (``_ninja_guard``, Linux): ninja
gets a session of its own, dies when the building Python dies, and when ninja ends, by
any means, whatever is left of its session is killed. So on Linux no compiler outlives

- a ``KeyboardInterrupt`` (Ctrl-C, Jupyter's "interrupt kernel") or any exception in the
  building process: torch kills ninja, the guard kills the rest;
- the building process killed, alone or with its process group (``SIGKILL`` included).

Not covered: the guard itself killed by ``SIGKILL`` (with ninja's whole session, say),
commands that leave the session on purpose (``setsid``, as a compiler cache's server
does), and systems without ``prctl`` (macOS), where ninja runs unguarded.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import shutil
import stat
import sys
import sysconfig
import tempfile
import time
import tomllib
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from pytorch_memo._checks import (
    check_module_name,
    check_path,
    check_seconds,
    check_strings,
    check_type,
)
from pytorch_memo._compat import cpp_extension_lock_is_a_file, cuda_toolkit_home

__all__ = [
    "StaleLockWarning",
    "build_extension",
    "clear_stale_lock",
    "default_build_root",
    "is_stale_lock",
    "killed_build",
    "release_folder_name",
]

LOCK_NAME = "lock"  # torch's lock file in every build directory
TURN_NAME = "lock.memo"  # the OS lock that builds through build_extension take turns on
POLL_SECONDS = 0.1
BATON_GRACE_SECONDS = 30.0  # a plain build holds a fresh FileBaton before ninja starts
PROJECT_NAME = "pytorch-memo"  # the name in the pyproject.toml of a checkout of the book
GUARD_DIR = ".memo-bin"  # in each build directory: the ninja wrapper (see _ninja_guard)


class StaleLockWarning(UserWarning):
    """A build directory held a lock file that no live process holds; it was removed."""


def _check_cuda_build() -> None:
    """Building CUDA sources needs nvcc and an architecture to compile for."""
    if cuda_toolkit_home() is None:
        msg = (
            "cuda_sources needs the CUDA toolkit (nvcc), and torch found none: set "
            "CUDA_HOME, or leave cuda_sources out"
        )
        raise RuntimeError(msg)
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch_cuda_available():
        msg = (
            "cuda_sources needs a GPU architecture to compile for: no GPU is visible "
            "(torch.cuda.is_available() is False) and TORCH_CUDA_ARCH_LIST is not set; "
            "set it (e.g. TORCH_CUDA_ARCH_LIST='8.0') to build without a GPU"
        )
        raise RuntimeError(msg)


def torch_cuda_available() -> bool:
    """``torch.cuda.is_available()``, asked only when CUDA sources are built."""
    import torch

    return bool(torch.cuda.is_available())


def release_folder_name() -> str:
    """The build folder of this torch release, Python and accelerator.

    ``torch-<release>-py<major><minor>[<abiflags>]-<accelerator>``, the accelerator being
    ``cu<version>`` (CUDA), ``rocm<version>`` (ROCm) or ``cpu``, as torch names them in
    its own ``py311_cu132``-style sub-folder. torch's folder is per Python and CUDA but
    not per torch release, so a build directory is shared by every release with the
    same Python and CUDA: torch 2.14 and 2.15 leave an empty ``lock`` file after each
    build, which an older torch (whose ``FileBaton`` reads any ``lock`` file as a build
    in progress) waits on forever. A folder per release keeps them apart.

    Returns:
        The folder's name, e.g. ``torch-2.15.0-py311-cu132``.

    Example:
        >>> import sys, torch
        >>> name = release_folder_name()
        >>> name.startswith(f"torch-{torch.__version__.split('+')[0]}-py{sys.version_info.major}")
        True
    """
    import torch

    release = str(torch.__version__).split("+", 1)[0]
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if hip:
        accelerator = "rocm" + str(hip).split("-", 1)[0].replace(".", "")
    elif cuda:
        accelerator = "cu" + str(cuda).replace(".", "")
    else:
        accelerator = "cpu"
    return f"torch-{release}-{python}-{accelerator}"


def default_build_root(*, start: str | os.PathLike[str] | None = None) -> Path:
    """Where extensions are built: ``TORCH_EXTENSIONS_DIR``, else a folder per release.

    ``TORCH_EXTENSIONS_DIR``, when it is set, is used as it is (as torch does): put the
    release in it yourself. Otherwise the folder is :func:`release_folder_name` (one per
    torch release, Python and accelerator) under a base folder: inside a checkout of this
    book (found by walking up from ``start`` to a folder that holds ``_toc.yml`` and a
    ``pyproject.toml`` whose project is named ``pytorch-memo``) ``_build/torch_extensions``
    at its root, when the checkout's root and every folder from it down to the build
    folder are this user's and not writable by others. Elsewhere (an installed package,
    Colab, another project, a checkout others can write to) torch's own default, a
    ``torch_extensions`` folder in the user's cache, or where that folder cannot be
    created, is not a folder, or can be written by other users, a private temporary
    folder, ``torch_extensions-<uid>`` (mode ``0o700``): nobody else may place a library
    where a build would load it.

    Args:
        start: where to begin looking (the current directory when ``None``).

    Returns:
        The folder under which each extension gets a build directory of its name.

    Raises:
        TypeError: ``start`` is not a path.
        PermissionError: outside a checkout, neither fallback folder is private.

    Example:
        >>> import os, tempfile
        >>> from pathlib import Path
        >>> project = Path(tempfile.mkdtemp()).resolve()
        >>> (project / "_toc.yml").touch()
        >>> _ = (project / "pyproject.toml").write_text('[project]\\nname = "pytorch-memo"')
        >>> (project / "book").mkdir()
        >>> found = default_build_root(start=project / "book")  # from a chapter's folder
        >>> "TORCH_EXTENSIONS_DIR" in os.environ or found.parent.relative_to(project).as_posix()
        '_build/torch_extensions'
        >>> "TORCH_EXTENSIONS_DIR" in os.environ or found.name == release_folder_name()
        True
    """
    here = Path.cwd() if start is None else check_path("start", start)
    given = os.environ.get("TORCH_EXTENSIONS_DIR")
    if given:
        return Path(given)
    release = release_folder_name()
    checkout = _checkout_root(here.resolve())
    if checkout is not None:
        inside = _private_path(checkout, ("_build", "torch_extensions", release))
        if inside is not None:
            return inside
    from torch.utils.cpp_extension import get_default_build_root

    private = Path(tempfile.gettempdir()) / f"torch_extensions-{os.getuid()}"
    base = _private_folder(Path(get_default_build_root()), private)
    return _private_folder(base / release)


def _checkout_root(here: Path) -> Path | None:
    """The nearest folder at or above ``here`` that is a checkout of this book."""
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and _names_this_book(folder / "pyproject.toml"):
            return folder
    return None


def _names_this_book(pyproject: Path) -> bool:
    """Whether ``pyproject`` is a TOML file whose ``[project]`` is named pytorch-memo."""
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    project = data.get("project")
    return isinstance(project, dict) and project.get("name") == PROJECT_NAME


def _private_path(root: Path, parts: Sequence[str]) -> Path | None:
    """``root / parts...``, each folder created private where missing, or None when
    ``root`` or a folder on the way is a link, another user's, or writable by others."""
    try:
        info = root.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    folder = root
    for part in parts:
        folder = folder / part
        try:
            _private_folder(folder)
        except PermissionError:
            return None
    return folder


def _private_folder(*candidates: Path) -> Path:
    """The first candidate that is (or is created as) a folder of this user's, not a link,
    and not writable by anyone else; PermissionError naming each refusal otherwise."""
    refused = []
    for folder in candidates:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = folder.lstat()
        except OSError as error:
            refused.append(f"{folder} ({error.strerror or error})")
            continue
        if not stat.S_ISDIR(info.st_mode):
            refused.append(f"{folder} (not a folder: a link or a file)")
        elif info.st_uid != os.getuid():
            refused.append(f"{folder} (owned by uid {info.st_uid}, not {os.getuid()})")
        elif info.st_mode & 0o022:
            refused.append(f"{folder} (writable by others: mode {stat.S_IMODE(info.st_mode):#o})")
        else:
            return folder
    msg = (
        f"no private folder to build extensions in: {'; '.join(refused)}; "
        "set TORCH_EXTENSIONS_DIR to a folder of your own"
    )
    raise PermissionError(msg)


def _held_by_someone(path: Path) -> bool:
    """Whether some process holds an OS lock (flock) on ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _torch_lock_is_a_file() -> bool:
    """Whether this torch's builds wait while the ``lock`` file merely exists (FileBaton)."""
    return cpp_extension_lock_is_a_file()


def killed_build(build_directory: str | os.PathLike[str]) -> str | None:
    """Who started a build through :func:`build_extension` that died before finishing.

    A build writes its process id and start time into ``lock.memo`` while it holds an
    OS lock on that file, and empties the file when it is done (also when it fails).
    A file with content that nobody holds is therefore a build that was killed.

    Args:
        build_directory: one extension's build directory.

    Returns:
        The killed build's record (``"pid 123, started 2025-01-01 12:00:00"``), or
        ``None`` when no build was killed or one is running now.

    Raises:
        TypeError: ``build_directory`` is not a path.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> killed_build(folder) is None
        True
        >>> _ = (folder / "lock.memo").write_text("pid 123, started 2025-01-01 12:00:00")
        >>> killed_build(folder)  # written, never emptied, held by nobody
        'pid 123, started 2025-01-01 12:00:00'
    """
    turn = check_path("build_directory", build_directory) / TURN_NAME
    try:
        record = turn.read_text().strip()
    except FileNotFoundError:
        return None
    if not record or _held_by_someone(turn):
        return None
    return record


def is_stale_lock(build_directory: str | os.PathLike[str]) -> bool:
    """Whether the ``lock`` file in ``build_directory`` is a dead build's leftover.

    It is when no process holds it, no build through :func:`build_extension` is running
    there (one holds ``lock.memo``), no process of this user works in the directory (as
    ninja and the compilers of a build do; Linux), and either a build was killed there
    (:func:`killed_build`) or this torch's builds wait on the file's mere existence
    (``FileBaton``, torch < 2.14), where a leftover file blocks every later build, and
    the file is at least ``BATON_GRACE_SECONDS`` old (a plain ``load_inline`` holds a
    fresh one before its ninja starts). With torch >= 2.14 the file stays after every
    normal build and blocks nothing.

    Args:
        build_directory: one extension's build directory.

    Returns:
        True when the file exists, nobody holds it, and it is a leftover.

    Raises:
        TypeError: ``build_directory`` is not a path.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "lock").touch()
        >>> _ = (folder / "lock.memo").write_text("pid 123, started 2025-01-01 12:00:00")
        >>> is_stale_lock(folder)
        True
    """
    folder = check_path("build_directory", build_directory)
    return _is_stale(folder, killed_build(folder))


def _working_in(folder: Path) -> int | None:
    """A process (not this one) whose working folder is ``folder`` or below it, as ninja
    and the compilers of a build are: its pid, or None (also where there is no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    try:
        target = folder.resolve()
        entries = [e.name for e in os.scandir(proc) if e.name.isdigit()]
    except OSError:
        return None
    for name in entries:
        if int(name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(proc / name / "cwd"))
        except OSError:  # gone, a zombie, or another user's
            continue
        if cwd == target or target in cwd.parents:
            return int(name)
    return None


def _age(path: Path) -> float:
    """Seconds since ``path`` last changed (0 when it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _is_stale(folder: Path, record: str | None, *, own_turn: bool = False) -> bool:
    """``own_turn``: the caller holds the build directory's turn (``lock.memo``) itself."""
    lock = folder / LOCK_NAME
    if not lock.is_file() or _held_by_someone(lock):
        return False
    if not own_turn and _held_by_someone(folder / TURN_NAME):
        return False  # a live build: under FileBaton its `lock` is held by existing
    if record is not None:
        return True  # the record of a build through build_extension that was killed
    if not _torch_lock_is_a_file():
        return False  # torch >= 2.14 keeps the file after every build: it blocks nothing
    if _working_in(folder) is not None:
        return False  # a build at work (ninja, a compiler): a plain load_inline's, say
    # Under FileBaton a plain load_inline marks its build only by the file's existence,
    # for a moment before its ninja starts: a fresh file may be a live build's.
    return _age(lock) >= BATON_GRACE_SECONDS


def clear_stale_lock(build_directory: str | os.PathLike[str]) -> Path | None:
    """Remove a stale ``lock`` file (see :func:`is_stale_lock`), warning with its path.

    Args:
        build_directory: one extension's build directory.

    Returns:
        The removed file's path, or ``None`` when there was nothing stale.

    Raises:
        TypeError: ``build_directory`` is not a path.

    Warns:
        StaleLockWarning: a stale lock file was found and removed.

    Example:
        >>> import tempfile, warnings
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "lock").touch()
        >>> _ = (folder / "lock.memo").write_text("pid 123, started 2025-01-01 12:00:00")
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     removed = clear_stale_lock(folder)
        >>> removed.name, removed.exists(), str(caught[0].message).startswith("removed")
        ('lock', False, True)
    """
    folder = check_path("build_directory", build_directory)
    return _clear(folder, killed_build(folder))


def _clear(folder: Path, who: str | None, *, own_turn: bool = False) -> Path | None:
    if not _is_stale(folder, who, own_turn=own_turn):
        return None
    cause = (
        f"the build ({who}) was killed midway and no live process holds it"
        if who
        else f"it is {_age(folder / LOCK_NAME):.0f} s old, no process works in its folder, "
        "and this torch's builds would wait for it forever (a build was killed midway, or "
        "a torch that keeps the file after its builds, as 2.14 and 2.15 do, built here)"
    )
    lock = folder / LOCK_NAME
    lock.unlink(missing_ok=True)
    warnings.warn(
        f"removed the stale lock file {lock}: {cause}; building again",
        StaleLockWarning,
        stacklevel=3,
    )
    return lock


def _real_ninja() -> str | None:
    """The ninja to build with: the one installed with this Python, else one on PATH.

    ninja 1.12 and later write ``.ninja_log`` in a format older ninjas do not read, and
    the reverse: a build directory built by one version is rebuilt from scratch by the
    other. A machine with a system ninja and the environment's one would otherwise
    rebuild whenever the caller's ``PATH`` differs (a shell, a kernel, nox).
    """
    scripts = sysconfig.get_path("scripts")
    binary = "ninja.exe" if os.name == "nt" else "ninja"
    if scripts and (Path(scripts) / binary).is_file():
        return str(Path(scripts) / binary)
    return shutil.which(binary)


def _write_if_changed(path: Path, text: str, mode: int) -> None:
    """Replace ``path`` atomically with ``text`` unless it already holds it."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text)
        temporary.chmod(mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextmanager
def _guarded_ninja(folder: Path) -> Iterator[None]:
    """Put a ``ninja`` first on PATH that runs the real one under ``_ninja_guard``.

    torch's ``load_inline`` finds ninja on ``PATH``. The wrapper, ``GUARD_DIR/ninja`` in
    the build directory, runs ``_ninja_guard`` (see there): the compilers die with
    ninja, and ninja with the building process.
    """
    real = _real_ninja()
    if real is None:
        yield  # no ninja: torch says it is missing
        return
    guard = Path(__file__).with_name("_ninja_guard.py")
    script = (
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(guard))} "
        f'{shlex.quote(real)} "$@"\n'
    )
    bindir = folder / GUARD_DIR
    _write_if_changed(bindir / "ninja", script, 0o755)
    before = os.environ.get("PATH")
    os.environ["PATH"] = os.pathsep.join([str(bindir), before]) if before else str(bindir)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


@contextmanager
def _turn(folder: Path, *, timeout: float) -> Iterator[None]:
    """Hold the build directory's turn: an flock the kernel drops if the holder dies.

    While held, the file records who builds; it is emptied when the block ends, so a
    record left behind means the holder was killed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TURN_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                msg = (
                    f"waited {timeout:g} s for {path}: a live process is building this "
                    "extension; raise wait_timeout or stop that process"
                )
                raise TimeoutError(msg)
            time.sleep(POLL_SECONDS)
        record = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        # the previous holder's record: it was killed
        _settle(folder, record or None, deadline=deadline, timeout=timeout)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, started {started}".encode(), 0)
        os.fsync(fd)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing drops the flock


def _settle(folder: Path, record: str | None, *, deadline: float, timeout: float) -> None:
    """Remove a stale ``lock``; wait, until ``deadline``, while a live build outside
    :func:`build_extension` holds it (an OS lock: a torch >= 2.14 build, whichever torch
    runs here) or, under FileBaton, while a live one exists, rather than let
    ``load_inline`` wait on it forever (neither torch's wait has a deadline)."""
    lock = folder / LOCK_NAME
    while _clear(folder, record, own_turn=True) is None:
        held = _held_by_someone(lock)
        if not held and not (_torch_lock_is_a_file() and lock.is_file()):
            return  # nothing blocks
        if time.monotonic() >= deadline and held:
            msg = (
                f"waited {timeout:g} s for {lock}: a live process holds an OS lock on it, "
                "a build of this extension outside build_extension (a plain load_inline "
                "of torch >= 2.14) is running; raise wait_timeout or stop that process"
            )
            raise TimeoutError(msg)
        if time.monotonic() >= deadline:
            pid = _working_in(folder)
            who = (
                f"process {pid} works in {folder}"
                if pid is not None
                else f"it is {_age(lock):.0f} s old"
            )
            msg = (
                f"waited {timeout:g} s for {lock} to go: {who}, a build outside "
                "build_extension (a plain load_inline) may be running; when no build of "
                f"this extension runs, delete it (rm {shlex.quote(str(lock))}) and build again"
            )
            raise TimeoutError(msg)
        time.sleep(POLL_SECONDS)


def build_extension(
    name: str,
    cpp_sources: str | Sequence[str],
    *,
    functions: Sequence[str] | None = None,
    cuda_sources: str | Sequence[str] | None = None,
    build_root: str | os.PathLike[str] | None = None,
    extra_cflags: Sequence[str] | None = None,
    no_implicit_headers: bool = False,
    wait_timeout: float = 600.0,
    verbose: bool = False,
) -> ModuleType:
    """Build (or load from the cache) a C++ extension with ``load_inline``, safely.

    The extension is built in ``build_root / name``. Builds through this function take
    turns on an OS lock (``lock.memo``) that the kernel releases if a builder dies;
    whoever has the turn removes a stale ``lock`` left by a killed build (warning
    :class:`StaleLockWarning`; see :func:`is_stale_lock`), waits, up to
    ``wait_timeout``, while a build outside this function holds ``lock`` (a plain
    ``load_inline`` of torch >= 2.14, whichever torch runs here) or, under torch < 2.14,
    while a live ``lock`` exists (a plain ``load_inline``), and then calls
    ``torch.utils.cpp_extension.load_inline`` (a plain build that takes ``lock`` in the
    moment between that wait and the call is waited for by torch itself, which sets no
    deadline),
    which rebuilds what the killed build left unfinished (ninja keeps track). It builds
    with the ninja installed with this Python when there is one (another ninja version
    would rebuild what this one built).

    Within one Python process torch remembers each name's sources: built again with
    other sources (or in another directory) the module is renamed ``name_v1``, ``_v2``...
    as a module, once imported, cannot be replaced.

    Args:
        name: the module's name, a Python identifier.
        cpp_sources: C++ source(s); ``<torch/extension.h>`` is included for you unless
            ``no_implicit_headers``.
        functions: C++ functions to bind to Python (``None``: the sources bind their own).
        cuda_sources: CUDA source(s), built with nvcc.
        build_root: the folder of build directories (``None``: :func:`default_build_root`).
        extra_cflags: extra compiler flags.
        no_implicit_headers: do not add torch's headers to the sources.
        wait_timeout: seconds to wait for a live build of the same extension.
        verbose: let torch log the build steps.

    Returns:
        The extension's Python module.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``name`` is not an identifier or is the name of an imported or
            importable module (loading the extension would replace it in
            ``sys.modules``), ``cpp_sources`` is empty, or ``wait_timeout`` is not
            positive and finite.
        TimeoutError: another live build held the turn or an OS lock on ``lock``, or
            (torch < 2.14) a ``lock`` that is not stale stayed, for ``wait_timeout``
            seconds; the message names the file to delete when no build runs, or
            ``wait_timeout``.
        RuntimeError: the compiler or linker failed (torch's message), or
            ``cuda_sources`` were given without a CUDA toolkit or target architecture.
        ImportError: the built library does not import as module ``name``.

    Warns:
        StaleLockWarning: a killed build's lock file was removed.

    Example:
        With torch's headers a build takes tens of seconds; this bare CPython module
        (``TORCH_EXTENSION_NAME`` is the ``name``, defined by torch's build) takes a few:

        >>> import tempfile
        >>> bare = '''
        ... #include <Python.h>
        ... #define NAME_(n) #n
        ... #define NAME(n) NAME_(n)
        ... #define INIT_(n) PyInit_##n
        ... #define INIT(n) INIT_(n)
        ... static PyModuleDef def = {PyModuleDef_HEAD_INIT, NAME(TORCH_EXTENSION_NAME)};
        ... PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&def); }
        ... '''
        >>> module = build_extension(
        ...     "bare_example", bare, no_implicit_headers=True, build_root=tempfile.mkdtemp())
        >>> module.__name__
        'bare_example'
    """
    check_module_name("name", name)
    cpp = check_strings("cpp_sources", cpp_sources, required=True)
    check_type("no_implicit_headers", no_implicit_headers, bool, "a bool")
    check_type("verbose", verbose, bool, "a bool")
    cuda = (
        None if cuda_sources is None else check_strings("cuda_sources", cuda_sources, required=True)
    )
    names = None if functions is None else check_strings("functions", functions, required=True)
    flags = (
        None
        if extra_cflags is None
        else check_strings("extra_cflags", extra_cflags, required=False)
    )
    timeout = check_seconds("wait_timeout", wait_timeout)
    root = default_build_root() if build_root is None else check_path("build_root", build_root)
    folder = root / name
    if cuda is not None:
        _check_cuda_build()

    from torch.utils import cpp_extension

    load_inline: Callable[..., object] = cpp_extension.load_inline  # untyped in torch
    with _turn(folder, timeout=timeout), _guarded_ninja(folder):
        try:
            module = load_inline(
                name,
                cpp_sources=cpp,
                cuda_sources=cuda,
                functions=names,
                extra_cflags=flags,
                build_directory=str(folder),
                no_implicit_headers=no_implicit_headers,
                verbose=verbose,
            )
        except ImportError as error:
            msg = (
                f"the library built from cpp_sources in {folder} does not import as module "
                f"{name!r}: {error} (without torch's headers the sources must define "
                f"PyInit_{name} themselves; an undefined symbol is a declaration without a "
                "definition)"
            )
            raise ImportError(msg, name=name) from error
    if not isinstance(module, ModuleType):  # pragma: no cover - load_inline's contract
        msg = f"load_inline returned {type(module).__name__}, not a module"
        raise TypeError(msg)
    return module

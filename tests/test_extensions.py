"""pytorch_memo.extensions: a build killed midway, for real, and the next one recovering.

The builds use a bare CPython module (no torch headers), which compiles in seconds, in
a temporary build root; they go through torch's ``load_inline`` like any other build.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from torch.utils.cpp_extension import get_default_build_root

from pytorch_memo._procs import descendants, kill_tree
from pytorch_memo.extensions import (
    StaleLockWarning,
    _torch_lock_is_a_file,
    build_extension,
    clear_stale_lock,
    default_build_root,
    is_stale_lock,
    killed_build,
    release_folder_name,
)
from tests.processes import no_orphans

pytestmark = pytest.mark.early  # a long file: handed out first (tests/conftest.py)

BARE = """
#include <Python.h>
#define NAME_(n) #n
#define NAME(n) NAME_(n)
#define INIT_(n) PyInit_##n
#define INIT(n) INIT_(n)
static PyModuleDef def = {PyModuleDef_HEAD_INIT, NAME(TORCH_EXTENSION_NAME)};
PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&def); }
"""
BUILD = textwrap.dedent(
    """
    import signal, sys, warnings
    warnings.simplefilter("always")
    # Ctrl-C raises KeyboardInterrupt even where this process was started with SIGINT
    # ignored (a background job of a shell inherits that, and passes it on)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from pytorch_memo.extensions import build_extension
    module = build_extension("bare", sys.argv[2], no_implicit_headers=True, build_root=sys.argv[1])
    print("built", module.__name__)
    """
)
ROOT = Path(__file__).resolve().parent.parent
SLOW_COMPILER = '#!/bin/sh\ncase " $* " in *" -c "*) sleep 60;; esac\nexec c++ "$@"\n'


def _build_process(root: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", BUILD, str(root), BARE],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the kill takes ninja and cc too
    )


def _wait_for(path: Path, *, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear in {seconds} s"
        time.sleep(0.05)


def _slow_build(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A build process whose compiler is running (it takes a minute)."""
    slow = tmp_path / "slow-c++"
    slow.write_text(SLOW_COMPILER)
    slow.chmod(0o755)
    root = tmp_path / "extensions"
    process = _build_process(root, CXX=str(slow))
    _wait_for(root / "bare" / "build.ninja", seconds=120)  # written before ninja starts
    deadline = time.monotonic() + 30
    while not any("sleep" in _cmdline(pid) for pid in descendants(process.pid)):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the slow compiler did not start"
        time.sleep(0.05)
    return process, root / "bare"


def _make_checkout(folder: Path) -> Path:
    """A checkout of this book: `_toc.yml` and a pyproject.toml naming pytorch-memo."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_toc.yml").touch()
    (folder / "pyproject.toml").write_text('[project]\nname = "pytorch-memo"\n')
    return folder


def _age(path: Path, seconds: float) -> None:
    """Date the file's last change `seconds` back."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_killed_build_leaves_a_stale_lock_that_the_next_build_clears(tmp_path: Path) -> None:
    with no_orphans():  # ninja's compiler runs in a process group of its own: it dies too
        killed, folder = _slow_build(tmp_path)
        os.killpg(killed.pid, signal.SIGKILL)  # the building process and its group
        killed.communicate()
    assert killed.returncode == -signal.SIGKILL
    root = folder.parent

    assert (folder / "lock").exists()
    assert killed_build(folder).startswith(f"pid {killed.pid}, started ")  # type: ignore[union-attr]
    assert is_stale_lock(folder)
    assert not list(folder.glob("*.so"))

    again = _build_process(root)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert out.strip() == "built bare"
    assert "StaleLockWarning: removed the stale lock file" in err
    assert str(folder / "lock") in err
    assert f"the build (pid {killed.pid}, started " in err
    assert killed_build(folder) is None  # the finished build emptied its record
    assert list(folder.glob("*.so"))


def test_an_interrupted_build_leaves_no_compiler_running(tmp_path: Path) -> None:
    with no_orphans():
        interrupted, folder = _slow_build(tmp_path)
        interrupted.send_signal(signal.SIGINT)  # Ctrl-C: KeyboardInterrupt in load_inline
        try:
            _, err = interrupted.communicate(timeout=60)
        finally:
            if interrupted.poll() is None:  # it did not stop: leave nothing running
                os.killpg(interrupted.pid, signal.SIGKILL)
                interrupted.communicate()
    assert "KeyboardInterrupt" in err
    assert interrupted.returncode != 0
    assert killed_build(folder) is None  # the interrupted build emptied its record


def test_a_build_whose_python_alone_is_killed_stops_too(tmp_path: Path) -> None:
    with no_orphans():  # ninja dies with the Python that started it, its compiler with it
        killed, folder = _slow_build(tmp_path)
        killed.kill()  # SIGKILL to the Python process only
        killed.communicate()
    assert killed_build(folder) is not None  # its record says it was killed
    again = _build_process(folder.parent)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert out.strip() == "built bare"


def test_a_cached_build_loads_without_warnings(tmp_path: Path) -> None:
    first = build_extension("bare", BARE, no_implicit_headers=True, build_root=tmp_path)
    library = next((tmp_path / "bare").glob("*.so"))
    built = library.stat().st_mtime_ns
    second = build_extension("bare", [BARE], no_implicit_headers=True, build_root=tmp_path)
    assert first.__name__ == second.__name__ == "bare"
    assert library.stat().st_mtime_ns == built  # loaded, not rebuilt


def test_a_live_holder_is_not_stale(tmp_path: Path) -> None:
    (tmp_path / "lock.memo").write_text("pid 1, started 2025-01-01 00:00:00")
    lock = tmp_path / "lock"
    with FileLock(lock):  # how torch >= 2.14 holds it during a build
        assert lock.exists()
        assert not is_stale_lock(tmp_path)
        assert clear_stale_lock(tmp_path) is None
        assert lock.exists()
    assert is_stale_lock(tmp_path)  # released, and the record says its build died


@pytest.mark.parametrize("file_baton", [False, True], ids=["flock", "FileBaton"])
def test_a_running_build_is_not_a_killed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_baton: bool
) -> None:
    """Under torch < 2.14 (FileBaton) too, where an unheld `lock` file alone blocks builds."""
    if file_baton:
        monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    turn = tmp_path / "lock.memo"
    turn.write_text("pid 1, started 2025-01-01 00:00:00")
    (tmp_path / "lock").touch()
    fd = os.open(turn, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the builder is alive
    try:
        assert killed_build(tmp_path) is None
        assert not is_stale_lock(tmp_path)
        assert clear_stale_lock(tmp_path) is None
        assert (tmp_path / "lock").exists()
    finally:
        os.close(fd)
    assert killed_build(tmp_path) == "pid 1, started 2025-01-01 00:00:00"


def test_a_lock_file_after_a_normal_build_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "lock").touch()  # torch >= 2.14 leaves it after every build
    _age(tmp_path / "lock", 600)
    (tmp_path / "lock.memo").touch()  # emptied: the last build finished
    if _torch_lock_is_a_file():
        assert is_stale_lock(tmp_path)  # FileBaton: the file itself would block
    else:
        assert not is_stale_lock(tmp_path)
        assert clear_stale_lock(tmp_path) is None
        assert (tmp_path / "lock").exists()


def test_under_file_baton_an_unheld_lock_file_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    (tmp_path / "lock").touch()  # a FileBaton left by a killed plain load_inline
    _age(tmp_path / "lock", 600)
    assert killed_build(tmp_path) is None
    assert is_stale_lock(tmp_path)
    with pytest.warns(StaleLockWarning, match=r"a build was killed midway"):
        assert clear_stale_lock(tmp_path) == tmp_path / "lock"


def test_under_file_baton_a_plain_build_at_work_is_not_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain load_inline under torch <= 2.13 marks its build only by the `lock` file's
    existence; while it builds, ninja and the compilers work in the build directory."""
    monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    (tmp_path / "lock").touch()
    _age(tmp_path / "lock", 600)  # a long build
    with no_orphans():
        ninja = subprocess.Popen(["sleep", "60"], cwd=tmp_path)  # as ninja runs there
        try:
            assert not is_stale_lock(tmp_path)
            assert clear_stale_lock(tmp_path) is None
            assert (tmp_path / "lock").exists()
        finally:
            ninja.kill()
            ninja.wait()
    assert is_stale_lock(tmp_path)  # nobody works there any more


def test_under_file_baton_a_fresh_lock_file_is_not_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain build takes its `lock` a moment before ninja starts: a fresh file may be one."""
    monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    (tmp_path / "lock").touch()
    assert not is_stale_lock(tmp_path)
    assert clear_stale_lock(tmp_path) is None
    _age(tmp_path / "lock", 600)
    assert is_stale_lock(tmp_path)


def test_under_file_baton_a_build_waits_for_a_plain_build_then_says_what_to_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "lock").touch()
    _age(folder / "lock", 600)
    with no_orphans():
        ninja = subprocess.Popen(["sleep", "60"], cwd=folder)
        try:
            with pytest.raises(
                TimeoutError,
                match=rf"waited 0.5 s for {folder / 'lock'} to go: process {ninja.pid} works "
                r"in .*plain load_inline.*rm ",
            ):
                build_extension("bare", BARE, build_root=tmp_path, wait_timeout=0.5)
            assert (folder / "lock").exists()  # the live build's lock is left alone
        finally:
            ninja.kill()
            ninja.wait()


def test_a_plain_load_inline_at_work_is_not_stale(tmp_path: Path) -> None:
    """With this torch's own lock: a FileBaton (torch <= 2.13) or an OS lock."""
    slow = tmp_path / "slow-c++"
    slow.write_text(SLOW_COMPILER)
    slow.chmod(0o755)
    folder = tmp_path / "plain"
    plain = textwrap.dedent(
        """
        import sys
        from torch.utils.cpp_extension import load_inline
        load_inline("plain", sys.argv[2], build_directory=sys.argv[1], no_implicit_headers=True)
        """
    )
    folder.mkdir()
    with no_orphans():
        build = subprocess.Popen(
            [
                sys.executable,
                "-c",
                plain,
                str(folder),
                BARE.replace("TORCH_EXTENSION_NAME", "plain"),
            ],
            env={**os.environ, "CXX": str(slow)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not any("sleep" in _cmdline(pid) for pid in descendants(build.pid)):
                assert build.poll() is None, build.communicate()
                assert time.monotonic() < deadline, "the slow compiler did not start"
                time.sleep(0.05)
            _age(folder / "lock", 600)  # however long it has been building
            assert not is_stale_lock(folder)
            assert clear_stale_lock(folder) is None
            assert (folder / "lock").exists()
        finally:
            kill_tree(build.pid)  # ninja runs the compiler in a process group of its own
            build.communicate()


def test_clear_stale_lock_warns_with_the_path_and_the_killed_build(tmp_path: Path) -> None:
    (tmp_path / "lock").touch()
    (tmp_path / "lock.memo").write_text("pid 99, started 2025-01-01 00:00:00")
    with pytest.warns(
        StaleLockWarning,
        match=r"removed the stale lock file .*lock: the build "
        r"\(pid 99, started 2025-01-01 00:00:00\) was killed midway",
    ):
        removed = clear_stale_lock(tmp_path)
    assert removed == tmp_path / "lock"
    assert not removed.exists()
    assert clear_stale_lock(tmp_path) is None
    assert not is_stale_lock(tmp_path / "missing")
    assert killed_build(tmp_path / "missing") is None


def test_builds_with_the_environments_ninja_whatever_comes_first_on_path(
    tmp_path: Path,
) -> None:
    # Another ninja first on PATH (here one that only records that it ran and fails).
    other = tmp_path / "other-bin"
    other.mkdir()
    called = tmp_path / "other-ninja-ran"
    (other / "ninja").write_text(f'#!/bin/sh\ntouch "{called}"\nexit 1\n')
    (other / "ninja").chmod(0o755)
    build = _build_process(tmp_path / "extensions", PATH=f"{other}{os.pathsep}{os.environ['PATH']}")
    out, err = build.communicate(timeout=300)
    assert build.returncode == 0, err
    assert out.strip() == "built bare"
    assert not called.exists()


def test_a_build_leaves_path_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    before = os.environ["PATH"]
    build_extension("bare", BARE, no_implicit_headers=True, build_root=tmp_path)
    assert os.environ["PATH"] == before


def test_waits_for_a_live_build_then_names_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "bare"
    folder.mkdir()
    fd = os.open(folder / "lock.memo", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another builder has the turn
    try:
        start = time.monotonic()
        with (
            no_orphans(),
            pytest.raises(TimeoutError, match=r"waited 0.3 s for .*lock.memo: a live process"),
        ):
            build_extension("bare", BARE, build_root=tmp_path, wait_timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        os.close(fd)


def test_default_build_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # not the user's own
    project = _make_checkout(tmp_path / "project")
    (project / "book").mkdir(parents=True)
    expected = project.resolve() / "_build" / "torch_extensions" / release_folder_name()
    assert default_build_root(start=project / "book") == expected
    monkeypatch.chdir(project / "book")
    assert default_build_root() == expected
    monkeypatch.chdir(tmp_path)  # outside any project: under torch's own default root
    assert default_build_root() == Path(get_default_build_root()) / release_folder_name()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "given"))
    assert default_build_root(start=project) == tmp_path / "given"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((3, BARE), {}, TypeError, r"name must be a str, got int: 3"),
        (("no-dash", BARE), {}, ValueError, r"name must be a Python identifier.*'no-dash'"),
        (("ok", ""), {}, ValueError, r"cpp_sources must hold some source code, got ''"),
        (("ok", 5), {}, TypeError, r"cpp_sources must be a str or a sequence of str, got int"),
        (("ok", BARE), {"functions": [1]}, TypeError, r"functions must be a str or a sequence"),
        (("ok", BARE), {"wait_timeout": 0}, ValueError, r"wait_timeout must be > 0 seconds, got 0"),
        (
            ("ok", BARE),
            {"wait_timeout": "5"},
            TypeError,
            r"wait_timeout must be a number of seconds, got str: '5'",
        ),
        (
            ("ok", BARE),
            {"build_root": 3},
            TypeError,
            r"build_root must be a str or os\.PathLike, got int",
        ),
    ],
)
def test_build_extension_rejects_bad_input(
    args: tuple[object, ...], kwargs: dict[str, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        build_extension(*args, **kwargs)  # type: ignore[arg-type]


def test_stale_lock_checks_reject_a_non_path() -> None:
    with pytest.raises(TypeError, match=r"build_directory must be a str or os\.PathLike, got int"):
        is_stale_lock(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"start must be a str or os\.PathLike, got float"):
        default_build_root(start=1.5)  # type: ignore[arg-type]


def _outside_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No TORCH_EXTENSIONS_DIR, the user's cache and the temporary folder under tmp_path;
    returns the folder to start from (no _toc.yml above it)."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    start = tmp_path / "content"  # a Colab-like working folder
    start.mkdir()
    return start


def test_default_build_root_outside_a_checkout_is_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = _outside_a_checkout(tmp_path, monkeypatch)
    found = default_build_root(start=start)
    assert found.parent == Path(get_default_build_root())
    assert found == tmp_path / "cache" / "torch_extensions" / release_folder_name()
    for folder in (found, found.parent):
        assert folder.is_dir()
        assert folder.stat().st_mode & 0o777 == 0o700  # created private
    assert default_build_root(start=start) == found  # and used again


@pytest.mark.parametrize("pyproject", ["", '[project]\nname = "other-book"\n', "not [toml"])
def test_another_projects_folder_is_not_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pyproject: str
) -> None:
    """Any Jupyter Book project has `_toc.yml` and `pyproject.toml`: only this one counts."""
    start = _outside_a_checkout(tmp_path, monkeypatch)
    (start / "_toc.yml").touch()
    (start / "pyproject.toml").write_text(pyproject)
    found = default_build_root(start=start)
    assert found == tmp_path / "cache" / "torch_extensions" / release_folder_name()


def test_a_checkout_others_can_write_to_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Markers planted in a shared folder (mode 1777, like /tmp) redirect nothing."""
    start = _outside_a_checkout(tmp_path, monkeypatch)
    shared = _make_checkout(tmp_path / "shared")
    shared.chmod(0o1777)
    mine = shared / "my_project"
    mine.mkdir()
    found = default_build_root(start=mine)
    assert found == tmp_path / "cache" / "torch_extensions" / release_folder_name()
    assert not (shared / "_build").exists()
    _make_checkout(start / "book")  # a checkout of one's own is used
    inside = default_build_root(start=start / "book")
    assert inside == start / "book" / "_build" / "torch_extensions" / release_folder_name()
    (start / "book" / "_build").chmod(0o777)  # a folder on the way others can write to
    assert default_build_root(start=start / "book") == found


@pytest.mark.parametrize("cache", ["a file", "writable by others", "a link"])
def test_default_build_root_falls_back_to_a_private_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    start = _outside_a_checkout(tmp_path, monkeypatch)
    users = tmp_path / "cache" / "torch_extensions"
    users.parent.mkdir()
    if cache == "a file":
        users.write_text("")  # no folder can be made there
    elif cache == "writable by others":
        users.mkdir()
        users.chmod(0o777)
    else:
        (tmp_path / "elsewhere").mkdir()
        users.symlink_to(tmp_path / "elsewhere")
        monkeypatch.setattr(  # as torch would, were it not resolving links
            "torch.utils.cpp_extension.get_default_build_root", lambda: str(users)
        )
    found = default_build_root(start=start)
    assert found == tmp_path / "tmp" / f"torch_extensions-{os.getuid()}" / release_folder_name()
    for folder in (found, found.parent):
        assert folder.is_dir()
        assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("planted", ["writable by others", "a link"])
def test_default_build_root_refuses_a_temporary_folder_planted_by_someone_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    start = _outside_a_checkout(tmp_path, monkeypatch)
    (tmp_path / "cache").write_text("")  # the user's cache cannot be used
    temporary = tmp_path / "tmp" / f"torch_extensions-{os.getuid()}"
    if planted == "a link":
        (tmp_path / "theirs").mkdir()
        temporary.symlink_to(tmp_path / "theirs")
        reason = "not a folder: a link or a file"
    else:
        temporary.mkdir()
        temporary.chmod(0o777)
        reason = "writable by others: mode 0o777"
    with pytest.raises(PermissionError, match="no private folder to build extensions in") as caught:
        default_build_root(start=start)
    message = str(caught.value)
    assert f"{temporary} ({reason})" in message
    assert "set TORCH_EXTENSIONS_DIR" in message
    assert not list(temporary.iterdir())  # nothing was built or written there


def test_default_build_root_refuses_a_folder_of_another_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = _outside_a_checkout(tmp_path, monkeypatch)
    if os.getuid() == 0:
        theirs = tmp_path / "cache" / "torch_extensions"
        theirs.mkdir(parents=True, mode=0o700)
        os.chown(theirs, 65534, -1)  # nobody's
    else:
        theirs = Path("/")  # root's, and not writable by others
    monkeypatch.setattr("torch.utils.cpp_extension.get_default_build_root", lambda: str(theirs))
    found = default_build_root(start=start)
    assert found == tmp_path / "tmp" / f"torch_extensions-{os.getuid()}" / release_folder_name()


# -- issue 16: names that would replace a module; CUDA sources without CUDA ---------------


@pytest.mark.parametrize("name", ["random", "os", "torch", "pytest"])
def test_the_name_of_an_imported_module_is_refused(name: str, tmp_path: Path) -> None:
    before = sys.modules[name]
    with pytest.raises(
        ValueError,
        match=rf"name must not be the name of an imported module, got '{name}': loading the "
        r"extension would replace <module",
    ):
        build_extension(name, BARE, no_implicit_headers=True, build_root=tmp_path)
    assert sys.modules[name] is before
    assert not (tmp_path / name).exists()  # refused before anything was written


def test_the_name_of_an_importable_module_is_refused(tmp_path: Path) -> None:
    (tmp_path / "not_imported_yet.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"importable module, got 'not_imported_yet'.*shadow"):
            build_extension("not_imported_yet", BARE, no_implicit_headers=True, build_root=tmp_path)
    finally:
        sys.path.remove(str(tmp_path))
    assert "not_imported_yet" not in sys.modules


def test_an_extension_may_be_built_again_under_its_name(tmp_path: Path) -> None:
    first = build_extension("bare_again", BARE, no_implicit_headers=True, build_root=tmp_path)
    assert sys.modules["bare_again"] is first  # CPython registers single-phase modules
    second = build_extension("bare_again", BARE, no_implicit_headers=True, build_root=tmp_path)
    assert second.__name__ == "bare_again"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_cuda_sources_without_a_gpu_or_architecture_get_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    with pytest.raises(RuntimeError, match=r"cuda_sources needs a GPU architecture to compile"):
        build_extension(
            "with_cuda", BARE, cuda_sources="__global__ void k() {}", build_root=tmp_path
        )
    monkeypatch.setattr("pytorch_memo.extensions.cuda_toolkit_home", lambda: None)
    with pytest.raises(RuntimeError, match=r"cuda_sources needs the CUDA toolkit \(nvcc\)"):
        build_extension(
            "with_cuda", BARE, cuda_sources="__global__ void k() {}", build_root=tmp_path
        )


@pytest.mark.parametrize("wait_timeout", [float("inf"), float("nan"), 10.0**10])
def test_wait_timeout_must_be_finite(wait_timeout: float, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"wait_timeout must be"):
        build_extension("ok", BARE, build_root=tmp_path, wait_timeout=wait_timeout)


def test_a_library_that_is_not_a_module_gets_a_clear_import_error(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match=r"does not import as module 'not_a_module'.*PyInit_"):
        build_extension(
            "not_a_module", "int f() { return 1; }", no_implicit_headers=True, build_root=tmp_path
        )


# -- issue 22: a build folder per torch release, so an older torch never meets 2.14's lock --


def test_the_release_folder_names_the_torch_release_python_and_accelerator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    python = f"py{sys.version_info.major}{sys.version_info.minor}{sys.abiflags}"
    monkeypatch.setattr(torch, "__version__", "2.13.0+cu128")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.version, "hip", None)
    assert release_folder_name() == f"torch-2.13.0-{python}-cu128"
    monkeypatch.setattr(torch.version, "cuda", None)
    assert release_folder_name() == f"torch-2.13.0-{python}-cpu"
    monkeypatch.setattr(torch.version, "hip", "6.4.43482-0f2d60242")
    assert release_folder_name() == f"torch-2.13.0-{python}-rocm6443482"  # as torch names it


def test_an_older_release_builds_in_another_folder_than_the_one_2_14_left_its_lock_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.14+ leaves an empty `lock` after each build; torch <= 2.13's FileBaton reads
    any `lock` file as a build in progress and waits for it to go, forever. torch's own
    sub-folder (py311_cu128) is shared by every release with that Python and CUDA."""
    from torch.utils.file_baton import FileBaton

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    project = _make_checkout(tmp_path / "project")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.version, "hip", None)

    monkeypatch.setattr(torch, "__version__", "2.14.1+cu128")
    newer = default_build_root(start=project) / "bare"
    newer.mkdir(parents=True)
    (newer / "lock").touch()  # what a finished 2.14 build leaves: empty, held by nobody
    assert (newer / "lock").stat().st_size == 0
    assert not FileBaton(str(newer / "lock")).try_acquire()  # an older torch would wait here

    monkeypatch.setattr(torch, "__version__", "2.13.0+cu128")
    older = default_build_root(start=project) / "bare"
    assert older != newer
    assert older.parent.parent == newer.parent.parent  # the same base, one folder per release
    older.mkdir(parents=True)
    baton = FileBaton(str(older / "lock"))
    assert baton.try_acquire()  # nothing to wait for: the build goes ahead
    baton.release()
    assert (newer / "lock").exists()  # the other release's folder is left alone


def test_under_file_baton_a_build_reports_2_14s_leftover_lock_instead_of_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the folder is shared anyway (TORCH_EXTENSIONS_DIR set by hand), a build through
    build_extension under a FileBaton torch removes the empty, unheld `lock` with a warning
    that names it, and builds."""
    monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    folder = tmp_path / "bare_shared"
    folder.mkdir()
    (folder / "lock").touch()  # left by a 2.14 build that finished
    _age(folder / "lock", 600)
    (folder / "lock.memo").touch()  # emptied: that build finished
    with pytest.warns(StaleLockWarning) as caught:
        module = build_extension("bare_shared", BARE, no_implicit_headers=True, build_root=tmp_path)
    assert module.__name__ == "bare_shared"
    message = str(caught[0].message)
    assert message.startswith(f"removed the stale lock file {folder / 'lock'}: ")
    assert "no process works in its folder" in message
    assert "as 2.14 and 2.15 do" in message


@pytest.mark.parametrize("file_baton", [False, True], ids=["flock", "FileBaton"])
def test_a_build_holding_an_os_lock_is_waited_for_up_to_wait_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_baton: bool
) -> None:
    """A torch >= 2.14 build outside build_extension (a plain load_inline) holds `lock`
    with an OS lock: neither torch's FileBaton (which waits while the file exists) nor its
    FileLock has a deadline, so build_extension waits for it itself, up to wait_timeout."""
    if file_baton:
        monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)

    def load_inline(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_inline was called while a live build held the lock")

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", load_inline)
    folder = tmp_path / "bare"
    folder.mkdir()
    lock = folder / "lock"
    with FileLock(lock):  # how a torch >= 2.14 build holds it
        _age(lock, 600)  # however long it has been building
        start = time.monotonic()
        with pytest.raises(
            TimeoutError,
            match=rf"waited 0.3 s for {lock}: a live process holds an OS lock.*wait_timeout",
        ):
            build_extension("bare", BARE, build_root=tmp_path, wait_timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 5
        assert lock.exists()


def test_a_killed_builds_record_makes_its_lock_stale_whoever_works_in_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell that cd'd into the build folder must not keep a killed build's lock."""
    monkeypatch.setattr("pytorch_memo.extensions._torch_lock_is_a_file", lambda: True)
    (tmp_path / "lock").touch()
    (tmp_path / "lock.memo").write_text("pid 99, started 2025-01-01 00:00:00")
    with no_orphans():
        shell = subprocess.Popen(["sleep", "60"], cwd=tmp_path)  # a shell, say
        try:
            assert killed_build(tmp_path) is not None
            assert is_stale_lock(tmp_path)
        finally:
            shell.kill()
            shell.wait()

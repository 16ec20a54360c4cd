"""pytorch_memo._files: a file is replaced whole, or left as it was."""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytorch_memo._files import atomic_file, write_text
from tests.fileprocs import drop_file_capabilities, forked, permissions_enforced


def test_write_text_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("old")
    write_text(target, "new: ü\n")
    assert target.read_bytes() == "new: ü\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    seen: list[Path] = []

    def write_half() -> None:
        with atomic_file(target) as (file, temporary):
            file.write(b"half of the new con")
            seen.append(temporary)
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_half()
    assert seen[0].parent == tmp_path
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_the_temporary_file_can_be_checked_before_it_replaces_the_target(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    with atomic_file(target) as (file, temporary):
        file.write(b"checked")
        file.flush()
        assert temporary.read_bytes() == b"checked"
        assert not target.exists()  # nothing is replaced until the block ends
    assert target.read_bytes() == b"checked"


def test_new_files_get_the_usual_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=oct)
def test_new_files_get_the_umasks_permissions(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400, 0o000], ids=oct)
def test_the_temporary_file_is_never_more_open_to_others_than_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    # before: it was created with 0o666 less the umask (0o644 here) and narrowed by
    # fchmod a moment later; another user who opened it in between kept a descriptor
    # that reads whatever is written next. Created with the final bits, there is no
    # such moment: its mode is checked as the call that creates it returns.
    target = tmp_path / "private.bin"
    target.write_bytes(b"old")
    target.chmod(mode)
    created: list[int] = []
    real_open = os.open

    def recording_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if flags & os.O_CREAT and Path(path).name.startswith(".private.bin."):
            created.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return fd

    monkeypatch.setattr(os, "open", recording_open)
    old = os.umask(0o022)
    try:
        write_text(target, "new")
    finally:
        os.umask(old)
    assert len(created) == 1
    assert created[0] & 0o077 & ~mode == 0, f"created {created[0]:#o} for a {mode:#o} file"
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert target.read_text() == "new"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o660, 0o755, 0o444, 0o000], ids=oct)
def test_an_existing_file_keeps_its_permissions(tmp_path: Path, mode: int) -> None:
    # As writing in place would: a private file is not made readable by others.
    target = tmp_path / "private.bin"
    target.write_bytes(b"old")
    target.chmod(mode)
    old = os.umask(0o022)
    try:
        with atomic_file(target) as (file, temporary):
            file.write(b"new")
            file.flush()
            during = stat.S_IMODE(temporary.stat().st_mode)
            assert during & 0o077 == mode & 0o077  # never more open to others
            assert during & 0o600 == 0o600  # the writer can still read it back
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["private.bin"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_link_is_replaced_by_a_file_with_the_permissions_of_what_it_named(
    tmp_path: Path,
) -> None:
    (tmp_path / "epoch3.txt").write_text("epoch 3")
    (tmp_path / "epoch3.txt").chmod(0o600)
    (tmp_path / "latest.txt").symlink_to("epoch3.txt")
    write_text(tmp_path / "latest.txt", "epoch 4")
    assert not (tmp_path / "latest.txt").is_symlink()
    assert stat.S_IMODE((tmp_path / "latest.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "epoch3.txt").stat().st_mode) == 0o600


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_set_user_id_bits_are_not_copied(tmp_path: Path) -> None:
    target = tmp_path / "tool"
    target.write_text("old")
    target.chmod(0o6755)
    write_text(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="os.fchmod")
def test_a_refused_mode_change_is_an_error_naming_the_path_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file system that cannot give the new file the old one's mode (it creates every
    # file 0o666 less the umask, whatever mode it is asked for, and refuses chmod): not
    # written at all, rather than left readable by others.
    target = tmp_path / "private.bin"
    target.write_bytes(b"old")
    target.chmod(0o600)
    real_open = os.open

    def one_mode(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        return real_open(path, flags, 0o666 if flags & os.O_CREAT else mode, *args, **kwargs)

    def refuse(fd: int, mode: int) -> None:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "open", one_mode)
    monkeypatch.setattr(os, "fchmod", refuse)
    old = os.umask(0o022)
    try:
        with pytest.raises(
            PermissionError,
            match=r"could not write '.*private\.bin': .*\(EPERM.*\) while giving its temporary "
            r"file '\.private\.bin\..*\.tmp' the mode 0o600; '.*private\.bin' is unchanged",
        ):
            write_text(target, "new")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["private.bin"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_failed_write_leaves_the_old_files_permissions(tmp_path: Path) -> None:
    target = tmp_path / "private.bin"
    target.write_bytes(b"old")
    target.chmod(0o600)

    def write_half() -> None:
        with atomic_file(target) as (file, _):
            file.write(b"half")
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_half()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["private.bin"]


def test_a_missing_folder_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_text(tmp_path / "missing" / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------- what is replaced


def _make_special(path: Path, kind: str) -> str:
    """Create a non-regular file at ``path``; return the words its error uses."""
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO"
    if kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()  # the socket file stays
        return "a socket"
    try:  # the character device 1:3 (/dev/null's); needs CAP_MKNOD
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        path.symlink_to("/dev/null")  # a link to one is refused too
    return "a character device"


def _file_type(path: Path) -> int:
    return stat.S_IFMT(path.lstat().st_mode)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs, sockets and device nodes are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_special_files_are_refused_and_left_as_they_were(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out"
    words = _make_special(target, kind)
    before = _file_type(target)
    with pytest.raises(shutil.SpecialFileError, match=rf"'.*out' is {words}.*not a regular file"):
        write_text(target, "text")
    assert _file_type(target) == before  # still a FIFO, a socket, a device (or link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_directory_or_a_link_to_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "folder")
    for name in ["folder", "link"]:
        with pytest.raises(IsADirectoryError, match=rf"'.*{name}' is a directory"):
            write_text(tmp_path / name, "x")
    assert (tmp_path / "link").is_symlink()


def test_a_symlink_is_replaced_and_the_file_it_named_is_kept(tmp_path: Path) -> None:
    # os.replace semantics, documented: the link becomes the new file.
    (tmp_path / "epoch3.txt").write_text("epoch 3")
    (tmp_path / "latest.txt").symlink_to("epoch3.txt")
    write_text(tmp_path / "latest.txt", "epoch 4")
    assert not (tmp_path / "latest.txt").is_symlink()
    assert (tmp_path / "latest.txt").read_text() == "epoch 4"
    assert (tmp_path / "epoch3.txt").read_text() == "epoch 3"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    write_text(tmp_path / "dangling", "new")
    assert (tmp_path / "dangling").read_text() == "new"
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "loop").symlink_to("loop")  # names nothing, like a dangling link
    write_text(tmp_path / "loop", "unlooped")
    assert (tmp_path / "loop").read_text() == "unlooped"


def test_a_path_through_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"path '.*file/a\.txt' cannot be written: Not a"):
        write_text(tmp_path / "file" / "a.txt", "x")


def test_a_name_too_long_for_its_temporary_still_works(tmp_path: Path) -> None:
    # The temporary name adds ~25 bytes; a target name near the 255-byte limit fits.
    target = tmp_path / ("é" * 100 + "x" * 50 + ".txt")  # 254 bytes in UTF-8
    assert len(os.fsencode(target.name)) == 254
    write_text(target, "long")
    assert target.read_text() == "long"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_nul_byte_in_a_path_is_an_error_naming_it(tmp_path: Path) -> None:
    from pytorch_memo._files import check_file_path

    with pytest.raises(
        ValueError, match=r"path must not contain a NUL byte \(at index \d+\), got '.*a\\x00b'"
    ):
        check_file_path("path", f"{tmp_path}/a\x00b")


# ------------------------------------------------------------------- killed writers


def _dead_pid() -> int:
    """The PID of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_later_writes_remove_the_stale_temporaries_of_dead_writers(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    dead = _dead_pid()
    stale = tmp_path / f".data.bin.{dead}.0123abcd.tmp"
    kept = [
        tmp_path / f".data.bin.{os.getpid()}.0123abcd.tmp",  # a live writer: this process
        tmp_path / f".other.bin.{dead}.0123abcd.tmp",  # another target's
        tmp_path / ".data.bin.0123abcd.tmp",  # the old naming: its writer is unknown
        tmp_path / f".data.bin.{dead}.0123abcd.tmp.bak",  # not a temporary name
        tmp_path / f".data.bin.{dead}.0123abcd.txt",
    ]
    for path in [stale, *kept]:
        path.write_bytes(b"half a file")
    locked = tmp_path / f".data.bin.{dead}.feedbeef.tmp"  # dead PID, but its lock is held:
    locked.write_bytes(b"")  # a writer of another PID namespace, or an inherited descriptor
    fifo = tmp_path / f".data.bin.{dead}.deadbeef.tmp"  # not a regular file: never opened
    os.mkfifo(fifo)
    link = tmp_path / f".data.bin.{dead}.beefbeef.tmp"
    link.symlink_to(tmp_path / "data.bin.keep")
    (tmp_path / "data.bin.keep").write_text("kept")

    import fcntl

    with open(locked, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        write_text(target, "new")
        assert locked.exists()
    assert target.read_text() == "new"
    assert not stale.exists()
    for path in [*kept, fifo, link, tmp_path / "data.bin.keep"]:
        assert path.exists() or path.is_symlink(), path
    write_text(target, "newer")  # now its lock is free: removed
    assert not locked.exists()


def _killed_mid_write(target: Path) -> None:
    """In a forked child: start writing ``target``, then die by SIGKILL."""
    with atomic_file(target) as (file, _):
        file.write(b"half of the new content")
        file.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _fork(work: Any) -> int:
    with warnings.catch_warnings():  # 3.12+ warns about forking a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            work()
        finally:
            os._exit(1)
    return pid


def _state(pid: int) -> bytes:
    return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_killed_writer_not_yet_reaped_counts_as_dead(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    pid = _fork(lambda: _killed_mid_write(target))
    try:
        deadline = time.monotonic() + 30
        while _state(pid) != b"Z":  # a zombie: dead, not reaped, its PID still taken
            assert time.monotonic() < deadline, "the child did not die"
            time.sleep(0.01)
        assert len(list(tmp_path.glob(f".data.bin.{pid}.*.tmp"))) == 1
        assert target.read_bytes() == b"old"
        write_text(target, "new")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL


def test_a_live_writers_temporary_is_never_removed(tmp_path: Path) -> None:
    # A writer in another process, paused mid-write; the parent writes the same target.
    target = tmp_path / "data.bin"
    go_on, paused = os.pipe(), os.pipe()

    def writer() -> None:
        with atomic_file(target) as (file, _):
            file.write(b"from the child")
            file.flush()
            os.write(paused[1], b"p")
            os.read(go_on[0], 1)  # wait for the parent
        os._exit(0)

    pid = _fork(writer)
    try:
        ready, _, _ = select.select([paused[0]], [], [], 60)
        assert ready, "the child never started writing"
        (theirs,) = tmp_path.glob(f".data.bin.{pid}.*.tmp")
        for _ in range(3):
            write_text(target, "from the parent")
            assert theirs.exists()  # alive and locked: left alone
        os.write(go_on[1], b"g")
        _, status = os.waitpid(pid, 0)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        for fd in (*go_on, *paused):
            os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0  # its rename worked
    assert target.read_bytes() == b"from the child"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


# ---------------------------------------------------------------- errors name the path


def test_a_read_only_directory_names_the_path_not_the_temporary(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "notes.txt").write_text("old")
    folder.chmod(0o555)
    try:
        if not permissions_enforced(folder):
            pytest.skip("file permissions are not enforced here even without CAP_DAC_OVERRIDE")

        def write() -> None:
            drop_file_capabilities()  # so that root is refused too
            write_text(folder / "notes.txt", "new")

        kind, (name, message, number) = forked(write)
    finally:
        folder.chmod(0o755)
    assert (kind, name, number) == ("raised", "PermissionError", errno.EACCES)
    assert f"could not write '{folder / 'notes.txt'}'" in message
    assert "Permission denied (EACCES" in message
    assert f"creating a temporary file in its directory '{folder}'" in message
    assert (folder / "notes.txt").read_text() == "old"
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_a_directory_that_cannot_be_listed_still_takes_the_write(tmp_path: Path) -> None:
    # Mode -wx: files can be created and renamed, but the directory cannot be opened
    # to fsync it. The write has happened, so it must not be reported as failed.
    folder = tmp_path / "wx"
    folder.mkdir()
    folder.chmod(0o300)
    try:
        if not permissions_enforced(folder, refused="list"):
            pytest.skip("file permissions are not enforced here even without CAP_DAC_OVERRIDE")

        def write() -> str:
            drop_file_capabilities()
            write_text(folder / "notes.txt", "new")
            return "written"

        outcome = forked(write)
    finally:
        folder.chmod(0o755)
    assert outcome == ("returned", "written")
    assert (folder / "notes.txt").read_text() == "new"
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]

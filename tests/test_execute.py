"""memobook.execute (``nox -s execute``) never loses an author's edit and never leaves
its kernel or the kernel's connection file behind.

Each test runs ``python -m memobook.execute`` in a fresh process in a throwaway book
(:mod:`tests.authorbook`) with tiny notebooks, and looks at the files and processes it
leaves: an edit saved while it runs survives, the file's mode and hard links are kept,
and a Ctrl-C of nox, a SIGTERM, or a SIGKILL of its parent leaves no kernel, no
connection file and an unchanged notebook.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest

import memobook
from memobook._guard import (
    FileChangedError,
    create_new,
    replace_if_unchanged,
)
from memobook.execute import run_cells
from pytorch_memo._temporaries import remove_stale_temporaries
from tests.authorbook import (
    POSIX_PROCESSES,
    alive,
    connection_files,
    environment,
    finish,
    make_book,
    notebook,
    nox_interrupt,
    sources,
    tool,
    wait_for,
)
from tests.processes import no_orphans

pytestmark = POSIX_PROCESSES

EDITS_ITSELF = """\
import json, pathlib
path = pathlib.Path("edited.ipynb")
nb = json.loads(path.read_text())
nb["cells"][0]["source"] = "# Edited while it ran"
path.write_text(json.dumps(nb, indent=1) + "\\n")
"""
"""A cell that saves an edit of its own notebook, as an author would while it runs."""

SLOW = """\
import os, pathlib, time
pathlib.Path("kernel.pid").write_text(str(os.getpid()))
time.sleep(120)
"""
"""A cell that says which process runs it, then runs for two minutes."""

MODE = 0o660  # neither 0o644 nor 0o664: what a new file gets under umask 022 or 002


def _edited(text: str) -> bytes:
    """What :data:`EDITS_ITSELF` writes, given the notebook's text."""
    nb = json.loads(text)
    nb["cells"][0]["source"] = "# Edited while it ran"
    return (json.dumps(nb, indent=1) + "\n").encode()


def _shown(cell: dict[str, Any]) -> str:
    """The text of a code cell's first output."""
    return "".join(cell["outputs"][0]["data"]["text/plain"])


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """A book with a hard-linked notebook of mode 0o660 and one that edits itself, both
    executed by one run (the linked one first); the root, status and output."""
    root = make_book(
        tmp_path_factory.mktemp("book"),
        {"linked": notebook("x = 41", "x + 1"), "edited": notebook(EDITS_ITSELF, "1 + 1")},
    )
    linked = root / "book" / "linked.ipynb"
    os.chmod(linked, MODE)
    os.link(linked, root / "linked-elsewhere.ipynb")
    with no_orphans(grace=10):
        process = tool(root, "memobook.execute", "linked", "edited")
        out = finish(process)
    return root, process.returncode, out


def test_an_edit_saved_while_execute_runs_is_kept(ran: tuple[Path, int, str]) -> None:
    """D1: the notebook changed during the run, so it is left as the author saved it;
    the run's outputs go to _build/executed/ and the run says so, with status 1."""
    root, status, out = ran
    path = root / "book" / "edited.ipynb"
    assert path.read_bytes() == _edited(notebook(EDITS_ITSELF, "1 + 1")), out
    assert status == 1, out
    assert "changed while it ran" in out, out
    kept = root / "_build" / "executed" / "book" / "edited.ipynb"
    assert str(kept) in out, out
    outputs = json.loads(kept.read_text())
    assert sources(kept)[0] == "# A tiny chapter", "the run's own notebook, with outputs"
    assert _shown(outputs["cells"][2]) == "2"
    assert connection_files(root) == []


def test_execute_keeps_the_mode_and_the_hard_links(ran: tuple[Path, int, str]) -> None:
    """D1: the notebook keeps its mode (0o660) and its hard link sees the new outputs."""
    root, _, out = ran
    path = root / "book" / "linked.ipynb"
    info = os.stat(path)
    assert stat.S_IMODE(info.st_mode) == MODE, oct(info.st_mode)
    assert info.st_nlink == 2, "the hard link was broken"
    assert os.stat(root / "linked-elsewhere.ipynb").st_ino == info.st_ino
    written = json.loads(path.read_text())
    assert _shown(written["cells"][2]) == "42", out
    assert "pytorch_memo" in written["metadata"], "the run record"
    assert [p.name for p in (root / "book").iterdir() if p.name.endswith(".tmp")] == []


def _slow_book(root: Path) -> tuple[Path, bytes]:
    make_book(root, {"slow": notebook("x = 1", SLOW)})
    path = root / "book" / "slow.ipynb"
    return path, path.read_bytes()


def _kernel_pid(root: Path, process: subprocess.Popen[str]) -> int:
    marker = root / "book" / "kernel.pid"

    def started() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"execute ended early:\n{finish(process)}")
        return marker.is_file() and marker.read_text() != ""

    wait_for(started, 180, "the slow cell to start")
    return int(marker.read_text())


@pytest.mark.parametrize("stop", ["nox Ctrl-C", "SIGTERM"])
def test_a_stopped_execute_leaves_no_kernel_and_no_connection_file(
    tmp_path: Path, stop: str
) -> None:
    """D11: Ctrl-C of nox (SIGINT, then SIGTERM 0.3 s later, SIGKILL 0.2 s after that) or
    a SIGTERM stops the kernel, removes its connection file (its HMAC key) and writes
    nothing."""
    path, before = _slow_book(tmp_path)
    with no_orphans(grace=10):
        process = tool(tmp_path, "memobook.execute", "slow")
        kernel = _kernel_pid(tmp_path, process)
        if stop == "SIGTERM":
            process.terminate()
        else:
            nox_interrupt(process)
        out = finish(process, timeout=30)
        wait_for(lambda: not alive(kernel), 10, f"the kernel {kernel} to end")
        wait_for(lambda: connection_files(tmp_path) == [], 10, "the connection file to go")
    assert path.read_bytes() == before, out
    if stop == "SIGTERM":
        assert process.returncode == 128 + signal.SIGTERM, out
        assert "stopped by SIGTERM: book/slow.ipynb was not written" in out, out


def test_execute_under_nox_ends_with_nox(tmp_path: Path) -> None:
    """D1: after a SIGKILL of nox (here: a parent that runs execute as nox does, with
    NOX_CURRENT_SESSION set), execute ends at once instead of running on to rewrite the
    notebook later; its kernel and connection file go with it."""
    path, before = _slow_book(tmp_path)
    parent_code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-m', 'memobook.execute', 'slow'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = environment(tmp_path, NOX_CURRENT_SESSION="execute")
    with no_orphans(grace=10):
        parent = subprocess.Popen(
            [sys.executable, "-c", parent_code],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        try:
            kernel = _kernel_pid(tmp_path, parent)
        finally:
            parent.kill()
            parent.wait()
            parent.stdout.close()
        wait_for(lambda: not alive(child), 20, f"execute ({child}) to end with its parent")
        wait_for(lambda: not alive(kernel), 10, f"the kernel {kernel} to end")
        wait_for(lambda: connection_files(tmp_path) == [], 10, "the connection file to go")
    assert path.read_bytes() == before


# ---------------------------------------------------------- the careful write, in-process


def test_replace_if_unchanged_refuses_a_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"read")
    path.write_bytes(b"edited")
    with pytest.raises(FileChangedError, match="changed after it was read"):
        replace_if_unchanged(path, b"new", expected=b"read")
    assert path.read_bytes() == b"edited"
    path.unlink()
    with pytest.raises(FileChangedError, match="was removed after it was read"):
        replace_if_unchanged(path, b"new", expected=b"read")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_replace_if_unchanged_writes_through_links_and_keeps_the_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_bytes(b"a longer old text")
    os.chmod(real, MODE)
    (tmp_path / "link.txt").symlink_to(real)
    replace_if_unchanged(tmp_path / "link.txt", b"new", expected=b"a longer old text")
    assert (tmp_path / "link.txt").is_symlink()
    assert real.read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(real).st_mode) == MODE
    os.link(real, tmp_path / "hard.txt")
    inode = os.stat(real).st_ino
    replace_if_unchanged(real, b"shorter", expected=b"new")
    replace_if_unchanged(real, b"x", expected=b"shorter")  # shorter again: truncated
    assert (tmp_path / "hard.txt").read_bytes() == b"x"
    assert os.stat(real).st_ino == inode
    assert os.stat(real).st_nlink == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.txt", "link.txt", "real.txt"]


def test_the_author_tools_write_a_file_whose_name_fills_name_max(tmp_path: Path) -> None:
    # 255 bytes: the longest name a file system takes; the temporary beside it is named
    # from a shortened prefix, so the write does not fail with ENAMETOOLONG.
    path = tmp_path / ("n" * 251 + ".md")
    create_new(path, b"first")
    replace_if_unchanged(path, b"second", expected=b"first")
    assert path.read_bytes() == b"second"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_create_new_never_replaces_and_stale_temporaries_go(tmp_path: Path) -> None:
    path = tmp_path / "new.txt"
    create_new(path, b"first")
    with pytest.raises(FileExistsError, match="exists; it was not replaced"):
        create_new(path, b"second")
    assert path.read_bytes() == b"first"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = tmp_path / f".new.txt.{dead}.0123abcd.tmp"
    stale.write_bytes(b"left by a killed writer")
    assert remove_stale_temporaries(path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt"]


FORKSERVER = """\
import multiprocessing as mp, multiprocessing.util as util, tempfile
with mp.get_context("forkserver").Pool(1) as pool:
    assert pool.map(abs, [-1]) == [1]
print(util.get_temp_dir().startswith(tempfile.gettempdir() + "/"))
"""
"""A cell that starts a forkserver (and with it a resource tracker), as the processes and
devices chapters do, and says whether multiprocessing's folder is in the kernel's
temporary folder."""

INDUCTOR = """
import os
import tempfile
from pathlib import Path
from torch._inductor import codecache
print(os.environ["TORCHINDUCTOR_CACHE_DIR"])
print(os.path.realpath(codecache._HEADER_DIR))
print(tempfile.gettempdir())
Path(codecache._HEADER_DIR).mkdir(parents=True, exist_ok=True)
Path(codecache._HEADER_DIR, "kept").write_text("kept")
"""
"""A cell that says where Inductor caches and puts its precompiled headers (torch's
``_HEADER_DIR``, under its default folder in ``TMPDIR`` whatever
``TORCHINDUCTOR_CACHE_DIR`` says) and writes a file among those headers."""


def test_a_kernels_temporary_folder_goes_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel that started a forkserver does not end within Jupyter's grace period
    (ipykernel waits for its children; the resource tracker ignores SIGTERM), so it is
    terminated and Python's exit never removes its ``pymp-*`` folder. ``run_cells`` gives
    the kernel a ``TMPDIR`` of its own and removes it: nothing stays in the machine's
    but Inductor's folder, which the kernel reaches through a link, so that what it
    compiles (precompiled headers included) is kept for the next run.

    The machine's temporary folder here is a short one (not under ``tmp_path``): the
    forkserver's socket lives in it, and a socket's path may not pass 107 bytes."""
    outer = Path(tempfile.mkdtemp(prefix="memo-t-"))
    try:
        monkeypatch.setenv("TMPDIR", str(outer))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        nb.cells = [nbformat.v4.new_code_cell(FORKSERVER), nbformat.v4.new_code_cell(INDUCTOR)]
        run_cells(nb, tmp_path, timeout=120)
        assert nb.cells[0].outputs[0]["text"] == "True\n"
        # Inductor's folders are where they would be without the kernel's own TMPDIR:
        # its cache, and its precompiled headers (which ignore TORCHINDUCTOR_CACHE_DIR),
        # reached through the link in the kernel's TMPDIR; what it wrote there stays.
        shared = Path(memobook.inductor_default_cache_dir())
        assert shared.parent == outer
        cache, headers, tmpdir = nb.cells[1].outputs[0]["text"].splitlines()
        assert Path(cache) == shared
        assert Path(headers) == shared / "precompiled_headers"
        assert Path(tmpdir).parent == outer
        assert Path(tmpdir) != shared
        assert (shared / "precompiled_headers" / "kept").read_text() == "kept"
        # the kernel's own folder is gone, and the link with it; only Inductor's folder,
        # which Inductor itself makes on its first compile, is left in the machine's
        assert sorted(outer.iterdir()) == [shared]
        assert not shared.is_symlink()
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def test_a_kernel_caches_what_inductor_compiles_where_it_would_without_its_tmpdir(
    tmp_path: Path,
) -> None:
    """The kernel's own TMPDIR goes after each run; Inductor's cache must not go with it
    (a chapter that compiles would compile from scratch every run): the kernels get
    TORCHINDUCTOR_CACHE_DIR set to torch's own default, computed before the change, and
    in their TMPDIR a link of torch's default folder's name to that folder."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert memobook.inductor_default_cache_dir() == default_cache_dir()
    kernels = tmp_path / "kernel"
    kernels.mkdir()
    given = memobook.kernel_environment(str(kernels))
    assert given["TMPDIR"] == str(kernels)
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        assert given["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
    else:
        assert "TORCHINDUCTOR_CACHE_DIR" not in given  # the caller's choice stays
    (link,) = kernels.iterdir()
    assert link.name == Path(default_cache_dir()).name
    assert link.is_symlink()
    assert link.resolve() == Path(default_cache_dir()).resolve()

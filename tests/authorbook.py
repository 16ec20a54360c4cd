"""A throwaway book for the tests of the author tools (``memobook.execute``, the scaffold).

:func:`make_book` copies ``memobook`` (and, on request, ``pytorch_memo``) into a
temporary root with its own ``_toc.yml`` and tiny notebooks, so that
``python -m memobook.execute TOPIC`` and ``python -m memobook.scaffold`` run there, in a
fresh process, exactly as in the repository (``memobook.ROOT`` is the copy). Jupyter's
runtime folder and the temporary folder of those processes are folders of the root, so a
test sees every connection file a kernel leaves behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import memobook

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


POSIX_PROCESSES = [
    pytest.mark.early,  # processes and kernels: handed out first (tests/conftest.py)
    pytest.mark.skipif(
        not Path("/proc/self/stat").exists(), reason="needs /proc and POSIX signals (Linux)"
    ),
]
"""The marks of the author tools' process tests (``pytestmark`` of their files)."""


def notebook(*cells: str, title: str = "A tiny chapter") -> str:
    """A notebook's text: a title cell, then one code cell per source."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}")]
    nb.cells += [nbformat.v4.new_code_cell(source) for source in cells]
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index}"
    return str(nbformat.writes(nb)) + "\n"


def make_book(root: Path, chapters: dict[str, str], *, package: bool = False) -> Path:
    """A book at ``root`` whose one numbered part lists ``chapters`` (topic -> notebook
    text, see :func:`notebook`); ``package`` copies ``pytorch_memo`` and ``tests`` too
    (the scaffold writes there). Returns ``root``."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(memobook.ROOT / "memobook", root / "memobook", ignore=ignore)
    for name in ("_config.yml", "pins.txt", "pyproject.toml"):
        shutil.copy2(memobook.ROOT / name, root / name)
    if package:
        shutil.copytree(memobook.ROOT / "pytorch_memo", root / "pytorch_memo", ignore=ignore)
        (root / "tests").mkdir()
    (root / "book").mkdir()
    (root / "book" / "intro.md").write_text("# Intro\n")
    (root / "book" / "memo.md").write_text("# The memo\n")
    for topic, text in chapters.items():
        (root / "book" / f"{topic}.ipynb").write_text(text)
    listed = "".join(f"      - file: book/{topic}\n" for topic in chapters)
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - caption: Tensors\n    numbered: true\n"
        f"    chapters:\n{listed}  - caption: Reference\n    chapters:\n      - file: book/memo\n"
    )
    (root / "runtime").mkdir()
    (root / "tmp").mkdir()
    return root


def environment(root: Path, **extra: str) -> dict[str, str]:
    """The environment of a tool run in the book at ``root``."""
    env = {k: v for k, v in os.environ.items() if k != "NOX_CURRENT_SESSION"}
    env.update(
        PYTHONPATH=str(root),
        PYTHONDONTWRITEBYTECODE="1",
        JUPYTER_RUNTIME_DIR=str(root / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        TMPDIR=str(root / "tmp"),
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def tool(root: Path, module: str, *args: str, **popen: object) -> subprocess.Popen[str]:
    """``python -m MODULE ARGS`` started in the book at ``root`` (a session of its own:
    its process group's id is its pid)."""
    env = popen.pop("env", None) or environment(root)
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", module, *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )


def connection_files(root: Path) -> list[str]:
    """Kernel connection files in the book's runtime and temporary folders."""
    folders = (root / "runtime", root / "tmp")
    return sorted(str(p.relative_to(root)) for f in folders for p in f.rglob("*.json"))


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def wait_for(condition: object, timeout: float, what: str) -> None:
    """Poll ``condition()`` every 20 ms until it is true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def nox_interrupt(process: subprocess.Popen[str]) -> None:
    """What a Ctrl-C of ``nox`` does to its session's command: SIGINT to the process
    group (the terminal), SIGTERM to the command 0.3 s later, SIGKILL 0.2 s after that."""
    os.killpg(process.pid, signal.SIGINT)
    for signum, wait in ((signal.SIGTERM, 0.3), (signal.SIGKILL, 0.2)):
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            process.send_signal(signum)


def finish(process: subprocess.Popen[str], timeout: float = 120) -> str:
    """Wait for ``process``; its output (it is killed, and the test fails, on timeout)."""
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise AssertionError(f"{process.args!r} ran over {timeout} s:\n{out}") from None
    return out


def sources(path: Path) -> list[str]:
    """The sources of a notebook's cells (it must be valid JSON)."""
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the book (not ``_build``, nor the runtime and temporary folders),
    hidden ones included: its path relative to ``root`` -> its bytes."""
    skip = ("_build", "runtime", "tmp", "memobook")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in skip and "__pycache__" not in p.parts
    }

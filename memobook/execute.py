"""Re-execute chapters in place and record how they ran (``nox -s execute``).

Usage: ``python -m memobook.execute [CHAPTER ...]`` (topics such as ``views``, paths of
chapters, or paths of other notebooks; every chapter when none is named).

Cells run in order in a fresh kernel started in the notebook's folder, as nbval runs
them. Cells tagged ``gpu`` run only where CUDA is available; elsewhere their stored
outputs are kept. A notebook is written only when every cell ran; a failing cell aborts
with its traceback. Each notebook's metadata gets a fresh
:class:`~memobook.record.RunRecord`, and the standard kernel metadata (so that JupyterLab
opens it unmodified).

An author's edit is never lost: the notebook is written only if it still holds the bytes
that were read before the run (:func:`memobook._guard.replace_if_unchanged`: the file's
mode is kept, a hard-linked file is written in place, a symbolic link is followed). If it
changed meanwhile, the run stops (exit status 1) and says so; the new outputs are kept
in ``_build/executed/`` under the book's root (the folder holding ``_toc.yml``), or
beside the notebook as ``NAME.executed.ipynb`` outside a book.

The kernel never outlives the run: it runs in a session of its own and, on Linux, gets
SIGKILL when the thread that started it dies (``PR_SET_PDEATHSIG``). Its connection file
(ports and HMAC key) is made in Jupyter's runtime folder and removed as soon as the
kernel answers. On SIGINT or SIGTERM the kernel's process group is killed and the
connection file removed at once (``nox`` follows Ctrl-C with SIGTERM after 0.3 s and
SIGKILL 0.2 s later, before a graceful shutdown could end); nothing is written (a
signal that comes during the write waits for its end, and the message says the outputs
were written), and the status is 128 + the signal's number. A watchdog process (a session of its own) waits on
a pipe from this one: when this process dies in any way, SIGKILL included, it kills the
kernel's process group and removes the connection file. The kernel's ``TMPDIR`` is a
private folder made for the run and removed after it (and by the watchdog): a kernel that
started a ``forkserver`` or a ``multiprocessing`` resource tracker does not end within
Jupyter's grace period (ipykernel waits for those children, and the tracker ignores
SIGTERM), so Jupyter terminates it before Python's exit removes its ``pymp-*`` folder.
Run by ``nox`` (or with
``--die-with-parent``), this process itself gets SIGTERM when its parent dies, so that
``kill -9`` of nox does not leave it running to rewrite the notebook later.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import nbformat
from jupyter_client import AsyncKernelManager  # type: ignore[attr-defined]
from jupyter_core.paths import jupyter_runtime_dir
from jupyter_core.utils import ensure_dir_exists
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

import memobook
from memobook._guard import (
    FileChangedError,
    Interrupted,
    die_with_parent,
    interruptible,
    replace_if_unchanged,
)
from memobook._guard import replace as replace_file
from memobook.record import GpuRun, RunRecord, now, read_record, write_record

_BOOT = """\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
    sys.exit("memobook.execute: prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.exit("memobook.execute: the process that started this kernel is gone")
os.execvp(sys.argv[2], sys.argv[2:])
"""
"""Runs before the kernel, in its process (Linux): SIGKILL when the parent thread dies."""

_WATCHDOG = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
files, groups, trees = set(), set(), set()
for line in sys.stdin:
    kind, _, value = line.rstrip("\\n").partition(" ")
    if kind == "file":
        files.add(value)
    elif kind == "forget-file":
        files.discard(value)
    elif kind == "tree":
        trees.add(value)
    elif kind == "group":
        groups.add(int(value))
    elif kind == "done":
        files.clear()
        groups.clear()
        trees.clear()
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for name in files:
    try:
        os.remove(name)
    except OSError:
        pass
if trees:
    import shutil
    for tree in trees:
        shutil.rmtree(tree, ignore_errors=True)
"""
"""The watchdog: on end of input (its parent gone, SIGKILL included) it kills the
kernel's process group and removes the connection file and the kernel's temporary
folder it was told of."""


class NotebookChangedError(RuntimeError):
    """The notebook changed while it ran; it was not written (the outputs were kept)."""


def cuda_available() -> bool:
    """Whether torch, imported in this process (once, seconds), sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def device_name() -> str:
    """``cpu``, or the name of CUDA device 0."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


class _Keeper:
    """The kernel's keeper: its watchdog process, its connection file, its group, its
    temporary folder."""

    def __init__(self) -> None:
        runtime = jupyter_runtime_dir()
        ensure_dir_exists(runtime, 0o700)
        self.connection_file = str(
            Path(runtime) / f"kernel-memo-{os.getpid()}-{secrets.token_hex(6)}.json"
        )
        self.tmpdir = tempfile.mkdtemp(prefix="memo-kernel-")  # the kernel's TMPDIR
        self.environment = memobook.kernel_environment(self.tmpdir)
        self.process: subprocess.Popen[bytes] | None = None  # the kernel's, once launched
        self.watchdog: subprocess.Popen[str] | None = None
        self._stdin: IO[str] | None = None
        if os.name == "posix":
            self.watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG],
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self._stdin = self.watchdog.stdin
        self._tell(f"file {self.connection_file}")
        self._tell(f"tree {self.tmpdir}")

    def _tell(self, line: str) -> None:
        if self._stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self._stdin.write(line + "\n")
                self._stdin.flush()

    def launched(self, process: subprocess.Popen[bytes]) -> None:
        """The kernel runs: its process leads a group of its own."""
        self.process = process
        self._tell(f"group {process.pid}")

    def connected(self) -> None:
        """The kernel answered: it has read its connection file, which goes now."""
        with contextlib.suppress(OSError):
            os.remove(self.connection_file)
        self._tell(f"forget-file {self.connection_file}")

    def kill_now(self) -> None:
        """Kill the kernel's process group and remove the connection file (quick: a
        signal handler calls it)."""
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                process.wait(timeout=2)
        with contextlib.suppress(OSError):
            os.remove(self.connection_file)

    def close(self) -> None:
        """The run is over and the kernel gone (:meth:`kill_now` first): its temporary
        folder goes, with whatever its processes left there; the watchdog may go."""
        with contextlib.suppress(OSError):
            os.remove(self.connection_file)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        self._tell("done")
        if self._stdin is not None:
            with contextlib.suppress(OSError):
                self._stdin.close()
        if self.watchdog is not None:
            try:
                self.watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - it only reads a pipe
                self.watchdog.kill()
                self.watchdog.wait()


def _manager_class(keeper: _Keeper) -> type[Any]:
    """A kernel manager that starts the kernel through :data:`_BOOT` (Linux), with
    ``keeper``'s temporary folder as its ``TMPDIR`` (:func:`memobook.kernel_environment`),
    and tells ``keeper`` about it."""

    class Manager(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            cmd: list[str] = super().format_kernel_cmd(extra_arguments)
            if not sys.platform.startswith("linux"):  # pragma: no cover
                return cmd
            return [sys.executable, "-I", "-S", "-c", _BOOT, str(os.getpid()), *cmd]

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            kw["env"] = {**(kw.get("env") or os.environ), **keeper.environment}
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None:
                keeper.launched(process)

    return Manager


def run_cells(
    nb: nbformat.NotebookNode,
    workdir: Path,
    *,
    timeout: int = 600,
    seconds: dict[int, float] | None = None,
    failures: list[tuple[int, str, str]] | None = None,
) -> int:
    """Run ``nb``'s code cells in order in a fresh kernel; return how many are `gpu` cells.

    Without CUDA, `gpu` cells are not run and keep their stored outputs. When
    ``seconds`` is given, it receives how long each cell that ran took, by index. On
    SIGINT or SIGTERM (in the main thread) the kernel is killed and
    :class:`~memobook._guard.Interrupted` raised. When ``failures`` is given, a cell that
    raises does not stop the run: its index, exception name and message are appended
    (the GPU run, :mod:`memobook.gpu`, reports every failing cell at once).
    """
    gpu = [memobook.GPU_TAG in c.metadata.get("tags", []) for c in nb.cells]
    has_cuda = any(gpu) and cuda_available()  # torch is imported only when needed (seconds)
    keeper = _Keeper()
    try:
        with interruptible([keeper.kill_now]):
            client = NotebookClient(
                nb,
                timeout=timeout,
                kernel_name=memobook.KERNELSPEC["name"],
                kernel_manager_class=_manager_class(keeper),
                record_timing=False,
                resources={"metadata": {"path": str(workdir)}},
            )
            client.km = client.create_kernel_manager()
            client.km.connection_file = keeper.connection_file
            gpu_cells = 0
            with client.setup_kernel():
                keeper.connected()
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    if memobook.GPU_TAG in cell.metadata.get("tags", []):
                        gpu_cells += 1
                        if not has_cuda:
                            cell.execution_count = None  # keep the outputs of the last GPU run
                            continue
                    start = time.perf_counter()
                    try:
                        client.execute_cell(cell, index)
                    except CellExecutionError as error:
                        if failures is None:
                            raise
                        failures.append((index, error.ename, error.evalue))
                    except DeadKernelError as error:
                        if failures is None:
                            raise
                        failures.append((index, "DeadKernelError", str(error)))
                        break  # nothing after it can run in this kernel
                    if seconds is not None:
                        seconds[index] = time.perf_counter() - start
    finally:
        keeper.kill_now()  # already gone after a clean shutdown: then this does nothing
        keeper.close()
    return gpu_cells


def standard_metadata(nb: nbformat.NotebookNode) -> None:
    """The kernel and language metadata every chapter carries (:data:`memobook.KERNELSPEC`)."""
    nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
    nb.metadata["language_info"] = memobook.language_info()


def kept_path(path: Path) -> Path:
    """Where the outputs of a run go when ``path`` changed meanwhile: ``_build/executed/``
    under the book's root (the nearest folder above with a ``_toc.yml``), else
    ``NAME.executed.ipynb`` beside it."""
    path = Path(os.path.abspath(path))
    for folder in path.parents:
        if (folder / "_toc.yml").is_file():
            return folder / "_build" / "executed" / path.relative_to(folder)
    return path.with_name(f"{path.stem}.executed.ipynb")


def execute(path: Path, *, timeout: int = 600) -> RunRecord:
    """Execute ``path`` in place; return the record stored in its metadata.

    Raises:
        NotebookChangedError: ``path`` changed while it ran; it is as the editor left
            it, and the new outputs are in :func:`kept_path`.
        Interrupted: SIGINT or SIGTERM arrived; nothing was written (unless its
            ``written`` says that the write was complete when it came).
    """
    original = Path(path).read_bytes()
    nb = nbformat.reads(original.decode("utf-8"), as_version=4)
    old = read_record(nb, where=str(path))
    start = time.perf_counter()
    gpu_cells = run_cells(nb, Path(path).parent, timeout=timeout)
    seconds = time.perf_counter() - start
    import torch  # after the run: a notebook without gpu cells never needed it before

    executed = now()
    gpu_run = old.gpu_run if old is not None else None
    if torch.cuda.is_available() and gpu_cells:
        gpu_run = GpuRun(executed, torch.__version__, device_name(), gpu_cells)
    record = RunRecord(
        executed=executed,
        seconds=round(seconds, 1),
        torch=torch.__version__,
        device=device_name(),
        gpu_cells=gpu_cells,
        gpu_run=gpu_run,
    )
    write_record(nb, record)
    standard_metadata(nb)
    data = (nbformat.writes(nb) + "\n").encode("utf-8")
    try:
        replace_if_unchanged(Path(path), data, expected=original)
    except FileChangedError as error:
        kept = kept_path(Path(path))
        kept.parent.mkdir(parents=True, exist_ok=True)
        replace_file(kept, data)
        msg = (
            f"{os.fspath(path)} changed while it ran ({error}): it was left as it is, and "
            f"the new outputs were written to {os.fspath(kept)} instead. Run execute again "
            "to store outputs of the edited notebook."
        )
        raise NotebookChangedError(msg) from error
    return record


def _paths(names: list[str]) -> list[Path]:
    """Each name as a notebook path: an existing ``.ipynb`` file as given, else a
    chapter of ``_toc.yml`` by topic or path (every chapter when none is named)."""
    if not names:
        return [memobook.ROOT / name for name in memobook.chapter_paths()]
    found = []
    for name in names:
        if name.endswith(".ipynb") and Path(name).is_file():
            found.append(Path(name))
        else:
            found += [memobook.ROOT / p for p in memobook.chapter_paths([name])]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="topics or paths (default: every chapter)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument(
        "--die-with-parent",
        action="store_true",
        help="stop (SIGTERM) when the parent process dies (the default under nox)",
    )
    args = parser.parse_args(argv)
    if args.die_with_parent or os.environ.get("NOX_CURRENT_SESSION"):
        die_with_parent()
    try:
        paths = _paths(args.chapters)
    except KeyError as error:
        parser.error(str(error.args[0]))
    for path in paths:
        shown = _shown(path)
        try:
            with interruptible():
                record = execute(path, timeout=args.timeout)
        except NotebookChangedError as error:
            print(f"memobook.execute: {error}", file=sys.stderr, flush=True)
            return 1
        except Interrupted as stop:
            what = "its new outputs were written" if stop.written else "was not written"
            print(
                f"memobook.execute: stopped by {stop.name}: {shown} {what}; its kernel was stopped",
                file=sys.stderr,
                flush=True,
            )
            return stop.exit_status
        print(f"{shown}: {record.seconds:.1f} s on {record.device}", flush=True)
    return 0


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is in it."""
    try:
        return os.fspath(Path(os.path.abspath(path)).relative_to(memobook.ROOT))
    except ValueError:
        return os.fspath(path)


if __name__ == "__main__":
    sys.exit(main())

"""pytest plugin of the notebook runs (:data:`memobook.NBVAL_ARGS` loads it).

- Cells tagged ``gpu`` are skipped, with the reason, when CUDA is not available.
- With ``--memo-outcomes=PATH`` (the version matrix), the outcome of every test by its
  node id is written to PATH as JSON (``passed``, ``failed``, ``skipped``, ``error``).
- After a notebook's last cell its kernel is asked to shut down, as Jupyter does, before
  nbval kills it: a kernel killed outright takes its ``multiprocessing`` resource tracker
  with it, and the named semaphores of every ``spawn``/``forkserver`` queue, lock or pool
  still alive in the notebook stay in ``/dev/shm`` for good.
- The kernels get a ``TMPDIR`` of their own, a private folder made when the run starts
  and removed when it ends: a kernel that started a ``forkserver`` or a resource tracker
  does not end within Jupyter's grace period (ipykernel waits for those children, and
  the tracker ignores SIGTERM), so it is terminated before Python's exit removes its
  ``pymp-*`` folder, which would otherwise stay in the machine's temporary folder.
  Inductor's cache and precompiled headers stay where they were
  (:func:`memobook.kernel_environment`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile

import pytest

from memobook import GPU_TAG, kernel_environment

_outcomes: dict[str, str] = {}


@functools.cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA device (asked once, lazily)."""
    import torch

    return torch.cuda.is_available()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--memo-outcomes",
        metavar="PATH",
        help="write every test's outcome by node id to PATH (JSON)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's notebook-cell items carry their cell
        if cell is None or GPU_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        if not cuda_available():
            item.add_marker(
                pytest.mark.skip(reason=f"cell tagged {GPU_TAG!r}: CUDA is not available")
            )


_kernels_tmpdir: tuple[str, dict[str, str | None]] | None = None
"""The kernels' temporary folder and the environment variables it replaced, while the run
lasts."""


def pytest_configure(config: pytest.Config) -> None:
    global _kernels_tmpdir
    folder = tempfile.mkdtemp(prefix="memo-kernels-")
    given = kernel_environment(folder)
    _kernels_tmpdir = (folder, {name: os.environ.get(name) for name in given})
    os.environ.update(given)  # kernels started from now on inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    global _kernels_tmpdir
    if _kernels_tmpdir is None:
        return
    folder, before = _kernels_tmpdir
    _kernels_tmpdir = None
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    notebook = item.parent
    if nextitem is not None and nextitem.parent is notebook:
        return  # not the notebook's last cell
    kernel = getattr(notebook, "kernel", None)  # nbval's RunningKernel, once started
    if kernel is None or not kernel.is_alive():
        return
    kernel.kc.stop_channels()
    # Graceful: a shutdown request, then a kill only after the kernel's grace period.
    # The kernel's exit runs multiprocessing's finalizers, which unlink the semaphores.
    kernel.km.shutdown_kernel(now=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        # A failure in setup or teardown is an error; a skip is reported from setup.
        error = report.failed and report.when != "call"
        if _outcomes.get(report.nodeid) not in ("failed", "error"):
            _outcomes[report.nodeid] = "error" if error else report.outcome


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _outcomes[report.nodeid or "collection"] = "error"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    outcomes = session.config.getoption("--memo-outcomes", default=None)
    if outcomes and not hasattr(session.config, "workerinput"):  # xdist's controller only
        from pytorch_memo._files import write_text

        write_text(outcomes, json.dumps(_outcomes, indent=1, sort_keys=True) + "\n")

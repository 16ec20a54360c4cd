"""Shared pytest configuration.

Also loaded as a plugin (``-p tests.conftest``) by the nbval runs of `nox -s notebooks`
and `nox -s gpu`, where it skips the cells tagged ``gpu`` when CUDA is unavailable.
With ``--memo-record-gpu`` (`nox -s gpu`) it records, in each notebook's metadata, that
its ``gpu`` cells ran and passed, and where; the book's status page shows that record.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import settings

from pytorch_memo._files import write_text

# Timing deadlines flake on a loaded 2-core machine; CI also fixes the examples drawn.
settings.register_profile("memo", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("memo")

GPU_TAG = "gpu"
_gpu_cells: dict[Path, set[str]] = defaultdict(set)  # notebook -> node ids of its gpu cells
_failed: set[str] = set()


@functools.cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA device (asked once, lazily)."""
    import torch

    return torch.cuda.is_available()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--memo-record-gpu",
        action="store_true",
        help="record in each notebook's metadata that its gpu cells ran and passed",
    )
    parser.addoption(  # see the golden files block at the end
        "--update-golden",
        action="store_true",
        help="rewrite the expected renderings in tests/golden/ and list the files rewritten",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's notebook-cell items carry their cell
        if cell is None or GPU_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        _gpu_cells[Path(str(item.path))].add(item.nodeid)
        if not cuda_available():
            item.add_marker(pytest.mark.skip(reason="cell tagged 'gpu': CUDA is not available"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed or report.skipped:
        _failed.add(report.nodeid)


def record_gpu_runs(gpu_cells: dict[Path, set[str]], failed: set[str], run: dict[str, str]) -> None:
    """Store ``run`` as ``gpu_run`` in each notebook none of whose gpu cells failed."""
    for notebook, cells in gpu_cells.items():
        if cells & failed:
            continue
        nb = json.loads(notebook.read_text(encoding="utf-8"))
        nb.setdefault("metadata", {}).setdefault("pytorch_memo", {})["gpu_run"] = run
        write_text(notebook, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--memo-record-gpu", default=False) or not cuda_available():
        return
    import torch

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    run = {"executed": now, "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    record_gpu_runs(_gpu_cells, _failed, run)


# -- golden files ------------------------------------------------------------------------
# `pytest tests/test_table.py --update-golden` rewrites the expected renderings in
# tests/golden/ from the current code; the run then lists every file it rewrote.
UPDATE_GOLDEN = "--update-golden"
_golden_rewritten = pytest.StashKey[list[str]]()


def golden_rewritten(config: pytest.Config) -> list[str]:
    """The list the golden test appends the files it rewrote to."""
    return config.stash.setdefault(_golden_rewritten, [])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    rewritten = golden_rewritten(config)
    if rewritten:
        terminalreporter.section(f"{UPDATE_GOLDEN}: {len(rewritten)} golden file(s) rewritten")
        for path in rewritten:
            terminalreporter.line(path)

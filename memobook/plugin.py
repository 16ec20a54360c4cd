"""pytest plugin of the notebook runs (:data:`memobook.NBVAL_ARGS` loads it).

- Cells tagged ``gpu`` are skipped, with the reason, when CUDA is not available.
- With ``--memo-outcomes=PATH`` (the version matrix), the outcome of every test by its
  node id is written to PATH as JSON (``passed``, ``failed``, ``skipped``, ``error``).
- With ``--memo-record-gpu`` (``nox -s gpu``), each notebook none of whose ``gpu`` cells
  failed or was skipped gets a :class:`~memobook.record.GpuRun` in its run record; the
  status and memo pages show it.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path

import pytest

from memobook import GPU_TAG
from memobook.record import GpuRun, now, record_gpu_run

_gpu_cells: dict[Path, set[str]] = defaultdict(set)  # notebook -> node ids of its gpu cells
_not_passed: set[str] = set()
_outcomes: dict[str, str] = {}


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
        _gpu_cells[Path(str(item.path))].add(item.nodeid)
        if not cuda_available():
            item.add_marker(
                pytest.mark.skip(reason=f"cell tagged {GPU_TAG!r}: CUDA is not available")
            )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed or report.skipped:
        _not_passed.add(report.nodeid)
    if report.when == "call" or report.outcome != "passed":
        # A failure in setup or teardown is an error; a skip is reported from setup.
        error = report.failed and report.when != "call"
        if _outcomes.get(report.nodeid) not in ("failed", "error"):
            _outcomes[report.nodeid] = "error" if error else report.outcome


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _outcomes[report.nodeid or "collection"] = "error"


def record_gpu_runs(
    gpu_cells: dict[Path, set[str]], not_passed: set[str], run: GpuRun
) -> list[Path]:
    """Record ``run`` in each notebook all of whose gpu cells passed; return those notebooks."""
    recorded = []
    for notebook, cells in sorted(gpu_cells.items()):
        if cells & not_passed:
            continue
        record_gpu_run(notebook, GpuRun(run.executed, run.torch, run.device, len(cells)))
        recorded.append(notebook)
    return recorded


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    outcomes = session.config.getoption("--memo-outcomes", default=None)
    if outcomes and not hasattr(session.config, "workerinput"):  # xdist's controller only
        from pytorch_memo._files import write_text

        write_text(outcomes, json.dumps(_outcomes, indent=1, sort_keys=True) + "\n")
    if not session.config.getoption("--memo-record-gpu", default=False) or not cuda_available():
        return
    import torch

    run = GpuRun(now(), torch.__version__, torch.cuda.get_device_name(0))
    record_gpu_runs(_gpu_cells, _not_passed, run)

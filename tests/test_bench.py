"""The memory measure of nox -s bench, and what its "torch's share" line runs (its timings
are never tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

from memobook import bench

# Measured in a fresh process: a test worker's own leftover children (kernels, servers
# of earlier tests) would count too.
MEASURE = """
import subprocess, sys
from memobook.bench import PeakPss
hold = (
    "import time; block = bytearray(200 * 2**20); "
    "block[::4096] = b'x' * len(block[::4096]); time.sleep(1.5)"
)
with PeakPss() as memory:
    if sys.argv[1] == "child":
        subprocess.run([sys.executable, "-c", hold], check=True)
print(memory.peak)
"""


def _peak(what: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, what], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_the_peak_counts_a_child_processes_memory() -> None:
    peak = _peak("child")
    assert peak > 200 * 2**20  # the block (touched page by page) and the interpreter
    assert peak < 400 * 2**20


def test_nothing_started_is_no_memory() -> None:
    assert _peak("nothing") == 0


STEP = """
import sys
import torch
from memobook.bench import STEP_SOURCE
before = "torch._dynamo" in sys.modules
exec(STEP_SOURCE)
print(before, "torch._dynamo" in sys.modules)
"""


def test_one_optimizer_step_imports_dynamo_as_the_bench_says() -> None:
    # What the bench's "torch's share" line measures: torch, not the book, imports
    # torch._dynamo at an optimizer's first step.
    done = subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_run_all_says_whether_the_notebook_imported_dynamo(tmp_path: Path) -> None:
    """The bench's torch._dynamo column: a notebook that builds an optimizer imports it,
    the bare notebook does not; the probe cell it adds is gone from the cell times."""
    bare, step = tmp_path / "bare.ipynb", tmp_path / "step.ipynb"
    nbformat.write(bench.bare_notebook(), bare)
    nbformat.write(bench.step_notebook(), step)
    seen: list[bool] = []
    cells: list[tuple[float, str]] = []
    for path in (bare, step):
        assert bench.run_all(path, cells, seen) > 0
    assert seen == [False, True]
    shown = sorted(where.split("]")[0] + "]" for _, where in cells)
    assert shown == ["bare [0]", "bare [1]", "step [0]", "step [1]", "step [2]"]

"""The memory measure of nox -s bench, and what its "torch's share" line runs (its timings
are never tests)."""

from __future__ import annotations

import subprocess
import sys

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

"""The memory measure of nox -s bench (its timings are never tests)."""

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

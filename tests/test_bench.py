"""The memory measure of nox -s bench (its timings are never tests)."""

from __future__ import annotations

import subprocess
import sys

from memobook.bench import PeakPss

HOLD = "import time; block = bytearray(200 * 2**20); block[::4096] = b'x' * len(block[::4096]); time.sleep(1.5)"


def test_the_peak_counts_a_child_processes_memory() -> None:
    with PeakPss() as memory:
        subprocess.run([sys.executable, "-c", HOLD], check=True)
    assert memory.peak > 200 * 2**20  # the block (touched page by page) and the interpreter
    assert memory.peak < 400 * 2**20


def test_nothing_started_is_no_memory() -> None:
    with PeakPss() as memory:
        pass
    assert memory.peak == 0

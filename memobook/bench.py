"""Measure the book's performance goals (``nox -s bench``); never run as a test.

Absolute times on a shared machine swing by half between runs, so every goal is a ratio
of two things measured side by side in this one run:

First, for information, what torch itself adds to a chapter that trains: a bare notebook
that also takes one optimizer step, against the bare notebook (:data:`STEP_SOURCE`).
Then, numbered as the output numbers them:

1. **A reader's Run All**, per chapter: running the chapter top to bottom in a fresh
   kernel, against a bare notebook (the setup cell and ``import torch``) run right
   before it. Goals: median over the chapters at most 2.0, every chapter at most 6.0.
   The table says which chapters imported ``torch._dynamo`` (torch's optimizers,
   profiler and deterministic mode import it, about a second) and gives the median
   ratio of each group. Beside it, the **peak memory** of each chapter's Run All: the
   proportional set size (PSS, shared pages split between the processes that share
   them) of the kernel and every process it starts, summed, sampled every 0.2 s while
   the chapter runs. Goal: at most 1.5 GiB (Binder gives a reader 2 GB).
2. **Verification overhead**: the strict nbval run of every chapter (``nox -s
   notebooks``) against a plain parallel Run All of the same notebooks (the same number
   of worker processes, each running whole notebooks in a fresh kernel, comparing
   nothing). Goal: at most 1.10.
3. The site build (``jupyter-book build``), for information; the slowest cells come
   after the table of 1.

Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

import nbformat

import memobook
from memobook.execute import cuda_available, run_cells

WORK = memobook.ROOT / "_build" / "bench"
GOAL_OVERHEAD = 1.10
GOAL_MEDIAN = 2.0
GOAL_EACH = 6.0
GOAL_MEMORY_GIB = 1.5
SAMPLE_SECONDS = 0.2


class PeakPss:
    """The largest summed PSS (bytes) of this process's descendants while in the block.

    The kernel, the processes it starts (DataLoader workers, ranks, compilers) and the
    kernel's small watchdog are this process's descendants; this process is not.
    """

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_full_info().pss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue  # gone, or not ours to read, between listing and reading
            self.peak = max(self.peak, total)
            self._stop.wait(SAMPLE_SECONDS)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()


def bare_notebook() -> nbformat.NotebookNode:
    """The floor of a chapter: its setup cell and ``import torch``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
    nb.cells = [
        nbformat.v4.new_code_cell(memobook.setup_cell_source()),
        nbformat.v4.new_code_cell("import torch"),
    ]
    return nb  # type: ignore[no-any-return]  # nbformat is unannotated


STEP_SOURCE = """\
from torch import nn

model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(1, 2)).sum().backward()
optimizer.step()
optimizer.zero_grad()"""
"""One optimizer step: building an optimizer and taking its step imports
``torch._dynamo`` (and with it sympy and Inductor's modules; torch 2.15 imports it in the
optimizer's constructor), so every chapter that trains pays for it. So do, in torch
2.15, ``torch.profiler``'s ``profile``, ``torch.use_deterministic_algorithms`` and
``torch.nn.attention.bias``. The bench prints what one step costs, as a ratio to the bare
notebook, and which chapters imported ``torch._dynamo``, beside the goals: the part of a
chapter's ratio that is torch's, not the book's."""


def step_notebook() -> nbformat.NotebookNode:
    """The bare notebook and one optimizer step (:data:`STEP_SOURCE`)."""
    nb = bare_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(STEP_SOURCE))
    return nb


DYNAMO_PROBE = 'import sys\nprint("torch._dynamo" in sys.modules, end="")'
"""The cell :func:`run_all` adds after a chapter's last when asked whether the chapter
imported ``torch._dynamo`` (a few milliseconds of the time it measures)."""


def run_all(
    path: Path, cells: list[tuple[float, str]] | None = None, dynamo: list[bool] | None = None
) -> float:
    """Seconds to run the notebook at ``path`` top to bottom in a fresh kernel.

    ``cells`` receives ``(seconds, "chapter [index] first line")`` for each cell that ran;
    ``dynamo`` receives whether ``torch._dynamo`` was imported by the end
    (:data:`DYNAMO_PROBE`, run as one more cell).
    """
    nb = nbformat.read(path, as_version=4)
    if dynamo is not None:
        nb.cells.append(nbformat.v4.new_code_cell(DYNAMO_PROBE))
    seconds: dict[int, float] = {}
    start = time.perf_counter()
    run_cells(nb, path.parent, seconds=seconds)
    took = time.perf_counter() - start
    if dynamo is not None:
        probe = nb.cells.pop()
        dynamo.append("".join(o.get("text", "") for o in probe.outputs) == "True")
    if cells is not None:
        for index, cell_seconds in seconds.items():
            if index < len(nb.cells):
                first = nb.cells[index].source.strip().splitlines()[0][:48]
                cells.append((cell_seconds, f"{path.stem} [{index}] {first}"))
    return took


def torch_build() -> str:
    """Which torch the chapters ran on: a CUDA build maps CUDA's libraries into every
    process that imports torch (hundreds of MiB of PSS each), a CPU build (Binder's,
    from environment.yml) does not, so the peaks differ by build."""
    import torch

    cuda = torch.version.cuda
    return f"torch {torch.__version__}, " + (f"a CUDA {cuda} build" if cuda else "a CPU build")


def plain_parallel_run_all(paths: list[Path], workers: int) -> float:
    """Seconds to Run All every notebook, ``workers`` at a time, comparing nothing."""
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(run_all, paths))
    return time.perf_counter() - start


def strict_nbval(paths: list[Path], workers: int) -> float:
    """Seconds of the strict nbval run of ``nox -s notebooks`` over ``paths``."""
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
        *memobook.NBVAL_ARGS, "-n", str(workers), "--dist", "loadfile", *map(str, paths),
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, cwd=memobook.ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="topics or paths (default: every chapter)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-site", action="store_true", help="skip the site build")
    parser.add_argument(
        "--no-overhead", action="store_true", help="skip the verification overhead (2.)"
    )
    args = parser.parse_args(argv)
    paths = [memobook.ROOT / p for p in memobook.chapter_paths(args.chapters)]

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    bare = WORK / "bare.ipynb"
    nbformat.write(bare_notebook(), bare)
    run_all(bare)  # warm-up: the first kernel of a run starts cold
    # Running a chapter with `gpu` cells asks torch, in this process, whether CUDA is
    # there (memobook.execute.run_cells): import it now, or the first such chapter's time
    # holds this process's import of torch (about 2 s), which the reader's Run All has not.
    cuda_available()
    step = WORK / "step.ipynb"
    nbformat.write(step_notebook(), step)
    pairs = [(run_all(bare), run_all(step)) for _ in range(3)]  # the fastest of each
    floor, stepping = min(b for b, _ in pairs), min(s for _, s in pairs)
    print(
        f"0. torch's share: a bare notebook that takes one optimizer step runs "
        f"{stepping / floor:.2f}x the bare notebook ({stepping:.1f} s against {floor:.1f} s; "
        "the optimizer imports torch._dynamo)\n"
    )

    print("1. A reader's Run All, each chapter beside a bare notebook run just before it")
    print(
        f"{'chapter':<16} {'chapter s':>9} {'bare s':>7} {'ratio':>6} {'peak GiB':>9}"
        "  torch._dynamo"
    )
    cells: list[tuple[float, str]] = []
    ratios: list[float] = []
    peaks: list[float] = []
    dynamo: list[bool] = []
    for path in paths:
        floor = run_all(bare)
        with PeakPss() as memory:
            took = run_all(path, cells, dynamo)
        ratios.append(took / floor)
        peaks.append(memory.peak / 2**30)
        print(
            f"{path.stem:<16} {took:9.1f} {floor:7.1f} {took / floor:6.2f} {peaks[-1]:9.2f}"
            f"  {'imported' if dynamo[-1] else '-'}",
            flush=True,
        )
    median, worst = statistics.median(ratios), max(ratios)
    print(
        f"median ratio {median:.2f} (goal <= {GOAL_MEDIAN}); largest {worst:.2f} (goal <= {GOAL_EACH})"
    )
    for imported, which in ((True, "imported"), (False, "did not import")):
        group = [r for r, d in zip(ratios, dynamo, strict=True) if d == imported]
        if group:
            print(
                f"  {len(group)} chapters {which} torch._dynamo: median ratio "
                f"{statistics.median(group):.2f}"
            )
    print(
        f"largest peak PSS {max(peaks):.2f} GiB, {paths[peaks.index(max(peaks))].stem} "
        f"(goal <= {GOAL_MEMORY_GIB}; sampled every {SAMPLE_SECONDS} s; {torch_build()})"
    )
    print("\nslowest cells (seconds):")
    for took, where in sorted(cells, reverse=True)[:12]:
        print(f"{took:6.2f}  {where}")

    overhead = 0.0
    if not args.no_overhead:
        print(f"\n2. Verification overhead, {len(paths)} chapters, {args.workers} workers")
        plain = plain_parallel_run_all(paths, args.workers)
        strict = strict_nbval(paths, args.workers)
        overhead = strict / plain
        print(f"plain parallel Run All: {plain:6.1f} s")
        print(f"strict nbval:           {strict:6.1f} s")
        print(f"ratio strict / plain:   {overhead:6.2f}  (goal <= {GOAL_OVERHEAD})")

    if not args.no_site:
        html = WORK / "site"
        start = time.perf_counter()
        command = ["jupyter-book", "build", ".", "--all", "--path-output", str(html)]
        subprocess.run(command, cwd=memobook.ROOT, check=True, stdout=subprocess.DEVNULL)
        print(f"\n3. site build (jupyter-book, all pages): {time.perf_counter() - start:.1f} s")
    shutil.rmtree(WORK, ignore_errors=True)

    missed = [
        name
        for name, ok in (
            ("median Run All ratio", median <= GOAL_MEDIAN),
            ("largest Run All ratio", worst <= GOAL_EACH),
            ("peak memory", max(peaks) <= GOAL_MEMORY_GIB),
            ("verification overhead", overhead <= GOAL_OVERHEAD),
        )
        if not ok
    ]
    print("\ngoals missed: " + ", ".join(missed) if missed else "\nevery goal met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

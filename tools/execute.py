"""Re-execute chapter notebooks in place and record how they ran (used by `nox -s execute`).

Cells run in order in a fresh kernel, as nbval runs them. Cells tagged `gpu` run only
where CUDA is available; elsewhere their stored outputs are kept untouched. A notebook is
written (atomically) only when every cell ran; a failing cell aborts with its traceback.

Each notebook's metadata gets a `pytorch_memo` record: when it ran, how long it took,
the torch version, the device, and when its `gpu` cells last ran and where.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import torch
from nbclient import NotebookClient

from pytorch_memo._files import write_text

GPU_TAG = "gpu"


def device_name() -> str:
    """``cpu``, or the name of CUDA device 0."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def run_cells(
    nb: nbformat.NotebookNode,
    workdir: Path,
    *,
    timeout: int = 600,
    seconds: dict[int, float] | None = None,
) -> int:
    """Run ``nb``'s code cells in order in a fresh kernel; return how many are `gpu` cells.

    Without CUDA, `gpu` cells are not run and keep their stored outputs. When
    ``seconds`` is given, it receives how long each cell that ran took, by index.
    """
    has_cuda = torch.cuda.is_available()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    gpu_cells = 0
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if GPU_TAG in cell.metadata.get("tags", []):
                gpu_cells += 1
                if not has_cuda:
                    cell.execution_count = None  # keep the outputs of the last GPU run
                    continue
            start = time.perf_counter()
            client.execute_cell(cell, index)
            if seconds is not None:
                seconds[index] = time.perf_counter() - start
    return gpu_cells


def execute(path: Path, *, timeout: int = 600) -> dict[str, Any]:
    """Execute ``path`` in place; return the record stored in its metadata."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    gpu_cells = run_cells(nb, path.parent, timeout=timeout)
    seconds = time.perf_counter() - start

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    old = nb.metadata.get("pytorch_memo", {})
    record: dict[str, Any] = {
        "executed": now,
        "seconds": round(seconds, 1),
        "torch": torch.__version__,
        "device": device_name(),
        "gpu_cells": gpu_cells,
        "gpu_run": old.get("gpu_run"),
    }
    if torch.cuda.is_available() and gpu_cells:
        record["gpu_run"] = {"executed": now, "torch": torch.__version__, "device": device_name()}
    nb.metadata["pytorch_memo"] = record
    write_text(path, nbformat.writes(nb) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        record = execute(path, timeout=args.timeout)
        print(f"{path}: {record['seconds']:.1f} s on {record['device']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

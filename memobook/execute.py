"""Re-execute chapters in place and record how they ran (``nox -s execute``).

Usage: ``python -m memobook.execute [CHAPTER ...]`` (topics such as ``views`` or paths;
every chapter when none is named).

Cells run in order in a fresh kernel started in the notebook's folder, as nbval runs
them. Cells tagged ``gpu`` run only where CUDA is available; elsewhere their stored
outputs are kept. A notebook is written (atomically) only when every cell ran; a failing
cell aborts with its traceback. Each notebook's metadata gets a fresh
:class:`~memobook.record.RunRecord`, and the standard kernel metadata (so that JupyterLab
opens it unmodified).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient

import memobook
from memobook.record import GpuRun, RunRecord, now, read_record, write_record
from pytorch_memo._files import write_text


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
        kernel_name=memobook.KERNELSPEC["name"],
        record_timing=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    gpu_cells = 0
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if memobook.GPU_TAG in cell.metadata.get("tags", []):
                gpu_cells += 1
                if not has_cuda:
                    cell.execution_count = None  # keep the outputs of the last GPU run
                    continue
            start = time.perf_counter()
            client.execute_cell(cell, index)
            if seconds is not None:
                seconds[index] = time.perf_counter() - start
    return gpu_cells


def standard_metadata(nb: nbformat.NotebookNode) -> None:
    """The kernel and language metadata every chapter carries (:data:`memobook.KERNELSPEC`)."""
    nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
    nb.metadata["language_info"] = memobook.language_info()


def execute(path: Path, *, timeout: int = 600) -> RunRecord:
    """Execute ``path`` in place; return the record stored in its metadata."""
    nb = nbformat.read(path, as_version=4)
    old = read_record(nb, where=str(path))
    start = time.perf_counter()
    gpu_cells = run_cells(nb, path.parent, timeout=timeout)
    seconds = time.perf_counter() - start
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
    write_text(path, nbformat.writes(nb) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="topics or paths (default: every chapter)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    for name in memobook.chapter_paths(args.chapters):
        record = execute(memobook.ROOT / name, timeout=args.timeout)
        print(f"{name}: {record.seconds:.1f} s on {record.device}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

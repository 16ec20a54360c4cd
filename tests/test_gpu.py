"""The GPU run (memobook.gpu): every failing cell named, results stored only when whole."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest
import torch

import memobook
from memobook.execute import run_cells
from memobook.gpu import SUMMARY, ChapterRun, merge, run_one
from memobook.record import GpuRun, RunRecord, gpu_mark, read_record, write_record

RECORD = RunRecord("2026-01-01 00:00 UTC", 1.5, "2.15.0", "cpu", gpu_cells=1)
SUMMARY_DATA = {
    "executed": "2026-11-26 02:15 UTC",
    "torch": "2.11.0+cu130",
    "device": "NVIDIA H200",
    "python": "3.12.3",
}
GPU_SOURCE = "if torch.cuda.is_available():\n    print(torch.cuda.get_device_name())"


def _chapter(path: Path, *, record: RunRecord | None = RECORD) -> Path:
    """A chapter with a CPU cell and a gpu cell (ids ``cpu`` and ``gpu``)."""
    nb = nbformat.v4.new_notebook()
    cpu = nbformat.v4.new_code_cell("import torch\nx = 1", id="cpu")
    cpu.outputs = [nbformat.v4.new_output("stream", text="from the CPU run\n")]
    gpu = nbformat.v4.new_code_cell(GPU_SOURCE, id="gpu", metadata={"tags": ["gpu"]})
    nb.cells = [cpu, gpu]
    data = json.loads(nbformat.writes(nb))
    if record is not None:
        write_record(data, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def _results(folder: Path, book: Path, *, failed: list[dict[str, object]] | None = None) -> Path:
    """A GPU run's folder for ``book/ch.ipynb``: its copy with GPU outputs, and the summary."""
    ran = json.loads((book / "book" / "ch.ipynb").read_text())
    for cell in ran["cells"]:
        cell["outputs"] = [
            {"output_type": "stream", "name": "stdout", "text": f"{cell['id']} ran\n"}
        ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ch.ipynb").write_text(json.dumps(ran))
    chapter = ChapterRun(["gpu"], failed or [], 3.0)
    summary = {**SUMMARY_DATA, "chapters": {"book/ch.ipynb": asdict(chapter)}}
    (folder / SUMMARY).write_text(json.dumps(summary))
    return folder


def test_a_passed_chapter_gets_its_gpu_outputs_and_run_and_keeps_the_rest(tmp_path: Path) -> None:
    book = tmp_path / "root"
    target = _chapter(book / "book" / "ch.ipynb")
    assert merge(_results(tmp_path / "run", book), book=book) == []
    nb = json.loads(target.read_text())
    cpu, gpu = nb["cells"]
    assert memobook.source({"source": cpu["outputs"][0]["text"]}) == "from the CPU run\n"  # kept
    assert gpu["outputs"][0]["text"] == "gpu ran\n"
    run = GpuRun("2026-11-26 02:15 UTC", "2.11.0+cu130", "NVIDIA H200")
    assert gpu_mark(gpu) == run  # the site shows where the output comes from
    assert gpu_mark(cpu) is None
    record = read_record(nb)
    assert record is not None
    assert record.gpu_run == GpuRun(run.executed, run.torch, run.device, 1)
    assert record.executed == RECORD.executed  # the CPU run's record is kept
    assert sorted(p.name for p in target.parent.iterdir()) == ["ch.ipynb"]  # no temp files


def test_a_reworded_comment_keeps_the_mark_and_a_code_change_drops_it(tmp_path: Path) -> None:
    book = tmp_path / "root"
    target = _chapter(book / "book" / "ch.ipynb")
    merge(_results(tmp_path / "run", book), book=book)
    nb = json.loads(target.read_text())
    gpu = nb["cells"][1]
    assert gpu_mark({**gpu, "source": "# Cause: reworded.\n" + GPU_SOURCE}) is not None
    assert gpu_mark({**gpu, "source": GPU_SOURCE + "\nprint(1)"}) is None


def test_a_chapter_with_any_failing_cell_is_not_stored(tmp_path: Path) -> None:
    book = tmp_path / "root"
    target = _chapter(book / "book" / "ch.ipynb")
    before = target.read_bytes()
    failed = [{"id": "cpu", "gpu": False, "ename": "TimeoutError", "evalue": "ranks [0]"}]
    problems = merge(_results(tmp_path / "run", book, failed=failed), book=book)
    assert problems == ["book/ch.ipynb: cells failed on the GPU machine: cpu"]
    assert target.read_bytes() == before


def test_a_gpu_cell_whose_code_changed_since_the_run_keeps_what_it_had(tmp_path: Path) -> None:
    book = tmp_path / "root"
    target = _chapter(book / "book" / "ch.ipynb")
    results = _results(tmp_path / "run", book)
    nb = json.loads(target.read_text())
    nb["cells"][1]["source"] = GPU_SOURCE + "\nprint('edited')"
    target.write_text(json.dumps(nb))
    before = target.read_bytes()
    problems = merge(results, book=book)
    assert problems == ["book/ch.ipynb: gpu cells not in the run or changed since: gpu"]
    assert target.read_bytes() == before  # nothing stored: the chapter's only gpu cell


def test_only_a_comment_changed_since_the_run_still_stores(tmp_path: Path) -> None:
    book = tmp_path / "root"
    target = _chapter(book / "book" / "ch.ipynb")
    results = _results(tmp_path / "run", book)
    nb = json.loads(target.read_text())
    nb["cells"][1]["source"] = "# Cause: a comment added after the run.\n" + GPU_SOURCE
    target.write_text(json.dumps(nb))
    assert merge(results, book=book) == []
    assert gpu_mark(json.loads(target.read_text())["cells"][1]) is not None


def test_a_chapter_never_executed_is_named(tmp_path: Path) -> None:
    book = tmp_path / "root"
    _chapter(book / "book" / "ch.ipynb", record=None)
    problems = merge(_results(tmp_path / "run", book), book=book)
    assert problems == ["book/ch.ipynb: no run record: execute it first (nox -s execute)"]


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata.update(kernelspec=memobook.KERNELSPEC)
    return nb


def test_a_failing_cell_does_not_stop_the_run_and_each_is_named(tmp_path: Path) -> None:
    nb = _notebook("x = 1", "raise ValueError('boom')", "print(x + 1)", "undefined_name")
    failures: list[tuple[int, str, str]] = []
    run_cells(nb, tmp_path, timeout=60, failures=failures)
    assert [(i, ename) for i, ename, _ in failures] == [(1, "ValueError"), (3, "NameError")]
    assert failures[0][2] == "boom"
    assert nb.cells[2].outputs[0]["text"] == "2\n"  # the cell after the failure ran


def test_a_dead_kernel_ends_the_run_and_is_named(tmp_path: Path) -> None:
    nb = _notebook("import os", "os._exit(1)", "print('never')")
    failures: list[tuple[int, str, str]] = []
    run_cells(nb, tmp_path, timeout=60, failures=failures)
    assert [(i, ename) for i, ename, _ in failures] == [(1, "DeadKernelError")]
    assert nb.cells[2].outputs == []


def test_without_failures_a_failing_cell_still_raises(tmp_path: Path) -> None:
    from nbclient.exceptions import CellExecutionError

    with pytest.raises(CellExecutionError, match="boom"):
        run_cells(_notebook("raise ValueError('boom')"), tmp_path, timeout=60)


def test_run_one_writes_the_copy_and_names_the_gpu_cells(tmp_path: Path) -> None:
    source = _chapter(tmp_path / "book" / "ch.ipynb")
    chapter = run_one(source, tmp_path / "out" / "ch.ipynb", timeout=60)
    assert chapter.gpu_cells == ["gpu"]
    assert chapter.failed == []
    assert (tmp_path / "out" / "ch.ipynb").is_file()
    stored = json.loads(source.read_text())["cells"][0]["outputs"][0]["text"]
    assert memobook.source({"source": stored}) == "from the CPU run\n"  # left as it was


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_the_gpu_run_refuses_a_machine_without_cuda() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memobook.gpu", "views", "--no-merge"],
        capture_output=True,
        text=True,
        cwd=memobook.ROOT,
        check=False,
    )
    assert done.returncode != 0
    assert "memobook.gpu needs CUDA: torch.cuda.is_available() is False" in done.stderr

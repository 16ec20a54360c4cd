"""The GPU run (``nox -s gpu``): every chapter with ``gpu`` cells, run on a CUDA machine.

Usage::

    python -m memobook.gpu                 # run the chapters, then store what passed
    python -m memobook.gpu views devices   # only these chapters
    python -m memobook.gpu --no-merge      # run only: the results stay in _build/gpu
    python -m memobook.gpu --merge DIR     # store the results of a run made elsewhere

Each chapter runs in a fresh kernel, in order, every cell (:func:`memobook.execute.run_cells`),
on a copy in ``_build/gpu/`` (several chapters side by side, ``--jobs``): the stored
notebooks keep the outputs of the pinned CPU stack, which strict nbval compares. A cell
that fails does not stop its chapter, so one run names every failure.
``_build/gpu/summary.json`` says what ran (torch, device, Python, date) and, per chapter,
its ``gpu`` cells and the cells that failed.

Then, for each chapter all of whose cells passed, each of its ``gpu`` cells in ``book/``
whose code is the code that ran gets the output from that run and a mark of the run in
its metadata, which the site shows beside the cell ("the output below comes from its GPU
run") and the memo beside its claims; the chapter's run record gets a
:class:`~memobook.record.GpuRun`, shown on the status page. A ``gpu`` cell added, or
whose code changed, since the run keeps what it had and is named (run it again). A
chapter with a failing cell keeps its previous record.
``--merge DIR`` does this step alone, with the results copied back from a GPU machine.
The exit status is 1 when any cell failed or any chapter could not be stored.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import memobook
from memobook.record import (
    GPU_MARK,
    GpuRun,
    RunRecord,
    now,
    read_record,
    source_digest,
    write_record,
)

OUT = memobook.ROOT / "_build" / "gpu"
SUMMARY = "summary.json"


@dataclass
class ChapterRun:
    """One chapter's GPU run: its ``gpu`` cells (ids) and the cells that failed."""

    gpu_cells: list[str]
    failed: list[dict[str, Any]] = field(default_factory=list)
    """Each failing cell: ``id``, ``gpu`` (whether tagged ``gpu``), ``ename``, ``evalue``."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Whether every cell passed: a CPU cell that fails only on a GPU machine is a
        finding too (the chapter's CPU example followed the GPU there, say)."""
        return bool(self.gpu_cells) and not self.failed


def gpu_cell_ids(nb: dict[str, Any]) -> list[str]:
    """The ids of the code cells of ``nb`` tagged ``gpu``, in order."""
    return [
        str(c["id"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and memobook.GPU_TAG in memobook.tags(c)
    ]


def run_one(source: Path, copy: Path, *, timeout: int) -> ChapterRun:
    """Run every cell of ``source`` (CUDA needed), write the result to ``copy``."""
    import nbformat

    from memobook.execute import run_cells
    from pytorch_memo._files import write_text

    nb = nbformat.read(source, as_version=4)
    failures: list[tuple[int, str, str]] = []
    start = time.perf_counter()
    run_cells(nb, source.parent, timeout=timeout, failures=failures)
    seconds = round(time.perf_counter() - start, 1)
    copy.parent.mkdir(parents=True, exist_ok=True)
    write_text(copy, nbformat.writes(nb) + "\n")
    cells = nb.cells
    return ChapterRun(
        gpu_cell_ids(nb),
        [
            {
                "id": str(cells[i].get("id", i)),
                "gpu": memobook.GPU_TAG in cells[i].metadata.get("tags", []),
                "ename": ename,
                "evalue": evalue,
            }
            for i, ename, evalue in failures
        ],
        seconds,
    )


def merge(results: Path, *, book: Path = memobook.ROOT) -> list[str]:
    """Store the ``gpu`` outputs and GPU runs of ``results`` (a run's folder) in ``book``.

    For each chapter all of whose cells passed: each ``gpu`` cell whose code is the code
    that ran (comments aside, :func:`~memobook.record.source_digest`) gets its output from
    the run and a mark of the run in its metadata (:data:`~memobook.record.GPU_MARK`),
    which the site shows beside it; the chapter's run record gets the run. A ``gpu`` cell
    added or whose code changed since keeps what it had, and is named.

    Returns the problems: chapters or cells not stored, and why.
    """
    from pytorch_memo._files import write_text

    summary = json.loads((results / SUMMARY).read_text(encoding="utf-8"))
    mark = {k: summary[k] for k in ("executed", "torch", "device")}
    problems = []
    for name, data in sorted(summary["chapters"].items()):
        chapter = ChapterRun(**data)
        target = book / name
        if not chapter.passed:
            failed = [f["id"] for f in chapter.failed]
            problems.append(f"{name}: cells failed on the GPU machine: {', '.join(failed)}")
            continue
        ran = json.loads((results / Path(name).name).read_text(encoding="utf-8"))
        nb = json.loads(target.read_text(encoding="utf-8"))
        old = read_record(nb, where=str(target))
        if old is None:
            problems.append(f"{name}: no run record: execute it first (nox -s execute)")
            continue
        ran_cells = {str(c.get("id")): c for c in ran["cells"]}
        stored, left = 0, []
        gpu_ids = set(gpu_cell_ids(nb))
        for cell in nb["cells"]:
            cell_id = str(cell.get("id"))
            if cell_id not in gpu_ids:
                continue
            new = ran_cells.get(cell_id)
            code = source_digest(memobook.source(cell))
            if new is None or source_digest(memobook.source(new)) != code:
                left.append(cell_id)
                continue
            cell["outputs"] = new["outputs"]
            cell["execution_count"] = None  # not part of the CPU run's numbering
            cell.setdefault("metadata", {})[GPU_MARK] = {**mark, "code": code}
            stored += 1
        if left:
            problems.append(f"{name}: gpu cells not in the run or changed since: {', '.join(left)}")
        if stored:
            run = GpuRun(mark["executed"], mark["torch"], mark["device"], stored)
            write_record(nb, RunRecord(**{**asdict(old), "gpu_run": run}))
            write_text(target, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return problems


def _with_gpu_cells(names: list[str]) -> list[str]:
    """The chapters (paths relative to the root) named, or all, that have ``gpu`` cells,
    the longest first by their last run (so that side by side the run ends soonest)."""
    found = []
    for path in memobook.chapter_paths(names):
        nb = json.loads((memobook.ROOT / path).read_text(encoding="utf-8"))
        if gpu_cell_ids(nb):
            record = read_record(nb, where=path)
            found.append((-(record.seconds if record else 0.0), path))
    return [path for _, path in sorted(found)]


def run(names: list[str], out: Path, *, jobs: int, timeout: int) -> dict[str, Any]:
    """Run the chapters side by side (one process each); write and return the summary."""
    import platform

    import torch

    from pytorch_memo._files import write_text

    if not torch.cuda.is_available():
        raise SystemExit("memobook.gpu needs CUDA: torch.cuda.is_available() is False")
    chapters = _with_gpu_cells(names)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, jobs))))

    def one(path: str) -> tuple[str, dict[str, Any]]:
        result = out / (Path(path).stem + ".json")
        result.unlink(missing_ok=True)
        command = [sys.executable, "-m", "memobook.gpu", "--one", path, "--out", str(out),
                   "--timeout", str(timeout)]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=memobook.ROOT, check=False)
        if not result.is_file():
            failed = {"id": "kernel", "gpu": True, "ename": "RunError",
                      "evalue": f"the run of {path} ended with status {done.returncode}"}  # fmt: skip
            nb = json.loads((memobook.ROOT / path).read_text(encoding="utf-8"))
            return path, asdict(ChapterRun(gpu_cell_ids(nb), [failed]))
        return path, json.loads(result.read_text(encoding="utf-8"))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        chapters_run = dict(pool.map(one, chapters))
    summary = {
        "executed": now(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "python": platform.python_version(),
        "chapters": chapters_run,
    }
    write_text(out / SUMMARY, json.dumps(summary, indent=1) + "\n")
    return summary


def report(summary: dict[str, Any]) -> int:
    """Print each chapter's result; return how many cells failed."""
    failed = 0
    print(f"GPU run: torch {summary['torch']} on {summary['device']}, "
          f"Python {summary['python']}, {summary['executed']}")  # fmt: skip
    for name, data in sorted(summary["chapters"].items()):
        chapter = ChapterRun(**data)
        state = "passed" if not chapter.failed else f"{len(chapter.failed)} failed"
        print(f"  {name}: {len(chapter.gpu_cells)} gpu cells, {state}, {chapter.seconds} s")
        for f in chapter.failed:
            kind = "gpu cell" if f["gpu"] else "cell"
            print(f"    {kind} {f['id']}: {f['ename']}: {f['evalue']}")
        failed += len(chapter.failed)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="topics or paths (default: every chapter)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the results")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--no-merge", action="store_true", help="run only; store nothing")
    parser.add_argument("--merge", type=Path, metavar="DIR", help="store the results in DIR")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one chapter, in a child process
    args = parser.parse_args(argv)
    if args.one:
        from pytorch_memo._files import write_text

        source = memobook.ROOT / args.one
        chapter = run_one(source, args.out / source.name, timeout=args.timeout)
        write_text(args.out / (source.stem + ".json"), json.dumps(asdict(chapter)) + "\n")
        return 0
    if args.merge:
        summary = json.loads((args.merge / SUMMARY).read_text(encoding="utf-8"))
        failed = report(summary)
    else:
        summary = run(args.chapters, args.out, jobs=args.jobs, timeout=args.timeout)
        failed = report(summary)
        if args.no_merge:
            return 1 if failed else 0
    problems = merge(args.merge or args.out)
    for problem in problems:
        print(f"not stored: {problem}", file=sys.stderr)
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())

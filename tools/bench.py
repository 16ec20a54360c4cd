"""Print how long the book takes to verify and build (used by `nox -s bench`).

Figures, all measured in this one run on this machine:

- per chapter: executing the notebook in a fresh kernel (as `nox -s execute` does), and
  how much longer that took than a bare notebook executed the same way (median of
  three, after a warm-up): what the chapter's own imports and cells cost; and the
  slowest cells of the book, where that time goes;
- whole book: the strict nbval run of `nox -s notebooks` over every chapter;
- floor: the same nbval run over as many bare notebooks (the setup cell and
  `import torch`), i.e. what kernels and imports alone cost; and the ratio of the two
  (the book's goal: at most 1.5);
- site: a full `jupyter-book build` of the stored outputs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from execute import run_cells

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.bookfiles import setup_cell_source

WORK = ROOT / "_build" / "bench"
NBVAL = [
    sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
    "-p", "tests.conftest", "--nbval-current-env",
    "--nbval-sanitize-with", "tests/sanitize.cfg",
]  # fmt: skip


def bare_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "language": "python",
        "display_name": "Python 3",
    }
    nb.cells = [
        nbformat.v4.new_code_cell(setup_cell_source()),
        nbformat.v4.new_code_cell("import torch"),
    ]
    return nb


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers (-n)")
    args = parser.parse_args(argv)

    chapters = sorted((ROOT / "book").glob("*.ipynb"))
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    bare = []
    for i in range(len(chapters)):
        path = WORK / f"bare_{i:02d}.ipynb"
        nbformat.write(bare_notebook(), path)
        bare.append(path)

    cells: list[tuple[float, str]] = []

    def executed(path: Path) -> float:
        nb = nbformat.read(path, as_version=4)
        seconds: dict[int, float] = {}
        start = time.perf_counter()
        run_cells(nb, path.parent, seconds=seconds)
        for index, took in seconds.items():
            first = nb.cells[index].source.strip().splitlines()[0][:48]
            cells.append((took, f"{path.stem} [{index}] {first}"))
        return time.perf_counter() - start

    executed(bare[0])  # warm-up: the first kernel of a run starts cold
    bare_seconds = statistics.median(executed(bare[0]) for _ in range(3))
    bare_import = max(took for took, _ in cells[-2:])  # its slower cell: import torch
    cells.clear()
    print(f"{'chapter':<28} {'seconds':>8} {'over bare':>10}")
    print(f"{'(bare notebook)':<28} {bare_seconds:8.1f}")
    total = 0.0
    for path in chapters:
        seconds = executed(path)
        total += seconds
        print(f"{path.stem:<28} {seconds:8.1f} {seconds - bare_seconds:10.1f}", flush=True)
    over = total - len(chapters) * bare_seconds
    print(f"{'sum of chapters':<28} {total:8.1f} {over:10.1f}")
    print(f"\nslowest cells (seconds; a bare notebook's `import torch`: {bare_import:.2f}):")
    for took, where in sorted(cells, reverse=True)[:12]:
        print(f"{took:6.2f}  {where}")

    workers = ["-n", args.workers, "--dist", "loadfile"] if len(chapters) > 1 else []
    book = timed([*NBVAL, *workers, *map(str, chapters)])
    floor = timed([*NBVAL, *workers, *map(str, bare)])
    html = WORK / "site"
    site = timed(["jupyter-book", "build", ".", "--all", "--path-output", str(html)])
    print()
    print(f"whole book, strict nbval ({len(chapters)} notebooks): {book:6.1f} s")
    print(f"floor, same run over bare notebooks:     {floor:6.1f} s")
    print(f"ratio book / floor:                      {book / floor:6.2f}  (goal <= 1.5)")
    print(f"site build (jupyter-book, all pages):    {site:6.1f} s")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`nox -s gpu` records in a notebook's metadata that its gpu cells ran and passed
(tests.conftest.record_gpu_runs, called at the end of that run)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from tests.conftest import record_gpu_runs

RUN = {"executed": "2026-01-01 00:00 UTC", "torch": "2.14.1", "device": "Stand-in GPU"}


def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["pytorch_memo"] = {"seconds": 1.0, "gpu_run": None}
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nb, path)
    return path


def test_only_notebooks_whose_gpu_cells_all_passed_are_recorded(tmp_path: Path) -> None:
    ok, bad = _notebook(tmp_path / "ok.ipynb"), _notebook(tmp_path / "bad.ipynb")
    cells = {ok: {"ok.ipynb::Cell 1"}, bad: {"bad.ipynb::Cell 1", "bad.ipynb::Cell 2"}}
    record_gpu_runs(cells, {"bad.ipynb::Cell 2"}, RUN)
    recorded = json.loads(ok.read_text())["metadata"]["pytorch_memo"]
    assert recorded == {"seconds": 1.0, "gpu_run": RUN}  # the execute record is kept
    assert json.loads(bad.read_text())["metadata"]["pytorch_memo"]["gpu_run"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ipynb", "ok.ipynb"]  # no temp files


def test_a_notebook_without_a_record_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "new.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    record_gpu_runs({path: {"new.ipynb::Cell 0"}}, set(), RUN)
    assert json.loads(path.read_text())["metadata"]["pytorch_memo"] == {"gpu_run": RUN}

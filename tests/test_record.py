"""The run records (memobook.record) and the GPU record of `nox -s gpu` (memobook.plugin)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

import memobook
from memobook.record import (
    GpuRun,
    MatrixRecord,
    MatrixRun,
    Outcome,
    RecordError,
    RunRecord,
    read_record,
    write_record,
)

RUN = GpuRun("2026-01-01 00:00 UTC", "2.14.1", "Stand-in GPU")
RECORD = RunRecord("2026-01-01 00:00 UTC", 1.5, "2.14.1", "cpu", gpu_cells=2)


def _notebook(path: Path, record: RunRecord | None = RECORD) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nb, path)
    if record is not None:
        data = json.loads(path.read_text())
        write_record(data, record)
        path.write_text(json.dumps(data))
    return path


def test_a_record_round_trips_through_the_metadata() -> None:
    nb: dict[str, object] = {"cells": [], "metadata": {}}
    write_record(nb, RECORD)
    assert read_record(nb) == RECORD
    with_gpu = RunRecord(**{**RECORD.__dict__, "gpu_run": GpuRun("d", "2.11", "H100", 3)})
    write_record(nb, with_gpu)
    assert read_record(json.loads(json.dumps(nb))) == with_gpu


def test_a_notebook_never_executed_has_no_record() -> None:
    assert read_record({"cells": [], "metadata": {}}) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"seconds": 1.0, "torch": "2", "device": "cpu", "gpu_cells": 0}, "'executed' is missing"),
        (
            {"executed": "d", "seconds": "1", "torch": "2", "device": "cpu", "gpu_cells": 0},
            "seconds must be",
        ),
        (
            {"executed": "d", "seconds": 1, "torch": "2", "device": "cpu", "gpu_cells": True},
            "gpu_cells must be",
        ),
        (
            {
                "executed": "d",
                "seconds": 1,
                "torch": "2",
                "device": "cpu",
                "gpu_cells": 1,
                "gpu_run": 3,
            },
            "gpu_run must be a mapping",
        ),
    ],
)
def test_a_damaged_record_is_named(data: dict[str, object], message: str) -> None:
    nb = {"metadata": {"pytorch_memo": data}}
    with pytest.raises(RecordError, match=message) as caught:
        read_record(nb, where="book/x.ipynb")
    assert "book/x.ipynb" in str(caught.value)


def test_every_chapters_record_reads() -> None:
    for chapter in memobook.chapters():
        record = read_record(chapter.load(), where=str(chapter.path))
        assert record is not None, f"{chapter.name} was never executed"
        gpu = sum(memobook.GPU_TAG in memobook.tags(c) for c in memobook.code_cells(chapter.load()))
        assert record.gpu_cells == gpu, chapter.name


def test_the_matrix_record_round_trips_and_replaces_a_release(tmp_path: Path) -> None:
    path = tmp_path / "matrix.json"
    assert MatrixRecord.read(path).runs == {}
    unit = Outcome(10, 0, 1)
    first = MatrixRun(
        "2.15.0", "0.29.2", "d", "3.11.7", unit, {"views": Outcome(5, 1, 0, failures=("c3",))}
    )
    older = MatrixRun("2.8.0", "0.23.0", "d", "3.11.7", unit, {"views": Outcome(6, 0, 0)})
    MatrixRecord().with_run(first).with_run(older).write(path)
    again = MatrixRecord.read(path)
    # by version, not as text; a run is a release on a Python
    assert list(again.runs) == ["2.8.0 py3.11", "2.15.0 py3.11"]
    assert again.runs["2.15.0 py3.11"] == first
    assert not again.runs["2.15.0 py3.11"].chapters["views"].ok
    redone = MatrixRun("2.15.0", "0.29.2", "e", "3.11.9", unit, {"views": Outcome(6, 0, 0)})
    assert MatrixRecord.read(path).with_run(redone).runs["2.15.0 py3.11"].executed == "e"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.json"]


def test_the_errors_a_run_caught_round_trip_and_are_gathered(tmp_path: Path) -> None:
    from memobook.record import gather_raised

    (tmp_path / "raised-1.jsonl").write_text(
        '{"type": "ValueError", "match": "bad", "message": "bad value"}\n'
        '{"type": "ValueError", "match": "bad", "message": "bad value"}\n'
        '{"type": "TypeError", "match": "bad", "message": "bad type"}\n'
    )
    (tmp_path / "raised-2.jsonl").write_text(
        '{"type": "KeyError", "match": "k", "message": "\'k\'"}\n{"type": "Val'  # cut short
    )
    raised = gather_raised(tmp_path)
    assert raised == {
        "bad": [["TypeError", "bad type"], ["ValueError", "bad value"]],
        "k": [["KeyError", "'k'"]],
    }
    run = MatrixRun(
        "2.15.0", "0.30.0", "d", "3.11.7", Outcome(1, 0, 0), seconds=512.5, raised=raised
    )
    path = tmp_path / "matrix.json"
    MatrixRecord().with_run(run).write(path)
    assert MatrixRecord.read(path).runs[run.key].raised == raised
    assert MatrixRecord.read(path).runs[run.key].seconds == 512.5


def test_a_damaged_raised_mapping_is_named(tmp_path: Path) -> None:
    run = MatrixRun("2.15.0", "0.30.0", "d", "3.11.7", Outcome(1, 0, 0))
    data = json.loads(json.dumps(run.to_json()))
    data["raised"] = {"bad": [["ValueError"]]}
    with pytest.raises(RecordError, match="raised must map each match"):
        MatrixRun.from_json(data, "run")


def test_a_cells_digest_is_of_its_code_so_reworded_comments_keep_its_results() -> None:
    from memobook.record import code_of, source_digest

    cell = '# Claim: one.\nx = 1  # why\n\nassert x == 1\ns = "# kept"\n'
    assert code_of(cell) == 'x = 1\nassert x == 1\ns = "# kept"'
    reworded = cell.replace("# Claim: one.", "# Claim: one, said better.\n# Cause: none.")
    assert source_digest(reworded) == source_digest(cell)
    assert source_digest(cell.replace("x = 1", "x = 2")) != source_digest(cell)
    assert code_of("x = (\n") == "x = (\n"  # not Python: kept whole

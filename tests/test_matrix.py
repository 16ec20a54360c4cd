"""The version matrix (memobook.matrix): its list of releases agrees with the package's
declared floor and the pin, and the outcomes it records are what pytest ran."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import memobook
from memobook import matrix
from memobook.matrix import Release, _outcome, _requirements, releases

pytestmark = pytest.mark.early  # a long file: handed out first (tests/conftest.py)


def _declared(name: str) -> Requirement:
    deps = tomllib.loads(memobook.PYPROJECT.read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, deps) if r.name == name)


def test_the_matrix_checks_the_declared_floor_the_pin_and_a_newer_release() -> None:
    listed = releases()
    versions = sorted(Version(r.torch) for r in listed if r.torch)
    floor = next(s for s in _declared("torch").specifier if s.operator == ">=")
    assert versions[0] == Version(floor.version), "the declared floor is the tested one"
    assert Version(memobook.pins()["torch"]) in versions, "the pin is in the matrix"
    assert versions[-1] >= Version(memobook.pins()["torch"])
    vision_floor = next(s for s in _declared("torchvision").specifier if s.operator == ">=")
    lowest = min(listed, key=lambda r: Version(r.torch or "0"))
    assert Version(lowest.torchvision or "0") == Version(vision_floor.version)


def test_an_environment_gets_the_release_and_the_other_pins(tmp_path: Path) -> None:
    wanted, constraints = _requirements(Release("2.8.0", "0.23.0"))
    assert wanted[:2] == ["torch==2.8.0", "torchvision==0.23.0"]
    others = {Requirement(w).name for w in wanted[2:]}
    assert others == set(memobook.pins()) - {"torch", "torchvision"}
    assert constraints == "torch==2.8.0\ntorchvision==0.23.0\n"
    newest, free = _requirements(Release(None, None))
    assert newest[:2] == ["torch", "torchvision"]
    assert free == "\n"


def test_a_release_without_its_versions_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "versions.toml"
    bad.write_text('[[release]]\ntorch = "2.8.0"\n')
    with pytest.raises(ValueError, match=r"release 0 must give \['torchvision'\]"):
        releases(bad)


def test_outcomes_are_recorded_by_node_id(tmp_path: Path) -> None:
    """The plugin's --memo-outcomes, run for real on a small test file."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "@pytest.mark.skip(reason='x')\n"
        "def test_skipped(): pass\n"
        "@pytest.fixture\n"
        "def broken(): raise RuntimeError\n"
        "def test_error(broken): pass\n"
    )
    out = tmp_path / "outcomes.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", memobook.PLUGIN,
               f"--memo-outcomes={out}", "test_sample.py"]  # fmt: skip
    env = {"PYTHONPATH": str(memobook.ROOT), "PATH": ""}
    subprocess.run(command, cwd=tmp_path, check=False, capture_output=True, env=env)
    results = json.loads(out.read_text())
    assert results == {
        "test_sample.py::test_ok": "passed",
        "test_sample.py::test_bad": "failed",
        "test_sample.py::test_skipped": "skipped",
        "test_sample.py::test_error": "error",
    }
    outcome = _outcome(results)
    assert (outcome.passed, outcome.failed, outcome.skipped, outcome.errors) == (1, 1, 1, 1)
    assert outcome.failures == ("test_sample.py::test_bad", "test_sample.py::test_error")
    assert not outcome.ok


OTHER_CHECKS_CACHES = {".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}


def test_the_package_is_installed_from_the_checkout_leaving_nothing_behind(
    tmp_path: Path,
) -> None:
    """The matrix installs the current package on every run (never an older copy), as a
    reader installs it, and the build leaves no ``build/`` or egg-info in the checkout."""
    before = sorted(p.name for p in memobook.ROOT.iterdir())
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "env")], check=True)
    python = tmp_path / "env" / "bin" / "python"
    matrix.install_package(python, log=False)
    shown = subprocess.run(
        [str(python), "-m", "pip", "show", "-f", "pytorch-memo"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "Editable project location" not in shown
    installed = next(
        Path(line.split(":", 1)[1].strip()) for line in shown.splitlines()
        if line.startswith("Location:")
    )  # fmt: skip
    copied = (installed / "pytorch_memo" / "_checks.py").read_text()
    assert copied == (memobook.ROOT / "pytorch_memo" / "_checks.py").read_text()
    new = {p.name for p in memobook.ROOT.iterdir()} - set(before)
    # `nox` runs the other checks beside this one: their tools may create their caches now.
    assert new <= OTHER_CHECKS_CACHES, f"the install left {sorted(new - OTHER_CHECKS_CACHES)}"


# -------------------------------------------------- every minor release, several Pythons


def test_the_matrix_lists_every_minor_release_from_the_floor_to_the_newest() -> None:
    minors = sorted(Version(r.torch or "0").minor for r in releases())
    assert minors == list(range(minors[0], minors[-1] + 1)), (
        f"versions.toml skips minor releases of torch 2.x: it lists 2.{minors}"
    )


def test_the_pin_and_an_older_release_run_on_every_python() -> None:
    listed = releases()
    everywhere = [r for r in listed if set(r.pythons) == set(matrix.pythons(listed))]
    pinned = memobook.pins()["torch"]
    assert any(r.torch == pinned for r in everywhere), "the pin runs on every Python"
    assert any(Version(r.torch or "0") < Version(pinned) for r in everywhere), (
        "an older release runs on every Python too"
    )


def test_pyproject_declares_exactly_the_pythons_the_matrix_runs() -> None:
    project = tomllib.loads(memobook.PYPROJECT.read_text())["project"]
    declared = sorted(
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.")
    )
    assert declared == matrix.pythons(), "classifiers name the Pythons of versions.toml"
    assert project["requires-python"] == f">={matrix.pythons()[0]}"


def test_a_release_with_a_bad_python_list_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "versions.toml"
    bad.write_text('[[release]]\ntorch = "2.8.0"\ntorchvision = "0.23.0"\npython = "3.12"\n')
    with pytest.raises(ValueError, match=r"python must be a non-empty list of versions"):
        releases(bad)
    bad.write_text('[[release]]\ntorch = "2.8.0"\ntorchvision = "0.23.0"\npython = ["3.1x"]\n')
    with pytest.raises(ValueError, match=r"got \['3.1x'\]"):
        releases(bad)


def test_jobs_are_the_releases_named_on_their_pythons() -> None:
    listed = [Release("2.8.0", "0.23.0"), Release("2.15.0", "0.29.2", "", ("3.11", "3.13"))]
    assert [(r.torch, p) for r, p in matrix.jobs(listed, [], [])] == [
        ("2.8.0", "3.11"), ("2.15.0", "3.11"), ("2.15.0", "3.13")
    ]  # fmt: skip
    assert [(r.torch, p) for r, p in matrix.jobs(listed, ["2.15.0"], ["3.13"])] == [
        ("2.15.0", "3.13")
    ]
    with pytest.raises(ValueError, match=r"got \['2.9.0'\]"):
        matrix.jobs(listed, ["2.9.0"], [])


def test_an_interpreter_is_found_or_named_as_missing() -> None:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert matrix.interpreter(here) == Path(sys.executable)
    with pytest.raises(FileNotFoundError, match=r"python 3\.99 is needed"):
        matrix.interpreter("3.99")


def test_claim_outcomes_map_nbval_cells_to_claims_and_branches(tmp_path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# T"),
        nbformat.v4.new_code_cell("import torch"),
        nbformat.v4.new_code_cell(
            '# Claim: it is 2 on 2.15 and 1 on 2.8.\nif torch.__version__ >= "2.15":\n'
            "    assert 1 + 1 == 2\nelse:\n    assert 1 == 1\n"
        ),
        nbformat.v4.new_code_cell("# Claim: a gpu fact.\nassert True"),
    ]
    path = tmp_path / "book" / "topic.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    results = {
        "book/topic.ipynb::Cell 0": "passed",
        "book/topic.ipynb::Cell 1": "passed",
        "book/topic.ipynb::Cell 2": "skipped",
    }
    found = matrix.claim_outcomes(path, "book/topic.ipynb", results, "2.8.0")
    ids = [c.id for c in nb.cells]
    assert set(found) == {ids[2], ids[3]}, "only claim cells"
    assert found[ids[2]].outcome == "passed"
    assert found[ids[2]].branches == ("else",)
    assert found[ids[3]].outcome == "skipped"
    assert found[ids[3]].branches == ()
    newer = matrix.claim_outcomes(path, "book/topic.ipynb", results, "2.15.0")
    assert newer[ids[2]].branches == ("then",)
    from memobook.record import source_digest

    assert found[ids[2]].source == source_digest(nb.cells[2].source)


def test_the_record_keeps_runs_per_release_and_python(tmp_path: Path) -> None:
    from memobook.record import ClaimOutcome, MatrixRecord, MatrixRun, Outcome

    path = tmp_path / "matrix.json"
    ok = Outcome(1, 0, 0)
    claims = {"views": {"abc": ClaimOutcome("passed", "0123", ("then",))}}
    record = MatrixRecord()
    for torch, python in (("2.15.0", "3.13.0"), ("2.9.1", "3.11.7"), ("2.15.0", "3.11.7")):
        record = record.with_run(MatrixRun(torch, "0", "now", python, ok, {"views": ok}, claims))
    record = record.with_run(MatrixRun("2.15.0", "0", "later", "3.11.9", ok, {"views": ok}))
    record.write(path)
    again = MatrixRecord.read(path)
    assert list(again.runs) == ["2.9.1 py3.11", "2.15.0 py3.11", "2.15.0 py3.13"]
    assert again.runs["2.15.0 py3.11"].executed == "later", "the same release and Python replaced"
    assert again.runs["2.15.0 py3.13"].claims == claims
    assert again.torch_minors() == {"2.9", "2.15"}


def test_the_memo_names_a_claims_releases_compactly() -> None:
    pytest.importorskip("sphinx", reason="memobook.site needs the book dependency group")
    from memobook.record import ClaimOutcome, MatrixRecord, MatrixRun, Outcome, release_spans
    from memobook.site import claim_releases

    assert (
        release_spans(["2.8", "2.9", "2.10", "2.15", "2.13", "2.9"]) == "2.8\u20132.10, 2.13, 2.15"
    )
    ok = Outcome(1, 0, 0)
    record = MatrixRecord()
    runs = [("2.8.0", "3.11.7", "passed", "new"), ("2.9.1", "3.11.7", "passed", "new"),
            ("2.10.0", "3.11.7", "failed", "new"), ("2.11.0", "3.11.7", "passed", "old"),
            ("2.11.0", "3.12.1", "passed", "new"), ("2.15.0", "3.12.1", "passed", "new"),
            ("2.15.0", "3.13.0", "passed", "new")]  # fmt: skip
    for torch, python, outcome, source in runs:
        claims = {"views": {"c1": ClaimOutcome(outcome, source)}}
        record = record.with_run(MatrixRun(torch, "0", "now", python, ok, {}, claims))
    text = claim_releases(record, "views", "c1", "new")
    # 2.11 on 3.11 ran an older version of the cell: not counted.
    assert text == (
        "holds on torch 2.8\u20132.9 on Python 3.11; 2.11, 2.15 on Python 3.12; "
        "2.15 on Python 3.13; fails on torch 2.10 on Python 3.11"
    )
    assert claim_releases(record, "views", "c1", "edited") == (
        "not yet in the version matrix as it reads now"
    )


def test_jobs_print_ci_s_strategy_and_records_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memobook.record import MatrixRecord, MatrixRun, Outcome

    assert matrix.main(["--jobs", "2.15.0"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == [{"torch": "2.15.0", "python": p} for p in ("3.11", "3.12", "3.13")]
    target = tmp_path / "matrix.json"
    monkeypatch.setattr(matrix, "MATRIX", target)
    MatrixRecord().with_run(MatrixRun("2.8.0", "0", "then", "3.11.7", Outcome(1, 0, 0))).write(
        target
    )
    parts = []
    for torch, python in (("2.9.1", "3.11.7"), ("2.8.0", "3.11.7")):
        part = tmp_path / f"{torch}.json"
        MatrixRecord().with_run(MatrixRun(torch, "0", "now", python, Outcome(2, 0, 0))).write(part)
        parts.append(str(part))
    assert matrix.main(["--merge", *parts]) == 0
    merged = MatrixRecord.read(target)
    assert list(merged.runs) == ["2.8.0 py3.11", "2.9.1 py3.11"]
    assert merged.runs["2.8.0 py3.11"].executed == "now", "a newer run replaces the older"


def test_a_chapter_rerun_replaces_that_chapter_only_and_says_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memobook.record import ClaimOutcome, MatrixRecord, MatrixRun, Outcome

    old, new = ClaimOutcome("passed", "old"), ClaimOutcome("failed", "new", ("else",))
    run = MatrixRun(
        "2.12.1", "0.27.1", "then", "3.11.7", Outcome(5, 0, 0),
        {"views": Outcome(1, 0, 0), "compiling": Outcome(2, 0, 0)},
        {"views": {"v": old}, "compiling": {"c": old, "gone": old}}, 600.0,
        {"kept": [["E", "a"]], "caught": [["E", "old"]]},
    )  # fmt: skip
    again = run.with_chapters(
        {"compiling": Outcome(1, 1, 0)},
        {"compiling": {"c": new}},
        {"caught": [["E", "new"]]},
        "now",
    )
    assert again.chapters == {"views": Outcome(1, 0, 0), "compiling": Outcome(1, 1, 0)}
    assert again.claims == {"views": {"v": old}, "compiling": {"c": new}}, "old cells dropped"
    assert again.raised == {"caught": [["E", "new"]], "kept": [["E", "a"]]}
    assert (again.unit, again.executed, again.seconds) == (run.unit, "then", 600.0)
    assert again.reruns == {"compiling": "now"}
    path = tmp_path / "matrix.json"
    MatrixRecord().with_run(again).write(path)
    assert MatrixRecord.read(path).runs["2.12.1 py3.11"] == again, "reruns kept in the record"
    with pytest.raises(ValueError, match="outcome and the claims of each chapter"):
        run.with_chapters({"compiling": Outcome(1, 0, 0)}, {}, {}, "now")
    # The command line refuses what it cannot update, before building anything.
    monkeypatch.setattr(matrix, "MATRIX", path)
    monkeypatch.setattr(matrix, "build", lambda *a, **k: pytest.fail("built an environment"))
    for argv, expected in (
        (["2.12.1", "--chapter", "nochapter"], "not chapters of _toc.yml: ['nochapter']"),
        (["2.13.0", "--chapter", "compiling"], "none yet for 2.13.0 py3.11"),
        (["--newest", "--chapter", "compiling"], "name releases, not --newest"),
    ):
        with pytest.raises(SystemExit):
            matrix.main(argv)
        assert expected in capsys.readouterr().err


def test_the_workflow_runs_one_job_per_release_and_python() -> None:
    import yaml

    workflow = yaml.safe_load((memobook.ROOT / ".github/workflows/matrix.yml").read_text())
    plan = " ".join(str(s.get("run", "")) for s in workflow["jobs"]["plan"]["steps"])
    assert "python -m memobook.matrix --jobs" in plan
    job = workflow["jobs"]["matrix"]
    assert job["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.jobs) }}"
    runs = " ".join(str(s.get("run", "")) for s in job["steps"])
    assert "nox -s matrix -- ${{ matrix.torch }} --python ${{ matrix.python }}" in runs
    setup = next(s for s in job["steps"] if "setup-python" in str(s.get("uses", "")))
    assert "${{ matrix.python }}" in setup["with"]["python-version"]
    merge = " ".join(str(s.get("run", "")) for s in workflow["jobs"]["record"]["steps"])
    assert "python -m memobook.matrix --merge" in merge
    assert workflow[True]["schedule"], "weekly"  # YAML reads the key `on` as True
    assert "workflow_dispatch" in workflow[True]


def _nbval_one_cell(
    notebook: Path, source: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Write a one-cell notebook holding ``source`` and run it under lax nbval with the
    book's plugin, in a fresh process."""
    notebook.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": "a1",
                   "metadata": {}, "outputs": [], "source": source}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }))  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               *memobook.NBVAL_ARGS, "--nbval-lax", str(notebook)]  # fmt: skip
    return subprocess.run(
        command, cwd=memobook.ROOT, env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="named semaphores live in /dev/shm")
def test_a_notebooks_kernel_is_shut_down_so_its_semaphores_are_unlinked(tmp_path: Path) -> None:
    """A ``spawn`` queue still alive when the notebook ends holds named semaphores. Killed
    outright (nbval's way), the kernel takes its resource tracker with it and they stay in
    ``/dev/shm``; the plugin asks the kernel to shut down first, so they are unlinked."""
    names = tmp_path / "names.txt"
    source = (
        "import multiprocessing as mp\n"
        "queue = mp.get_context('spawn').Queue()\n"
        "locks = [queue._rlock, queue._wlock, queue._sem]\n"
        f"open({str(names)!r}, 'w').write(' '.join(l._semlock.name for l in locks))\n"
    )
    ran = _nbval_one_cell(tmp_path / "alive.ipynb", source)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    left = [n for n in names.read_text().split() if Path(f"/dev/shm/sem.{n[1:]}").exists()]
    assert len(names.read_text().split()) == 3
    assert not left, f"left in /dev/shm: {left}"


def test_the_notebook_runs_leave_no_kernel_temporary_folder(tmp_path: Path) -> None:
    """A kernel that started a forkserver is terminated at the end of Jupyter's grace
    period, before Python's exit removes its ``pymp-*`` folder: the plugin gives the
    kernels a ``TMPDIR`` of their own and removes it when the run ends; only Inductor's
    folder stays, as it would without that ``TMPDIR``. (The machine's
    temporary folder here is a short one: the forkserver's socket lives in it, and a
    socket's path may not pass 107 bytes.)"""
    outer = Path(tempfile.mkdtemp(prefix="memo-t-"))
    source = (
        "import multiprocessing as mp, multiprocessing.util as util, tempfile\n"
        "with mp.get_context('forkserver').Pool(1) as pool:\n"
        "    assert pool.map(abs, [-1]) == [1]\n"
        "assert util.get_temp_dir().startswith(tempfile.gettempdir() + '/')\n"
        f"assert tempfile.gettempdir().startswith({str(outer)!r} + '/memo-kernels-')\n"
    )
    env = {**os.environ, "TMPDIR": str(outer)}
    try:
        ran = _nbval_one_cell(tmp_path / "forkserver.ipynb", source, env)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        # only Inductor's folder is left, which the kernels reach through a link
        # (memobook.kernel_environment), a folder of its own, not the link
        inductor = outer / Path(memobook.inductor_default_cache_dir()).name
        assert sorted(outer.iterdir()) == [inductor]
        assert inductor.is_dir()
        assert not inductor.is_symlink()
    finally:
        shutil.rmtree(outer, ignore_errors=True)

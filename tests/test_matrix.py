"""The version matrix (memobook.matrix): its list of releases agrees with the package's
declared floor and the pin, and the outcomes it records are what pytest ran."""

from __future__ import annotations

import json
import subprocess
import sys
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

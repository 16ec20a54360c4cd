"""The package can be released as the chapters' setup cell installs it: the wheel and
the sdist build from a checkout, pass ``twine check --strict``, hold every module and
``py.typed``, and the release workflow publishes them only from a tag naming the version.

Issue 24, D13: before, nothing built or published a release, so the setup cell could only
install a moving ``git+...@main``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

import memobook

pytestmark = pytest.mark.early  # builds a wheel and an sdist: handed out first

ROOT = memobook.ROOT
PROJECT = tomllib.loads(memobook.PYPROJECT.read_text(encoding="utf-8"))["project"]
NAME, VERSION = PROJECT["name"], PROJECT["version"]
STEM = f"{NAME.replace('-', '_')}-{VERSION}"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [path for path in listed.split("\0") if path]


def _modules() -> set[str]:
    """The package's files in the checkout: every module and ``py.typed``."""
    return {
        path
        for path in _tracked()
        if path.startswith("pytorch_memo/") and path.endswith((".py", "py.typed"))
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build`` (sdist, then the wheel from the sdist) of the checkout's
    tracked files, as the release workflow builds them, with this environment's
    setuptools (no download)."""
    source = tmp_path_factory.mktemp("checkout")
    for path in _tracked():
        if (ROOT / path).is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, source / path)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def test_wheel_and_sdist_pass_twine_check(dist: Path) -> None:
    built = sorted(p.name for p in dist.iterdir())
    assert built == [f"{STEM}-py3-none-any.whl", f"{STEM}.tar.gz"]
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted(map(str, dist.iterdir()))],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_the_wheel_holds_every_module_and_py_typed(dist: Path) -> None:
    with zipfile.ZipFile(dist / f"{STEM}-py3-none-any.whl") as wheel:
        names = set(wheel.namelist())
        metadata = Parser().parsestr(wheel.read(f"{STEM}.dist-info/METADATA").decode())
    package = {n for n in names if not n.startswith(f"{STEM}.dist-info/")}
    assert "pytorch_memo/py.typed" in package
    assert package == _modules()  # every module, and nothing else (no tests, no memobook)
    assert f"{metadata['Name']}=={metadata['Version']}" == memobook.package_release()
    assert metadata["Requires-Python"] == PROJECT["requires-python"]
    assert metadata.get_all("Requires-Dist") == PROJECT["dependencies"]
    assert metadata["Description-Content-Type"] == "text/markdown"


def test_the_sdist_holds_what_the_wheel_is_built_from(dist: Path) -> None:
    with tarfile.open(dist / f"{STEM}.tar.gz") as sdist:
        names = {name.removeprefix(f"{STEM}/") for name in sdist.getnames()}
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert _modules() <= names


def _tag_check() -> str:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    steps = workflow["jobs"]["build"]["steps"]
    script: str = next(s["run"] for s in steps if s.get("name", "").startswith("The tag"))
    return script


@pytest.mark.parametrize("tag", [f"v{VERSION}", f"v{VERSION}.1", "v0.0.0", VERSION])
def test_the_workflows_tag_check_accepts_only_the_version(tag: str) -> None:
    bash = shutil.which("bash")
    assert bash is not None, "GitHub's runners run the step with bash"
    done = subprocess.run(
        [bash, "-e", "-c", _tag_check()],
        cwd=ROOT, env={"GITHUB_REF_NAME": tag, "PATH": str(Path(sys.executable).parent)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if tag == f"v{VERSION}":
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode == 1
        assert done.stdout.strip() == (
            f"::error::tag {tag} does not name the version in pyproject.toml, "
            f"{VERSION}: tag v{VERSION} instead"
        )


def test_the_workflow_publishes_on_a_version_tag_with_trusted_publishing() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1: `on` is True
    assert workflow["permissions"] == {"contents": "read"}
    build = workflow["jobs"]["build"]["steps"]
    runs = " ".join(s.get("run", "") for s in build)
    assert "python -m build --outdir dist" in runs
    assert "python -m twine check --strict dist/*" in runs
    publish = workflow["jobs"]["publish"]
    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write"}  # and no token anywhere
    assert publish["environment"]["name"] == "pypi"
    assert publish["steps"][-1] == {"uses": "pypa/gh-action-pypi-publish@release/v1"}
    assert "secrets." not in WORKFLOW.read_text(encoding="utf-8")

"""The ways readers reach the book agree with each other: README links, workflows, and
the one repository URL in _config.yml."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import yaml

import memobook
from memobook.checks import CHECKS

ROOT = memobook.ROOT


def _workflow(name: str) -> dict[object, object]:
    loaded: dict[object, object] = yaml.safe_load(
        (ROOT / ".github" / "workflows" / name).read_text()
    )
    return loaded


def _run_lines(workflow: dict[object, object]) -> list[str]:
    lines = []
    for job in workflow["jobs"].values():  # type: ignore[attr-defined]
        for step in job.get("steps", []):
            lines += step.get("run", "").splitlines()
    return [line.strip() for line in lines]


def test_readme_gives_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "nox -s book" in readme
    assert re.search(r"^nox\s+#", readme, re.MULTILINE), "the test command: plain `nox`"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == "nox", ".ci/run ends with the README's test command"


def test_readme_launch_links_use_the_configured_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    repo = memobook.repository_url().removeprefix("https://github.com/")
    branch = memobook.config()["repository"]["branch"]
    links = re.findall(r"<(https://[^>]+)>", readme)
    binder = [link for link in links if "mybinder.org" in link]
    colab = [link for link in links if "colab.research.google.com" in link]
    assert binder == [
        f"https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/book/creation.ipynb"
    ]
    assert colab == [
        f"https://colab.research.google.com/github/{repo}/blob/{branch}/book/creation.ipynb"
    ]
    for link in binder + colab:
        assert (ROOT / link.rsplit("/", 2)[-2] / link.rsplit("/", 1)[-1]).exists()


def _job_runs(workflow: dict[object, object], job: str) -> list[str]:
    steps = workflow["jobs"][job]["steps"]  # type: ignore[index]
    return [line.strip() for step in steps for line in step.get("run", "").splitlines()]


def test_ci_runs_every_check_of_the_test_command() -> None:
    """`nox` runs the session `all`, every check side by side; CI runs each check as a job."""
    workflow = _workflow("ci.yml")
    assert "pull_request" in workflow[True]  # type: ignore[operator]  # YAML 1.1: `on` is True
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    assert noxfile.nox.options.sessions == ["all"]
    for check in CHECKS:
        runs = " ".join(_job_runs(workflow, check))
        assert f"nox -s {check}" in runs, f"job {check} does not run nox -s {check}"


def test_ci_shards_the_notebooks_by_the_books_chapters() -> None:
    workflow = _workflow("ci.yml")
    plan = " ".join(_job_runs(workflow, "plan"))
    assert "python -m memobook chapters --json" in plan
    listed = subprocess.run(
        [sys.executable, "-m", "memobook", "chapters", "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert json.loads(listed) == [c.name for c in memobook.chapters()]
    job = workflow["jobs"]["notebooks"]  # type: ignore[index]
    assert job["strategy"]["matrix"]["chapter"] == "${{ fromJSON(needs.plan.outputs.chapters) }}"
    runs = " ".join(_job_runs(workflow, "notebooks"))
    assert "nox -s notebooks -- book/${{ matrix.chapter }}.ipynb" in runs


def test_ci_caches_the_environment_under_the_noxfiles_digest() -> None:
    workflow = _workflow("ci.yml")
    digest = subprocess.run(
        [sys.executable, "-m", "memobook", "digest"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert digest == memobook.env_digest()
    assert "python -m memobook digest" in " ".join(_job_runs(workflow, "plan"))
    for name, job in workflow["jobs"].items():  # type: ignore[attr-defined]
        for step in job.get("steps", []):
            if str(step.get("uses", "")).startswith("actions/cache"):
                assert step["with"]["path"] == ".nox/memo", name
                assert "${{ needs.plan.outputs.digest }}" in step["with"]["key"], name


def test_pages_publishes_only_after_every_check_on_main() -> None:
    workflow = _workflow("ci.yml")
    site = workflow["jobs"]["site"]  # type: ignore[index]
    upload = next(
        s
        for s in site["steps"]
        if str(s.get("uses", "")).startswith("actions/upload-pages-artifact")
    )
    assert upload["with"]["path"] == "_build/html"
    deploy = workflow["jobs"]["deploy"]  # type: ignore[index]
    assert set(deploy["needs"]) == set(CHECKS)
    assert "refs/heads/main" in deploy["if"]
    assert deploy["permissions"]["pages"] == "write"
    assert not (ROOT / ".github" / "workflows" / "pages.yml").exists(), "one way to publish"


def test_the_version_matrix_runs_weekly_on_the_newest_release() -> None:
    workflow = _workflow("matrix.yml")
    assert workflow[True]["schedule"]  # type: ignore[index]
    assert "nox -s matrix -- --newest" in " ".join(_job_runs(workflow, "matrix"))


def test_gpu_workflow_runs_on_a_gpu_runner() -> None:
    workflow = _workflow("gpu.yml")
    job = workflow["jobs"]["gpu"]  # type: ignore[index]
    assert "gpu" in job["runs-on"]
    assert "self-hosted" in job["runs-on"]
    assert "nox -s gpu" in _run_lines(workflow)

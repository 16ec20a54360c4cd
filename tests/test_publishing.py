"""The ways readers reach the book agree with each other: README links, workflows, and
the one repository URL in _config.yml."""

from __future__ import annotations

import re

import yaml

import memobook

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


def test_ci_workflow_runs_the_test_command() -> None:
    workflow = _workflow("ci.yml")
    assert "pull_request" in workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "nox" in _run_lines(workflow)


def test_gpu_workflow_runs_on_a_gpu_runner() -> None:
    workflow = _workflow("gpu.yml")
    job = workflow["jobs"]["gpu"]  # type: ignore[index]
    assert "gpu" in job["runs-on"]
    assert "self-hosted" in job["runs-on"]
    assert "nox -s gpu" in _run_lines(workflow)


def test_pages_workflow_publishes_the_built_book() -> None:
    workflow = _workflow("pages.yml")
    assert "nox -s book" in _run_lines(workflow)
    steps = workflow["jobs"]["build"]["steps"]  # type: ignore[index]
    upload = next(
        s for s in steps if str(s.get("uses", "")).startswith("actions/upload-pages-artifact")
    )
    assert upload["with"]["path"] == "_build/html"
    assert workflow["permissions"]["pages"] == "write"  # type: ignore[index]

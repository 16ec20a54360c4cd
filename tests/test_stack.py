"""One verified stack: pins.txt, environment.yml (Binder), the environment and pyproject agree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

import memobook

ROOT = memobook.ROOT


def test_the_pin_is_the_newest_release_the_matrix_checks() -> None:
    """pins.txt follows the newest torch release of versions.toml (and its torchvision)."""
    from packaging.version import Version

    from memobook.matrix import releases

    newest = max(releases(), key=lambda r: Version(r.torch or "0"))
    pins = memobook.pins()
    assert pins["torch"] == newest.torch
    assert pins["torchvision"] == newest.torchvision


def test_the_intro_names_the_pinned_stack() -> None:
    intro = (memobook.BOOK / "intro.md").read_text()
    pins = memobook.pins()
    assert f"torch {pins['torch']}, torchvision {pins['torchvision']}" in intro


def test_environment_installs_the_pins_cpu_build_and_package() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-r pins.txt" in pip
    assert "-e ." in pip
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    # No second, possibly different, version of a pinned package.
    pinned = set(memobook.pins())
    for line in pip:
        if not line.startswith("-"):
            assert Requirement(line).name.lower() not in pinned, line
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python.split("=")[1] >= requires.removeprefix(">=")


def test_the_environment_digest_follows_what_it_is_built_from(tmp_path: Path) -> None:
    """nox rebuilds .nox/memo (and CI's cache key changes) exactly when these change."""
    for name in ("pins.txt", "pyproject.toml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    before = memobook.env_digest(tmp_path)
    assert before == memobook.env_digest()
    for name in ("pins.txt", "pyproject.toml"):
        saved = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(saved + b"\n# changed\n")
        assert memobook.env_digest(tmp_path) != before, name
        (tmp_path / name).write_bytes(saved)
    assert memobook.env_digest(tmp_path) == before


def test_package_ranges_admit_the_pins() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = memobook.pins()
    for dep in map(Requirement, deps):
        assert dep.name.lower() in pins, f"{dep.name} is a dependency but not pinned"
        assert dep.specifier.contains(pins[dep.name.lower()]), f"{dep} excludes the pin"


@pytest.mark.pinned_stack
def test_installed_stack_is_the_pinned_one() -> None:
    from importlib.metadata import version

    for name, pinned in memobook.pins().items():
        assert version(name).split("+")[0] == pinned, f"{name} {version(name)} != pins.txt {pinned}"


def test_setup_cell_installs_the_release_and_names_the_configured_repository() -> None:
    url = memobook.repository_url()
    assert url.startswith("https://github.com/")
    assert f'release = "{memobook.package_release()}"' in memobook.setup_cell_source()
    assert f"{url}: pip install -e ." in memobook.setup_cell_source()  # its advice
    assert memobook.config()["repository"]["branch"] == "main"

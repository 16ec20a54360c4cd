"""One verified stack: pins.txt, environment.yml (Binder), noxfile.py and pyproject agree."""

from __future__ import annotations

import re
import tomllib

import yaml
from packaging.requirements import Requirement

from tests import bookfiles

ROOT = bookfiles.ROOT


def test_pins_hold_the_card_versions() -> None:
    pins = bookfiles.pins()
    assert pins["torch"] == "2.14.1"
    assert pins["torchvision"] == "0.29.1"


def test_environment_installs_the_pins_cpu_build_and_package() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-r pins.txt" in pip
    assert "-e ." in pip
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    # No second, possibly different, version of a pinned package.
    pinned = set(bookfiles.pins())
    for line in pip:
        if not line.startswith("-"):
            assert Requirement(line).name.lower() not in pinned, line
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python.split("=")[1] >= requires.removeprefix(">=")


def test_nox_installs_the_pins() -> None:
    text = (ROOT / "noxfile.py").read_text()
    assert re.search(r'PINS = ROOT / "pins.txt"', text)
    assert '"-r", str(PINS)' in text


def test_package_ranges_admit_the_pins() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = bookfiles.pins()
    for dep in map(Requirement, deps):
        assert dep.name.lower() in pins, f"{dep.name} is a dependency but not pinned"
        assert dep.specifier.contains(pins[dep.name.lower()]), f"{dep} excludes the pin"


def test_installed_stack_is_the_pinned_one() -> None:
    from importlib.metadata import version

    for name, pinned in bookfiles.pins().items():
        assert version(name).split("+")[0] == pinned, f"{name} {version(name)} != pins.txt {pinned}"


def test_setup_cell_installs_from_the_configured_repository() -> None:
    url = bookfiles.repository_url()
    assert url.startswith("https://github.com/")
    assert f"git+{url}@main" in bookfiles.setup_cell_source()
    assert bookfiles.config()["repository"]["branch"] == "main"

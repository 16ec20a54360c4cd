"""Readers for the book's own files (_config.yml, _toc.yml, chapters, pins), for the tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


def config() -> dict[str, Any]:
    """The parsed _config.yml."""
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def repository_url() -> str:
    """The one place the repository's URL lives."""
    return str(config()["repository"]["url"]).rstrip("/")


def toc_files() -> list[str]:
    """Every file named in _toc.yml (root first), without suffix, relative to the root."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict[str, Any]]) -> Iterator[str]:
        for entry in entries:
            if "file" in entry:
                yield entry["file"]
            for key in ("chapters", "sections"):
                yield from walk(entry.get(key, []))

    for part in toc.get("parts", []):
        files += list(walk(part["chapters"]))
    files += list(walk(toc.get("chapters", [])))
    return files


def chapters() -> list[Path]:
    """Every chapter notebook in book/."""
    return sorted(BOOK.glob("*.ipynb"))


def load(path: Path) -> dict[str, Any]:
    """A notebook as plain JSON."""
    return json.loads(path.read_text(encoding="utf-8"))


def code_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell: dict[str, Any]) -> str:
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else str(text)


def tags(cell: dict[str, Any]) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def setup_cell_source() -> str:
    """The first code cell of every chapter: installs pytorch_memo where it is missing."""
    return (
        "# Setup: installs the book's helper package where it is missing (Colab);\n"
        "# does nothing where it is installed (local, Binder).\n"
        "import importlib.util\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if importlib.util.find_spec("pytorch_memo") is None:\n'
        f'    repo = "git+{repository_url()}@{config()["repository"]["branch"]}"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", repo], check=True)'
    )


def pins() -> dict[str, str]:
    """``{name: version}`` from pins.txt."""
    found = {}
    for line in (ROOT / "pins.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line).groups()  # type: ignore[union-attr]
            found[name.lower()] = version
    return found

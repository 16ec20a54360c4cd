"""What each figure of the book shows, in words: the site's alt text for it.

A figure is an image output of a code cell. Its description comes from the cell:

- a caption, the comment ``# Figure: ...`` anywhere in the cell (lines right after it
  that start with ``#`` and at least two spaces continue it), written where the code
  gives the picture no title that says what it shows::

      # Figure: the 3 x 4 tensor t as a grid above its storage, each element joined
      #   to the storage cell it lives in.
      plot_view(t)

- else the titles the code gives the figure: string literals passed as ``title=`` (to
  the book's plotting helpers, ``ax.set``), to ``set_title`` or to ``suptitle``, in
  the order written, joined by ``"; "``.

:func:`figures` lists every figure of a chapter with its description; the book's tests
require one for each (``tests/test_notebooks.py``), and the site writes it as the
image's alt text instead of the file's path.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

import memobook

CAPTION = "# Figure: "
_CONTINUATION = re.compile(r"^#\s{2,}(\S.*)$")
_TITLE_CALLS = frozenset({"set_title", "suptitle", "title"})
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
"""The output types the site shows as images."""


def caption(source: str) -> str:
    """The cell's ``# Figure:`` caption, continuation lines joined; ``""`` when none."""
    lines = source.splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith(CAPTION):
            continue
        parts = [stripped[len(CAPTION) :].strip()]
        for following in lines[index + 1 :]:
            match = _CONTINUATION.match(following.strip())
            if match is None:
                break
            parts.append(match.group(1).strip())
        return " ".join(parts)
    return ""


def titles(source: str) -> list[str]:
    """The string literals the cell's code passes as a figure's title, in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell of magics
        return []
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        candidates = [k.value for k in node.keywords if k.arg == "title"]
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if name in _TITLE_CALLS and node.args:
            candidates.append(node.args[0])
        found += [
            (value.lineno, value.col_offset, value.value)
            for value in candidates
            if isinstance(value, ast.Constant) and isinstance(value.value, str)
        ]
    return [text for _, _, text in sorted(found)]


def description(source: str) -> str:
    """What the figure of a cell with this source shows: its caption, else its titles."""
    return caption(source) or "; ".join(t.strip() for t in titles(source) if t.strip())


def image_count(cell: dict[str, Any]) -> int:
    """How many images a code cell's stored outputs hold."""
    return sum(
        any(kind in output.get("data", {}) for kind in IMAGE_TYPES)
        for output in cell.get("outputs", [])
    )


@dataclass(frozen=True)
class Figure:
    """A code cell that draws: its index in the notebook, its id and its description."""

    cell: int
    cell_id: str
    description: str


def figures(nb: dict[str, Any]) -> list[Figure]:
    """Every code cell of a notebook whose outputs hold an image, in order."""
    return [
        Figure(index, str(cell.get("id", "")), description(memobook.source(cell)))
        for index, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code" and image_count(cell)
    ]

"""How a chapter reads: the share of what a reader sees that is checking, not teaching.

Two figures per chapter, over the code a reader sees on the site (the setup cell and
folded checks, cells tagged ``hide-input``, are not counted):

- **check lines**: of the visible code lines (non-blank), the share that are claim
  comments (``# Claim:`` and its continuation lines) or checks (``assert`` statements,
  ``with raises(...)`` lines and calls of :data:`memobook.claims.CHECKING_CALLS` standing
  as statements), all their lines counted;
- **silent cells**: of the visible code cells, the share that store no output.

The book's targets (:data:`CHECK_LINES_TARGET`, :data:`SILENT_CELLS_TARGET`) are for the
whole book; each chapter's figures show where to work.

Usage: ``python -m memobook.teaching [CHAPTER ...] [--strict]``: prints a table, and
with ``--strict`` exits 1 when the book misses a target. The status page shows the same
table (:func:`book_figures`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import memobook
from memobook.claims import CHECKING_CALLS, CONTINUATION, MARK

CHECK_LINES_TARGET = 0.25
"""At most this share of the visible code lines checks (claim comments and asserts)."""
SILENT_CELLS_TARGET = 0.20
"""At most this share of the visible code cells shows no output."""


@dataclass(frozen=True)
class Figures:
    """What a reader sees of one chapter (or of several, added up).

    Attributes:
        name: the chapter's topic, or ``book``.
        code_lines: visible non-blank code lines.
        check_lines: of those, claim-comment and check lines.
        cells: visible code cells.
        silent_cells: of those, cells with no stored output.
    """

    name: str
    code_lines: int
    check_lines: int
    cells: int
    silent_cells: int

    @property
    def check_share(self) -> float:
        return self.check_lines / self.code_lines if self.code_lines else 0.0

    @property
    def silent_share(self) -> float:
        return self.silent_cells / self.cells if self.cells else 0.0

    @property
    def meets_targets(self) -> bool:
        return self.check_share <= CHECK_LINES_TARGET and self.silent_share <= SILENT_CELLS_TARGET

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            "book",
            self.code_lines + other.code_lines,
            self.check_lines + other.check_lines,
            self.cells + other.cells,
            self.silent_cells + other.silent_cells,
        )


def _claim_lines(lines: list[str]) -> set[int]:
    """Line numbers (1-based) of the claim comments that open a cell."""
    found: set[int] = set()
    in_claim = False
    for number, line in enumerate(lines, 1):
        if line.startswith(MARK):
            in_claim = True
        elif in_claim and CONTINUATION.match(line):
            pass
        elif line.startswith("#"):
            in_claim = False
            continue
        else:
            break
        if in_claim:
            found.add(number)
    return found


def _is_check_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in CHECKING_CALLS


def _check_lines(tree: ast.AST) -> set[int]:
    """Line numbers of assert statements, `with raises(...)` headers and checking calls
    that stand as statements."""
    found: set[int] = set()
    for node in ast.walk(tree):
        span: tuple[int, int] | None = None
        if isinstance(node, ast.Assert) or (
            isinstance(node, ast.Expr) and _is_check_call(node.value)
        ):
            span = (node.lineno, node.end_lineno or node.lineno)
        elif isinstance(node, ast.With) and any(
            _is_check_call(item.context_expr) for item in node.items
        ):
            span = (node.lineno, node.body[0].lineno - 1 if node.body else node.lineno)
        if span is not None:
            found.update(range(span[0], max(span) + 1))
    return found


def cell_figures(cell: dict[str, Any]) -> tuple[int, int]:
    """``(visible non-blank lines, check lines)`` of one code cell."""
    text = memobook.source(cell)
    lines = text.splitlines()
    marked = _claim_lines(lines)
    with contextlib.suppress(SyntaxError):  # magics: no Python checks to count
        marked |= _check_lines(ast.parse(text))
    shown = [n for n, line in enumerate(lines, 1) if line.strip()]
    return len(shown), sum(n in marked for n in shown)


def chapter_figures(chapter: memobook.Chapter) -> Figures:
    """The figures of one chapter, from its stored notebook."""
    code_lines = check_lines = cells = silent = 0
    for cell in memobook.code_cells(chapter.load()):
        if memobook.HIDE_INPUT_TAG in memobook.tags(cell):
            continue  # the setup cell and folded checks
        shown, checking = cell_figures(cell)
        code_lines += shown
        check_lines += checking
        cells += 1
        silent += not cell.get("outputs")
    return Figures(chapter.name, code_lines, check_lines, cells, silent)


def book_figures(chapters: Sequence[memobook.Chapter] | None = None) -> list[Figures]:
    """Each chapter's figures, then the book's (the last row)."""
    rows = [chapter_figures(c) for c in (memobook.chapters() if chapters is None else chapters)]
    total = Figures("book", 0, 0, 0, 0)
    for row in rows:
        total = total + row
    return [*rows, total]


def table(rows: Sequence[Figures]) -> str:
    """The figures as a plain-text table."""
    head = f"{'chapter':<20} {'check lines':>17} {'silent cells':>16}"
    lines = [head, "-" * len(head)]
    for row in rows:
        checks = f"{row.check_lines}/{row.code_lines} {row.check_share:4.0%}"
        silent = f"{row.silent_cells}/{row.cells} {row.silent_share:4.0%}"
        lines.append(f"{row.name:<20} {checks:>17} {silent:>16}")
    lines.append(
        f"targets for the book: check lines <= {CHECK_LINES_TARGET:.0%}, "
        f"silent cells <= {SILENT_CELLS_TARGET:.0%}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.teaching", description=__doc__)
    parser.add_argument("chapters", nargs="*", help="topics or paths (default: every chapter)")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when the book misses a target"
    )
    args = parser.parse_args(argv)
    try:
        paths = set(memobook.chapter_paths(args.chapters))
    except KeyError as error:
        parser.error(str(error.args[0]))
    chosen = [c for c in memobook.chapters() if str(c.path.relative_to(memobook.ROOT)) in paths]
    rows = book_figures(chosen)
    print(table(rows))
    return 1 if args.strict and not rows[-1].meets_targets else 0


if __name__ == "__main__":
    sys.exit(main())

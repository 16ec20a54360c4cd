"""Claims: every fact the book states, bound to the cell that proves it.

A claim is one short sentence in the comment block that opens a code cell::

    # Claim: writing in place through a dimension of size > 1 and stride 0 (`expand`)
    #   is refused.
    wide = torch.zeros(3).expand(2, 3)
    with raises(RuntimeError, match="more than one element"):
        wide.add_(1)

- A line ``# Claim: ...`` starts a claim; the lines right after it that start with
  ``#`` and at least two spaces continue it. A cell may open with several claims.
- The cell proves its claims: it must *check* (an ``assert`` statement, a
  ``with raises(...)`` block, or a call of one of :data:`CHECKING_CALLS`).
- A claim is only as wide as its check: every name the sentence quotes in backticks
  must occur in the cell's code (a sentence naming ``sum``, ``max`` and ``std`` gets all
  three exercised).
- Prose is bound to claims: a markdown cell of facts is followed, before the next
  markdown cell, by at least one claim cell. Headings alone, the chapter's opening cell,
  and cells tagged ``context`` (history, opinion, pointers, worded as such, with a link
  to their source) are exempt.

:func:`problems` lists every breach of these rules in a notebook; the claims test fails
on any. The site's memo page lists every claim, linked to its cell (:func:`anchor`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

import memobook

MARK = "# Claim: "
CONTINUATION = re.compile(r"^#\s{2,}(\S.*)$")
CHECKING_CALLS = frozenset(
    {"raises", "assert_close", "gradcheck", "gradgradcheck", "opcheck", "assert_equal"}
)
"""Calls that fail the cell when what they check does not hold (besides ``assert``):
``pytorch_memo.checks.raises``, ``torch.testing.assert_close``,
``torch.autograd.gradcheck``/``gradgradcheck`` (they raise by default),
``torch.library.opcheck``, ``numpy.testing.assert_equal``."""
MAX_LENGTH = 240
"""A claim is one short sentence a reader can look up."""
_QUOTED = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\]\((?:https?://|[\w./-]+\.(?:ipynb|md|html))|<https?://")


@dataclass(frozen=True)
class Claim:
    """One claim of a chapter.

    Attributes:
        chapter: the chapter's topic (``views``).
        cell: the index of its cell in the notebook's cells.
        cell_id: the cell's id (nbformat 4.5): stable while the cell is edited.
        text: the sentence, continuation lines joined.
        gpu: whether the cell is tagged ``gpu`` (it runs on a GPU only).
    """

    chapter: str
    cell: int
    cell_id: str
    text: str
    gpu: bool

    @property
    def anchor(self) -> str:
        """The id of the claim's cell on its chapter's page."""
        return anchor(self.cell_id)


def anchor(cell_id: str) -> str:
    """The id the site gives a claim cell: ``claim-<cell id>``."""
    return f"claim-{cell_id}"


def cell_claims(source: str) -> list[str]:
    """The claims that open a cell's source (empty for a cell that opens with none)."""
    found: list[str] = []
    current: list[str] | None = None
    for line in source.splitlines():
        if line.startswith(MARK):
            current = [line[len(MARK) :].strip()]
            found.append("")
        elif current is not None and CONTINUATION.match(line):
            current.append(CONTINUATION.match(line).group(1))  # type: ignore[union-attr]
        elif line.startswith("#"):
            current = None
        else:
            break
        if current is not None:
            found[-1] = " ".join(current)
    return found


def chapter_claims(chapter: memobook.Chapter) -> list[Claim]:
    """Every claim of a chapter, in order."""
    nb = chapter.load()
    return [
        Claim(
            chapter.name,
            index,
            str(cell.get("id", "")),
            text,
            memobook.GPU_TAG in memobook.tags(cell),
        )
        for index, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code"
        for text in cell_claims(memobook.source(cell))
    ]


def _code_without_comments(source: str) -> str:
    """The cell's code with its comments blanked out (strings keep their ``#``)."""
    import io
    import tokenize

    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(lines)


def _checks(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CHECKING_CALLS:
                return True
    return False


def _quoted_names(text: str) -> list[str]:
    """What a claim quotes, as it must appear in code: ``x.storage()`` -> ``x.storage``."""
    names = []
    for quoted in _QUOTED.findall(text):
        name = quoted.strip()
        name = name.removesuffix("()")
        names.append(name)
    return names


def _normalised(code: str) -> str:
    return re.sub(r"\s+", " ", code)


def cell_problems(cell: dict[str, Any], where: str) -> list[str]:
    """How a code cell breaks the rules of claims (see the module's docstring)."""
    source = memobook.source(cell)
    claims = cell_claims(source)
    problems = []
    stray = [
        number
        for number, line in enumerate(source.splitlines(), 1)
        if line.lstrip().startswith(MARK.strip()) and not line.startswith(MARK)
    ]
    opening = set()
    for number, line in enumerate(source.splitlines(), 1):
        if not line.startswith("#"):
            break
        opening.add(number)
    stray += [
        number
        for number, line in enumerate(source.splitlines(), 1)
        if line.startswith(MARK) and number not in opening
    ]
    problems += [
        f"{where} line {number}: a claim must be in the comment block that opens the cell, "
        f"as '{MARK}...'"
        for number in stray
    ]
    if not claims:
        return problems
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [*problems, f"{where}: a claim cell must be plain Python ({error.msg})"]
    if not _checks(tree):
        problems.append(
            f"{where}: its claims are not checked: the cell needs an assert, a `with raises(...)` "
            f"or one of {sorted(CHECKING_CALLS)}"
        )
    code = _normalised(_code_without_comments(source))
    for text in claims:
        if not text.endswith((".", "?", "!")) and not text.endswith(".)"):
            problems.append(f"{where}: the claim {text!r} must be a sentence ending with a period")
        if len(text) > MAX_LENGTH:
            problems.append(
                f"{where}: the claim {text[:40]!r}... is {len(text)} characters (at most {MAX_LENGTH})"
            )
        problems += [
            f"{where}: the claim quotes `{name}`, which the cell's code never uses: "
            "a claim is only as wide as its check"
            for name in _quoted_names(text)
            if _normalised(name) not in code
        ]
    return problems


def _is_headings_only(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return all(line.startswith("#") for line in lines)


def notebook_problems(nb: dict[str, Any], name: str) -> list[str]:
    """Every breach of the rules of claims in a notebook, each naming its cell."""
    problems: list[str] = []
    cells = nb["cells"]
    seen: dict[str, int] = {}
    for index, cell in enumerate(cells):
        where = f"{name} cell {index}"
        if cell["cell_type"] == "code":
            problems += cell_problems(cell, where)
            for text in cell_claims(memobook.source(cell)):
                if text in seen:
                    problems.append(
                        f"{where}: the claim {text!r} is made twice (cell {seen[text]} too)"
                    )
                seen[text] = index
            continue
        if cell["cell_type"] != "markdown" or index == 0:
            continue
        text = memobook.source(cell)
        if memobook.CONTEXT_TAG in memobook.tags(cell):
            if not _LINK.search(text):
                problems.append(
                    f"{where}: a `context` cell (history, opinion, pointers) links to its source"
                )
            continue
        if _is_headings_only(text):
            continue
        following = []
        for later in cells[index + 1 :]:
            if later["cell_type"] != "code":
                break
            following.append(later)
        if not any(cell_claims(memobook.source(c)) for c in following):
            first = next((line for line in text.splitlines() if line.strip()), "")[:60]
            problems.append(
                f"{where} ({first!r}): its facts are bound to no claim: a claim cell must follow "
                f"before the next markdown cell, or tag the cell `{memobook.CONTEXT_TAG}` "
                "(history, opinion, pointers, with a source link)"
            )
    return problems


def book_claims() -> list[Claim]:
    """Every claim of the book, chapter by chapter in reading order."""
    return [claim for chapter in memobook.chapters() for claim in chapter_claims(chapter)]

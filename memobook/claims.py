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

Scope rules (:func:`scope_problems`; they read the version matrix's record,
``book/_data/matrix.json``):

- **6a** a sentence naming a range of torch releases ("from 2.8 to 2.15", "2.8-2.15",
  "since 2.9", "until 2.13", "2.12 and later", the range in "2.8 and 2.10 to 2.15")
  passes only where every minor release in the range checked what the sentence is
  about; otherwise it names the releases checked. So does a sentence naming one
  release as torch's ("torch 2.9 raises"). A claim cell's comments are judged
  by the matrix's runs of that cell as it reads now, prose by the claim cells of its
  section, what the matrix has not run as it reads now by the releases the matrix ran
  (:func:`scope_problems`). Cells tagged ``context`` (history, with a source) are exempt.
- **6b** a claim cell that branches on the torch version (``if torch.__version__ >=
  "2.15":``) checks in every branch (or after the ``if``), and every branch is taken by
  at least one release the matrix ran; a ``gpu`` cell's branches, which the CPU matrix
  skips, by a release that ran it on a GPU (:func:`gpu_runs`).
- **6c** a claim saying "every", "all", "always", "never", "any" or "no other" is
  checked over a collection of cases (a loop, a comprehension, ``all``/``any``, a
  whole-tensor comparison), or its cell says why one case is the whole domain
  (:data:`EXEMPTION`).

:func:`notebook_problems` and :func:`scope_problems` list every breach of these rules in
a notebook; the claims test fails on any. The site's memo page lists every claim, linked to its cell (:func:`anchor`).
"""

from __future__ import annotations

import ast
import itertools
import operator
import re
from collections.abc import Callable, Iterator
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


def section_claims(chapter: memobook.Chapter) -> list[tuple[str, list[Claim]]]:
    """A chapter's claims grouped by the section (``## `` heading) they are in, in order:
    ``(section title, claims)``, sections without claims left out; claims before the
    first section are under the chapter's title."""
    starts = memobook.sections(chapter.load())
    groups: list[tuple[str, list[Claim]]] = []
    for claim in chapter_claims(chapter):
        title = next(
            (title for index, title in reversed(starts) if index <= claim.cell), chapter.title
        )
        if not groups or groups[-1][0] != title:
            groups.append((title, []))
        groups[-1][1].append(claim)
    return groups


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


# ------------------------------------------------------------------ scope: torch releases


@dataclass(frozen=True)
class VersionBranch:
    """An ``if`` of a claim cell that branches on the torch version.

    Attributes:
        line: its line in the cell.
        test: the condition's source (``torch.__version__ >= "2.15"``).
        then_checks: whether its body checks (an assert, ``raises``, ...), or a check
            follows the ``if``.
        else_checks: whether its ``else`` (or, without one, what follows the ``if``)
            checks.
    """

    line: int
    test: str
    then_checks: bool
    else_checks: bool

    def taken(self, version: str) -> str:
        """``then`` or ``else``: the branch this cell takes on torch ``version``."""
        return (
            "then"
            if _version_condition(ast.parse(self.test, mode="eval").body, version)
            else "else"
        )

    @property
    def releases(self) -> set[str]:
        """The minor releases its test compares with: ``{"2.10", "2.11"}`` for
        ``"2.10" <= torch.__version__ < "2.11"``."""
        from memobook.record import minor

        return {
            minor(node.value)
            for node in ast.walk(ast.parse(self.test, mode="eval"))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }

    def claims_about(self, claims: list[str]) -> list[str]:
        """The claims of its cell that this branch is about: those that name a release
        its test compares with, as a release or where a range they name starts or stops
        (``on 2.8 to 2.12`` for ``torch.__version__ < "2.13"``); else those that name
        any release; else all of them."""
        named = [claim for claim in claims if _MENTION.search(claim)]
        about = [claim for claim in named if release_edges(claim) & self.releases]
        return about or named or list(claims)


def _is_torch_version(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "__version__"
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    )


_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.GtE: operator.ge,
    ast.Gt: operator.gt,
    ast.LtE: operator.le,
    ast.Lt: operator.lt,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def _version_condition(node: ast.expr, version: str) -> bool | None:
    """The value of ``node`` on torch ``version``, when it is a condition on
    ``torch.__version__`` alone (comparisons with string constants, and/or/not of them);
    None for any other condition. Compared as torch compares (``packaging``'s Version)."""
    from packaging.version import Version

    if isinstance(node, ast.BoolOp):
        values = [_version_condition(v, version) for v in node.values]
        if any(v is None for v in values):
            return None
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _version_condition(node.operand, version)
        return None if inner is None else not inner
    if not isinstance(node, ast.Compare):
        return None
    if len(node.ops) > 1:  # a chain, `"2.10" <= torch.__version__ < "2.11"`: each pair
        operands = [node.left, *node.comparators]
        pairs = [
            _version_condition(ast.Compare(a, [o], [b]), version)
            for a, o, b in zip(operands, node.ops, operands[1:], strict=False)
        ]
        return None if any(v is None for v in pairs) else all(pairs)
    left, right, op = node.left, node.comparators[0], type(node.ops[0])
    if op not in _COMPARE:
        return None
    if _is_torch_version(left) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return bool(_COMPARE[op](Version(version), Version(right.value)))
    if _is_torch_version(right) and isinstance(left, ast.Constant) and isinstance(left.value, str):
        return bool(_COMPARE[op](Version(left.value), Version(version)))
    return None


def _ifs_with_what_follows(
    block: list[ast.stmt], follows: list[ast.stmt]
) -> Iterator[tuple[ast.If, list[ast.stmt]]]:
    """Every ``if`` in ``block`` with the statements that run after it: the rest of its
    block, then the rest of each enclosing block (``follows``)."""
    for index, node in enumerate(block):
        after = [*block[index + 1 :], *follows]
        if isinstance(node, ast.If):
            yield node, after
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(node, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                yield from _ifs_with_what_follows(inner, after)
        for handler in getattr(node, "handlers", []):
            yield from _ifs_with_what_follows(handler.body, after)


def version_branches(source: str) -> list[VersionBranch]:
    """The ``if`` statements of a cell that branch on the torch version, in order. A
    branch checks when it holds a check or a check runs after the ``if`` (the branches
    set what one assert then checks; a ``finally`` restores what the checks used)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node, after in _ifs_with_what_follows(tree.body, []):
        if _version_condition(node.test, "2.0") is None:
            continue
        later = _checks(ast.Module(body=after, type_ignores=[]))
        body = _checks(ast.Module(body=node.body, type_ignores=[]))
        orelse = _checks(ast.Module(body=node.orelse, type_ignores=[]))
        found.append(
            VersionBranch(node.lineno, ast.unparse(node.test), body or later, orelse or later)
        )
    return sorted(found, key=lambda b: b.line)


def branch_problems(
    cell: dict[str, Any],
    where: str,
    torch_versions: list[str],
    ran: str = "the version matrix ran",
) -> list[str]:
    """Rule 6b: a claim cell that branches on the torch version checks in every branch,
    and every branch is taken by at least one of ``torch_versions``: the releases the
    matrix ran, or for a ``gpu`` cell those that ran it on a GPU (``ran`` says which)."""
    source = memobook.source(cell)
    if not cell_claims(source):
        return []
    problems = []
    for branch in version_branches(source):
        at = f"{where} line {branch.line} (`if {branch.test}`)"
        if not branch.then_checks or not branch.else_checks:
            missing = "its body" if not branch.then_checks else "its else (or what follows)"
            problems.append(
                f"{at}: a claim that branches on the torch version checks in every branch; "
                f"{missing} checks nothing, so on those releases the claim is unchecked"
            )
        taken = {branch.taken(v) for v in torch_versions}
        problems += [
            f"{at}: its {side!r} branch is taken by no release {ran} "
            f"({', '.join(torch_versions) or 'none'}): unchecked code"
            for side in ("then", "else")
            if side not in taken
        ]
    return problems


_NAMED = r"(?:(?:torch|pytorch|releases?|versions?)\s+)?"
"""What may stand between a range's words and a release: ``from torch 2.9``."""
_MENTION = re.compile(r"(?<![\w.])2\.(\d+)(?:\.\d+)*(?![\w.]*\d)")
"""A torch release in a sentence: ``2.9``, ``2.9.1``, ``2.15.0+cu132``; its minor number."""
_SPAN = re.compile(
    rf"\s*(?:-|–|—|to|through|thru|until|till)\s+{_NAMED}|\s*[-–—]\s*", re.IGNORECASE
)
"""What joins the two ends of a range: ``2.8 to 2.15``, ``2.8-2.15``, ``2.8–2.15``."""
_BETWEEN = re.compile(rf"\bbetween\s+{_NAMED}$", re.IGNORECASE)
_AND = re.compile(rf"\s+and\s+{_NAMED}", re.IGNORECASE)
_FROM = re.compile(rf"\bfrom\s+{_NAMED}$", re.IGNORECASE)


def _words_before(words: str) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{words})\s+{_NAMED}$", re.IGNORECASE)


def _words_after(words: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:{words})", re.IGNORECASE)


_OPEN_ENDS = (
    # to the newest release: "since 2.9", "from torch 2.9 on", "as of 2.9",
    # "2.12 and later", "2.14 or later", "2.9 onwards", "2.9+"
    (_words_before("since|from|as of|starting (?:with|at|from)|beginning with"), "from"),
    (
        _words_after(
            r"\s+(?:and|or)\s+(?:later|newer|above|up|after)\b|\s+onwards?\b|\+(?![\w.])"
            r"|\s+on(?=\s*(?:[,.;:)]|$))"
        ),
        "from",
    ),
    # from the release after: "after 2.9", "newer than 2.9"
    (_words_before("after|above|newer than|later than"), "after"),
    # from the floor: "up to 2.14", "until 2.13", "through 2.13", "2.13 and earlier"
    (_words_before("up to|up until|up through|until|till|through"), "to"),
    (_words_after(r"\s+(?:and|or)\s+(?:earlier|older|before|below|lower)\b"), "to"),
    # from the floor to the release before: "before 2.10", "older than 2.10"
    (_words_before("before|prior to|below|older than|earlier than"), "below"),
)
"""The words that make one release the end of an open range, read before it (patterns
ending in ``$``) or after it (patterns starting with ``^``), with the range they make."""


def _minor_number(text: str) -> int:
    return int(text.split(".")[1])


def release_ranges(text: str, floor: str, newest: str) -> list[tuple[str, int, int]]:
    """The ranges of torch releases a sentence names: ``(phrase, low, high)`` minor
    numbers of 2.x, ``floor`` and ``newest`` standing for the open ends, in order.

    Every release the sentence names is read, so a list mixing single releases and ranges
    ("on 2.8 and 2.10 to 2.15") gives its range. Two releases joined by "to", "through",
    "until" or a dash are a range ("from 2.8 to 2.15", "2.8-2.15"), and so are two joined
    by "and" after "between"; "2.8 and 2.15" lists two releases. A release alone is the
    end of an open range when words before or after it say so (:data:`_OPEN_ENDS`):
    "since 2.9", "from 2.9 on", "2.12 and later", "until 2.13", "up to 2.14", "before 2.10".
    """
    mentions = list(_MENTION.finditer(text))
    found: list[tuple[int, str, int, int]] = []
    paired: set[int] = set()
    for index, (first, second) in enumerate(itertools.pairwise(mentions)):
        between = text[first.end() : second.start()]
        before = text[: first.start()]
        opening = _BETWEEN.search(before)
        if not (_SPAN.fullmatch(between) or (opening and _AND.fullmatch(between))):
            continue
        low, high = int(first.group(1)), int(second.group(1))
        if high <= low:
            continue
        start = opening.start() if opening else _phrase_start(before, first.start())
        found.append((start, text[start : second.end()], low, high))
        paired |= {index, index + 1}
    low_end, high_end = _minor_number(floor), _minor_number(newest)
    for index, mention in enumerate(mentions):
        if index in paired:
            continue
        before, after = text[: mention.start()], text[mention.end() :]
        number = int(mention.group(1))
        for pattern, kind in _OPEN_ENDS:
            reads_before = pattern.pattern.endswith("$")
            hit = pattern.search(before) if reads_before else pattern.match(after)
            if hit is None:
                continue
            start = hit.start() if reads_before else mention.start()
            end = mention.end() if reads_before else mention.end() + hit.end()
            low, high = {
                "from": (number, high_end),
                "after": (number + 1, high_end),
                "to": (low_end, number),
                "below": (low_end, number - 1),
            }[kind]
            found.append((start, text[start:end], low, high))
            break
    return [(" ".join(phrase.split()), low, high) for _, phrase, low, high in sorted(found)]


_TORCH_RELEASE = re.compile(r"\btorch\s+2\.(\d+)(?:\.\d+)*(?![\w.]*\d)", re.IGNORECASE)
"""A release named as torch's (``torch 2.9``, ``torch 2.15.0``): a claim about that
release, where a number alone may be a value (a loss of 2.5)."""


def named_release_problems(text: str, where: str, ran: set[str], whose: str = "") -> list[str]:
    """Rule 6a for one release: a sentence saying what "torch 2.9" does is true only where
    2.9 checked it (``ran``: minor releases); ranges are :func:`range_problems`'."""
    problems = []
    for release in dict.fromkeys(f"2.{m.group(1)}" for m in _TORCH_RELEASE.finditer(text)):
        if release not in ran:
            checked = ", ".join(sorted(ran, key=_minor_number)) or "none"
            problems.append(
                f"{where}: it says what torch {release} does, but "
                f"{whose or 'the version matrix never ran'} {release}: "
                f"name the releases checked ({checked}) instead"
            )
    return problems


def release_edges(text: str) -> set[str]:
    """The minor releases at which a sentence says something starts or stops: each
    release it names, and the release after the last of each range it names that is
    closed at its top ("2.8 to 2.12" -> 2.8, 2.12, 2.13; "before 2.10" -> 2.10)."""
    named = {f"2.{match.group(1)}" for match in _MENTION.finditer(text)}
    ranges = release_ranges(text, "2.0", "2.0")  # the open ends are not edges
    return named | {f"2.{high + 1}" for _, _, high in ranges if f"2.{high}" in named}


def _phrase_start(before: str, default: int) -> int:
    """Where a range's phrase starts: at its "from" (``from torch 2.8 to 2.15``)."""
    opening = _FROM.search(before)
    return opening.start() if opening else default


def range_problems(
    text: str, where: str, ran: set[str], floor: str, newest: str, whose: str = ""
) -> list[str]:
    """Rule 6a: a sentence naming a range of torch releases is true only where every minor
    release in it was checked (``ran``: minor releases, ``2.9``); else it names the
    releases that were checked. ``whose``: what ``ran`` are the releases of, for the
    message (the version matrix as a whole by default)."""
    problems = []
    for phrase, low, high in release_ranges(text, floor, newest):
        missing = [f"2.{n}" for n in range(low, high + 1) if f"2.{n}" not in ran]
        if missing:
            checked = ", ".join(sorted(ran, key=_minor_number)) or "none"
            problems.append(
                f"{where}: {phrase!r} names a range of releases, but "
                f"{whose or 'the version matrix never ran'} {', '.join(missing)}: "
                f"name the releases checked ({checked}) instead"
            )
    return problems


def cell_releases(cell: dict[str, Any], chapter: str, matrix: Any) -> dict[str, bool] | None:
    """How the version matrix fared with a claim cell as it reads now, by minor release
    (``2.9``): True where some run of it passed (on any Python), False where every run of
    it on that release failed or raised. A ``gpu`` cell's GPU run (its
    :func:`~memobook.record.gpu_mark`) counts as a passing run. None when nothing has
    checked the cell as it reads now: no run recorded the cell's code as it is
    (:func:`~memobook.record.source_digest`: a new cell, or one whose code changed since),
    or every run skipped it (a ``gpu`` cell on a machine without CUDA).
    ``matrix``: a :class:`~memobook.record.MatrixRecord`."""
    from memobook.record import gpu_mark, minor, source_digest

    digest = source_digest(memobook.source(cell))
    found: dict[str, bool] = {}
    for run, outcome in matrix.cell_runs(chapter, str(cell.get("id", "")), digest):
        if outcome.outcome != "skipped":
            release = minor(run.torch)
            found[release] = found.get(release, False) or outcome.outcome == "passed"
    mark = gpu_mark(cell) if memobook.GPU_TAG in memobook.tags(cell) else None
    if mark is not None:
        found[minor(mark.torch)] = True
    return found or None


def gpu_runs(cell: dict[str, Any], chapter: str, matrix: Any) -> list[str]:
    """The torch versions that ran a ``gpu`` cell as it reads now: its GPU run
    (:func:`~memobook.record.gpu_mark`) and any matrix run that did not skip it."""
    from memobook.record import gpu_mark, source_digest, version_key

    digest = source_digest(memobook.source(cell))
    ran = {
        run.torch
        for run, outcome in matrix.cell_runs(chapter, str(cell.get("id", "")), digest)
        if outcome.outcome != "skipped"
    }
    mark = gpu_mark(cell)
    if mark is not None:
        ran.add(mark.torch)
    return sorted(ran, key=version_key)


def _section_releases(fared: list[dict[str, bool] | None]) -> set[str] | None:
    """The releases prose may name in a range, from how its section's claim cells fared
    (:func:`cell_releases`): those on which one of them passed and none failed; None
    when none of them has been checked as it reads now."""
    checked = [f for f in fared if f is not None]
    if not checked:
        return None
    passed = {release for f in checked for release, ok in f.items() if ok}
    failed = {release for f in checked for release, ok in f.items() if not ok}
    return passed - failed


def _section_of(index: int, starts: list[int], cells: int) -> range:
    """The cells of the section that cell ``index`` is in (``starts``: the cells that open
    a section); before the first section, every cell of the chapter."""
    before = [start for start in starts if start <= index]
    if not before:
        return range(cells)
    return range(before[-1], min((s for s in starts if s > index), default=cells))


def _comments(source: str) -> str:
    """A code cell's comments as one text (``#`` and the indentation of continuation
    lines dropped), so that a range broken over two lines reads whole."""
    import io
    import tokenize

    try:
        found = [
            token.string
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):
        found = [line.strip() for line in source.splitlines() if line.lstrip().startswith("#")]
    return " ".join(comment.lstrip("#").strip() for comment in found)


# ------------------------------------------------------------------ scope: universal words

UNIVERSAL = re.compile(r"\b(every|all|always|never|any|no other)\b", re.IGNORECASE)
"""Words that make a claim about a whole set of cases."""
EXEMPTION = "# Whole domain:"
"""A comment in a claim cell saying why its one case is the whole domain of a universal
claim (reviewed like any other sentence): ``# Whole domain: a bool has two values``."""


def _covers_a_collection(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension | ast.While):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            # all(...) / any(...) and tensor-wide .all()/.any()/.equal checks
            if name in ("all", "any", "equal", "allclose", "assert_close", "array_equal"):
                return True
    return False


def universal_problems(cell: dict[str, Any], where: str) -> list[str]:
    """Rule 6c: a claim using a universal word is checked over a collection of cases (a
    loop, a comprehension, ``all``/``any``, a whole-tensor comparison) or carries an
    :data:`EXEMPTION` comment saying why one case is the whole domain."""
    source = memobook.source(cell)
    claims = [c for c in cell_claims(source) if UNIVERSAL.search(c)]
    if not claims or EXEMPTION in source:
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    if _covers_a_collection(tree):
        return []
    return [
        f"{where}: the claim {text[:60]!r}... says {UNIVERSAL.search(text).group()!r} "  # type: ignore[union-attr]
        f"but checks one case: loop over the cases it names, or add '{EXEMPTION} <why>'"
        for text in claims
    ]


def scope_problems(nb: dict[str, Any], name: str, matrix: Any = None) -> list[str]:
    """Every breach of the scope rules in a notebook: ranges of releases not checked in
    full (6a), version branches unchecked or never taken (6b), universal claims checked
    on one case (6c). ``name``: the chapter's topic (its key in the matrix's record);
    ``matrix``: a :class:`~memobook.record.MatrixRecord` (``book/_data/matrix.json`` by
    default).

    A range is judged where it is written (rule 6a): in a claim cell's comments (its
    claims, its Cause and Fix), against the matrix's runs of that cell as it reads now
    (:func:`cell_releases`); in prose (a markdown cell not tagged ``context``, or the
    comments of a code cell without claims), against the claim cells of its section
    (from its ``## `` heading to the next; before the first, the whole chapter): the
    releases on which one of them passed and none failed. What no run has checked as it
    reads now (a new chapter, a cell whose code changed) is judged against the releases
    the matrix ran at all, until the matrix runs it."""
    from memobook.matrix import releases
    from memobook.record import MatrixRecord, minor, version_key

    record = MatrixRecord.read() if matrix is None else matrix
    listed = sorted((minor(r.torch) for r in releases() if r.torch), key=version_key)
    floor, newest = listed[0], listed[-1]
    ran = record.torch_minors()
    unrun = "the version matrix never ran"
    versions = sorted({run.torch for run in record.runs.values()}, key=version_key)
    cells = nb["cells"]
    fared = {
        index: cell_releases(cell, name, record)
        for index, cell in enumerate(cells)
        if cell["cell_type"] == "code" and cell_claims(memobook.source(cell))
    }
    starts = [index for index, _ in memobook.sections(nb)]
    problems: list[str] = []
    for index, cell in enumerate(cells):
        where = f"{name} cell {index}"
        text = memobook.source(cell)
        if cell["cell_type"] == "markdown":
            if memobook.CONTEXT_TAG in memobook.tags(cell):
                continue
        elif cell["cell_type"] == "code":
            text = _comments(text)
        else:
            continue
        if index in fared:
            own = fared[index]
            checked = None if own is None else {r for r, ok in own.items() if ok}
            whose = "no run of the version matrix passed this cell (as it reads now) on"
        else:
            section = _section_of(index, starts, len(cells))
            checked = _section_releases([f for i, f in fared.items() if i in section])
            whose = (
                "no run of the version matrix passed the claim cells of its section "
                "(as they read now) on"
            )
        if checked is None:
            checked, whose = ran, unrun
        ranged = range_problems(text, where, checked, floor, newest, whose)
        problems += ranged
        if not ranged:  # a failed range names its missing releases already
            problems += named_release_problems(text, where, checked, whose)
        if index in fared:
            if memobook.GPU_TAG in memobook.tags(cell):  # the CPU runs skip it
                on_gpu = gpu_runs(cell, name, record)
                problems += branch_problems(cell, where, on_gpu, "that ran this `gpu` cell")
            else:
                problems += branch_problems(cell, where, versions)
            problems += universal_problems(cell, where)
    return problems

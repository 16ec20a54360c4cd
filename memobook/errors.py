"""The Errors and What changed pages, generated from the book (one owner: the chapters).

**Errors**: every error a claim cell provokes with ``raises(Type, match=...)``, keyed by its
message. The message as the pinned stack prints it comes from the cell's stored output
(``raises`` prints ``Type: first line``); the messages of the other releases come from
the version matrix, which notes what each ``raises`` caught (``MEMO_RAISED``,
:func:`memobook.record.gather_raised`). A cause and a fix are read from comments written
in the cell just above the ``with raises(...)``::

    # Cause: the two operands live on different devices.
    # Fix: move one of them first, `x.to(y.device)`.
    with raises(RuntimeError, match="Expected all tensors to be on the same device"):
        ...

(a comment line starting ``#   `` continues the one above it).

**What changed**: every claim cell that branches on the torch version (an ``if`` on
``torch.__version__``, :func:`memobook.claims.version_branches`), with the releases of the
matrix that took each branch, grouped by the release where the behaviour changed (the
first release after a run of releases that took the other branch), newest first; each
labelled by the claims the branch is about
(:meth:`memobook.claims.VersionBranch.claims_about`), not the cell's first claim.

:func:`errors` and :func:`changes` return plain data; :func:`errors_text` and
:func:`changes_text` render it as text (the golden tests compare those); the site's
directives (:mod:`memobook.site`) render the same data as pages.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

import memobook
from memobook.record import MatrixRecord, gpu_mark, minor, release_spans, source_digest, version_key

_FIRST_LINE = re.compile(r"^(\w+(?:\.\w+)*): (.*)$")


@dataclass
class ErrorEntry:
    """One ``raises`` check of a claim cell."""

    chapter: str
    """The chapter's topic (``views``)."""
    docname: str
    cell_id: str
    types: tuple[str, ...]
    """The exception types the check expects, as written (``torch.OutOfMemoryError``)."""
    match: str
    message: str
    """``Type: first line`` as the stored output shows it (the pinned stack), or ``""``."""
    cause: str = ""
    fix: str = ""
    releases: dict[str, list[str]] = field(default_factory=dict)
    """Each message (``Type: first line``) the matrix saw, with the runs that printed it
    (``2.15 py3.11``), oldest first."""
    gpu_run: str = ""
    """For a ``gpu`` cell whose stored output is its GPU run's (:func:`~memobook.record.gpu_mark`):
    that run (``torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3, 2026-11-26``)."""

    @property
    def names(self) -> set[str]:
        """The exception classes' own names (``OutOfMemoryError``)."""
        return _class_names(self.types)

    @property
    def key(self) -> str:
        """What the entry is sorted and found by: its message, else its pattern."""
        return self.message or f"{'/'.join(sorted(self.names))}: /{self.match}/"


def _class_names(types: tuple[str, ...]) -> set[str]:
    """``("torch.OutOfMemoryError", "KeyError")`` -> ``{"OutOfMemoryError", "KeyError"}``."""
    return {t.rsplit(".", 1)[-1] for t in types}


def _comment_block(lines: list[str], line: int) -> dict[str, str]:
    """The ``# Cause:`` and ``# Fix:`` comments right above source line ``line`` (1-based)."""
    block: list[str] = []
    index = line - 2
    while index >= 0 and lines[index].lstrip().startswith("#"):
        block.insert(0, lines[index].strip())
        index -= 1
    return {label.lower(): text for label, text in _labelled(block, ("Cause", "Fix")).items()}


def _raises_calls(source: str) -> list[tuple[int, tuple[str, ...], str]]:
    """Each ``with raises(Types, match="literal")`` of ``source``: its line, the types as
    written and the pattern. Checks whose pattern is not a literal are left out."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.With):
            continue
        for item in node.items:
            call = item.context_expr
            if not isinstance(call, ast.Call) or not call.args:
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else None
            if isinstance(call.func, ast.Name):
                name = call.func.id
            if name != "raises":
                continue
            match = next((k.value for k in call.keywords if k.arg == "match"), None)
            if not (isinstance(match, ast.Constant) and isinstance(match.value, str)):
                continue
            first = call.args[0]
            elts = first.elts if isinstance(first, ast.Tuple) else [first]
            found.append((node.lineno, tuple(ast.unparse(e) for e in elts), match.value))
    return sorted(found)


def _printed_lines(cell: dict[str, object]) -> list[str]:
    lines: list[str] = []
    outputs = cell.get("outputs", [])
    assert isinstance(outputs, list)
    for output in outputs:
        if isinstance(output, dict) and output.get("output_type") == "stream":
            lines += memobook.source({"source": output.get("text", "")}).splitlines()
    return lines


def _exception_class(name: str) -> type | None:
    """Python's or torch's exception class named ``name`` (``torch.`` optional), or None."""
    short = name.removeprefix("torch.")
    kind = getattr(builtins, short, None)
    if kind is None:
        import torch

        kind = getattr(torch, short, None)
    return kind if isinstance(kind, type) and issubclass(kind, BaseException) else None


def _is_a(printed: str, names: set[str]) -> bool:
    """Whether an exception printed as ``printed`` is one of ``names`` or a subclass of
    one, for Python's and torch's own exceptions (``NotImplementedError`` and, on a GPU,
    ``AcceleratorError`` are ``RuntimeError``s)."""
    if printed in names:
        return True
    kind = _exception_class(printed)
    bases = [_exception_class(n) for n in names]
    return kind is not None and any(b is not None and issubclass(kind, b) for b in bases)


def _stored_messages(lines: list[str], names: set[str], pattern: str) -> list[str]:
    """Every distinct printed ``Type: first line`` the check's types and pattern match
    (a check in a loop prints one per case), in order."""
    found: list[str] = []
    for line in lines:
        parts = _FIRST_LINE.match(line)
        if not parts or not _is_a(parts.group(1), names) or line in found:
            continue
        try:
            if re.search(pattern, parts.group(2)):
                found.append(line)
        except re.error:
            return []
    return found


def _same_error(one: str, other: str) -> bool:
    """Whether two printed messages are one error in two wordings: the same text with
    its numbers and quoted names taken out (a check in a loop prints several errors)."""

    def shape(text: str) -> str:
        return re.sub(r"\d+|'[^']*'|\"[^\"]*\"", "#", text)

    return shape(one) == shape(other)


def _wordings(seen: list[str], message: str) -> list[str]:
    """Which of the messages a run caught for a check's pattern are this entry's error:
    those worded as ``message`` but for numbers and quoted names; where none is (the
    wording changed), the one closest to it. Other checks with the same pattern, and the
    other cases of a check in a loop, caught the rest."""
    if not message:
        return seen
    same = [text for text in seen if _same_error(text, message)]
    if same or not seen:
        return same
    return [max(seen, key=lambda text: difflib.SequenceMatcher(None, text, message).ratio())]


def _run_name(torch: str, python: str) -> str:
    return f"{minor(torch)} py{minor(python)}"


def errors(root: Path | None = None, matrix: MatrixRecord | None = None) -> list[ErrorEntry]:
    """Every ``raises`` check of every claim cell of the book at ``root``, in reading
    order of the chapters, alphabetical by message within each."""
    from memobook.claims import cell_claims

    base = memobook.ROOT if root is None else root
    record = MatrixRecord() if matrix is None else matrix
    entries: list[ErrorEntry] = []
    for chapter in memobook.chapters(base):
        found = []
        for cell in memobook.code_cells(chapter.load()):
            source = memobook.source(cell)
            if not cell_claims(source):
                continue
            lines = source.splitlines()
            printed = _printed_lines(cell)
            for line, types, pattern in _raises_calls(source):
                if not any(name[:1].isupper() for name in _class_names(types)):
                    continue  # a type held in a variable (`raises(refusal, ...)`): unknown
                notes = _comment_block(lines, line)
                names = _class_names(types)
                messages = _stored_messages(printed, names, pattern) or [""]
                for message in messages:
                    entry = ErrorEntry(
                        chapter.name,
                        chapter.docname,
                        str(cell.get("id", "")),
                        types,
                        pattern,
                        message,
                        notes.get("cause", ""),
                        notes.get("fix", ""),
                    )
                    mark = gpu_mark(cell)
                    if mark is not None:
                        entry.gpu_run = (
                            f"torch {mark.torch} on {mark.device}, {mark.executed.split()[0]}"
                        )
                    for run in record.sorted_runs():
                        seen = [
                            f"{kind}: {text}"
                            for kind, text in run.raised.get(pattern, [])
                            if _is_a(kind, names)
                        ]
                        for text in _wordings(seen, message):
                            entry.releases.setdefault(text, []).append(
                                _run_name(run.torch, run.python)
                            )
                    found.append(entry)
        unique: dict[tuple[str, str], ErrorEntry] = {}
        for entry in found:  # the same check in a loop or twice in a cell: once
            unique.setdefault((entry.key, entry.cell_id), entry)
        entries += sorted(unique.values(), key=lambda e: e.key.lower())
    return entries


def _spans(runs: list[str]) -> str:
    """``["2.8 py3.11", "2.9 py3.11", "2.15 py3.12"]`` -> ``2.8–2.9 (py3.11); 2.15 (py3.12)``."""
    by_python: dict[str, list[str]] = {}
    for run in runs:
        torch, python = run.split(" ")
        by_python.setdefault(python, []).append(torch)
    return "; ".join(f"{release_spans(minors)} ({python})" for python, minors in by_python.items())


def span_text(runs: list[str]) -> str:
    """The runs as torch release spans per Python, or ``no run yet``."""
    return f"torch {_spans(runs)}" if runs else "no run yet"


def release_text(entry: ErrorEntry) -> str:
    """How the releases of the version matrix printed the error, in one line."""
    if not entry.releases and entry.gpu_run:
        return (
            f"As the book's GPU run printed it ({entry.gpu_run}); the version matrix runs on CPU."
        )
    if not entry.releases:
        return "Not yet caught by the version matrix."
    if len(entry.releases) == 1:
        (runs,) = entry.releases.values()
        return f"The same message on {span_text(runs)}."
    return " ".join(
        f"On {span_text(runs)}: {m}{'' if m.endswith('.') else '.'}"
        for m, runs in entry.releases.items()
    )


def errors_text(entries: list[ErrorEntry]) -> str:
    """The Errors page as text (what the golden test compares)."""
    out: list[str] = []
    chapter = None
    for entry in entries:
        if entry.chapter != chapter:
            chapter = entry.chapter
            out.append(f"## {chapter}")
        out.append(f"- {entry.key}  [{entry.docname}#claim-{entry.cell_id}]")
        if entry.cause:
            out.append(f"  Cause: {entry.cause}")
        if entry.fix:
            out.append(f"  Fix: {entry.fix}")
        out.append(f"  {release_text(entry)}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------- what changed


@dataclass
class Change:
    """A claim cell's ``if`` on the torch version, and the releases that took each side."""

    chapter: str
    docname: str
    cell_id: str
    claims: tuple[str, ...]
    """The claims of the cell that the branch is about
    (:meth:`memobook.claims.VersionBranch.claims_about`)."""
    test: str
    """The condition, as written (``torch.__version__ >= "2.13"``)."""
    then_runs: list[str] = field(default_factory=list)
    else_runs: list[str] = field(default_factory=list)

    def runs(self, side: str) -> list[str]:
        """The runs that took ``side`` (``then`` or ``else``)."""
        return self.then_runs if side == "then" else self.else_runs

    @property
    def changed_in(self) -> str:
        """The first minor release (any Python) after a release that took the other
        side, where the sides split the releases in two at consecutive minor releases
        that both ran; else ``""``."""
        sides: dict[str, set[str]] = {}
        for side, runs in (("then", self.then_runs), ("else", self.else_runs)):
            for run in runs:
                sides.setdefault(run.split(" ")[0], set()).add(side)
        ordered = sorted(sides, key=version_key)
        if any(len(s) > 1 for s in sides.values()) or not ordered:
            return ""
        switches = [(a, b) for a, b in itertools.pairwise(ordered) if sides[a] != sides[b]]
        if len(switches) != 1:
            return ""
        before, after = switches[0]  # exact only where the two minor releases both ran
        consecutive = int(after.split(".")[1]) == int(before.split(".")[1]) + 1
        return after if consecutive else ""


def changes(root: Path | None = None, matrix: MatrixRecord | None = None) -> list[Change]:
    """Every version branch of the book's claim cells, with the runs that took each side
    (only runs that passed the cell as it reads now; for a ``gpu`` cell, its GPU run,
    named ``2.11 GPU``, not the matrix's CPU runs, which skip it), newest change first;
    branches that split the releases otherwise (one release alone, say) come last."""
    from memobook.claims import cell_claims, version_branches

    base = memobook.ROOT if root is None else root
    record = MatrixRecord() if matrix is None else matrix
    found: list[Change] = []
    for chapter in memobook.chapters(base):
        for cell in memobook.code_cells(chapter.load()):
            source = memobook.source(cell)
            claims = cell_claims(source)
            branches = version_branches(source)
            if not claims or not branches:
                continue
            cell_id = str(cell.get("id", ""))
            digest = source_digest(source)
            gpu = gpu_mark(cell)
            mine: list[Change] = []
            for index, branch in enumerate(branches):
                change = Change(
                    chapter.name,
                    chapter.docname,
                    cell_id,
                    tuple(branch.claims_about(claims)),
                    f"if {branch.test}",
                )
                for run, outcome in record.cell_runs(chapter.name, cell_id, digest):
                    # Only a run that passed the cell took a side: the matrix also
                    # notes the side of a `gpu` cell it skipped (no CUDA there).
                    if outcome.outcome == "passed" and index < len(outcome.branches):
                        side = outcome.branches[index]
                        change.runs(side).append(_run_name(run.torch, run.python))
                if gpu is not None:  # a gpu cell: its GPU run passed it as it reads now
                    side = branch.taken(gpu.torch)
                    change.runs(side).append(f"{minor(gpu.torch)} GPU")
                # A cell that branches on the same test several times is one change,
                # unless the runs took the branches differently.
                if not any(
                    (c.test, c.then_runs, c.else_runs)
                    == (change.test, change.then_runs, change.else_runs)
                    for c in mine
                ):
                    mine.append(change)
            found += mine
    return sorted(
        found,
        key=lambda c: (c.changed_in == "", [-n for n in version_key(c.changed_in or "0")]),
    )


# -------------------------------------------------------------------------- deprecations

_WARNING_CLASSES = (
    "DeprecationWarning",
    "FutureWarning",
    "PendingDeprecationWarning",
    "UserWarning",
)


@dataclass
class Deprecation:
    """A claim cell that checks a deprecation warning, read from its comments::

        # Deprecated: `x.T` on a tensor that is not 2-D.
        # Use: `x.mT`, or `x.permute(...)` with the order spelled out.

    The block sits at the top level of the cell, right above the code that provokes and
    checks the warning; the warning's class and text are what that code (from the block
    to the end of the cell) checks: the warning classes it names, and each string it
    looks for in a message (``"..." in str(w.message)``)."""

    chapter: str
    docname: str
    cell_id: str
    claim: str
    old: str
    new: str
    categories: tuple[str, ...]
    texts: tuple[str, ...]
    runs: list[str] = field(default_factory=list)
    """The matrix runs that passed the cell as it reads now (``2.15 py3.11``)."""
    began: str = ""
    """The release the cell's version branch dates (:attr:`Change.changed_in`), or ``""``."""

    @property
    def kind(self) -> str:
        """The warning classes the check names (``FutureWarning``), or ``a warning``."""
        return " or ".join(self.categories) if self.categories else "a warning"


def _labelled(lines: list[str], labels: tuple[str, ...]) -> dict[str, str]:
    """Every ``# Label: text`` comment of ``lines`` whose label is in ``labels`` (the
    first of each), continued by the ``#   `` lines right after it."""
    found: dict[str, str] = {}
    current = None
    for line in lines:
        text = line.strip()
        label = re.match(r"#\s*(\w+):\s*(.*)$", text)
        if label and label.group(1) in labels and label.group(1) not in found:
            current = label.group(1)
            found[current] = label.group(2).strip()
        elif current and text.startswith("#   "):
            found[current] += " " + text[1:].strip()
        else:
            current = None
    return found


def _warning_checks(source: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The warning classes ``source`` names and the strings it looks for in messages."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return (), ()
    categories: set[str] = set()
    texts: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _WARNING_CLASSES:
            categories.add(node.id)
        elif isinstance(node, ast.Constant) and node.value in _WARNING_CLASSES:
            categories.add(str(node.value))
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
            and isinstance(node.ops[0], ast.In)
            and re.search(r"\bm\b|message", ast.unparse(node.comparators[0]))
            and node.left.value not in texts
        ):
            texts.append(node.left.value)
    return tuple(sorted(categories)), tuple(texts)


def deprecations(root: Path | None = None, matrix: MatrixRecord | None = None) -> list[Deprecation]:
    """Every claim cell with a ``# Deprecated:`` comment, in the book's order."""
    from memobook.claims import cell_claims

    base = memobook.ROOT if root is None else root
    record = MatrixRecord() if matrix is None else matrix
    dated: dict[tuple[str, str], str] = {}
    for change in changes(base, record):  # a cell with several branches: the earliest
        if change.changed_in:
            key = (change.chapter, change.cell_id)
            dated[key] = min(dated.get(key, change.changed_in), change.changed_in, key=version_key)
    found: list[Deprecation] = []
    for chapter in memobook.chapters(base):
        for cell in memobook.code_cells(chapter.load()):
            source = memobook.source(cell)
            labels = _labelled(source.splitlines(), ("Deprecated", "Use"))
            claims = cell_claims(source)
            if "Deprecated" not in labels or not claims:
                continue
            cell_id = str(cell.get("id", ""))
            lines = source.splitlines()
            start = next(i for i, t in enumerate(lines) if re.match(r"#\s*Deprecated:", t))
            categories, texts = _warning_checks("\n".join(lines[start:]))
            entry = Deprecation(
                chapter.name, chapter.docname, cell_id, claims[0], labels["Deprecated"],
                labels.get("Use", ""), categories, texts,
                began=dated.get((chapter.name, cell_id), ""),
            )  # fmt: skip
            digest = source_digest(source)
            for run, outcome in record.cell_runs(chapter.name, cell_id, digest):
                if outcome.outcome == "passed":
                    entry.runs.append(_run_name(run.torch, run.python))
            found.append(entry)
    return found


def deprecation_when(entry: Deprecation) -> str:
    """When the warning is known to come, in words."""
    if entry.began:
        return f"Began in torch {entry.began} (the version branch of its check)"
    if entry.runs:
        return f"Checked on {span_text(entry.runs)}"
    return "Not yet checked by the version matrix as the cell reads now"


def deprecation_warning_text(entry: Deprecation) -> str:
    """The warning as the cell checks it: its class(es) and the text it looks for."""
    kind = entry.kind
    said = "; ".join(f'"{t}"' for t in entry.texts)
    return f"{kind}: {said}" if said else kind


def changes_text(found: list[Change], deprecated: list[Deprecation] | None = None) -> str:
    """The What changed page as text (what the golden test compares)."""
    out: list[str] = []
    heading = None
    for change in found:
        title = f"torch {change.changed_in}" if change.changed_in else "other splits"
        if title != heading:
            heading = title
            out.append(f"## {title}")
        out.append(f"- {' '.join(change.claims)}  [{change.docname}#claim-{change.cell_id}]")
        out.append(f"  {change.test}: {span_text(change.then_runs)}")
        out.append(f"  otherwise: {span_text(change.else_runs)}")
    if deprecated:
        out.append("## deprecations")
    for entry in deprecated or []:
        out.append(f"- {entry.old}  [{entry.docname}#claim-{entry.cell_id}]")
        out.append(f"  use: {entry.new}")
        out.append(f"  warning: {deprecation_warning_text(entry)}")
        out.append(f"  {deprecation_when(entry)}")
    return "\n".join(out) + "\n"


def main() -> None:  # pragma: no cover - a look at the pages' content in a terminal
    matrix = MatrixRecord.read()
    found = errors(matrix=matrix)
    print(errors_text(found))
    print(f"{len(found)} checks, {len({e.key for e in found})} distinct errors\n")
    print(changes_text(changes(matrix=matrix), deprecations(matrix=matrix)))


if __name__ == "__main__":
    main()

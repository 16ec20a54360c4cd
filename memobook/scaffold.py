"""Start a chapter with everything a chapter must have (``nox -s chapter``).

Usage::

    python -m memobook.scaffold TOPIC --title "Title" [--part "Caption"] [--no-execute]
    python -m memobook.scaffold --sync

``TOPIC`` (a lowercase Python identifier) names the files it writes:

- ``book/TOPIC.ipynb``: the title, the setup cell, an import cell, and a first section
  whose cell states one claim and checks it; the standard kernel metadata and a
  placeholder for the one-line description the landing page lists;
- ``pytorch_memo/TOPIC.py``: a module with one example helper written the book's way
  (typed, keyword-only options, an error naming the argument, a doctest);
- ``tests/test_TOPIC.py``: that helper tested against plain torch, with hypothesis;
- an entry in ``_toc.yml``, at the end of the part ``--part`` (default: the last
  numbered part);

then executes the notebook so its outputs are stored. The result passes ``nox`` as it
is; replace the example content with the chapter's own.

It writes every file or none. One scaffold runs at a time per book (an ``fcntl`` lock,
``_build/scaffold/lock``), which checks under the lock that the topic is free: no page,
file or ``_toc.yml`` entry has it. A journal (``_build/scaffold/journal.json``) lists the
files before any is written; the notebook is executed under a hidden name and linked
into place last. A failure, SIGINT or SIGTERM rolls back what was written (``nox``'s
Ctrl-C included); after a SIGKILL, the next scaffold or ``--sync`` of the book settles
it from the journal (completes a chapter whose notebook is in place, else removes its
files and entry) and says so. A topic is refused, with the rule it breaks, when it is
not a lowercase identifier, is longer than 40 characters, is a name Windows reserves
(``con``, ``nul``, ``com1``...) or names an existing page (``intro``, ``memo``); the
title must be one printable line, and is escaped where it is written into Python.

``--sync`` rewrites every chapter's setup cell and kernel metadata from the model
(:func:`memobook.setup_cell_source`, :data:`memobook.KERNELSPEC`): neither has outputs,
so nothing needs executing again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import keyword
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

import memobook
from memobook._guard import (
    FileChangedError,
    Interrupted,
    book_lock,
    create_new,
    die_with_parent,
    digest,
    interruptible,
    remove,
    replace,
    replace_if_unchanged,
    signals_blocked,
)
from pytorch_memo._temporaries import remove_stale_temporaries

TOPIC = re.compile(r"[a-z][a-z0-9_]*")


class ScaffoldError(ValueError):
    """The topic, title or part cannot make a chapter; nothing was written."""


def _notebook(topic: str, title: str, builds_on: memobook.Chapter | None) -> nbformat.NotebookNode:
    link = (
        f" It builds on [{builds_on.title}]({builds_on.path.name})."
        if builds_on is not None
        else ""
    )
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
    nb.metadata["language_info"] = memobook.language_info()
    nb.metadata[memobook.DESCRIPTION_KEY] = "What the chapter teaches, in one line."
    setup = nbformat.v4.new_code_cell(memobook.setup_cell_source())
    setup.metadata["tags"] = [memobook.HIDE_INPUT_TAG]
    check = nbformat.v4.new_code_cell(
        "# Claim: a tensor of shape `(2, 3)` holds six elements, as `numel()` counts.\n"
        "assert torch.zeros(2, 3).numel() == element_count((2, 3)) == 6"
    )
    memobook.fold_check(check)
    summary = nbformat.v4.new_markdown_cell(
        f"## {memobook.SUMMARY_TITLE}\n\n"
        "What a reader should remember, as imperative lines; each is checked above "
        "([the memo](memo.md) links every claim to its cell).\n\n"
        "- Count a tensor's elements with `numel()`.\n\n"
        "Pasted an error from your terminal? [Errors](errors.md) lists every error the book\n"
        "provokes, by message; [What changed](changes.md) lists what differs between torch "
        "releases."
    )
    summary.metadata["tags"] = [memobook.CONTEXT_TAG]
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            f"# {title}\n\nWhat this chapter shows, in two or three sentences.{link}\n\n"
            f"The helpers come from `pytorch_memo.{topic}`."
        ),
        setup,
        nbformat.v4.new_code_cell(
            f"import torch\n\nfrom pytorch_memo.{topic} import element_count\n\ntorch.__version__"
        ),
        nbformat.v4.new_markdown_cell("## A first section"),
        nbformat.v4.new_code_cell("t = torch.zeros(2, 3)\nt.numel()"),
        nbformat.v4.new_markdown_cell(
            "A section opens with a short cell whose output the reader sees; the prose then "
            "explains it, one fact at a time; the claim cell after it states the fact (its "
            "first comment line) and checks it, folded on the site when long. A tensor of "
            "shape `(2, 3)` holds six elements, as `numel()` counts."
        ),
        check,
        summary,
    ]
    return nb  # type: ignore[no-any-return]  # nbformat is unannotated


def _module(topic: str, title: str) -> str:
    return f'''"""What ``pytorch_memo.{topic}`` holds, in one line."""

from __future__ import annotations

from collections.abc import Sequence

from pytorch_memo._checks import check_int

__all__ = ["element_count"]


def element_count(shape: Sequence[int]) -> int:
    """How many elements a tensor of ``shape`` holds (an example helper: replace it).

    Args:
        shape: the sizes of the dimensions, each an int >= 0.

    Returns:
        The product of the sizes (1 for ``()``, a scalar).

    Raises:
        TypeError: ``shape`` is not a sequence of ints.
        ValueError: a size is negative.

    Example:
        >>> element_count((2, 3))
        6
    """
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence):
        msg = f"shape must be a sequence of ints, got {{type(shape).__name__}}: {{shape!r}}"
        raise TypeError(msg)
    count = 1
    for index, size in enumerate(shape):
        count *= check_int(f"shape[{{index}}]", size, minimum=0)
    return count
'''


def _test(topic: str) -> str:
    return f'''"""pytorch_memo.{topic}, checked against plain torch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.{topic} import element_count


@given(st.lists(st.integers(0, 5), max_size=4))
def test_element_count_is_torchs_numel(shape: list[int]) -> None:
    assert element_count(shape) == torch.zeros(shape).numel()


@pytest.mark.parametrize(
    ("shape", "error", "message"),
    [
        ("23", TypeError, "shape must be a sequence of ints, got str"),
        ((2, -1), ValueError, r"shape\\[1\\] must be >= 0, got -1"),
        ((2, 1.5), TypeError, r"shape\\[1\\] must be an int, got float"),
    ],
)
def test_bad_shapes_are_named(shape: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        element_count(shape)  # type: ignore[arg-type]
'''


def _toc_with(text: str, docname: str, part: str | None, root: Path) -> str:
    """``_toc.yml``'s text with ``docname`` appended to a part (comments kept)."""
    captions = [
        (m.start(), m.group(1).strip())
        for m in re.finditer(r"^  - caption: (.+)$", text, re.MULTILINE)
    ]
    entries = {e.part: e for e in memobook.toc_entries(root) if e.numbered}
    if part is None:
        numbered = [c for c in memobook.toc(root)["parts"] if c.get("numbered")]
        if not numbered:
            msg = "_toc.yml has no numbered part: name one with --part"
            raise ScaffoldError(msg)
        part = str(numbered[-1]["caption"])
    starts = [start for start, caption in captions if caption == part]
    if not starts or part not in entries:
        known = [caption for _, caption in captions]
        msg = (
            f"part must be the caption of a numbered part of _toc.yml, one of {known}; got {part!r}"
        )
        raise ScaffoldError(msg)
    following = [start for start, _ in captions if start > starts[0]]
    end = following[0] if following else len(text)
    block = text[starts[0] : end]
    last = list(re.finditer(r"^      - file: .+\n", block, re.MULTILINE))
    if not last:
        msg = f"part {part!r} of _toc.yml lists no chapter to append after"
        raise ScaffoldError(msg)
    at = starts[0] + last[-1].end()
    return text[:at] + f"      - file: {docname}\n" + text[at:]


LONGEST_TOPIC = 40
"""The longest topic: it names three files, a module and the page's address."""

RESERVED = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{port}{n}" for port in ("com", "lpt") for n in range(10)]
)
"""File names Windows reserves (with any extension): a chapter named so cannot be checked
out there."""


def check_topic(topic: str) -> None:
    """Raise :class:`ScaffoldError`, naming the rule, unless ``topic`` can name a chapter
    (whether it is free is :func:`_check_free`'s question)."""
    if not isinstance(topic, str) or not TOPIC.fullmatch(topic) or keyword.iskeyword(topic):
        msg = f"topic must be a lowercase Python identifier such as 'data_loading', got {topic!r}"
        raise ScaffoldError(msg)
    if len(topic) > LONGEST_TOPIC:
        msg = (
            f"topic must be at most {LONGEST_TOPIC} characters (it names book/TOPIC.ipynb, "
            f"pytorch_memo/TOPIC.py, tests/test_TOPIC.py and the page's address), got "
            f"{len(topic)}: {topic[:20]!r}..."
        )
        raise ScaffoldError(msg)
    if topic in RESERVED:
        msg = (
            f"topic must not be a file name Windows reserves (CON, PRN, AUX, NUL, COM0-9, "
            f"LPT0-9, with any extension): the chapter could not be checked out there; "
            f"got {topic!r}"
        )
        raise ScaffoldError(msg)


def check_title(title: str) -> str:
    """``title`` stripped; :class:`ScaffoldError` unless it is one printable line."""
    if not isinstance(title, str) or not title.strip() or not title.strip().isprintable():
        msg = (
            "title must be one non-empty line of printable characters (no tab, newline or "
            f"other control character), got {title!r}"
        )
        raise ScaffoldError(msg)
    return title.strip()


def _check_free(topic: str, base: Path) -> None:
    """Raise :class:`ScaffoldError` if a page, file or table-of-contents entry has it."""
    pages = sorted(p for p in (base / "book").glob(f"{topic}.*") if not p.name.startswith("."))
    if pages:
        shown = [str(p.relative_to(base)) for p in pages]
        msg = (
            f"topic {topic!r} is taken: it names an existing page {shown} (a topic must "
            "not name a page of _toc.yml or a file in book/)"
        )
        raise ScaffoldError(msg)
    listed = {e.docname for e in memobook.toc_entries(base)}
    if f"book/{topic}" in listed:
        msg = f"topic {topic!r} is taken: _toc.yml lists book/{topic}"
        raise ScaffoldError(msg)
    files = (base / "pytorch_memo" / f"{topic}.py", base / "pytorch_memo" / topic)
    taken = [p for p in (*files, base / "tests" / f"test_{topic}.py") if os.path.lexists(p)]
    if taken:
        msg = f"topic {topic!r} is taken: {[str(p.relative_to(base)) for p in taken]} exist"
        raise ScaffoldError(msg)


# ------------------------------------------------------------------- lock and journal


def _state(base: Path) -> Path:
    return base / "_build" / "scaffold"


def _say(line: str) -> None:
    print(f"memobook.scaffold: {line}", file=sys.stderr, flush=True)


def _locked(base: Path) -> contextlib.AbstractContextManager[None]:
    """The book's lock: one scaffold (or ``--sync``) at a time."""
    lock = _state(base) / "lock"
    return book_lock(lock, waiting=f"waiting for another scaffold of this book ({lock})")


def _settle(base: Path, journal: dict[str, Any]) -> tuple[list[str], bool]:
    """Finish or undo what the journal's scaffold did; remove the journal; say what, and
    whether the chapter is complete.

    The notebook is the last file a scaffold makes: if it is there with the digest the
    journal records, the chapter is complete and stays. Otherwise every file the journal
    lists is removed if it still holds what the scaffold wrote (else kept, and said so),
    and the chapter's line leaves ``_toc.yml``.
    """
    topic = journal["topic"]
    notebook = base / journal["notebook"]
    staged = base / journal["staged"]
    done = journal.get("notebook_digest") is not None and (
        notebook.is_file() and digest(notebook.read_bytes()) == journal["notebook_digest"]
    )
    said = []
    with signals_blocked():
        remove(staged)
        if done:
            said.append(f"the chapter {topic!r} was complete; its journal is removed")
        else:
            removed, kept = [], []
            for name, expected in journal["created"].items():
                path = base / name
                if not path.is_file():
                    continue
                if digest(path.read_bytes()) == expected:
                    remove(path)
                    removed.append(name)
                else:
                    kept.append(name)
            if _remove_entry(base / "_toc.yml", f"      - file: book/{topic}\n".encode()):
                removed.append(f"the _toc.yml entry book/{topic}")
            said.append(
                f"rolled back the unfinished chapter {topic!r}: removed {removed or 'nothing'}"
            )
            if kept:
                said.append(f"kept {kept}: changed since the scaffold wrote them")
        for name in (*journal["created"], journal["staged"], journal["notebook"]):
            remove_stale_temporaries(base / name)
        remove(_state(base) / "journal.json")
    return said, done


def _remove_entry(toc: Path, line: bytes) -> bool:
    """Remove ``line`` from ``toc`` (once) without losing an edit saved meanwhile (tried
    again on the new text); whether it was there."""
    for _ in range(10):
        text = toc.read_bytes()
        if line not in text:
            return False
        try:
            replace_if_unchanged(toc, text.replace(line, b"", 1), expected=text)
        except FileChangedError:
            continue
        return True
    msg = f"{toc} keeps changing: its line {line.decode().strip()!r} could not be removed"
    raise FileChangedError(msg)


def recover(base: Path | None = None) -> list[str]:
    """Settle what a scaffold killed earlier (SIGKILL, a crash) left, from its journal;
    say what was done (nothing when no journal is left). Call it under the lock."""
    base = memobook.ROOT if base is None else base
    path = _state(base) / "journal.json"
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError:  # torn while being written: nothing was made before it was whole
        remove(path)
        return [f"removed a journal that was being written when its scaffold stopped: {path}"]
    said, _ = _settle(base, journal)
    return [f"a scaffold stopped before it finished: {line}" for line in said]


def _write_journal(base: Path, journal: dict[str, Any]) -> None:
    replace(_state(base) / "journal.json", (json.dumps(journal, indent=1) + "\n").encode())


# ------------------------------------------------------------------------ the scaffold


def new_chapter(
    topic: str,
    *,
    title: str,
    part: str | None = None,
    root: Path | None = None,
    execute: bool = True,
    say: Callable[[str], None] = _say,
) -> list[Path]:
    """Write a new chapter's files (see the module's docstring); return them.

    Every file or none: the files are recorded in a journal (``_build/scaffold/``) before
    any is written, the notebook is made last (executed under a hidden name, then linked
    into place), and a failure or SIGINT/SIGTERM rolls back what was written. After a
    SIGKILL, the next scaffold (or ``--sync``) of the book settles it from the journal
    and says so. One scaffold runs at a time per book (a lock in ``_build/scaffold/``).

    Raises:
        ScaffoldError: the topic is not a lowercase identifier, is too long, is a name
            Windows reserves, or names an existing page or file; the title is not one
            printable line; the part is not a numbered part. Nothing was written.
        Interrupted: SIGINT or SIGTERM; what was written was rolled back.
    """
    base = memobook.ROOT if root is None else root
    check_topic(topic)
    title = check_title(title)
    module_text = _module(topic, title)
    notebook = base / "book" / f"{topic}.ipynb"
    module = base / "pytorch_memo" / f"{topic}.py"
    test = base / "tests" / f"test_{topic}.py"
    staged = base / "book" / f".{topic}.scaffold-unfinished"
    toc_path = base / "_toc.yml"
    completed = False
    try:
        with interruptible(), _locked(base):
            for line in recover(base):
                say(line)
            _check_free(topic, base)
            toc_old = toc_path.read_bytes()
            toc_new = _toc_with(toc_old.decode("utf-8"), f"book/{topic}", part, base).encode()
            existing = memobook.chapters(base)
            nb = _notebook(topic, title, existing[0] if existing else None)
            files = {module: module_text.encode(), test: _test(topic).encode()}
            journal: dict[str, Any] = {
                "topic": topic,
                "created": {str(p.relative_to(base)): digest(data) for p, data in files.items()},
                "staged": str(staged.relative_to(base)),
                "notebook": str(notebook.relative_to(base)),
                "notebook_digest": None,
            }
            try:
                _write_journal(base, journal)
                for path, data in files.items():
                    create_new(path, data)
                replace_if_unchanged(toc_path, toc_new, expected=toc_old)
                remove(staged)
                create_new(staged, (nbformat.writes(nb) + "\n").encode())
                if execute:
                    from memobook.execute import execute as run

                    run(staged)
                final = staged.read_bytes()
                journal["notebook_digest"] = digest(final)
                _write_journal(base, journal)
                create_new(notebook, final)
                with signals_blocked():
                    remove(staged)
                    remove(_state(base) / "journal.json")
                    completed = True
            except BaseException:
                with signals_blocked():  # a second signal (nox's SIGTERM) waits for it
                    if not completed:
                        said, completed = _settle(base, journal)
                        for line in said:
                            say(line)
                raise
    except Interrupted:
        if not completed:
            raise  # rolled back above
        # the signal came once the chapter was complete: it stays, and is reported
    return [notebook, module, test, toc_path]


def sync(root: Path | None = None) -> list[Path]:
    """Rewrite every chapter's setup cell and kernel metadata from the model; return the
    notebooks that changed (a notebook edited meanwhile is left as it is: FileChangedError)."""
    base = memobook.ROOT if root is None else root
    changed = []
    with _locked(base):
        for line in recover(base):
            _say(line)
        for found in memobook.chapters(base):
            original = found.path.read_bytes()
            nb = nbformat.reads(original.decode("utf-8"), as_version=4)
            before = nbformat.writes(nb)
            cell = next(c for c in nb.cells if c.cell_type == "code")
            cell.source = memobook.setup_cell_source()
            cell.metadata["tags"] = [memobook.HIDE_INPUT_TAG]
            cell.outputs = []
            nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
            nb.metadata["language_info"] = memobook.language_info()
            if nbformat.writes(nb) != before:
                data = (nbformat.writes(nb) + "\n").encode()
                replace_if_unchanged(found.path, data, expected=original)
                changed.append(found.path)
    return changed


def _first_lines(error: BaseException, lines: int = 30) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    more = f"\n... ({len(text) - lines} more lines)" if len(text) > lines else ""
    return "\n".join(text[:lines]) + more


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.scaffold", description=__doc__)
    parser.add_argument("topic", nargs="?", help="the chapter's topic: book/TOPIC.ipynb")
    parser.add_argument("--title", help="the chapter's title")
    parser.add_argument("--part", help="the caption of the part it joins (default: the last)")
    parser.add_argument("--no-execute", action="store_true", help="do not execute the notebook")
    parser.add_argument("--sync", action="store_true", help="rewrite setup cells and metadata")
    parser.add_argument("--root", type=Path, help="the book's root (default: this repository)")
    args = parser.parse_args(argv)
    base = memobook.ROOT if args.root is None else args.root
    if os.environ.get("NOX_CURRENT_SESSION"):
        die_with_parent()  # a kill -9 of nox stops it too (it rolls back)
    if args.sync:
        for path in sync(base):
            print(f"synced {path.relative_to(base)}")
        return 0
    if args.topic is None or args.title is None:
        parser.error("give a TOPIC and --title (or --sync)")
    try:
        written = new_chapter(
            args.topic, title=args.title, part=args.part, root=base, execute=not args.no_execute
        )
    except ScaffoldError as error:
        parser.error(str(error))
    except Interrupted as stop:
        _say(f"stopped by {stop.name}: nothing of the chapter {args.topic!r} is left")
        return stop.exit_status
    except Exception as error:  # noqa: BLE001 - said in short, after the roll back
        _say(
            f"the chapter {args.topic!r} could not be made, and nothing of it is left:\n"
            + _first_lines(error)
        )
        return 1
    for path in written:
        print(f"wrote {path.relative_to(base)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start a chapter with everything a chapter must have (``nox -s chapter``).

Usage::

    python -m memobook.scaffold TOPIC --title "Title" [--part "Caption"] [--no-execute]
    python -m memobook.scaffold --sync

``TOPIC`` (a lowercase Python identifier) names the files it writes:

- ``book/TOPIC.ipynb``: the title, the setup cell, an import cell, and a first section
  whose cell states one claim and checks it; the standard kernel metadata;
- ``pytorch_memo/TOPIC.py``: a module with one example helper written the book's way
  (typed, keyword-only options, an error naming the argument, a doctest);
- ``tests/test_TOPIC.py``: that helper tested against plain torch, with hypothesis;
- an entry in ``_toc.yml``, at the end of the part ``--part`` (default: the last
  numbered part);

then executes the notebook so its outputs are stored. The result passes ``nox`` as it
is; replace the example content with the chapter's own.

``--sync`` rewrites every chapter's setup cell and kernel metadata from the model
(:func:`memobook.setup_cell_source`, :data:`memobook.KERNELSPEC`): neither has outputs,
so nothing needs executing again.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path

import nbformat

import memobook
from pytorch_memo._files import write_text

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
    setup = nbformat.v4.new_code_cell(memobook.setup_cell_source())
    setup.metadata["tags"] = [memobook.HIDE_INPUT_TAG]
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            f"# {title}\n\nWhat this chapter shows, in two or three sentences.{link}\n\n"
            f"The helpers come from `pytorch_memo.{topic}`."
        ),
        setup,
        nbformat.v4.new_code_cell(
            f"import torch\n\nfrom pytorch_memo.{topic} import element_count\n\ntorch.__version__"
        ),
        nbformat.v4.new_markdown_cell(
            "## A first section\n\n"
            "Prose explains one fact at a time; the cell after it states the fact as a claim "
            "(its first comment line) and checks it. A tensor of shape `(2, 3)` holds six "
            "elements, as `numel()` counts."
        ),
        nbformat.v4.new_code_cell(
            "# Claim: a tensor of shape `(2, 3)` holds six elements, as `numel()` counts.\n"
            "t = torch.zeros(2, 3)\n"
            "assert t.numel() == element_count((2, 3)) == 6\n"
            "t.numel()"
        ),
    ]
    return nb  # type: ignore[no-any-return]  # nbformat is unannotated


def _module(topic: str, title: str) -> str:
    return f'''"""What ``pytorch_memo.{topic}`` holds, in one line.

Used by the chapter *{title}*.
"""

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


def new_chapter(
    topic: str,
    *,
    title: str,
    part: str | None = None,
    root: Path | None = None,
    execute: bool = True,
) -> list[Path]:
    """Write a new chapter's files (see the module's docstring); return them.

    Raises:
        ScaffoldError: the topic is not a lowercase identifier, or is taken; the title
            is empty; the part is not a numbered part.
    """
    base = memobook.ROOT if root is None else root
    if not TOPIC.fullmatch(topic) or keyword.iskeyword(topic):
        msg = f"topic must be a lowercase Python identifier such as 'data_loading', got {topic!r}"
        raise ScaffoldError(msg)
    if not title.strip() or "\n" in title:
        msg = f"title must be one non-empty line, got {title!r}"
        raise ScaffoldError(msg)
    notebook = base / "book" / f"{topic}.ipynb"
    module = base / "pytorch_memo" / f"{topic}.py"
    test = base / "tests" / f"test_{topic}.py"
    taken = [p for p in (notebook, module, test) if p.exists()]
    if taken:
        msg = f"topic {topic!r} is taken: {[str(p.relative_to(base)) for p in taken]} exist"
        raise ScaffoldError(msg)
    toc_path = base / "_toc.yml"
    toc_text = _toc_with(toc_path.read_text(encoding="utf-8"), f"book/{topic}", part, base)
    existing = memobook.chapters(base)
    nbformat.write(_notebook(topic, title.strip(), existing[0] if existing else None), notebook)
    write_text(module, _module(topic, title.strip()))
    write_text(test, _test(topic))
    write_text(toc_path, toc_text)
    if execute:
        from memobook.execute import execute as run

        run(notebook)
    return [notebook, module, test, toc_path]


def sync(root: Path | None = None) -> list[Path]:
    """Rewrite every chapter's setup cell and kernel metadata from the model; return the
    notebooks that changed."""
    changed = []
    for found in memobook.chapters(root):
        nb = nbformat.read(found.path, as_version=4)
        before = nbformat.writes(nb)
        cell = next(c for c in nb.cells if c.cell_type == "code")
        cell.source = memobook.setup_cell_source()
        cell.metadata["tags"] = [memobook.HIDE_INPUT_TAG]
        cell.outputs = []
        nb.metadata["kernelspec"] = dict(memobook.KERNELSPEC)
        nb.metadata["language_info"] = memobook.language_info()
        if nbformat.writes(nb) != before:
            write_text(found.path, nbformat.writes(nb) + "\n")
            changed.append(found.path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.scaffold", description=__doc__)
    parser.add_argument("topic", nargs="?", help="the chapter's topic: book/TOPIC.ipynb")
    parser.add_argument("--title", help="the chapter's title")
    parser.add_argument("--part", help="the caption of the part it joins (default: the last)")
    parser.add_argument("--no-execute", action="store_true", help="do not execute the notebook")
    parser.add_argument("--sync", action="store_true", help="rewrite setup cells and metadata")
    args = parser.parse_args(argv)
    if args.sync:
        for path in sync():
            print(f"synced {path.relative_to(memobook.ROOT)}")
        return 0
    if args.topic is None or args.title is None:
        parser.error("give a TOPIC and --title (or --sync)")
    try:
        written = new_chapter(
            args.topic, title=args.title, part=args.part, execute=not args.no_execute
        )
    except ScaffoldError as error:
        parser.error(str(error))
    for path in written:
        print(f"wrote {path.relative_to(memobook.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

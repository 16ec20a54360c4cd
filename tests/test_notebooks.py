"""Hygiene of the stored chapters: run in order, no stray errors or machine paths, one
setup cell, the standard metadata, a one-line description, figures that say what they
show, known tags, and _toc.yml in step with book/. (Their outputs are checked by nbval
in `nox -s notebooks`.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import memobook

CHAPTERS = [c.path for c in memobook.chapters()]
MACHINE_PATH = re.compile(r"/root/|/home/\w+|/tmp/|/work/|/Users/\w+|[A-Z]:\\\\Users")


def test_there_are_chapters() -> None:
    assert CHAPTERS, "_toc.yml lists no chapter notebooks"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_cells_ran_in_order(path: Path) -> None:
    counts = [
        c["execution_count"]
        for c in memobook.code_cells(memobook.load(path))
        if memobook.GPU_TAG not in memobook.tags(c)
    ]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: run `nox -s execute -- {path}`"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_stored_errors_unless_tagged(path: Path) -> None:
    for i, cell in enumerate(memobook.code_cells(memobook.load(path))):
        errors = [o for o in cell.get("outputs", []) if o["output_type"] == "error"]
        if memobook.RAISES_TAG in memobook.tags(cell):
            assert errors, f"{path.name} code cell {i}: tagged raises-exception but raised nothing"
        else:
            assert not errors, f"{path.name} code cell {i}: stores an error"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_machine_paths_in_outputs(path: Path) -> None:
    for i, cell in enumerate(memobook.code_cells(memobook.load(path))):
        for output in cell.get("outputs", []):
            texts = [output.get("text", ""), *output.get("data", {}).values()]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text)
                match = MACHINE_PATH.search(text)
                assert match is None, f"{path.name} code cell {i} shows {match.group()!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_setup_cell_is_the_first_and_identical(path: Path) -> None:
    first = memobook.code_cells(memobook.load(path))[0]
    assert memobook.source(first) == memobook.setup_cell_source()
    assert memobook.tags(first) == [memobook.HIDE_INPUT_TAG], "the site folds the setup cell away"
    assert first["outputs"] == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_opens_with_a_title(path: Path) -> None:
    first = memobook.load(path)["cells"][0]
    assert first["cell_type"] == "markdown"
    assert memobook.source(first).startswith("# ")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_standard_kernel_and_language_metadata(path: Path) -> None:
    """JupyterLab opens a chapter without marking it modified when these are stored."""
    metadata = memobook.load(path)["metadata"]
    assert metadata["kernelspec"] == memobook.KERNELSPEC
    info = dict(metadata["language_info"])
    assert re.fullmatch(r"3\.\d+\.\d+", info.pop("version")), "the kernel's Python version"
    assert info == memobook.LANGUAGE_INFO


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_only_known_tags(path: Path) -> None:
    for i, cell in enumerate(memobook.load(path)["cells"]):
        unknown = set(memobook.tags(cell)) - set(memobook.TAGS)
        assert not unknown, f"{path.name} cell {i}: unknown tags {unknown}; known: {memobook.TAGS}"


def test_the_books_formatter_width_is_the_sites_column() -> None:
    ruff = tomllib.loads((memobook.BOOK / "ruff.toml").read_text())
    assert ruff["line-length"] == memobook.CODE_WIDTH


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_lines_fit_the_sites_column(path: Path) -> None:
    # ruff formats the book to this width but cannot split long strings or comments.
    long = [
        f"code cell {index}: {line.strip()[:50]}... ({len(line)} characters)"
        for index, cell in enumerate(memobook.code_cells(memobook.load(path)))
        for line in memobook.source(cell).splitlines()
        if len(line) > memobook.CODE_WIDTH
    ]
    assert not long, (
        f"lines longer than {memobook.CODE_WIDTH} characters scroll on the site: {long}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_says_what_it_teaches_in_one_line(path: Path) -> None:
    text = memobook.description_of(memobook.load(path))
    assert text, (
        f"{path.name}: its metadata needs {memobook.DESCRIPTION_KEY!r}: what the chapter "
        "teaches, in one line (the landing page lists it)"
    )
    assert "\n" not in text, text
    assert len(text) <= 160, text
    assert text.endswith("."), text


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_figure_says_what_it_shows(path: Path) -> None:
    from memobook.figures import figures

    silent = [f.cell for f in figures(memobook.load(path)) if not f.description]
    assert not silent, (
        f"{path.name} cells {silent} draw a figure with no title and no caption: write "
        "'# Figure: what it shows' in the cell (the site's alt text)"
    )


def test_toc_and_book_folder_agree() -> None:
    listed = [entry.docname for entry in memobook.toc_entries()]
    assert len(listed) == len(set(listed)), "a file is listed twice in _toc.yml"
    for entry in listed:
        found = list((memobook.ROOT / Path(entry).parent).glob(Path(entry).name + ".*"))
        assert found, f"_toc.yml lists {entry}, which does not exist"
    pages = {
        f"book/{p.stem}" for p in (*memobook.BOOK.glob("*.ipynb"), *memobook.BOOK.glob("*.md"))
    }
    missing = pages - set(listed)
    assert not missing, f"not in _toc.yml: {sorted(missing)}"


SUMMARY = f"## {memobook.SUMMARY_TITLE}"
NOTES = re.compile(
    r"\b(?:the|a|one|another|some|these|those|our|source|personal)\s+notes?\b", re.IGNORECASE
)


def _headings(cell: dict[str, object]) -> list[str]:
    return [line for line in memobook.source(cell).splitlines() if line.startswith("## ")]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_ends_with_its_summary(path: Path) -> None:
    cells = memobook.load(path)["cells"]
    sections = [
        (index, heading)
        for index, cell in enumerate(cells)
        if cell["cell_type"] == "markdown"
        for heading in _headings(cell)
    ]
    assert sections, f"{path.name} has no sections"
    index, last = sections[-1]
    assert last == SUMMARY, f"{path.name}: the last section must be {SUMMARY!r}, not {last!r}"
    from memobook.claims import cell_claims

    bare = [
        later
        for later in range(index + 1, len(cells))
        if cells[later]["cell_type"] == "code" and not cell_claims(memobook.source(cells[later]))
    ]
    assert not bare, (
        f"{path.name} cells {bare}: the summary shows what to do; setup and teardown code "
        "goes before it (a code cell there must prove a claim)"
    )
    summary = "".join(memobook.source(c) for c in cells[index:] if c["cell_type"] == "markdown")
    for page in ("errors.md", "changes.md"):
        assert f"]({page})" in summary, f"{path.name}: its summary must link {page}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_speaks_to_the_reader_not_to_notes(path: Path) -> None:
    # The book grew from notes the reader never saw: a chapter does not argue with them;
    # a common misconception is a "Common mistake" box in the reader's words.
    found = [
        f"cell {index}: ...{match.group()}..."
        for index, cell in enumerate(memobook.load(path)["cells"])
        for match in NOTES.finditer(memobook.source(cell))
    ]
    assert not found, f"{path.name} refers to notes the reader never saw: {found}"


def test_the_notes_rule_catches_what_it_names() -> None:
    for text in ("One of the source notes guessed", "as the notes say", "a note shows"):
        assert NOTES.search(text), text
    for text in ("notebook", "noted", "Notes on CUDA semantics (PyTorch docs)"):
        assert not NOTES.search(text), text


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_folded_cells_are_checks_or_the_setup_cell(path: Path) -> None:
    from memobook.claims import cell_claims

    cells = memobook.code_cells(memobook.load(path))
    for index, cell in enumerate(cells[1:], 1):
        cell_tags = memobook.tags(cell)
        if memobook.HIDE_INPUT_TAG not in cell_tags and memobook.CHECK_TAG not in cell_tags:
            continue
        where = f"{path.name} code cell {index}"
        assert memobook.CHECK_TAG in cell_tags, f"{where}: only checks (and setup) are folded"
        assert memobook.HIDE_INPUT_TAG in cell_tags, f"{where}: a check is folded (fold_check)"
        prompts = cell.get("metadata", {}).get("mystnb", {})
        assert prompts == memobook.CHECK_PROMPTS, f"{where}: use memobook.fold_check"
        assert cell_claims(memobook.source(cell)), f"{where}: a check proves a claim"


def test_fold_check_marks_a_cell_as_the_site_folds_it() -> None:
    cell: dict[str, object] = {"metadata": {"tags": ["gpu"]}}
    memobook.fold_check(cell)
    memobook.fold_check(cell)  # twice: no duplicate tags
    assert cell["metadata"] == {
        "tags": ["gpu", "check", "hide-input"],
        "mystnb": {"code_prompt_show": "Show the check", "code_prompt_hide": "Hide the check"},
    }

"""Hygiene of the stored chapters: run in order, no stray errors or machine paths, one
setup cell, the standard metadata, known tags, and _toc.yml in step with book/. (Their
outputs are checked by nbval in `nox -s notebooks`.)"""

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

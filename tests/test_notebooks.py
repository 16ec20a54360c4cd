"""Hygiene of the stored chapters: run in order, no stray errors or machine paths, one
setup cell, and _toc.yml in step with book/. (Their outputs are checked by nbval in
`nox -s notebooks`.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests import bookfiles

CHAPTERS = bookfiles.chapters()
# ruff formats the book to this width (the site's column) but cannot split long
# strings or comments.
WIDTH = tomllib.loads((bookfiles.ROOT / "book" / "ruff.toml").read_text())["line-length"]
MACHINE_PATH = re.compile(r"/root/|/home/\w+|/tmp/|/work/|/Users/\w+|[A-Z]:\\\\Users")


def test_there_are_chapters() -> None:
    assert CHAPTERS, "book/ holds no chapter notebooks"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_cells_ran_in_order(path: Path) -> None:
    counts = [
        c["execution_count"]
        for c in bookfiles.code_cells(bookfiles.load(path))
        if "gpu" not in bookfiles.tags(c)
    ]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: run `nox -s execute -- {path}`"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_stored_errors_unless_tagged(path: Path) -> None:
    for i, cell in enumerate(bookfiles.code_cells(bookfiles.load(path))):
        errors = [o for o in cell.get("outputs", []) if o["output_type"] == "error"]
        if "raises-exception" in bookfiles.tags(cell):
            assert errors, f"{path.name} code cell {i}: tagged raises-exception but raised nothing"
        else:
            assert not errors, f"{path.name} code cell {i}: stores an error"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_machine_paths_in_outputs(path: Path) -> None:
    for i, cell in enumerate(bookfiles.code_cells(bookfiles.load(path))):
        for output in cell.get("outputs", []):
            texts = [output.get("text", ""), *output.get("data", {}).values()]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text)
                match = MACHINE_PATH.search(text)
                assert match is None, f"{path.name} code cell {i} shows {match.group()!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_setup_cell_is_the_first_and_identical(path: Path) -> None:
    first = bookfiles.code_cells(bookfiles.load(path))[0]
    assert bookfiles.source(first) == bookfiles.setup_cell_source()
    assert bookfiles.tags(first) == ["hide-input"], "the site folds the setup cell away"
    assert first["outputs"] == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_opens_with_a_title(path: Path) -> None:
    first = bookfiles.load(path)["cells"][0]
    assert first["cell_type"] == "markdown"
    assert bookfiles.source(first).startswith("# ")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_kernel_is_python3(path: Path) -> None:
    assert bookfiles.load(path)["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_lines_fit_the_sites_column(path: Path) -> None:
    long = [
        f"code cell {index}: {line.strip()[:50]}... ({len(line)} characters)"
        for index, cell in enumerate(bookfiles.code_cells(bookfiles.load(path)))
        for line in bookfiles.source(cell).splitlines()
        if len(line) > WIDTH
    ]
    assert not long, f"lines longer than {WIDTH} characters scroll on the site: {long}"


def test_toc_and_book_folder_agree() -> None:
    listed = bookfiles.toc_files()
    assert len(listed) == len(set(listed)), "a file is listed twice in _toc.yml"
    for entry in listed:
        found = list((bookfiles.ROOT / Path(entry).parent).glob(Path(entry).name + ".*"))
        assert found, f"_toc.yml lists {entry}, which does not exist"
    pages = {f"book/{p.stem}" for p in (*CHAPTERS, *bookfiles.BOOK.glob("*.md"))}
    missing = pages - set(listed)
    assert not missing, f"not in _toc.yml: {sorted(missing)}"

"""The printed book's plan (memobook/pdf.py), without a browser: which pages it holds,
where each chapter's pages end, what the contents list; tests/site/test_pdf.py reads
the printed PDF itself."""

from __future__ import annotations

import re
from pathlib import Path

import memobook
from memobook import pdf


def test_the_book_holds_the_root_page_every_chapter_then_the_appendices() -> None:
    pages = pdf.book_pages()
    chapters = memobook.chapters()
    assert pages[0].docname == memobook.toc_entries()[0].docname
    assert [p.docname for p in pages[1 : 1 + len(chapters)]] == [c.docname for c in chapters]
    appendices = pages[1 + len(chapters) :]
    assert [p.docname for p in appendices] == ["book/errors", "book/changes"]
    assert [p.appendix for p in appendices] == ["A", "B"]
    assert not any(p.appendix for p in pages[: 1 + len(chapters)])
    opened = [p.opens_part for p in pages if p.opens_part]
    assert opened == [*dict.fromkeys(c.part for c in chapters), pdf.APPENDICES]


def test_the_appendices_are_the_pages_of_the_errors_and_changes_directives(tmp_path: Path) -> None:
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nparts:\n  - caption: Reference\n    chapters:\n"
        "      - file: changes\n      - file: other\n      - file: errors\n"
    )
    (tmp_path / "intro.md").write_text("# Intro\n")
    (tmp_path / "changes.md").write_text("# What changed\n\n```{memo-changes}\n```\n")
    (tmp_path / "other.md").write_text("# Other\n\nmemo-errors, named but not used\n")
    (tmp_path / "errors.md").write_text("# Errors\n\n```{memo-errors}\n```\n")
    assert pdf.appendix_pages(tmp_path) == ["changes", "errors"]


def test_a_chapters_pages_end_where_the_next_chapter_starts() -> None:
    headings = [
        pdf.Heading(0, "", "Tensors", "part-1"),
        pdf.Heading(1, "1.", "Creating tensors", "creation"),
        pdf.Heading(2, "1.1.", "A section", "creation--a-section"),
        pdf.Heading(1, "2.", "Views", "views"),
    ]
    pages = {"part-1": 3, "creation": 3, "creation--a-section": 5, "views": 9}
    assert pdf.chapter_ranges(headings, pages, 12) == {
        "creation": range(3, 9),
        "views": range(9, 12),
    }


def test_the_contents_list_chapters_and_sections_with_their_pages() -> None:
    headings = [
        pdf.Heading(0, "", "Introduction", "intro"),
        pdf.Heading(1, "2.", "Views <and> strides", "views"),
        pdf.Heading(2, "2.1.", "stride()", "views--stride"),
        pdf.Heading(3, "2.1.1.", "Too deep for the contents", "views--deep"),
    ]
    page = pdf.front_html("<head></head>", headings, {"intro": 1, "views": 4, "views--stride": 5})
    entries = re.findall(r'<a href="memo-dest:([^"]+)">.*?page-number">(\d*)<', page)
    assert entries == [("intro", "1"), ("views", "4"), ("views--stride", "5")]
    assert "Views &lt;and&gt; strides" in page
    assert str(memobook.config()["title"]) in page
    assert "Errors and What changed are the appendices" in page
    assert f'href="{pdf.source_url()}"' in page
    assert pdf.source_url().startswith("https://")


def test_each_chapter_has_a_file_of_its_own_in_the_site() -> None:
    names = [pdf.chapter_pdf(c.name) for c in memobook.chapters()]
    assert len(set(names)) == len(names)
    assert all(n.startswith(f"{pdf.CHAPTERS_FOLDER}/") and n.endswith(".pdf") for n in names)


def test_the_column_holds_a_line_of_code_at_nine_points() -> None:
    # 84 characters of DejaVu Sans Mono (0.602 em) at 9 pt, in CSS pixels (96 per inch),
    # plus the code block's padding, fit the printed column: nothing is shrunk to fit.
    line = memobook.CODE_WIDTH * 0.602 * 9 / 72 * 96
    assert line + 40 < pdf.COLUMN_PX

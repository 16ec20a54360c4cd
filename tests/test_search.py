"""The section search's index (memobook.search): what a section's record holds, and how
the index is written. The search itself runs in the browser: tests/site/test_search.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

import memobook
from memobook.search import (
    BUNDLE,
    UNUSED,
    Record,
    drop_search_tools,
    page_records,
    text_of,
    write_index,
)


def _section(ids: str, title: str, *children: nodes.Node) -> nodes.section:
    section = nodes.section(ids=[ids])
    section += nodes.title(text=title)
    section.extend(children)
    return section


def _cell(source: str, output: str = "") -> nodes.container:
    cell = nodes.container(nb_element="cell_code", classes=["cell"])
    code = nodes.container(nb_element="cell_code_source")
    code += nodes.literal_block(text=source)
    cell += code
    if output:
        shown = nodes.container(nb_element="cell_code_output")
        shown += nodes.literal_block(text=output)
        cell += shown
    return cell


def _page() -> nodes.document:
    document = new_document("page", get_default_settings(Parser))
    note = nodes.container(classes=["memo-gpu-note"])
    note += nodes.paragraph(text="GPU cell: it runs only where CUDA is available.")
    figure = nodes.paragraph()
    figure += nodes.image(uri="_images/plot.png", alt="_images/plot.png")
    figure += nodes.Text("The plot shows ")
    figure += nodes.literal(text="view")
    figure += nodes.Text(" at work.")
    table = nodes.raw(text="<table><tr><td>a&amp;b</td></tr></table>", format="html")
    inner = _section(
        "view-vs-reshape",
        "view vs reshape",
        nodes.paragraph(text="view never copies."),
        _cell("x.view(6)", "RuntimeError: view size is not compatible"),
    )
    chapter = _section(
        "views",
        "Views",
        nodes.paragraph(text="A tensor is a view onto memory."),
        _cell(memobook.setup_cell_source()),
        note,
        figure,
        table,
        nodes.math_block(text=r"\frac{a}{b}"),
        inner,
    )
    document += chapter
    return document


def test_each_section_is_a_record_at_its_anchor_with_its_own_words() -> None:
    records = page_records(_page(), uri="book/views.html", page="Views", chapter=True)
    assert [r.url for r in records] == ["book/views.html#views", "book/views.html#view-vs-reshape"]
    top, inner = records
    assert top.title == "Views"
    assert top.parts == (
        ("prose", "A tensor is a view onto memory."),
        ("prose", "The plot shows view at work."),
        ("prose", "a&b"),
    ), "no setup cell, GPU note, image path or math source; HTML outputs as text"
    assert "view never copies" not in " ".join(t for _, t in top.parts), "subsections apart"
    assert inner.parts == (
        ("prose", "view never copies."),
        ("code", "x.view(6)"),
        ("output", "RuntimeError: view size is not compatible"),
    )
    assert inner.context == ("Views",)
    assert top.context == (), "a page's first section is the page: no context of its own"


def test_a_record_is_html_that_pagefind_weighs_and_escapes() -> None:
    record = Record(
        url="book/views.html#a",
        title="<b> & co",
        page="Views, strides",
        chapter=False,
        parts=(("code", "x < y"),),
        context=("Views, strides", "Outer"),
    )
    html = record.html()
    assert '<h1 data-pagefind-weight="5.00">&lt;b&gt; &amp; co</h1>' in html
    assert '<p data-pagefind-weight="0.80">x &lt; y</p>' in html
    assert html.endswith(
        '<p data-pagefind-weight="0.50">Views, strides \u203a Outer</p></body></html>'
    )
    for key, value in {
        "kind": "reference",
        "href": "book/views.html#a",
        "page": "Views, strides",
        "context": "Views, strides \u203a Outer",
    }.items():
        assert f'data-pagefind-meta="{key}[content]" content="{value}"' in html


def test_text_of_joins_blocks_with_spaces_and_keeps_inline_text_whole() -> None:
    items = nodes.bullet_list()
    for text in ("one", "two"):
        item = nodes.list_item()
        item += nodes.paragraph(text=text)
        items += item
    assert text_of(items) == "one two"
    assert text_of(nodes.raw(text="<p>x</p>", format="latex")) == ""


def test_the_index_is_written_whole_and_replaces_the_old_one(tmp_path: Path) -> None:
    pytest.importorskip("pagefind", reason="runs Pagefind: needs the book dependency group")
    records = page_records(_page(), uri="book/views.html", page="Views", chapter=True)
    old = tmp_path / BUNDLE
    old.mkdir()
    (old / "stale.txt").write_text("from the last build")
    bundle = write_index(records, tmp_path)
    assert bundle == old
    assert (bundle / "pagefind.js").is_file()
    assert not (bundle / "stale.txt").exists()
    entry = json.loads((bundle / "pagefind-entry.json").read_text())
    assert entry["languages"]["en"]["page_count"] == len(records)
    assert sorted(p.name for p in tmp_path.iterdir()) == [BUNDLE], "nothing left beside it"
    ui = [p.name for p in bundle.iterdir() if p.name.startswith(UNUSED)]
    assert not ui, f"Pagefind's own interfaces, which the site never loads: {ui}"


def test_the_themes_search_tools_stay_only_on_the_search_page(tmp_path: Path) -> None:
    tags = (
        '    <script src="../_static/searchtools.js"></script>\n'
        '    <script src="../_static/language_data.js"></script>\n'
        '    <script src="../searchindex.js"></script>\n'
    )
    kept = '    <script src="../_static/memo-search.js?v=1"></script>\n'
    (tmp_path / "book").mkdir()
    chapter = tmp_path / "book" / "views.html"
    chapter.write_text(f"<head>\n{tags}{kept}</head>\n")
    search_page = tmp_path / "search.html"
    search_page.write_text(f"<head>\n{tags}</head>\n")
    assert drop_search_tools(tmp_path) == 1
    assert chapter.read_text() == f"<head>\n{kept}</head>\n"
    assert search_page.read_text() == f"<head>\n{tags}</head>\n", "the file:// fallback"
    assert drop_search_tools(tmp_path) == 0, "a second pass changes nothing"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["book", "search.html", "views.html"]


def test_writing_into_a_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="site: expected the built site's folder"):
        write_index([], tmp_path / "missing")

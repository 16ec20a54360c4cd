"""Reading comfort in a real browser: dark mode, copy buttons, cross-links,
the generated status and API pages, and links from chapters to the helpers they use."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from playwright.sync_api import Page

import memobook
import pytorch_memo
from memobook.record import read_record
from memobook.site import module_users
from tests.site.conftest import chapter_pages

CHAPTERS = chapter_pages()


def test_code_cells_have_copy_buttons(chapter_page: tuple[Path, Page]) -> None:
    notebook, page = chapter_page
    cells = page.locator("article div.cell_input").count()
    assert cells == len(memobook.code_cells(memobook.load(notebook)))
    assert page.locator("article div.cell_input button.copybtn").count() == cells


def test_code_and_outputs_fit_the_column_beside_both_sidebars(
    chapter_page: tuple[Path, Page],
) -> None:
    _, page = chapter_page  # 1280 px wide: both sidebars are shown
    assert page.locator(".bd-sidebar-primary").is_visible()
    assert page.locator(".bd-sidebar-secondary").is_visible()
    scrolled = page.evaluate(
        """() => [...document.querySelectorAll(
                     'article div.cell_input pre, article div.cell_output *')]
            .filter(e => !e.closest('div.cell.tag_wide-output'))
            .filter(e => e.scrollWidth > e.clientWidth + 1
                         && getComputedStyle(e).overflowX !== 'visible')
            .map(e => e.textContent.trim().slice(0, 60))"""
    )
    assert not scrolled, f"blocks that scroll sideways: {scrolled}"


def test_chapter_links_to_other_chapters_and_its_helpers(
    chapter_page: tuple[Path, Page],
) -> None:
    notebook, page = chapter_page
    body = page.locator("article section").first
    hrefs = body.locator("a.reference.internal").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))"
    )
    others = {p.stem for p in CHAPTERS} - {notebook.stem}
    assert any(h.split("#")[0].removesuffix(".html") in others for h in hrefs), hrefs
    helpers = page.locator("#helpers-used-in-this-chapter a.reference.internal")
    assert helpers.count() > 0
    for href in helpers.evaluate_all("els => els.map(e => e.getAttribute('href'))"):
        assert href.startswith("api.html#pytorch_memo."), href


def test_status_page_shows_each_chapters_record(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/status.html")
    rows = page.locator("table.memo-status tbody tr")
    assert rows.count() == len(CHAPTERS)
    for i, notebook in enumerate(CHAPTERS):
        record = read_record(memobook.load(notebook))
        assert record is not None, f"{notebook.name} was never executed"
        cells = rows.nth(i).locator("td").all_inner_texts()
        assert cells[1] == record.executed
        assert cells[3] == record.torch
        assert cells[4] == record.device
        assert cells[5] == str(record.gpu_cells)


def test_status_page_says_which_chapters_ran_again_on_their_own(page: Page, site_url: str) -> None:
    from memobook.record import MatrixRecord

    runs = MatrixRecord.read().sorted_runs()
    page.goto(f"{site_url}/book/status.html")
    table = page.locator("table.memo-matrix")
    names = [c.name for c in memobook.chapters()]
    rows = table.locator("tbody tr")
    for column, run in enumerate(runs, start=1):
        for i, name in enumerate(names):
            text = rows.nth(i).locator("td").nth(column).inner_text()
            rerun = run.reruns.get(name)
            day = rerun.split()[0] if rerun else "no"
            assert (f"(re-run {day})" in text) == (rerun is not None), (run.key, name)


def test_api_page_documents_every_public_helper(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/api.html")
    ids = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
    for module in pkgutil.iter_modules(pytorch_memo.__path__):
        if module.name.startswith("_"):
            continue
        imported = importlib.import_module(f"pytorch_memo.{module.name}")
        for name in imported.__all__:
            assert f"pytorch_memo.{module.name}.{name}" in ids, f"{module.name}.{name}"
    # Which chapters use each module: generated from the chapters' imports.
    users = module_users(memobook.ROOT)
    for name, chapters in users.items():
        section = page.locator(f"section#{name.replace('.', '-').replace('_', '-')}")
        used = section.locator("p", has_text="Used by").first.inner_text()
        for chapter in chapters:
            assert chapter.title in used, f"{name}: {used}"
        # ... and only there: a docstring that names its chapters would go stale.
        said = section.locator("p").filter(has_text=re.compile(r"^\s*Used by")).count()
        assert said == 1, f"{name}: {said} paragraphs say which chapters use it"

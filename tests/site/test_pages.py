"""Every chapter page renders its stored outputs and figures, and its launch buttons
open the right notebook on the configured repository and branch."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from playwright.sync_api import Page

import memobook
from tests.site.conftest import chapter_pages

CHAPTERS = chapter_pages()


def _stored_images(notebook: Path) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in memobook.code_cells(memobook.load(notebook))
        for output in cell.get("outputs", [])
    )


def test_index_leads_to_the_intro_which_lists_every_chapter(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/index.html")
    page.wait_for_url("**/book/intro.html")
    listed = page.eval_on_selector_all(
        "article a.reference.internal", "els => els.map(e => e.getAttribute('href'))"
    )
    for notebook in CHAPTERS:
        assert any(href.split("#")[0].endswith(f"{notebook.stem}.html") for href in listed)


def test_chapter_renders_outputs_and_figures(chapter_page: tuple[Path, Page]) -> None:
    notebook, page = chapter_page
    title = memobook.source(memobook.load(notebook)["cells"][0]).splitlines()[0][2:]
    assert title.replace("`", "") in page.locator("article h1").first.inner_text()
    outputs = page.locator("article div.cell_output")
    assert outputs.count() > 0
    images = page.locator("article div.cell_output img")
    assert images.count() == _stored_images(notebook)
    for i in range(images.count()):
        images.nth(i).scroll_into_view_if_needed()
        width = images.nth(i).evaluate("img => img.complete ? img.naturalWidth : 0")
        assert width > 0, f"figure {i} of {notebook.name} did not load"
    assert page.locator("article .output.traceback").count() == 0


def test_launch_buttons_point_at_the_notebook(chapter_page: tuple[Path, Page]) -> None:
    notebook, page = chapter_page
    hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.href)")
    config = memobook.config()
    repo = memobook.repository_url().removeprefix("https://github.com/")
    branch = config["repository"]["branch"]
    path = notebook.relative_to(memobook.ROOT).as_posix()
    binder = f"https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/{path}"
    colab = f"https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"
    assert binder in hrefs
    assert colab in hrefs
    source = f"https://github.com/{repo}/blob/{branch}/{path}?plain=1"
    assert source in hrefs, "the page's source button shows the notebook in the repository"
    download = next(h for h in hrefs if h.endswith(f"_sources/{path}"))
    with urllib.request.urlopen(download) as response:  # the .ipynb as stored
        assert json.loads(response.read()) == memobook.load(notebook)


def test_what_changed_lists_every_deprecation_with_a_proof_that_lands(
    page: Page, site_url: str
) -> None:
    from memobook.errors import deprecations
    from memobook.record import MatrixRecord

    expected = deprecations(matrix=MatrixRecord.read())
    assert len(expected) >= 7
    page.goto(f"{site_url}/book/changes.html")
    items = page.locator("#changes-deprecations li.memo-deprecation")
    assert items.count() == len(expected)
    for index, entry in enumerate(expected):
        text = " ".join(items.nth(index).inner_text().split())
        for curly, straight in (("\u2018", "'"), ("\u2019", "'"), ("\u201c", '"'), ("\u201d", '"')):
            text = text.replace(curly, straight)  # Sphinx's smart quotes, in prose only
        assert f"Deprecated: {entry.old.replace('`', '')}" in text
        assert f"Use: {entry.new.replace('`', '')}" in text
        assert "Warning: " in text
        assert all(t in text for t in entry.texts)
        link = items.nth(index).locator("a.memo-proof-link")
        assert (link.get_attribute("href") or "").endswith(f"#claim-{entry.cell_id}")
    items.first.locator("a.memo-proof-link").click()
    page.wait_for_url(f"**/{expected[0].docname}.html#claim-{expected[0].cell_id}")
    assert page.locator(f"#claim-{expected[0].cell_id}").count() == 1

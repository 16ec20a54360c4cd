"""Reading on a phone (390 x 844) and offline, in a real browser: nothing scrolls the page
sideways, the navigation drawer opens, math renders with the network blocked, GPU cells
carry their marker, and dark mode does not glare."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

import memobook
from tests.site.conftest import DESKTOP

PAGES = [f"{entry.docname}.html" for entry in memobook.toc_entries()]
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll('body *')].filter(e => {
    const box = e.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1) return false;
    if (getComputedStyle(e).visibility === 'hidden') return false;
    for (let p = e.parentElement; p; p = p.parentElement) {  // inside a box that scrolls
      const style = getComputedStyle(p);
      if (['auto', 'scroll', 'hidden'].includes(style.overflowX)
          && p.getBoundingClientRect().right <= width + 1) return false;
    }
    return true;
  });
  return {scroll: document.documentElement.scrollWidth, width,
          wide: wide.slice(0, 5).map(e => e.tagName + ' ' + e.textContent.trim().slice(0, 50))};
}"""


@pytest.mark.parametrize("name", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(phone_page: Page, site_url: str, name: str) -> None:
    page = phone_page
    page.goto(f"{site_url}/{name}")
    page.wait_for_load_state("load")
    found = page.evaluate(OVERFLOW)
    assert found["scroll"] <= found["width"], f"{name} scrolls sideways: {found}"
    assert not found["wide"], f"{name}: wider than the screen: {found['wide']}"


def test_the_drawer_opens_with_the_chapter_list(phone_page: Page, site_url: str) -> None:
    page = phone_page
    page.goto(f"{site_url}/book/views.html")
    visible = [b for b in page.locator(".primary-toggle").all() if b.is_visible()]
    assert len(visible) == 1, "one visible menu button"
    visible[0].click()
    drawer = page.locator("#pst-primary-sidebar-modal")
    drawer.wait_for(state="visible", timeout=5_000)
    assert drawer.evaluate("d => d.open")
    links = drawer.locator("nav.bd-docs-nav a.reference.internal")
    titles = [t.strip() for t in links.all_inner_texts()]
    for chapter in memobook.chapters():
        assert any(chapter.title in t for t in titles), f"{chapter.title} not in the drawer"
    links.filter(has_text=memobook.chapters()[0].title).first.click()
    page.wait_for_url(f"**/{memobook.chapters()[0].path.stem}.html")


def test_the_contents_drawer_opens_on_a_phone(phone_page: Page, site_url: str) -> None:
    page = phone_page
    page.goto(f"{site_url}/book/views.html")
    visible = [b for b in page.locator(".secondary-toggle").all() if b.is_visible()]
    assert visible, "a visible contents button"
    visible[0].click()
    drawer = page.locator("#pst-secondary-sidebar-modal")
    drawer.wait_for(state="visible", timeout=5_000)
    assert drawer.locator("nav.page-toc a").count() > 5


def test_the_sidebar_toggle_hides_and_shows_the_sidebar_on_a_wide_screen(
    page: Page, site_url: str
) -> None:
    page.goto(f"{site_url}/book/views.html")
    sidebar = page.locator(".bd-sidebar-primary")
    assert sidebar.is_visible()
    button = next(b for b in page.locator(".primary-toggle").all() if b.is_visible())
    button.click()
    assert not sidebar.is_visible()
    assert page.locator("#pst-primary-sidebar-modal").evaluate("d => !d.open")
    button.click()
    assert sidebar.is_visible()


@pytest.mark.parametrize("name", ["book/losses.html", "book/creation.html"])
def test_math_renders_with_the_network_blocked(browser: Browser, site_url: str, name: str) -> None:
    context = browser.new_context(viewport=DESKTOP)
    requested: list[str] = []

    def only_the_site(route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if url.startswith(site_url):
            route.continue_()  # type: ignore[attr-defined]
        else:
            requested.append(url)
            route.abort()  # type: ignore[attr-defined]

    context.route("**/*", only_the_site)
    page = context.new_page()
    page.goto(f"{site_url}/{name}")
    page.wait_for_selector("mjx-container", timeout=15_000)
    assert page.locator("article mjx-container").count() > 0
    raw = page.evaluate("() => document.querySelector('article').innerText.includes('\\\\frac')")
    assert not raw, "raw LaTeX left on the page"
    assert not requested, f"the page asked the network for {requested}"
    context.close()


def test_gpu_cells_carry_their_marker(chapter_page: tuple[Path, Page]) -> None:
    """Every chapter: one marker right before each `gpu` cell, none elsewhere."""
    notebook, page = chapter_page
    cells = memobook.code_cells(memobook.load(notebook))
    gpu = sum(memobook.GPU_TAG in memobook.tags(c) for c in cells)
    markers = page.locator("article div.memo-gpu-note")
    assert markers.count() == gpu
    assert page.locator("article div.cell.tag_gpu").count() == gpu
    for i in range(gpu):
        note = markers.nth(i)
        note.scroll_into_view_if_needed()
        assert note.is_visible()
        assert "GPU cell" in note.inner_text()
        following = note.evaluate("n => n.nextElementSibling.classList.contains('tag_gpu')")
        assert following, "the marker stands right before its GPU cell"


def test_dark_mode_figures_do_not_glare(browser: Browser, site_url: str) -> None:
    context = browser.new_context(viewport=DESKTOP)
    context.add_init_script("localStorage.setItem('mode', 'dark')")
    page = context.new_page()
    page.goto(f"{site_url}/book/creation.html")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    figure = page.locator("article div.cell_output img").first
    assert "invert" in figure.evaluate("img => getComputedStyle(img).filter")
    context.close()

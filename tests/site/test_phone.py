"""Reading on a phone (390 x 844) and offline, in a real browser: nothing reaches past the
screen (figures scale to the column, tables keep their words whole or scroll in their own
box, headings keep their words whole, the contents drawer fits), the navigation drawer opens, math renders with the network
blocked, GPU cells carry their marker, and dark mode neither glares nor shouts."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

import memobook
from tests.site.conftest import DESKTOP

PAGES = [f"{entry.docname}.html" for entry in memobook.toc_entries()]
OUTSIDE = """(root) => {
  // Every element's box against the screen: nothing may reach past either edge, except
  // inside the boxes that scroll on purpose (code, tables, display math), which must
  // themselves fit. A figure never scrolls: it scales to the column.
  const width = document.documentElement.clientWidth;
  const own = 'pre, table, mjx-container';
  const found = [];
  for (const e of root.querySelectorAll('*')) {
    const box = e.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if (box.left >= -1 && box.right <= width + 1) continue;
    if (getComputedStyle(e).visibility === 'hidden') continue;
    const scroller = e.tagName === 'IMG' ? null : e.parentElement && e.parentElement.closest(own);
    if (scroller) {
      const outer = scroller.getBoundingClientRect();
      if (['auto', 'scroll'].includes(getComputedStyle(scroller).overflowX)
          && outer.left >= -1 && outer.right <= width + 1) continue;
    }
    found.push(`${e.tagName}.${e.className} [${Math.round(box.left)}, ${Math.round(box.right)}]`
               + ` "${(e.textContent || e.getAttribute('alt') || '').trim().slice(0, 40)}"`);
  }
  return {scroll: document.documentElement.scrollWidth, width, outside: found.slice(0, 8)};
}"""
BROKEN_WORDS = r"""(selector) => {
  // Words split over two lines ("passe|d", "2.1|5.0", "pytorch_memo.archiv|e") in the
  // elements the selector names; a break after a hyphen or a slash is a break between
  // words.
  const broken = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.matchAll(/[^\s\-\/\u2013]+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                                                          .map(r => Math.round(r.bottom)));
        if (lines.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken.slice(0, 10);
}"""


@pytest.mark.parametrize("name", PAGES)
def test_nothing_on_a_phone_reaches_past_the_screen(
    phone_page: Page, site_url: str, name: str
) -> None:
    """Every element of every page, figures included, within the 390 px screen; table
    words whole; the contents drawer within the screen too."""
    page = phone_page
    page.goto(f"{site_url}/{name}")
    page.wait_for_load_state("load")
    found = page.evaluate(OUTSIDE, page.locator("body").element_handle())
    assert found["scroll"] <= found["width"], f"{name} scrolls sideways: {found}"
    assert not found["outside"], f"{name}: past the screen's edge: {found['outside']}"
    broken = page.evaluate(BROKEN_WORDS, "article td, article th")
    assert not broken, f"{name}: table words broken over two lines: {broken}"
    broken = page.evaluate(BROKEN_WORDS, "article h1, article h2, article h3")
    assert not broken, f"{name}: heading words broken over two lines: {broken}"
    toggles = [b for b in page.locator(".secondary-toggle").all() if b.is_visible()]
    if toggles:  # the page's contents, in their drawer
        toggles[0].click()
        drawer = page.locator("#pst-secondary-sidebar-modal")
        drawer.wait_for(state="visible", timeout=5_000)
        inside = page.evaluate(OUTSIDE, drawer.element_handle())
        assert not inside["outside"], f"{name}: the contents run off the screen: {inside}"


def test_figures_scale_to_a_phones_column_and_open_full_size(
    phone_page: Page, site_url: str
) -> None:
    page = phone_page
    page.goto(f"{site_url}/book/compiling.html")  # its widest figure: 1000 px
    images = page.locator("article div.cell_output img")
    assert images.count() > 0
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        box = image.bounding_box()
        column = image.evaluate("img => img.closest('div.cell_output').clientWidth")
        assert box is not None
        assert box["width"] <= column + 1, (box, column)
        natural = image.evaluate("img => img.naturalWidth")
        link = image.evaluate(
            "img => img.parentElement.closest('a') && img.parentElement.closest('a').href"
        )
        assert link == image.evaluate("img => img.src"), "a tap opens the image itself"
        if natural > column:
            assert box["width"] < natural, "a wide figure is scaled down, not cut off"
    images.first.click()
    page.wait_for_url("**/_images/*.png")


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


def _luminance(rgb: str) -> float:
    channels = [int(c) / 255 for c in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    high, low = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_dark_mode_claim_comments_are_quiet_comments(browser: Browser, site_url: str) -> None:
    """A claim is a comment: in dark mode a readable grey, quieter than the code (not the
    code style's bright yellow, the loudest text of the page), like every comment."""
    context = browser.new_context(viewport=DESKTOP)
    context.add_init_script("localStorage.setItem('mode', 'dark')")
    page = context.new_page()
    page.goto(f"{site_url}/book/views.html")
    colors = page.evaluate(
        """() => {
          const claim = [...document.querySelectorAll('article div.cell_input pre span.c1')]
            .find(s => s.textContent.startsWith('# Claim:') && s.offsetParent);
          const other = [...document.querySelectorAll('article div.cell_input pre span.c1')]
            .find(s => !s.textContent.startsWith('# Claim:') && s.offsetParent);
          const name = claim.closest('pre').querySelector('span.n');
          const color = e => getComputedStyle(e).color;
          let back = claim.closest('pre');
          while (getComputedStyle(back).backgroundColor === 'rgba(0, 0, 0, 0)') back = back.parentElement;
          return {claim: color(claim), other: color(other), name: color(name),
                  background: getComputedStyle(back).backgroundColor};
        }"""
    )
    context.close()
    assert colors["claim"] == colors["other"], colors
    red, green, blue = (int(c) for c in colors["claim"][4:-1].split(","))
    assert max(red, green, blue) - min(red, green, blue) <= 16, f"a grey, not a colour: {colors}"
    contrast = _contrast(colors["claim"], colors["background"])
    assert 4.5 <= contrast < _contrast(colors["name"], colors["background"]), (contrast, colors)


def test_dark_mode_figures_do_not_glare(browser: Browser, site_url: str) -> None:
    context = browser.new_context(viewport=DESKTOP)
    context.add_init_script("localStorage.setItem('mode', 'dark')")
    page = context.new_page()
    page.goto(f"{site_url}/book/creation.html")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    figure = page.locator("article div.cell_output img").first
    assert "invert" in figure.evaluate("img => getComputedStyle(img).filter")
    context.close()

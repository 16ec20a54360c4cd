"""The landing page says what the book teaches, for whom and how to use it before how
its claims are checked, and lists every chapter with a line on what it teaches; every
page carries the logo, the title "PyTorch memo" and a favicon that exists; the concepts
have an index, and the site has no general index of helpers' names."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page

import memobook
from memobook.concepts import CONCEPTS
from tests.site.conftest import DESKTOP, HTML, SERVED

TITLE = "PyTorch memo"


def _plain(text: str) -> str:
    """Text as the page reads: no backticks, quotes straight (the site curls them)."""
    text = text.replace("`", "").replace("\u2019", "'").replace("\u201c", '"')
    return " ".join(text.replace("\u201d", '"').split())


def test_the_landing_page_says_what_and_for_whom_before_how_claims_are_checked(
    page: Page, site_url: str
) -> None:
    page.goto(f"{site_url}/book/intro.html")
    assert page.locator("article h1").first.inner_text().strip() == TITLE
    lead = page.locator("article section > p").first.inner_text()
    assert "people who write PyTorch" in lead, lead
    headings = [h.strip() for h in page.locator("article h2").all_inner_texts()]
    order = ["How to use it", "Chapters", "How the claims are checked"]
    found = [next((i for i, h in enumerate(headings) if h.startswith(o)), -1) for o in order]
    assert -1 not in found, headings
    assert found == sorted(found), headings
    # How to use it: read a chapter, look up an error, check the memo (and the index).
    use = page.locator("article section", has=page.locator("h2", has_text="How to use it"))
    hrefs = use.first.locator("a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    for target in ("errors.html", "changes.html", "memo.html", "concepts.html"):
        assert target in hrefs, f"How to use it does not link {target}: {hrefs}"


def test_the_landing_page_lists_every_chapter_with_what_it_teaches(
    page: Page, site_url: str
) -> None:
    page.goto(f"{site_url}/book/intro.html")
    items = page.locator("article ol.memo-chapters > li")
    chapters = memobook.chapters()
    assert items.count() == len(chapters)
    parts = [p.strip() for p in page.locator("article p.memo-part").all_inner_texts()]
    assert parts == list(dict.fromkeys(c.part for c in chapters))
    for i, chapter in enumerate(chapters):
        item = items.nth(i)
        assert chapter.description, f"{chapter.path.name} has no description"
        text = _plain(item.inner_text())
        assert chapter.title in text, text
        assert _plain(chapter.description) in text, text
        href = item.locator("a").first.get_attribute("href") or ""
        assert href.split("#")[0] == f"{chapter.name}.html", href
        # numbered through the book, as in the menu
        assert (
            item.evaluate(
                "li => li.parentElement.start + [...li.parentElement.children].indexOf(li)"
            )
            == i + 1
        )


def test_the_landing_page_shows_a_figure_from_a_chapter(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/intro.html")
    figure = page.locator("article div.memo-landing-figure")
    assert figure.count() == 1
    image = figure.locator("img")
    image.scroll_into_view_if_needed()
    assert image.evaluate("img => img.complete && img.naturalWidth > 0")
    alt = image.get_attribute("alt") or ""
    assert len(alt) > 20, alt
    assert ".png" not in alt, alt
    link = figure.locator("p.memo-landing-caption a")
    chapter = next(c for c in memobook.chapters() if c.title in link.inner_text())
    assert (link.get_attribute("href") or "").startswith(f"{chapter.name}.html#")


def test_the_logo_and_the_title_are_on_every_kind_of_page(page: Page, site_url: str) -> None:
    for name in ("book/intro.html", "book/status.html", "book/concepts.html", "search.html"):
        page.goto(f"{site_url}/{name}")
        assert page.title().endswith(TITLE), f"{name}: {page.title()!r}"
        logo = page.locator(".bd-sidebar-primary .navbar-brand img").first
        assert logo.evaluate("img => img.complete && img.naturalWidth > 0"), name
        assert TITLE in page.locator(".bd-sidebar-primary .navbar-brand").first.inner_text()


def test_every_page_declares_a_favicon() -> None:
    """A page without one makes the browser ask for /favicon.ico, which the site lacks
    (test_links checks that the declared file exists)."""
    pages = [p for p in HTML.rglob("*.html") if "_static" not in p.parts]
    assert len(pages) > 5
    head = re.compile(r"<link\b[^>]*\brel=\"(?:shortcut )?icon\"", re.IGNORECASE)
    missing = [
        str(path.relative_to(HTML))
        for path in pages
        if not head.search(path.read_text(encoding="utf-8").split("</head>", 1)[0])
    ]
    assert not missing, f"pages without a favicon: {missing}"
    # Beside the SVG, PNG icons (test_links checks that they exist): Safari shows no
    # SVG favicon, and a phone's home screen takes the 180 px one.
    png = re.compile(r'<link rel="(icon|apple-touch-icon)" type="image/png" sizes="(\d+)x\2"')
    for path in pages:
        found = {m.group(1) for m in png.finditer(path.read_text(encoding="utf-8"))}
        assert found == {"icon", "apple-touch-icon"}, f"{path.relative_to(HTML)}: {found}"


def test_a_fresh_browser_finds_every_file_it_asks_for(browser: Browser, site_url: str) -> None:
    """Everything a browser fetches, of its own accord too (a page without a declared
    favicon makes it ask for /favicon.ico), exists: the server saw no 404."""
    context = browser.new_context(viewport=DESKTOP)
    tab = context.new_page()
    start = len(SERVED)
    tab.goto(f"{site_url}/index.html")  # the site's root, which redirects
    tab.wait_for_url("**/book/intro.html")
    tab.wait_for_load_state("load")
    tab.goto(f"{site_url}/book/status.html")
    tab.wait_for_load_state("load")
    tab.wait_for_timeout(1_000)  # the favicon is fetched after the page has loaded
    context.close()
    asked = SERVED[start:]
    assert any(path.endswith("intro.html") for path, _ in asked), "the root did not redirect"
    missing = [f"{path} ({status})" for path, status in asked if status >= 400]
    assert not missing, f"the site lacks what the browser asked for: {missing}"


def test_the_index_of_concepts_links_each_term_to_the_section_explaining_it(
    page: Page, site_url: str
) -> None:
    page.goto(f"{site_url}/book/concepts.html")
    links = page.locator("article ul.memo-concepts a.memo-concept-link")
    assert links.count() == len(CONCEPTS)
    hrefs = set(links.evaluate_all("els => els.map(e => e.getAttribute('href'))"))
    assert hrefs == {f"{c.chapter}.html#{c.anchor}" for c in CONCEPTS}
    # One, followed: it lands on the section, which uses the term (every anchor is
    # checked by test_links, every section's text by tests/test_concepts.py).
    concept = CONCEPTS[0]
    page.locator(f"a.memo-concept-link[href$='#{concept.anchor}']").first.click()
    page.wait_for_url(f"**/{concept.chapter}.html#{concept.anchor}")
    section = page.locator(f"section#{concept.anchor}")
    assert section.evaluate(
        "s => { const b = s.getBoundingClientRect(); return b.top < innerHeight && b.bottom > 0 }"
    )
    word = (concept.used_as or concept.term).replace("`", "").lower()
    assert word in (section.text_content() or "").lower(), concept


def test_the_site_has_no_general_index_of_helper_names() -> None:
    """The general index listed the helpers' names (the API reference lists them) and no
    concept; the index of concepts replaces it."""
    assert not (HTML / "genindex.html").exists()
    assert not (HTML / "py-modindex.html").exists()
    assert (HTML / "book" / "concepts.html").exists()

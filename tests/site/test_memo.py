"""The memo page lists every claim of the book and each link lands on the cell that proves
it; the whole-book PDF holds every chapter."""

from __future__ import annotations

import random
import unicodedata

import pypdfium2
from playwright.sync_api import Page

import memobook
from memobook.claims import book_claims
from tests.site.conftest import HTML


def test_the_memo_lists_every_claim_by_chapter(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/memo.html")
    claims = book_claims()
    links = page.locator("ul.memo-claims a.memo-claim-link")
    assert links.count() == len(claims)
    for chapter in memobook.chapters():
        section = page.locator(f"section#memo-{chapter.name}")
        expected = [c for c in claims if c.chapter == chapter.name]
        assert section.locator("a.memo-claim-link").count() == len(expected), chapter.name
        assert chapter.title in section.locator("h2").inner_text()
        assert "Checked with torch" in section.locator("p.memo-verified").inner_text()


def test_memo_links_land_on_the_proving_cell(page: Page, site_url: str) -> None:
    claims = book_claims()
    sample = random.Random(0).sample(claims, min(12, len(claims)))
    page.goto(f"{site_url}/book/memo.html")
    for claim in sample:
        link = page.locator(f"a.memo-claim-link[href$='#{claim.anchor}']").first
        link.click()
        page.wait_for_url(f"**/{claim.chapter}.html#{claim.anchor}")
        cell = page.locator(f"#{claim.anchor}")
        assert "memo-claim" in (cell.get_attribute("class") or "")
        # text_content, not inner_text: a long check is folded, its code in the page
        code = cell.locator("div.cell_input").text_content() or ""
        assert claim.text.split()[0] in code, f"{claim.anchor}: the claim is not in its cell"
        assert cell.evaluate(
            "c => { const b = c.getBoundingClientRect(); return b.top < innerHeight && b.bottom > 0 }"
        )
        page.go_back()


def test_the_home_page_links_the_pdf_which_holds_every_chapter(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/intro.html")
    link = page.locator("article a", has_text="the whole book as one PDF")
    assert link.get_attribute("href") == "../pytorch-memo.pdf"
    document = pypdfium2.PdfDocument(HTML / "pytorch-memo.pdf")  # PDFium: Chromium's reader
    try:
        assert len(document) > 10 * len(memobook.chapters())
        text = " ".join(document[i].get_textpage().get_text_range() for i in range(len(document)))
    finally:
        document.close()
    flat = " ".join(unicodedata.normalize("NFKC", text).split())  # ligatures: "ﬀ" is "ff"
    for chapter in memobook.chapters():
        assert chapter.title in flat, f"{chapter.title} is not in the PDF"

"""The memo page, the book as a cheat sheet: each chapter's summary first, then every
claim grouped by section, in plain text with a link to the cell that proves it and the
releases it holds on; a filter box narrows the lists as the reader types."""

from __future__ import annotations

import random
import re

from playwright.sync_api import Page

import memobook
from memobook.claims import book_claims, section_claims
from memobook.record import MATRIX, MatrixRecord, source_digest
from memobook.site import claim_releases

QUOTES = str.maketrans(
    {"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "\u2026": "..."}
)


def _plain(markdown: str) -> str:
    """Markdown as the page shows it, near enough: no backticks, no link targets, no
    emphasis marks, straight quotes, spaces collapsed."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    # Emphasis marks go, but not inside code: `(x**2)` shows as written.
    parts = text.split("`")
    plain = "".join(p if i % 2 else p.replace("**", "") for i, p in enumerate(parts))
    return _shown(plain)


def _shown(text: str) -> str:
    """Text as a page shows it, compared loosely: straight quotes, spaces collapsed."""
    return " ".join(text.translate(QUOTES).split())


_SUMMARIES = """() => Object.fromEntries([...document.querySelectorAll('section.memo-chapter')]
    .map(section => [section.id, {
        title: section.querySelector('h2').textContent,
        verified: section.querySelector('p.memo-verified').textContent,
        first: section.querySelector('div.memo-group').className,
        points: [...section.querySelectorAll('div.memo-summary ul.memo-summary-points > li')]
            .map(li => li.textContent),
    }]))"""


def test_the_memo_opens_each_chapter_with_its_summary(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/memo.html")
    shown = page.evaluate(_SUMMARIES)
    for chapter in memobook.chapters():
        section = shown[f"memo-{chapter.name}"]
        assert chapter.title in section["title"]
        assert "Checked with torch" in section["verified"]
        points = memobook.summary_points(chapter.load())
        assert points, f"{chapter.name} has no summary points"
        assert [_shown(p) for p in section["points"]] == [_plain(p) for p in points]
        # The summary comes first, before the claims.
        assert "memo-summary" in section["first"].split(), chapter.name


_GROUPS = """() => [...document.querySelectorAll('section.memo-chapter')].map(section => ({
    chapter: section.id,
    groups: [...section.querySelectorAll('div.memo-group:not(.memo-summary)')].map(g => ({
        title: g.querySelector('.memo-group-title').textContent,
        claims: [...g.querySelectorAll('li.memo-claim')].map(li => ({
            text: li.querySelector('.memo-claim-text').textContent,
            linked: li.querySelector('.memo-claim-text').closest('a') !== null,
            links: [...li.querySelectorAll('a')].map(a => a.getAttribute('href')),
            releases: li.querySelector('.memo-releases').textContent.trim(),
        })),
    })),
}))"""


def test_the_memo_lists_every_claim_by_section_in_plain_text(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/memo.html")
    shown = {section["chapter"]: section["groups"] for section in page.evaluate(_GROUPS)}
    assert list(shown) == [f"memo-{c.name}" for c in memobook.chapters()]
    assert sum(len(g["claims"]) for gs in shown.values() for g in gs) == len(book_claims())
    matrix = MatrixRecord.read(MATRIX)
    for chapter in memobook.chapters():
        groups = shown[f"memo-{chapter.name}"]
        expected = section_claims(chapter)
        assert [_shown(g["title"]) for g in groups] == [_plain(t) for t, _ in expected]
        cells = chapter.load()["cells"]
        for group, (title, claims) in zip(groups, expected, strict=True):
            assert len(group["claims"]) == len(claims), f"{chapter.name}: {title}"
            for item, claim in zip(group["claims"], claims, strict=True):
                assert _shown(item["text"]) == _shown(claim.text.replace("`", ""))
                assert not item["linked"], f"{claim.anchor}: the claim itself is a link"
                # one link: to the cell that proves it
                assert item["links"] == [f"{chapter.name}.html#{claim.anchor}"]
                digest = source_digest(memobook.source(cells[claim.cell]))
                releases = claim_releases(matrix, chapter.name, claim.cell_id, digest)
                assert item["releases"] == releases, claim.anchor


def test_memo_links_land_on_the_proving_cell(page: Page, site_url: str) -> None:
    claims = book_claims()
    sample = random.Random(0).sample(claims, min(12, len(claims)))
    page.goto(f"{site_url}/book/memo.html")
    for claim in sample:
        link = page.locator(f"a.memo-proof-link[href$='#{claim.anchor}']").first
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


WORD = "reshape"
"""A word some claims hold and most do not."""


def test_the_filter_narrows_the_list_as_you_type(page: Page, site_url: str) -> None:
    claims = book_claims()
    holding = [c for c in claims if WORD in c.text.replace("`", "").lower()]
    assert 0 < len(holding) < len(claims) / 10, f"pick another word than {WORD!r}"
    page.goto(f"{site_url}/book/memo.html")
    box = page.locator("#memo-filter")
    visible = page.locator("li.memo-claim:visible")
    assert visible.count() == len(claims)
    counts = []
    for piece in (WORD[:2], WORD[2:4], WORD[4:]):  # as the reader types, the list narrows
        box.press_sequentially(piece)
        counts.append(visible.count())
    assert box.input_value() == WORD
    assert counts == sorted(counts, reverse=True)
    assert counts[-1] < counts[0]
    assert counts[-1] == len(holding)
    shown = page.evaluate(
        """() => [...document.querySelectorAll('li.memo-claim')].filter(li => li.offsetParent)
            .map(li => li.querySelector('.memo-claim-text').textContent)"""
    )
    # every claim that holds the word stays, and only those
    assert sorted(map(_shown, shown)) == sorted(_shown(c.text.replace("`", "")) for c in holding)
    assert page.locator(".memo-filter-count").inner_text().startswith(f"{len(holding)} of ")
    # Chapters with no match fold away; the others keep their title.
    chapters = {c.chapter for c in holding}
    for chapter in memobook.chapters():
        shown = page.locator(f"section#memo-{chapter.name}").is_visible()
        points = [p for p in memobook.summary_points(chapter.load()) if WORD in p.lower()]
        assert shown == (chapter.name in chapters or bool(points)), chapter.name
    box.fill("")
    assert visible.count() == len(claims)

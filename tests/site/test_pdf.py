"""The printed book (`python -m memobook.pdf`), read with PDFium (Chromium's own reader):
an outline of parts, chapters and sections, then the appendices (Errors, What changed)
with every proof link landing in its chapter; a number on every page and a contents list
that gives them; every chapter on a new page; no interface printed; code at a readable
size; figures whole; each chapter's pages as a file of their own, which its download
menu links."""

from __future__ import annotations

import ctypes
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape

import pypdf
import pypdfium2
import pypdfium2.raw as pdfium_c
import pytest
from playwright.sync_api import Page

import memobook
from memobook import pdf
from tests.site.conftest import HTML

MM = 72 / 25.4
"""PDF points in a millimetre."""
SMALLEST_CODE = 8.5
"""Points: code smaller than this is hard to read on paper."""
MONO_ADVANCE = 0.6021
"""DejaVu Sans Mono (the code font here) advances 0.6021 em per character."""


@dataclass(frozen=True)
class Bookmark:
    level: int
    title: str
    page: int


def _bookmarks(document: pypdfium2.PdfDocument) -> list[Bookmark]:
    return [Bookmark(b.level, b.get_title(), b.get_dest().get_index()) for b in document.get_toc()]


@pytest.fixture(scope="module")
def book() -> Iterator[pypdfium2.PdfDocument]:
    path = HTML / pdf.PDF_NAME
    if not path.is_file():
        pytest.fail(f"{path} is missing: print it first (python -m memobook.pdf)")
    document = pypdfium2.PdfDocument(path)
    yield document
    document.close()


@pytest.fixture(scope="module")
def texts(book: pypdfium2.PdfDocument) -> list[str]:
    """The text of every page of the book."""
    return [_text(book, index) for index in range(len(book))]


def _flat(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())  # ligatures: "ﬀ" is "ff"


def _text(document: pypdfium2.PdfDocument, index: int) -> str:
    return str(document[index].get_textpage().get_text_range())


def _article(docname: str) -> str:
    html = (HTML / f"{docname}.html").read_text(encoding="utf-8")
    found = re.search(r'<article class="bd-article"[^>]*>(.*?)</article>', html, re.DOTALL)
    assert found, f"{docname}.html has no article"
    return found.group(1)


def _titles(article: str, tag: str) -> list[str]:
    """The text of each ``<tag>`` heading of an article, without its "#" link."""
    headings = re.findall(rf"<{tag}>(.*?)</{tag}>", article, re.DOTALL)
    plain = [re.sub(r"<a class=\"headerlink\".*?</a>|<[^>]+>", "", h) for h in headings]
    return [_flat(unescape(p)) for p in plain]


def _sections(marks: list[Bookmark], index: int) -> list[str]:
    """The titles of the sections (level 2) under the bookmark at ``index``."""
    sections = []
    for later in marks[index + 1 :]:
        if later.level <= 1:
            break
        if later.level == 2:
            sections.append(later.title)
    return sections


def test_the_outline_holds_parts_chapters_and_sections(book: pypdfium2.PdfDocument) -> None:
    marks = _bookmarks(book)
    assert marks, "the PDF has no outline"
    top = [m.title for m in marks if m.level == 0]
    parts = list(dict.fromkeys(c.part for c in memobook.chapters()))
    assert top == ["Introduction", *parts, pdf.APPENDICES]
    for chapter in memobook.chapters():
        article = _article(chapter.docname)
        title = _titles(article, "h1")[0]
        index = next((i for i, m in enumerate(marks) if m.level == 1 and m.title == title), None)
        assert index is not None, f"no bookmark {title!r} for {chapter.name}"
        part = max(i for i, m in enumerate(marks[:index]) if m.level == 0)
        assert marks[part].title == chapter.part, f"{chapter.name} is not under its part"
        assert _sections(marks, index) == _titles(article, "h2"), f"{chapter.name}: its sections"


def test_the_appendices_follow_the_chapters_with_their_sections(
    book: pypdfium2.PdfDocument,
) -> None:
    marks = _bookmarks(book)
    start = next(i for i, m in enumerate(marks) if m.level == 0 and m.title == pdf.APPENDICES)
    appendices = [m for m in marks[start + 1 :] if m.level == 1]
    pages = [p for p in pdf.book_pages() if p.appendix]
    assert len(appendices) == len(pages) == 2
    for mark, page in zip(appendices, pages, strict=True):
        article = _article(page.docname)
        assert mark.title == f"{page.appendix}. {_titles(article, 'h1')[0]}"
        index = marks.index(mark)
        assert _sections(marks, index) == _titles(article, "h2"), f"{page.docname}: its sections"


def test_every_proof_link_of_the_appendices_lands_in_its_chapter(
    book: pypdfium2.PdfDocument,
) -> None:
    marks = _bookmarks(book)
    chapters = {c.title: c.name for c in memobook.chapters()}
    starts = [(m.page, m.title) for m in marks if m.level <= 1]
    spans = {}  # chapter name -> its pages
    for (first, title), (end, _) in zip(starts, [*starts[1:], (len(book), "")], strict=True):
        name = next((n for t, n in chapters.items() if title.endswith(t)), None)
        if name:
            spans[name] = range(first, end)
    appendix = next(m.page for m in marks if m.level == 0 and m.title == pdf.APPENDICES)
    reader = pypdf.PdfReader(HTML / pdf.PDF_NAME)
    named = reader.named_destinations
    landed: list[str] = []
    for page in reader.pages[appendix:]:
        for ref in page.get("/Annots") or []:
            target = str(ref.get_object().get("/Dest", "")).removeprefix("/")
            if "--claim-" not in target:
                continue
            chapter = target.split("--")[0]
            assert f"/{target}" in named, f"a proof link to {target}, which the book lacks"
            where = reader.get_destination_page_number(named[f"/{target}"])
            assert where in spans[chapter], f"{target} lands on page {where}, not in {chapter}"
            landed.append(target)
    proofs = sum(
        len(re.findall(r'class="memo-proof-link[^"]*" href="[^"]+#claim-', _article(p.docname)))
        for p in pdf.book_pages()
        if p.appendix
    )
    assert proofs > 0
    assert len(landed) == proofs, f"{proofs} proof links on the site, {len(landed)} in the PDF"


def test_every_page_is_numbered_and_the_contents_give_the_numbers(
    book: pypdfium2.PdfDocument, texts: list[str]
) -> None:
    labels = [book.get_page_label(i) for i in range(len(book))]
    body = labels.index("1")
    assert labels[:body] == [_roman(i + 1) for i in range(body)], "front matter: i, ii, ..."
    assert labels[body:] == [str(i + 1) for i in range(len(book) - body)]
    for index in range(body, len(book)):  # the number printed at the foot of the page
        page = book[index]
        width, _ = page.get_size()
        foot = page.get_textpage().get_text_bounded(0, 0, width, 12 * MM).strip()
        assert foot == labels[index], f"page {index}: its foot reads {foot!r}"
    # The front matter's text as pypdf reads it: PDFium splits a short last page of the
    # contents into single characters.
    reader = pypdf.PdfReader(HTML / pdf.PDF_NAME)
    contents = unicodedata.normalize(
        "NFKC", "\n".join(reader.pages[i].extract_text() for i in range(body))
    )
    # (a part's caption is printed in capitals)
    listed = {t.lower(): n for t, n in re.findall(r"^(.*\S) (\d+)\r?$", contents, re.MULTILINE)}
    for mark in _bookmarks(book):
        if mark.level <= 2:
            found = listed.get(mark.title.lower())
            assert found == labels[mark.page], f"contents: {mark.title!r} on {found}"


def _roman(number: int) -> str:
    numerals = [(10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")]
    text = ""
    for value, numeral in numerals:
        while number >= value:
            text, number = text + numeral, number - value
    return text


def test_each_chapter_starts_a_page(book: pypdfium2.PdfDocument, texts: list[str]) -> None:
    marks = _bookmarks(book)
    appendices = next(i for i, m in enumerate(marks) if m.title == pdf.APPENDICES)
    chapters = [m for m in marks[:appendices] if m.level == 1]
    assert len(chapters) == len(memobook.chapters())
    for mark, chapter in zip(chapters, memobook.chapters(), strict=True):
        top = _flat(texts[mark.page])  # a part's first chapter: under its caption
        assert top.removeprefix(chapter.part.upper()).strip().startswith(mark.title)
        assert mark.title.endswith(chapter.title)


def test_nothing_of_the_interface_is_printed(texts: list[str]) -> None:
    labels: set[str] = set(memobook.CHECK_PROMPTS.values())
    for chapter in memobook.chapters():  # the toggles' labels, as the site shows them
        for summary in re.findall(
            r"<summary[^>]*>(.*?)</summary>", _article(chapter.docname), re.DOTALL
        ):
            labels |= {_flat(unescape(t)) for t in re.findall(r">([^<>]+)<", summary) if t.strip()}
    assert "Show code cell source" in labels
    text = _flat(" ".join(texts))
    printed = sorted(label for label in labels if label in text)
    assert not printed, f"the PDF prints interface text: {printed}"
    for chapter in memobook.chapters():
        assert chapter.title in text, f"{chapter.title} is not in the PDF"


def _code_sizes(page: pypdfium2.PdfPage) -> set[float]:
    """The sizes (points) of the monospaced text on a page, from the distance between
    neighbouring characters of a line (what the reader sees, whatever the scaling);
    spaces, whose origins PDFium places apart, are left out."""
    text = page.get_textpage()
    name = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    x, y = ctypes.c_double(), ctypes.c_double()
    sizes: set[float] = set()
    previous: tuple[str, float, float] | None = None
    for index in range(text.count_chars()):
        if chr(pdfium_c.FPDFText_GetUnicode(text.raw, index)).isspace():
            previous = None
            continue
        pdfium_c.FPDFText_GetFontInfo(text.raw, index, name, 128, ctypes.byref(flags))
        pdfium_c.FPDFText_GetCharOrigin(text.raw, index, ctypes.byref(x), ctypes.byref(y))
        font = name.value.decode(errors="replace")
        if (
            previous
            and "Mono" in font
            and previous[0] == font
            and abs(previous[2] - y.value) < 0.01
        ):
            step = x.value - previous[1]
            if 0 < step < 20:
                sizes.add(round(step / MONO_ADVANCE, 1))
        previous = (font, x.value, y.value)
    return sizes


def test_code_is_printed_at_a_readable_size(book: pypdfium2.PdfDocument) -> None:
    small = {}
    for index in range(0, len(book), 4):  # a quarter of the pages: every kind of cell occurs
        sizes = _code_sizes(book[index])
        if sizes and min(sizes) < SMALLEST_CODE - 0.05:
            small[book.get_page_label(index)] = min(sizes)
    assert not small, f"code smaller than {SMALLEST_CODE} pt on pages {small}"


def test_figures_are_whole_and_inside_the_page(book: pypdfium2.PdfDocument) -> None:
    stored = sum(
        "image/png" in output.get("data", {})
        for chapter in memobook.chapters()
        for cell in memobook.code_cells(chapter.load())
        for output in cell.get("outputs", [])
    )
    # The introduction prints the figure it shows from a chapter once more.
    stored += (memobook.ROOT / "book" / "intro.md").read_text().count("```{memo-figure}")
    # The pages that draw an image (pypdf reads their resources quickly), then where
    # PDFium places each image on them.
    reader = pypdf.PdfReader(HTML / pdf.PDF_NAME)
    with_images = [
        index
        for index, page in enumerate(reader.pages)
        for xobject in (page.get("/Resources") or {}).get("/XObject", {}).values()
        if xobject.get_object().get("/Subtype") == "/Image"
    ]
    found = 0
    for index in sorted(set(with_images)):
        page = book[index]
        width, height = page.get_size()
        for image in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=1):
            left, bottom, right, top = image.get_bounds()
            found += 1
            inside = left >= 10 * MM and right <= width - 10 * MM
            inside = inside and bottom >= 12 * MM and top <= height - 10 * MM
            assert inside, f"page {index}: a figure runs into the margin or off the page"
    # A figure split across pages would print as two images.
    assert found == stored, f"{stored} figures stored, {found} images printed"


def test_a_chapters_pdf_entry_gives_its_pages(book: pypdfium2.PdfDocument) -> None:
    marks = _bookmarks(book)
    starts = [m for m in marks if m.level == 1]
    for chapter in memobook.chapters():
        page = (HTML / f"{chapter.docname}.html").read_text(encoding="utf-8")
        assert "window.print()" not in page, f"{chapter.name}: .pdf opens the print dialog"
        entry = re.search(r'<a href="([^"]+)"[^>]*\n?\s*class="[^"]*btn-download-pdf-button', page)
        assert entry, f"{chapter.name}: no .pdf entry in the download menu"
        target = (HTML / chapter.docname).parent / entry.group(1)
        assert target.resolve() == (HTML / pdf.chapter_pdf(chapter.name)).resolve()
        index = next(i for i, m in enumerate(starts) if m.title.endswith(chapter.title))
        first = starts[index].page
        end = starts[index + 1].page if index + 1 < len(starts) else len(book)
        part = pypdfium2.PdfDocument(target)
        try:
            assert len(part) == end - first, f"{chapter.name}: its file has other pages"
            assert part.get_page_label(0) == book.get_page_label(first)
            assert _text(part, 0) == _text(book, first)
            assert _text(part, len(part) - 1) == _text(book, end - 1)
            assert [b.level for b in _bookmarks(part)][:1] == [0], "the file's own outline"
        finally:
            part.close()


def test_other_pages_have_no_print_button() -> None:
    pages = [p for p in HTML.rglob("*.html") if "_static" not in p.parts]
    printing = [str(p.relative_to(HTML)) for p in pages if "window.print()" in p.read_text()]
    assert not printing, f".pdf opens the print dialog on {printing}"


def test_the_home_page_links_the_whole_book(page: Page, site_url: str) -> None:
    page.goto(f"{site_url}/book/intro.html")
    link = page.locator("article a", has_text="the whole book as one PDF")
    assert link.get_attribute("href") == f"../{pdf.PDF_NAME}"
    entry = page.locator("a.btn-download-pdf-button")
    assert entry.get_attribute("href") == f"../{pdf.PDF_NAME}"

"""The book as a PDF (``nox -s pdf``), printed from the built site's chapter pages.

The chapters' articles in ``_build/html`` (built first: ``nox -s book``) are put together
into one page: the introduction, then each part with its chapters, each chapter on a new
page; then, as appendices (A, B, ...), the reference pages a reader of paper needs: the
pages made by the ``memo-errors`` and ``memo-changes`` directives (Errors, What
changed). The other reference pages (the memo, the concepts, the status page, the API
reference) stay on the website, and so does every interface element: buttons, the
toggles of folded cells (their code stays folded, as on the site). Headless Chromium
prints the page once, with page numbers; the front matter (title and contents) is
printed after it, small, with the page of every chapter and section read from the
printed body, and pypdf joins the two, writes the outline (parts, chapters, sections)
and the page labels (i, ii, ... then 1, 2, ...). Each chapter's pages are also written
as a file of their own (:func:`chapter_pdf`), which the chapter's download menu links.

Nothing is fetched from the network: the page and everything it loads are served from
the built site, any other request fails. Math is rendered by the site's own MathJax.

Usage: ``python -m memobook.pdf [--chromium PATH]`` (default: ``MEMO_CHROMIUM``, or the
first of chromium, chromium-browser, google-chrome on PATH).
"""

from __future__ import annotations

import argparse
import html
import io
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import memobook

if TYPE_CHECKING:
    from playwright._impl._api_structures import PdfMargins
    from playwright.sync_api import Page, Route
    from pypdf import PdfReader, PdfWriter

SITE = memobook.ROOT / "_build" / "html"
PDF_NAME = "pytorch-memo.pdf"
PDF = SITE / PDF_NAME
CHAPTERS_FOLDER = "pdf"
"""The folder of the site that holds each chapter's pages as a file of its own."""
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
HERE = Path(__file__).parent
STYLE = HERE / "pdf.css"
SCRIPT = HERE / "pdf.js"
ORIGIN = "http://pytorch-memo.invalid"
"""Where the browser finds the book and the site while printing: served from memory and
from ``_build/html`` (:func:`_serve`), never from the network."""
BODY_URL = f"{ORIGIN}/book/__book__.html"
FRONT_URL = f"{ORIGIN}/book/__front__.html"
DEST_SCHEME = "memo-dest:"
"""The front matter's links name a place in the body (``memo-dest:views``); once the two
are joined, each becomes a link to the page of that place."""
MARGIN: PdfMargins = {"top": "15mm", "bottom": "17mm", "left": "18mm", "right": "18mm"}
COLUMN_PX = round((210 - 18 - 18) / 25.4 * 96)
"""The width of the printed column in CSS pixels (A4 less the margins). A page wider
than this would be shrunk to fit, code and all, so the book refuses to print it."""
_TOO_WIDE = """() => document.documentElement.scrollWidth <= innerWidth ? [] :
    [...document.querySelectorAll('article *')]
    .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible')
    .filter(e => ![...e.children].some(c => c.scrollWidth > c.clientWidth + 1))
    .map(e => e.textContent.trim().slice(0, 60))"""
LOAD_TIMEOUT_MS = 600_000
"""How long loading the book's page may take (Playwright's default, 30 s, is too short on
a machine busy with the other checks)."""
FOOTER = (
    '<div style="width:100%;font-size:8pt;text-align:center;color:#555;'
    'font-family:sans-serif"><span class="pageNumber"></span></div>'
)


def chapter_pdf(name: str) -> str:
    """Where a chapter's pages are, relative to the site's root: ``pdf/pytorch-memo-views.pdf``."""
    return f"{CHAPTERS_FOLDER}/{PDF_NAME.removesuffix('.pdf')}-{name}.pdf"


def chromium() -> str | None:
    """The browser to print with: ``MEMO_CHROMIUM``, else the first one on PATH."""
    names = ("chromium", "chromium-browser", "google-chrome")
    return os.environ.get("MEMO_CHROMIUM") or next(filter(None, map(shutil.which, names)), None)


# ------------------------------------------------------------------------ the one page


@dataclass(frozen=True)
class BookPage:
    """One page of the site in the book: its docname, the part it opens (if any), and
    its letter if it is an appendix (``A``)."""

    docname: str
    opens_part: str
    appendix: str = ""


APPENDICES = "Appendices"
"""The caption of the part that holds the appendices."""


def appendix_pages(root: Path | None = None) -> list[str]:
    """The docnames of the pages printed as appendices (``book/errors``): those of the
    site's toc whose source uses the Errors or What changed directive
    (:data:`memobook.ERRORS_DIRECTIVE`, :data:`memobook.CHANGES_DIRECTIVE`), in the toc's
    order."""
    base = root or memobook.ROOT
    found = []
    for entry in memobook.toc_entries(root):
        source = base / f"{entry.docname}.md"
        if source.is_file():
            text = source.read_text(encoding="utf-8")
            if any(
                f"{{{name}}}" in text
                for name in (memobook.ERRORS_DIRECTIVE, memobook.CHANGES_DIRECTIVE)
            ):
                found.append(entry.docname)
    return found


def book_pages(root: Path | None = None) -> list[BookPage]:
    """The pages the PDF holds, in reading order: the root page, every chapter, then
    the appendices."""
    chapters = memobook.chapters(root)
    pages = [BookPage(memobook.toc_entries(root)[0].docname, "")]
    part = None
    for chapter in chapters:
        opens = chapter.part if chapter.part != part else ""
        part = chapter.part
        pages.append(BookPage(chapter.docname, opens))
    for index, docname in enumerate(appendix_pages(root)):
        opens = APPENDICES if index == 0 else ""
        pages.append(BookPage(docname, opens, appendix=chr(ord("A") + index)))
    return pages


_ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*?)</article>', re.DOTALL)
_LINK = re.compile(r"<link\b[^>]*>")
_HREF = re.compile(r'href="([^"]+)"')
_MATHJAX_CONFIG = re.compile(r"<script>window\.MathJax = .*?</script>", re.DOTALL)


def _read(site: Path, docname: str) -> str:
    path = site / f"{docname}.html"
    if not path.is_file():
        msg = f"{path} is missing: build the site first (nox -s book)"
        raise FileNotFoundError(msg)
    return path.read_text(encoding="utf-8")


def _head(html_pages: list[str], title: str) -> str:
    """The ``<head>`` of the book: the site's stylesheets (those of its first page), the
    book's own, and MathJax where a page has math."""
    links = [
        f'<link rel="stylesheet" href="{href}">'
        for tag in _LINK.findall(html_pages[0].split("</head>")[0])
        if 'rel="stylesheet"' in tag
        for href in _HREF.findall(tag)
    ]
    mathjax = ""
    for page in html_pages:
        config = _MATHJAX_CONFIG.search(page)
        if config:
            mathjax = f'{config.group()}<script src="../_static/mathjax/tex-chtml.js"></script>'
            break
    style = STYLE.read_text(encoding="utf-8")
    return (
        f'<head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"{''.join(links)}<style>{style}</style>{mathjax}</head>"
    )


def book_html(site: Path = SITE, root: Path | None = None) -> str:
    """The body of the book as one HTML page (its URL: :data:`BODY_URL`).

    Each page's article is wrapped in ``<section class="memo-pdf-page" data-page=NAME>``
    (an appendix's with ``data-appendix=LETTER``, which numbers it ``A.``); a part
    opens with ``<section class="memo-pdf-part">`` and its caption. ``pdf.js``
    then makes the ids unique and the links point inside the book.
    """
    pages = book_pages(root)
    html_pages = [_read(site, page.docname) for page in pages]
    body: list[str] = []
    parts = 0
    for page, text in zip(pages, html_pages, strict=True):
        match = _ARTICLE.search(text)
        if match is None:
            msg = f"{page.docname}.html has no <article class=bd-article>: not a page of this site"
            raise ValueError(msg)
        if page.opens_part:
            if parts:
                body.append("</section>")
            parts += 1
            body.append(
                f'<section class="memo-pdf-part" id="part-{parts}">'
                f'<p class="memo-pdf-part-title">{html.escape(page.opens_part)}</p>'
            )
        name = Path(page.docname).name
        appendix = f' data-appendix="{page.appendix}"' if page.appendix else ""
        body.append(
            f'<section class="memo-pdf-page" id="{name}" data-page="{name}"{appendix}>'
            f"{match.group(1)}</section>"
        )
    if parts:
        body.append("</section>")
    title = str(memobook.config()["title"])
    return (
        f'<!DOCTYPE html><html lang="en" data-theme="light">{_head(html_pages, title)}'
        '<body><div class="bd-content"><article class="bd-article memo-pdf">'
        f"{''.join(body)}</article></div></body></html>"
    )


@dataclass(frozen=True)
class Heading:
    """A place in the outline and the contents: a part, a chapter, a section.

    Attributes:
        level: 0 the introduction or a part, 1 a chapter, 2 a section, 3 a subsection.
        number: its number as the site shows it (``2.6.``), empty for parts.
        title: its title without the number.
        anchor: the id of its place in the body.
    """

    level: int
    number: str
    title: str
    anchor: str

    @property
    def label(self) -> str:
        return f"{self.number} {self.title}".strip()


def front_html(
    head: str, headings: list[Heading], pages: dict[str, int], *, contents_level: int = 2
) -> str:
    """The front matter: the title page and the contents, with the page of each entry (the
    numbers printed in the body's footers); each entry links to its place."""
    config = memobook.config()
    title = html.escape(str(config["title"]))
    author = html.escape(str(config.get("author", "")))
    url = source_url()
    source = f' (its source: <a href="{html.escape(url)}">{html.escape(url)}</a>)' if url else ""
    lines = []
    for heading in headings:
        if heading.level > contents_level:
            continue
        page = pages.get(heading.anchor)
        number = f'<span class="memo-pdf-number">{html.escape(heading.number)}</span>'
        lines.append(
            f'<li class="memo-pdf-contents-{heading.level}">'
            f'<a href="{DEST_SCHEME}{html.escape(heading.anchor)}">{number}'
            f'<span class="memo-pdf-entry">{html.escape(heading.title)}</span>'
            f'<span class="memo-pdf-page-number">{"" if page is None else page}</span></a></li>'
        )
    return (
        f'<!DOCTYPE html><html lang="en" data-theme="light">{head}<body>'
        '<div class="bd-content"><article class="bd-article memo-pdf">'
        f'<section class="memo-pdf-title"><h1>{title}</h1><p>{author}</p>'
        "<p>Printed from the chapters' stored outputs. Errors and What changed are "
        "the appendices; the other reference pages (the memo, the concepts, the status "
        f"page and the API reference) are on the book's website{source}.</p></section>"
        '<nav class="memo-pdf-contents"><h2>Contents</h2>'
        f"<ol>{''.join(lines)}</ol></nav></article></div></body></html>"
    )


def source_url() -> str:
    """Where the book's source is: ``repository.url`` of ``_config.yml`` (empty if unset)."""
    repository = memobook.config().get("repository") or {}
    return str(repository.get("url") or "")


# ---------------------------------------------------------------------------- printing


def _serve(site: Path, documents: dict[str, str]) -> Any:
    """A route handler: the documents from memory, the site's files from ``site``, and
    nothing else (every other request fails)."""
    from urllib.parse import unquote, urlsplit

    root = site.resolve()

    def handle(route: Route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != ORIGIN:
            route.abort()
            return
        document = documents.get(url.split("#")[0])
        if document is not None:
            route.fulfill(body=document, content_type="text/html; charset=utf-8")
            return
        path = (root / unquote(parts.path).lstrip("/")).resolve()
        if path.is_relative_to(root) and path.is_file():
            route.fulfill(path=path)
        else:
            route.abort()

    return handle


def _load(tab: Page, url: str) -> None:
    tab.goto(url, wait_until="load")
    tab.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")


@dataclass
class Printed:
    """What Chromium printed: the body, its front matter, and the body's headings."""

    body: bytes
    front: bytes
    headings: list[Heading]
    pages: dict[str, int]
    """The page (0-based, in the body) of each heading's anchor."""


def print_book(site: Path, browser: str) -> Printed:
    """Print the body, read where each heading landed, then print the front matter."""
    from playwright.sync_api import sync_playwright

    body_html = book_html(site)
    documents = {BODY_URL: body_html}
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=browser, args=CHROMIUM_ARGS)
        try:
            tab = launched.new_page(viewport={"width": COLUMN_PX, "height": 1000})
            tab.set_default_timeout(LOAD_TIMEOUT_MS)  # a busy machine loads slowly
            tab.route("**/*", _serve(site, documents))
            tab.emulate_media(media="print")
            _load(tab, BODY_URL)
            found = tab.evaluate(SCRIPT.read_text(encoding="utf-8"))
            wide = tab.evaluate(_TOO_WIDE)
            if wide:
                msg = (
                    f"these blocks are wider than the printed column ({COLUMN_PX} px) and "
                    f"Chromium would shrink every page to fit them: {wide[:5]}"
                )
                raise RuntimeError(msg)
            headings = [Heading(**h) for h in found]
            body = tab.pdf(
                format="A4",
                print_background=True,
                margin=MARGIN,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
            )
            pages = destinations(body)
            missing = [h.anchor for h in headings if h.anchor not in pages]
            if missing:
                msg = f"Chromium wrote no destination for these headings: {missing[:5]}"
                raise RuntimeError(msg)
            head = re.search(r"<head>.*?</head>", body_html, re.DOTALL)
            assert head is not None  # book_html wrote it
            numbers = {anchor: index + 1 for anchor, index in pages.items()}
            documents[FRONT_URL] = front_html(head.group(), headings, numbers)
            _load(tab, FRONT_URL)
            front = tab.pdf(format="A4", print_background=True, margin=MARGIN)
        finally:
            launched.close()
    return Printed(body, front, headings, pages)


# --------------------------------------------------------------------- the PDF files


def _reader(data: bytes) -> PdfReader:
    import logging

    from pypdf import PdfReader

    # Chromium's files make pypdf warn of a trailer size it then corrects.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    return PdfReader(io.BytesIO(data))


def destinations(data: bytes) -> dict[str, int]:
    """The named destinations of a PDF Chromium printed, and the page (0-based) of each:
    Chromium writes one for every id some link of the page points to."""
    reader = _reader(data)
    pages = {
        str(name).removeprefix("/"): reader.get_destination_page_number(dest)
        for name, dest in reader.named_destinations.items()
    }
    return {name: page for name, page in pages.items() if page is not None}


def _outline(writer: PdfWriter, headings: list[Heading], page_of: dict[str, int]) -> None:
    parents: dict[int, Any] = {}
    for heading in headings:
        if heading.anchor not in page_of:
            continue
        parent = next(
            (parents[level] for level in range(heading.level - 1, -1, -1) if level in parents), None
        )
        item = writer.add_outline_item(
            title=heading.label,
            page_number=page_of[heading.anchor],
            parent=parent,
            is_open=heading.level < 1,
        )
        parents[heading.level] = item
        for deeper in [level for level in parents if level > heading.level]:
            del parents[deeper]


def _link_front(writer: PdfWriter, front_pages: int, page_of: dict[str, int]) -> None:
    """Turn the front matter's ``memo-dest:`` links into links to their pages."""
    from pypdf.generic import ArrayObject, NameObject, NumberObject

    for index in range(front_pages):
        for ref in writer.pages[index].get("/Annots") or []:
            annotation = ref.get_object()
            action = annotation.get("/A")
            uri = str(action.get("/URI", "")) if action is not None else ""
            if not uri.startswith(DEST_SCHEME):
                continue
            target = page_of.get(uri.removeprefix(DEST_SCHEME))
            del annotation["/A"]
            if target is not None:
                page = writer.pages[target].indirect_reference
                annotation[NameObject("/Dest")] = ArrayObject([page, NameObject("/Fit")])
            else:
                annotation[NameObject("/F")] = NumberObject(0)


def _write(writer: PdfWriter, target: Path) -> int:
    from pytorch_memo._files import atomic_file

    data = io.BytesIO()
    writer.write(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(target) as (file, _):
        file.write(data.getvalue())
    return len(data.getvalue())


def chapter_ranges(headings: list[Heading], pages: dict[str, int], total: int) -> dict[str, range]:
    """The body's pages (0-based) of each chapter (``views``)."""
    starts = [(h.anchor, pages[h.anchor]) for h in headings if h.level == 1]
    starts.append(("", total))
    return {anchor: range(start, starts[i + 1][1]) for i, (anchor, start) in enumerate(starts[:-1])}


def write_book(printed: Printed, site: Path = SITE) -> tuple[int, int]:
    """Join the front matter and the body into the book, write it and each chapter's
    pages; return the book's size in bytes and its number of pages."""
    from pypdf import PdfWriter
    from pypdf.constants import PageLabelStyle

    body = _reader(printed.body)
    front = _reader(printed.front)
    writer = PdfWriter()
    writer.append(front, import_outline=False)
    writer.append(body, import_outline=False)
    offset = len(front.pages)
    page_of = {anchor: offset + index for anchor, index in printed.pages.items()}
    _link_front(writer, offset, page_of)
    _outline(writer, printed.headings, page_of)
    writer.set_page_label(0, offset - 1, style=PageLabelStyle.LOWERCASE_ROMAN, start=1)
    writer.set_page_label(offset, len(writer.pages) - 1, style=PageLabelStyle.DECIMAL, start=1)
    writer.add_metadata({"/Title": str(memobook.config()["title"])})
    size = _write(writer, site / PDF_NAME)

    folder = site / CHAPTERS_FOLDER
    ranges = chapter_ranges(printed.headings, printed.pages, len(body.pages))
    written = set()
    for chapter in memobook.chapters():
        span = ranges[chapter.name]
        part = PdfWriter()
        part.append(body, pages=(span.start, span.stop), import_outline=False)
        mine = [
            h
            for h in printed.headings
            if h.level >= 1 and span.start <= printed.pages[h.anchor] < span.stop
        ]
        _outline(part, mine, {h.anchor: printed.pages[h.anchor] - span.start for h in mine})
        part.set_page_label(0, len(span) - 1, style=PageLabelStyle.DECIMAL, start=span.start + 1)
        part.add_metadata({"/Title": f"{chapter.title} ({memobook.config()['title']})"})
        target = site / chapter_pdf(chapter.name)
        _write(part, target)
        written.add(target.name)
    for stale in folder.glob("*.pdf"):
        if stale.name not in written:
            stale.unlink()
    return size, len(writer.pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.pdf", description=__doc__)
    parser.add_argument("--chromium", help="the browser to print with")
    args = parser.parse_args(argv)
    browser = args.chromium or chromium()
    if browser is None:
        parser.error("printing needs Chromium (Debian: apt-get install -y chromium) or --chromium")
    try:
        printed = print_book(SITE, browser)
    except FileNotFoundError as missing:
        parser.error(str(missing))
    size, pages = write_book(printed)
    print(
        f"wrote {PDF.relative_to(memobook.ROOT)}: {pages} pages, {size / 1e6:.1f} MB, "
        f"and each chapter's pages in {(SITE / CHAPTERS_FOLDER).relative_to(memobook.ROOT)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

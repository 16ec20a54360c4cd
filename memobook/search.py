"""Search that finds the section: the site's search index, one record per section.

Sphinx's own search (the theme's) ranks whole pages, needs every word of a question on
one page, and builds its excerpts from the page's HTML, navigation included. This
module gives the site a Pagefind index (https://pagefind.app, the ``pagefind[bin]``
package: a static index in small compressed chunks, searched in the browser by a
WebAssembly module) built from the doctrees after the HTML is written, with one record
per section: its title, its prose, its code cells and their text outputs, each with a
weight. Its URL is the section's anchor, so a result opens the section itself.

- Each record says whether its page is a chapter (its ``kind``): the search ranks the
  sections of the memo, the API reference, the status, Errors and What changed pages
  below the chapters' (``REFERENCE_FACTOR`` in the script).
- Nothing of the theme (buttons, sidebars, contents) is in a record, so no excerpt
  shows navigation; neither is the setup cell every chapter opens with, nor the GPU
  notes repeated beside every ``gpu`` cell.
- ``_static/memo-search.js`` runs the search on the theme's search page: each word
  alone, summed, so a question finds the sections that share most of its words, and
  the question as a phrase, so a pasted error message finds where it is printed. A
  result links to ``page.html?highlight=WORDS#section``; arriving there marks the words
  inside the article and opens folded cells that hold them.

The index is written to ``_build/html/pagefind/`` at the end of every HTML build (the
``build-finished`` event), replacing the previous one whole, without Pagefind's own
search interfaces (``UNUSED``: 2.7 MB the script never loads). The theme loads Sphinx's
search tools and its whole-site ``searchindex.js`` (some 240 KB) on every page for a
search-as-you-type this site does not use; :func:`drop_search_tools` leaves them only on
the search page, where they are the fallback when Pagefind cannot load (``file://``).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes

import memobook

BUNDLE = "pagefind"
"""The folder of the built site that holds the index and Pagefind's scripts."""

UNUSED = ("pagefind-ui.", "pagefind-component-ui.", "pagefind-modular-ui.")
"""Pagefind's ready-made search interfaces (scripts and styles, by name prefix): the site
runs its own (``memo-search.js``), which imports ``pagefind.js`` alone."""

SEARCH_TOOLS = re.compile(
    r'[ \t]*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|'
    r'searchindex\.js)"></script>\n?'
)
"""The theme's tags that load Sphinx's search on every page (pydata-sphinx-theme's
``layout.html``, for its search-as-you-type)."""

WEIGHTS = {"title": 5.0, "prose": 1.0, "code": 0.8, "output": 0.5, "context": 0.5}
"""Weight of a word by where it stands in a section (Pagefind's scale, 0 to 10)."""

_SKIPPED = (
    nodes.image,
    nodes.math,
    nodes.math_block,
    nodes.comment,
    nodes.system_message,
    nodes.target,
    nodes.substitution_definition,
)
_INLINE = (nodes.Inline, nodes.TextElement)
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class Record:
    """One section as the index holds it.

    Attributes:
        url: the section's address relative to the site's root, with its anchor
            (``book/views.html#view-vs-reshape``).
        title: the section's title.
        page: the title of the page it is on.
        chapter: whether the page is a chapter (else a reference page).
        parts: ``(kind, text)`` in reading order; kind is a key of :data:`WEIGHTS`.
        context: the titles of the page and of the sections it is in, outermost
            first: a section is about its chapter's subject too.
    """

    url: str
    title: str
    page: str
    chapter: bool
    parts: tuple[tuple[str, str], ...]
    context: tuple[str, ...] = ()

    def html(self) -> str:
        """The record as the HTML document Pagefind reads: a weight on every block."""
        meta = {
            "title": self.title,
            "page": self.page,
            "kind": self.kind,
            "href": self.url,
            "context": self.context_text,
        }
        head = "".join(
            f'<meta data-pagefind-meta="{key}[content]" content="{html.escape(value)}">'
            for key, value in meta.items()
        )
        # The context last: the search knows its words (the metadata) and shows them
        # neither in an excerpt nor among the words a result's page marks.
        blocks = [("title", self.title), *self.parts]
        if self.context:
            blocks.append(("context", self.context_text))
        body = "".join(
            f'<{"h1" if kind == "title" else "p"} data-pagefind-weight="'
            f'{WEIGHTS[kind]:.2f}">{html.escape(text)}</{"h1" if kind == "title" else "p"}>'
            for kind, text in blocks
        )
        return f'<!DOCTYPE html><html lang="en"><head>{head}</head><body>{body}</body></html>'

    @property
    def context_text(self) -> str:
        """The context as the search shows it, and as the record's last words."""
        return " \u203a ".join(self.context)

    @property
    def kind(self) -> str:
        """``chapter`` or ``reference``."""
        return "chapter" if self.chapter else "reference"


def text_of(node: nodes.Node) -> str:
    """The words of ``node`` as a reader sees them: no images, math source, comments or
    titles; HTML outputs (tables) as their text; blocks separated by a space."""
    if isinstance(node, nodes.Text):
        return str(node)
    if isinstance(node, _SKIPPED):
        return ""
    if isinstance(node, nodes.raw):
        if "html" not in str(node.get("format", "")).split():
            return ""
        return html.unescape(_TAG.sub(" ", node.astext()))
    if not isinstance(node, nodes.Element):
        return ""
    parts = [text_of(child) for child in node.children]
    joined = "".join(parts) if isinstance(node, _INLINE) else " ".join(parts)
    return " ".join(joined.split()) if not isinstance(node, nodes.FixedTextElement) else joined


def _cell_parts(cell: nodes.Element, setup_source: str) -> Iterator[tuple[str, str]]:
    """A code cell's source and text outputs; nothing for the setup cell."""
    for part in cell.children:
        if not isinstance(part, nodes.Element):
            continue
        text = text_of(part).strip()
        if part.get("nb_element") == "cell_code_source":
            if text.split() == setup_source.split():
                return
            kind = "code"
        else:
            kind = "output"
        if text:
            yield kind, text


def _parts(section: nodes.section, setup_source: str) -> Iterator[tuple[str, str]]:
    """The section's own blocks, its subsections left out (they are records of their own)."""
    for child in section.children:
        if isinstance(child, (nodes.section, nodes.title)) or not isinstance(child, nodes.Element):
            continue
        if "memo-gpu-note" in child["classes"]:
            continue
        if child.get("nb_element") == "cell_code":
            yield from _cell_parts(child, setup_source)
            continue
        text = text_of(child).strip()
        if text:
            yield "prose", text


def _title(section: nodes.Element) -> str:
    title = next((c for c in section.children if isinstance(c, nodes.title)), None)
    return " ".join(title.astext().split()) if title is not None else ""


def _context(section: nodes.Element, page: str) -> Iterator[str]:
    """The page's title and those of the sections around ``section``, outermost first."""
    outer = []
    parent = section.parent
    while isinstance(parent, nodes.section):
        outer.append(_title(parent))
        parent = parent.parent
    seen = {_title(section)}
    for title in [page, *reversed(outer)]:
        if title and title not in seen:
            seen.add(title)
            yield title


def page_records(doctree: nodes.document, *, uri: str, page: str, chapter: bool) -> list[Record]:
    """One record per section of a page (sections without text of their own included:
    their title may be what a reader searches for).

    Args:
        doctree: the page's doctree.
        uri: the page's address relative to the site's root (``book/views.html``).
        page: the page's title.
        chapter: whether the page is a chapter.
    """
    setup_source = memobook.setup_cell_source()
    records = []
    for section in doctree.findall(nodes.section):
        if not section["ids"]:
            continue
        records.append(
            Record(
                url=f"{uri}#{section['ids'][0]}",
                title=_title(section) or page,
                page=page,
                chapter=chapter,
                parts=tuple(_parts(section, setup_source)),
                context=tuple(_context(section, page)),
            )
        )
    return records


def _run_pagefind(records: Iterable[Record], bundle: Path) -> None:
    """Index ``records`` into ``bundle`` with Pagefind's command (one process; its Python
    service answers one file per tenth of a second). Each record is a file of its own;
    its address is its ``href`` metadata, not the file's name."""
    with tempfile.TemporaryDirectory(prefix="memo-search-") as folder:
        for number, record in enumerate(records):
            (Path(folder) / f"{number:05d}.html").write_text(record.html(), encoding="utf-8")
        command = [
            sys.executable, "-m", "pagefind", "--site", folder, "--output-path", str(bundle),
            "--force-language", "en", "--quiet",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            msg = f"Pagefind failed ({done.returncode}): {done.stdout}{done.stderr}"
            raise RuntimeError(msg)


def write_index(records: Iterable[Record], site: Path) -> Path:
    """Write the index of ``records`` to ``site/pagefind``, replacing what was there
    whole: written beside it first, so a failure leaves the old index as it was.

    Returns:
        The bundle's folder.

    Raises:
        FileNotFoundError: ``site`` is not a folder.
        RuntimeError: Pagefind failed, or wrote no index.
    """
    if not site.is_dir():
        raise FileNotFoundError(f"site: expected the built site's folder, got {site}")
    target = site / BUNDLE
    staging = Path(tempfile.mkdtemp(prefix=f".{BUNDLE}-", dir=site))
    try:
        _run_pagefind(records, staging / BUNDLE)
        if not (staging / BUNDLE / "pagefind.js").is_file():
            raise RuntimeError(f"Pagefind wrote no pagefind.js into {staging / BUNDLE}")
        for unused in (staging / BUNDLE).iterdir():
            if unused.is_file() and unused.name.startswith(UNUSED):
                unused.unlink()
        old = None
        if target.exists():
            old = staging / "old"
            target.rename(old)
        (staging / BUNDLE).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def drop_search_tools(site: Path) -> int:
    """Take the theme's Sphinx-search tags out of every page of ``site`` but the search
    page (``search.html``, where the theme's search is the fallback); return how many
    pages changed. Each page is rewritten atomically."""
    from pytorch_memo._files import write_text

    changed = 0
    for page in sorted(site.rglob("*.html")):
        if page.name == "search.html" or BUNDLE in page.relative_to(site).parts:
            continue
        text = page.read_text(encoding="utf-8")
        kept = SEARCH_TOOLS.sub("", text)
        if kept != text:
            write_text(page, kept)
            changed += 1
    return changed


class _Index:
    """The records of one Sphinx build: each page's, taken as it is written (its resolved
    doctree, already in memory), then the index written when the build ends."""

    def __init__(self) -> None:
        self.pages: dict[str, list[Record]] = {}
        self.chapters: set[str] | None = None

    def page(self, app: Any, doctree: nodes.document, docname: str) -> list[Record]:
        if self.chapters is None:
            self.chapters = {c.docname for c in memobook.chapters(Path(app.srcdir))}
        title = app.env.titles[docname].astext() if docname in app.env.titles else docname
        uri = app.builder.get_target_uri(docname)
        return page_records(doctree, uri=uri, page=title, chapter=docname in self.chapters)

    def collect(self, app: Any, doctree: nodes.document, docname: str) -> None:
        if app.builder.name == "html":  # the site; not the single page the PDF prints
            self.pages[docname] = self.page(app, doctree, docname)

    def write(self, app: Any, exception: BaseException | None) -> None:
        if exception is not None or app.builder.name != "html":
            return
        from sphinx.util import logging

        start = time.monotonic()
        # A page written by another process (a parallel build) is read back from disk.
        for docname in sorted(set(app.env.found_docs) - self.pages.keys()):
            self.pages[docname] = self.page(app, app.env.get_doctree(docname), docname)
        records = [r for name in sorted(self.pages) for r in self.pages[name]]
        write_index(records, Path(app.outdir))
        drop_search_tools(Path(app.outdir))
        logging.getLogger(__name__).info(
            f"search index: {len(records)} sections in {time.monotonic() - start:.1f} s"
        )


def setup(app: Any) -> None:
    """Index every page as it is written and write the index when the build ends; load
    the search's script (it runs the search on the search page and marks the words on
    the others) and its styles on every page."""
    index = _Index()
    app.connect("doctree-resolved", index.collect)
    app.connect("build-finished", index.write)
    app.add_js_file("memo-search.js")
    app.add_css_file("memo-search.css")

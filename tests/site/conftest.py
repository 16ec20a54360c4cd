"""Fixtures for the browser checks of the built site (`nox -s site`).

The site in _build/html is served on 127.0.0.1 and opened in headless Chromium through
Playwright (its driver ships in the wheel; the browser is Debian's chromium, whose path
`nox -s site` passes in MEMO_CHROMIUM).
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

import memobook
from memobook import pdf

HTML = memobook.ROOT / "_build" / "html"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def site_url() -> Iterator[str]:
    """Base URL of the built site, served from _build/html on a free loopback port."""
    if not (HTML / "index.html").exists():
        pytest.fail("_build/html/index.html is missing: build the book first (nox -s book)")
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    chromium = pdf.chromium()  # the browser that prints the PDF
    if chromium is None:
        pytest.fail("no chromium: install Debian's chromium or set MEMO_CHROMIUM")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=pdf.CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture(scope="session", params=[c.path for c in memobook.chapters()], ids=lambda p: p.stem)
def chapter_page(
    request: pytest.FixtureRequest, browser: Browser, site_url: str
) -> Iterator[tuple[Path, Page]]:
    """``(notebook, page)``: each chapter's page, loaded once at 1280 x 900 and shared by
    the tests that only read it (pytest runs them together, chapter by chapter)."""
    notebook: Path = request.param
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto(f"{site_url}/{notebook.relative_to(memobook.ROOT).with_suffix('.html')}")
    opened.wait_for_load_state("load")
    yield notebook, opened
    context.close()
    assert not errors, f"JavaScript errors on {notebook.stem}'s page: {errors}"


def chapter_pages() -> list[Path]:
    """The chapter notebooks listed in _toc.yml, in reading order."""
    return [c.path for c in memobook.chapters()]

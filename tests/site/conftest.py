"""Fixtures for the browser checks of the built site (`nox -s site`).

The site in _build/html is served on 127.0.0.1 and opened in headless Chromium through
Playwright (its driver ships in the wheel; the browser is Debian's chromium, whose path
`nox -s site` passes in MEMO_CHROMIUM).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Error, Page, ViewportSize, sync_playwright

import memobook
from memobook import pdf

HTML = memobook.ROOT / "_build" / "html"


SERVED: list[tuple[str, int]] = []
"""Every request the site's server answered, ``(path, status)``, in order: what the
browser fetched on its own (a favicon) as well as what the pages asked for."""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = int(code) if isinstance(code, int) or str(code).isdigit() else 0
        SERVED.append((self.path, status))


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


DESKTOP: ViewportSize = {"width": 1280, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}


# Opening a tab costs Chromium about a CPU-second more than navigating an open one (about
# half a second for a chapter), and these checks load some sixty pages: each viewport has
# one context and one tab, which every test that loads its own page navigates.
@pytest.fixture(scope="session")
def desktop(browser: Browser) -> Iterator[BrowserContext]:
    """The 1280 x 900 context of the site's checks."""
    context = browser.new_context(viewport=DESKTOP)
    yield context
    context.close()


@pytest.fixture(scope="session")
def phone(browser: Browser) -> Iterator[BrowserContext]:
    """The 390 x 844 touch-screen context of the site's checks."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    yield context
    context.close()


@contextlib.contextmanager
def _watched(tab: Page, what: str) -> Iterator[Page]:
    """``tab`` while a test uses it; then left blank, with the site's storage cleared, and
    the test fails if a script on a page it loaded raised an error."""
    errors: list[str] = []

    def record(error: Error) -> None:
        errors.append(str(error))

    tab.on("pageerror", record)
    try:
        yield tab
    finally:
        tab.remove_listener("pageerror", record)
        with contextlib.suppress(Error):  # a page the test left mid-way, or none loaded
            tab.evaluate("() => { localStorage.clear(); sessionStorage.clear() }")
        tab.goto("about:blank")
    assert not errors, f"JavaScript errors on {what}: {errors}"


@pytest.fixture(scope="session")
def _desktop_tab(desktop: BrowserContext) -> Page:
    return desktop.new_page()


@pytest.fixture(scope="session")
def _phone_tab(phone: BrowserContext) -> Page:
    return phone.new_page()


@pytest.fixture
def page(_desktop_tab: Page) -> Iterator[Page]:
    """A 1280 x 900 tab for a test that loads its own pages."""
    with _watched(_desktop_tab, "the pages the test loaded") as tab:
        yield tab


@pytest.fixture
def phone_page(_phone_tab: Page) -> Iterator[Page]:
    """A 390 x 844 touch-screen tab for a test that loads its own pages."""
    with _watched(_phone_tab, "the pages the test loaded") as tab:
        yield tab


@pytest.fixture(scope="session")
def _chapter_tab(desktop: BrowserContext) -> Page:
    return desktop.new_page()


@pytest.fixture(scope="session", params=[c.path for c in memobook.chapters()], ids=lambda p: p.stem)
def chapter_page(
    request: pytest.FixtureRequest, _chapter_tab: Page, site_url: str
) -> Iterator[tuple[Path, Page]]:
    """``(notebook, page)``: each chapter's page, loaded once at 1280 x 900 and shared by
    the tests that only read it (pytest runs them together, chapter by chapter)."""
    notebook: Path = request.param
    with _watched(_chapter_tab, f"{notebook.stem}'s page") as tab:
        tab.goto(f"{site_url}/{notebook.relative_to(memobook.ROOT).with_suffix('.html')}")
        tab.wait_for_load_state("load")
        yield notebook, tab


def chapter_pages() -> list[Path]:
    """The chapter notebooks listed in _toc.yml, in reading order."""
    return [c.path for c in memobook.chapters()]

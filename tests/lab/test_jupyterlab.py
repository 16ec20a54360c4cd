"""JupyterLab, as a reader uses it (`nox -s lab -- --check` runs this): a chapter opens
unmodified, and Run All finishes without an error, in a real JupyterLab server driven
by headless Chromium."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

import memobook
from memobook.pdf import CHROMIUM_ARGS
from memobook.pdf import chromium as chromium_path

CHAPTERS = ["views", "losses"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A JupyterLab server on a copy of book/ (Run All must not change the stored files)."""
    folder = tmp_path_factory.mktemp("lab")
    shutil.copytree(memobook.BOOK, folder / "book")
    port, token = _free_port(), secrets.token_hex(16)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={folder}"]  # fmt: skip
    if hasattr(os, "getuid") and os.getuid() == 0:
        command.append("--allow-root")
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within 60 s")
        yield folder, f"http://127.0.0.1:{port}/lab/tree/book/{{}}.ipynb?token={token}&reset"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    chromium = chromium_path()  # the browser that prints the PDF
    if chromium is None:
        pytest.fail("no chromium: install Debian's chromium or set MEMO_CHROMIUM")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def _dirty(page: Page) -> bool:
    return bool(
        page.locator(
            ".jp-mod-current.jp-mod-dirty, li.lm-TabBar-tab.jp-mod-current.jp-mod-dirty"
        ).count()
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chapter_opens_unmodified_and_runs_all(
    lab: tuple[Path, str], page: Page, chapter: str
) -> None:
    folder, url = lab
    page.goto(url.format(chapter))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.wait_for_timeout(2_000)  # kernel info arrives and is written into the metadata
    assert not _dirty(page), f"{chapter} opens as modified"
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Escape")
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    indicator = ".jp-Notebook-ExecutionIndicator[data-status='{}']"
    page.wait_for_selector(indicator.format("busy"), timeout=30_000)
    page.wait_for_selector(indicator.format("idle"), timeout=300_000)
    # What ran is read from the saved file: JupyterLab renders only the cells in view.
    saved = folder / "book" / f"{chapter}.ipynb"
    before = saved.stat().st_mtime_ns
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while saved.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.2)
    cells = memobook.code_cells(memobook.load(saved))
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"not every cell ran, in order: {counts}"
    errors = [o for c in cells for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]

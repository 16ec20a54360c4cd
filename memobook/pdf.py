"""The whole book as one PDF (``nox -s pdf``), from the stored outputs.

Jupyter Book's single-page builder (``--builder singlehtml``) writes every page into one
HTML page; headless Chromium prints it to ``_build/html/pytorch-memo.pdf``, beside the
website, whose home page links to it. Math is rendered by the site's own MathJax before
printing; nothing is fetched from the network.

Usage: ``python -m memobook.pdf [--chromium PATH]`` (default: ``MEMO_CHROMIUM``, or the
first of chromium, chromium-browser, google-chrome on PATH).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import memobook

SINGLE = memobook.ROOT / "_build" / "singlehtml"
PDF = memobook.ROOT / "_build" / "html" / "pytorch-memo.pdf"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def chromium() -> str | None:
    """The browser to print with: ``MEMO_CHROMIUM``, else the first one on PATH."""
    names = ("chromium", "chromium-browser", "google-chrome")
    return os.environ.get("MEMO_CHROMIUM") or next(filter(None, map(shutil.which, names)), None)


def build_single_page() -> Path:
    """Build the single-page site; return the page, copied to the site's root.

    Jupyter Book names the page after the root document (``book/intro.html``) but links
    its assets from the site's root (``_static/...``), so the page is printed from there.
    """
    command = ["jupyter-book", "build", str(memobook.ROOT), "--builder", "singlehtml"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    root = memobook.toc_entries()[0].docname
    page = SINGLE / f"{root}.html"
    printed = SINGLE / "pytorch-memo.html"
    shutil.copyfile(page, printed)
    return printed


def print_pdf(page: Path, target: Path, browser: str) -> int:
    """Print ``page`` to ``target`` (written atomically); return its size in bytes."""
    from playwright.sync_api import sync_playwright

    from pytorch_memo._files import atomic_file

    target.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=browser, args=CHROMIUM_ARGS)
        try:
            tab = launched.new_page()
            # Everything comes from the built site: any request to the network fails.
            tab.route("http*://**", lambda route: route.abort())
            tab.goto(page.as_uri())
            tab.wait_for_function(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
            )
            tab.evaluate("() => MathJax.startup.promise")
            tab.emulate_media(media="print")
            data = tab.pdf(
                format="A4",
                print_background=True,
                margin={"top": "14mm", "bottom": "14mm", "left": "12mm", "right": "12mm"},
            )
        finally:
            launched.close()
    with atomic_file(target) as (file, _):
        file.write(data)
    return len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.pdf", description=__doc__)
    parser.add_argument("--chromium", help="the browser to print with")
    args = parser.parse_args(argv)
    browser = args.chromium or chromium()
    if browser is None:
        parser.error("printing needs Chromium (Debian: apt-get install -y chromium) or --chromium")
    size = print_pdf(build_single_page(), PDF, browser)
    print(f"wrote {PDF.relative_to(memobook.ROOT)}: {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every figure of a chapter says in its alt text what it shows (its cell's caption or
titles, memobook.figures), not its file's path, and links to its full-size image."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page

import memobook
from memobook.figures import figures, image_count


def test_figures_say_what_they_show_and_open_full_size(chapter_page: tuple[Path, Page]) -> None:
    notebook, page = chapter_page
    nb = memobook.load(notebook)
    expected = [f.description for f in figures(nb) for _ in range(image_count(nb["cells"][f.cell]))]
    images = page.locator("article div.cell_output img")
    assert images.count() == len(expected)
    found = images.evaluate_all(
        "els => els.map(e => ({alt: e.getAttribute('alt'), src: e.src,"
        " href: e.parentElement.closest('a') ? e.parentElement.closest('a').href : null}))"
    )
    for i, (image, description) in enumerate(zip(found, expected, strict=True)):
        where = f"{notebook.name}, figure {i}"
        assert description, f"{where}: its cell has no caption or title"
        assert image["alt"] == description, f"{where}: alt {image['alt']!r}"
        assert image["href"] == image["src"], f"{where}: links {image['href']}, not its image"

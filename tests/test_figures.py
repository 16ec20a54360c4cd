"""What each figure shows (memobook.figures): the cell's caption, else its titles."""

from __future__ import annotations

from typing import Any

import memobook
from memobook.figures import caption, description, figures, image_count, titles


def test_a_caption_is_read_with_its_continuation_lines() -> None:
    source = (
        "x = 1\n"
        "# Figure: the tensor as a grid,\n"
        "#   joined to its storage.\n"
        "# a plain comment\n"
        "plot_view(t)\n"
    )
    assert caption(source) == "the tensor as a grid, joined to its storage."
    assert description(source) == caption(source)


def test_without_a_caption_the_titles_in_the_order_written() -> None:
    source = (
        "fig, (top, bottom) = plt.subplots(2, 1)\n"
        'plot_storage(a, ax=top, title="contiguous")\n'
        'bottom.set_title("channels_last")\n'
        'fig.suptitle("two layouts")\n'
        'ax.set(title=name, xlabel="calls")\n'  # not a literal: left out
        'plot_view(t, title=f"{t.shape}")\n'  # an f-string: left out
    )
    assert titles(source) == ["contiguous", "channels_last", "two layouts"]
    assert description(source) == "contiguous; channels_last; two layouts"


def test_a_cell_with_neither_says_nothing() -> None:
    assert description("plot_view(t)\nplt.show()") == ""
    assert description("%timeit x + 1") == ""  # not Python: no titles, no error


def test_figures_are_the_cells_with_images() -> None:
    png = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "fig"}}
    text = {"output_type": "stream", "name": "stdout", "text": "hi"}
    nb: dict[str, Any] = {
        "cells": [
            {"cell_type": "markdown", "source": "# T", "metadata": {}},
            {"cell_type": "code", "id": "a1", "source": 'f(title="one")', "outputs": [png]},
            {"cell_type": "code", "id": "b2", "source": "print(1)", "outputs": [text]},
            {
                "cell_type": "code",
                "id": "c3",
                "source": "# Figure: two\ng()",
                "outputs": [png, png],
            },
        ]
    }
    found = figures(nb)
    assert [(f.cell, f.cell_id, f.description) for f in found] == [
        (1, "a1", "one"),
        (3, "c3", "two"),
    ]
    assert image_count(nb["cells"][3]) == 2


def test_the_books_figures_are_described_in_words_not_paths() -> None:
    found = [f for c in memobook.chapters() for f in figures(c.load())]
    assert len(found) > 10
    for figure in found:
        assert len(figure.description) > 10, figure
        assert ".png" not in figure.description, figure

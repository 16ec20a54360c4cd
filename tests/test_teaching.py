"""The teaching figures (memobook.teaching): what share of the visible code checks."""

from __future__ import annotations

from typing import Any

import memobook
from memobook import teaching


def _cell(source: str, *, outputs: int = 0, tags: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "source": source,
        "metadata": {"tags": list(tags)},
        "outputs": [{"output_type": "stream", "text": "x"}] * outputs,
    }


def test_claim_comments_asserts_and_raises_count_as_check_lines() -> None:
    source = (
        "# Claim: a thing holds,\n"
        "#   over two lines.\n"
        "# an ordinary comment\n"
        "x = 1\n"
        "\n"
        "assert (\n"
        "    x == 1\n"
        ")\n"
        "with raises(ValueError, match='no'):\n"
        "    int('no')\n"
        "torch.testing.assert_close(x, x)\n"
        "y = assert_close\n"
    )
    shown, checking = teaching.cell_figures(_cell(source))
    # 11 non-blank lines; the claim (2), the assert (3), the `with raises` header (1) and
    # the checking call (1) check; the plain comment, the code and the body do not.
    assert (shown, checking) == (11, 7)


def test_a_cell_that_is_not_python_counts_its_claim_lines_only() -> None:
    shown, checking = teaching.cell_figures(_cell("# Claim: magic.\n%timeit 1\n"))
    assert (shown, checking) == (2, 1)


def test_folded_cells_are_not_counted_and_silent_cells_are(tmp_path: Any) -> None:
    import json

    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "# T", "metadata": {}},
            _cell("import os", tags=("hide-input",)),  # the setup cell
            _cell("x = 1\nx", outputs=1),
            _cell("y = 2"),  # silent
            _cell("# Claim: x is 1.\nassert x == 1", tags=("check", "hide-input")),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "topic.ipynb"
    path.write_text(json.dumps(nb))
    figures = teaching.chapter_figures(memobook.Chapter(path, "book/topic", "Part"))
    assert figures == teaching.Figures("topic", 3, 0, 2, 1)
    assert figures.silent_share == 0.5
    assert not figures.meets_targets


def test_the_book_row_adds_up_the_chapters() -> None:
    rows = teaching.book_figures()
    assert rows[-1].name == "book"
    assert len(rows) == len(memobook.chapters()) + 1
    assert rows[-1].code_lines == sum(r.code_lines for r in rows[:-1])
    assert rows[-1].silent_cells == sum(r.silent_cells for r in rows[:-1])
    assert "targets for the book" in teaching.table(rows)


def test_strict_fails_when_the_book_misses_a_target(capsys: Any) -> None:
    rows = teaching.book_figures()
    expected = 0 if rows[-1].meets_targets else 1
    assert teaching.main(["--strict"]) == expected
    assert teaching.main([]) == 0
    assert "book" in capsys.readouterr().out

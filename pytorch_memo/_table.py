"""Text and HTML tables shared by the helpers' result types (describe, inventory, ...).

:class:`ResultTable` is the one base of the four result tables (``describe``,
``inventory``, ``explain_gather``, ``explain_broadcast``): a subclass says what its header
and rows are, and the base renders them as text (``str`` and ``repr``) and as HTML
(``_repr_html_``, what Jupyter shows). tests/golden/ holds every rendering.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

T = TypeVar("T")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=_Named)


class NamedRows(Generic[R]):
    """Lookup by name, iteration and length over a table's ``rows``."""

    rows: tuple[R, ...]

    def __getitem__(self, name: str) -> R:
        for row in self.rows:
            if row.name == name:
                return row
        msg = f"name must be one of {[r.name for r in self.rows]}, got {name!r}"
        raise KeyError(msg)

    def __iter__(self) -> Iterator[R]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def shape_text(values: Sequence[int]) -> str:
    """A tuple of ints as Python writes it: ``(2, 3)``, ``(4,)``, ``()``."""
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


def text_table(lines: Sequence[Sequence[str]], *, align_right: bool = False) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing spaces.

    ``lines[0]`` is the header. The first column is left-aligned; the others too,
    or right-aligned with ``align_right``.
    """
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = [
        "  ".join(
            cell.rjust(width) if align_right and i else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    ]
    return "\n".join(text)


@dataclass(frozen=True)
class Cell:
    """A table cell with HTML emphasis: inline CSS ``style`` and/or ``bold`` text.

    The text rendering shows ``text`` alone; a plain ``str`` is a cell without emphasis.
    """

    text: str
    style: str = ""
    bold: bool = False


def _cell_text(cell: str | Cell) -> str:
    return cell.text if isinstance(cell, Cell) else cell


def _td(cell: str | Cell, code: bool) -> str:
    plain = cell if isinstance(cell, Cell) else Cell(cell)
    content = html.escape(plain.text)
    if code:
        content = f"<code>{content}</code>"
    if plain.bold:
        content = f"<b>{content}</b>"
    style = f' style="{html.escape(plain.style)}"' if plain.style else ""
    return f"<td{style}>{content}</td>"


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str | Cell]],
    *,
    css_class: str,
    code: bool = False,
) -> str:
    """An escaped HTML table; ``code`` wraps each cell's text in ``<code>``."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_td(c, code) for c in row) + "</tr>" for row in rows)
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class ResultTable:
    """Base of the helpers' result tables: a header, rows of cells and an optional note.

    A subclass defines :meth:`_headers` and :meth:`_cells` (and :meth:`_note` when the
    table says more below its rows); the class variables choose the HTML table's CSS
    class, right-aligned text columns, and ``<code>`` cells. Subclasses that are
    dataclasses pass ``repr=False`` so that ``repr`` stays the text table.

    Example:
        >>> class Sizes(ResultTable):
        ...     _css_class = "memo-sizes"
        ...     def _headers(self): return ("name", "size")
        ...     def _cells(self): return [("x", "3"), (Cell("total", bold=True), "3")]
        >>> print(Sizes())
        name   size
        x      3
        total  3
        >>> Sizes()._repr_html_()[-56:]
        '<tr><td><b>total</b></td><td>3</td></tr></tbody></table>'
    """

    _css_class: ClassVar[str]
    _align_right: ClassVar[bool] = False
    _code: ClassVar[bool] = False

    def _headers(self) -> Sequence[str]:
        raise NotImplementedError

    def _cells(self) -> Sequence[Sequence[str | Cell]]:
        raise NotImplementedError

    def _note(self) -> tuple[str, str]:
        """What follows the rows: ``(text, html)``, each empty for nothing."""
        return "", ""

    def __str__(self) -> str:
        lines = [tuple(self._headers())]
        lines += [tuple(_cell_text(c) for c in row) for row in self._cells()]
        note, _ = self._note()
        return text_table(lines, align_right=self._align_right) + (f"\n{note}" if note else "")

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        _, note = self._note()
        table = html_table(
            self._headers(), self._cells(), css_class=self._css_class, code=self._code
        )
        return table + note


def named_arguments(
    positional: Sequence[T], named: Mapping[str, T], *, prefix: str
) -> list[tuple[str, T]]:
    """Name positional arguments ``{prefix}0``, ``{prefix}1``, ... and append the keywords.

    Raises:
        ValueError: a keyword is also the name of a positional argument.
    """
    items = [(f"{prefix}{i}", value) for i, value in enumerate(positional)]
    for name, _ in items:
        if name in named:
            msg = f"keyword {name!r} clashes with the name of positional argument {name}"
            raise ValueError(msg)
    return items + list(named.items())

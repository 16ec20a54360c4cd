"""Text and HTML tables shared by the helpers' result types (describe, inventory, ...)."""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

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


def html_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, css_class: str, code: bool = False
) -> str:
    """An escaped HTML table; ``code`` wraps each cell's text in ``<code>``."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    wrap = "<code>{}</code>" if code else "{}"
    body = "".join(
        "<tr>" + "".join(f"<td>{wrap.format(html.escape(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


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

"""How shapes broadcast: the aligned table of sizes, the result, and why a pair fails.

:func:`explain_broadcast` lines shapes up from the
right as torch does, and :func:`plot_broadcast` draws that alignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pytorch_memo._checks import INT64_MAX, check_axes, check_ints, check_type
from pytorch_memo._table import Cell, ResultTable, named_arguments

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_PLOTTED",
    "BroadcastError",
    "BroadcastRow",
    "BroadcastTable",
    "explain_broadcast",
    "plot_broadcast",
]

MAX_PLOTTED = 16
"""The most operands, and dimensions, :func:`plot_broadcast` draws."""
MISSING = "·"
STRETCHED = "*"


class BroadcastError(ValueError):
    """Shapes that do not broadcast; names the first incompatible dimension (from the right).

    Attributes:
        dim: the dimension counted from the right (``-1`` is the last).
        index: the same dimension as an index into the broadcast result's shape.
        names: the two operands whose sizes clash, in argument order.
        sizes: their sizes in that dimension.
    """

    def __init__(
        self, *, dim: int, index: int, names: tuple[str, str], sizes: tuple[int, int]
    ) -> None:
        self.dim, self.index, self.names, self.sizes = dim, index, names, sizes
        super().__init__(
            f"shapes do not broadcast: in dimension {dim} (index {index} of the aligned "
            f"shapes) {names[0]} has size {sizes[0]} and {names[1]} has size {sizes[1]}; "
            "expected equal sizes, or one of them 1"
        )


@dataclass(frozen=True)
class BroadcastRow:
    """One operand, its sizes aligned to the right (``None`` where it has no dimension)."""

    name: str
    shape: tuple[int, ...]
    aligned: tuple[int | None, ...]
    stretched: tuple[bool, ...]
    """Whether the operand is repeated along each aligned dimension (size 1 or missing)."""

    def cells(self) -> tuple[str, ...]:
        """The aligned sizes as display strings (``·`` missing, ``*`` stretched)."""
        return tuple(
            MISSING if size is None else f"{size}{STRETCHED if wide else ''}"
            for size, wide in zip(self.aligned, self.stretched, strict=True)
        )


_LEGEND = f"({MISSING} no such dimension, {STRETCHED} size 1 repeated to the result's size)"
_MISSING_STYLE = "color:#999"
_STRETCHED_STYLE = "background:#fde2c8"


@dataclass(frozen=True, repr=False)
class BroadcastTable(ResultTable):
    """The operands of a broadcast, aligned from the right, and the result's shape."""

    rows: tuple[BroadcastRow, ...]
    result: tuple[int, ...]
    _css_class = "memo-broadcast"
    _align_right = True

    def _headers(self) -> tuple[str, ...]:
        return ("dim", *(str(d) for d in range(-len(self.result), 0)))

    def _cells(self) -> list[tuple[str | Cell, ...]]:
        body: list[tuple[str | Cell, ...]] = []
        for row in self.rows:
            cells = [
                Cell(
                    cell,
                    style=_MISSING_STYLE if size is None else _STRETCHED_STYLE if wide else "",
                )
                for cell, size, wide in zip(row.cells(), row.aligned, row.stretched, strict=True)
            ]
            body.append((row.name, *cells))
        body.append((Cell("result", bold=True), *(Cell(str(n), bold=True) for n in self.result)))
        return body

    def _note(self) -> tuple[str, str]:
        return _LEGEND, ""


def _shape_of(name: str, operand: Any) -> tuple[int, ...]:
    if isinstance(operand, torch.Tensor):
        if operand.is_nested:
            msg = f"{name} must be a shape or a tensor with one shape, got a nested tensor"
            raise ValueError(msg)
        return tuple(operand.shape)
    spelled = "a shape (a sequence of ints) or a tensor"
    return check_ints(name, operand, minimum=0, maximum=INT64_MAX, spelled=spelled)


def _operands(
    operands: tuple[Any, ...], named: dict[str, Any]
) -> list[tuple[str, tuple[int, ...]]]:
    items = named_arguments(operands, named, prefix="arg")
    if not items:
        msg = "operands must hold at least one shape or tensor, got none"
        raise ValueError(msg)
    return [(name, _shape_of(name, op)) for name, op in items]


def _align(
    shapes: list[tuple[str, tuple[int, ...]]],
) -> tuple[list[tuple[int | None, ...]], list[int | None], BroadcastError | None]:
    """Right-align the shapes; each dimension's result size (``None`` on a clash), and
    the first clash counted from the right."""
    ndim = max(len(shape) for _, shape in shapes)
    aligned = [(None,) * (ndim - len(shape)) + shape for _, shape in shapes]
    result: list[int | None] = []
    first: BroadcastError | None = None
    for index in range(ndim):
        size, owner = 1, ""
        clashed = False
        for (name, _), sizes in zip(shapes, aligned, strict=True):
            n = sizes[index]
            if n is None or n == 1:
                continue
            if size == 1:
                size, owner = n, name
            elif n != size:
                # later (further right) clashes overwrite: the first from the right stays
                first = BroadcastError(
                    dim=index - ndim, index=index, names=(owner, name), sizes=(size, n)
                )
                clashed = True
                break
        result.append(None if clashed else size)
    return aligned, result, first


def explain_broadcast(*operands: Any, **named: Any) -> BroadcastTable:
    """Line shapes up from the right and broadcast them, as torch's element-wise ops do.

    Two sizes in one aligned dimension are compatible when they are equal, when one of
    them is 1 (it is repeated), or when one shape has no such dimension (it counts as 1).

    Args:
        *operands: shapes (sequences of ints, ``torch.Size``) or tensors, named
            ``arg0``, ``arg1``, ... by position.
        **named: shapes or tensors, named by keyword.

    Returns:
        A :class:`BroadcastTable`: one row per operand with its aligned sizes, and the
        result's shape (equal to ``torch.broadcast_shapes``). It prints as a text table
        (an HTML table in Jupyter).

    Raises:
        TypeError: an operand is neither a shape nor a tensor, or a size is not an int.
        ValueError: no operand, a negative size, or a keyword clashing with a
            positional name.
        BroadcastError: the shapes do not broadcast (a ``ValueError`` that names the
            first clashing dimension from the right, the two operands and sizes).

    Example:
        >>> print(explain_broadcast(x=(5, 3, 4, 1), y=(3, 1, 1)))
        dim     -4  -3  -2  -1
        x        5   3   4   1
        y        ·   3  1*   1
        result   5   3   4   1
        (· no such dimension, * size 1 repeated to the result's size)
        >>> explain_broadcast(x=(5, 2, 4, 1), y=(3, 1, 1))
        Traceback (most recent call last):
        ...
        pytorch_memo.broadcasting.BroadcastError: shapes do not broadcast: in dimension -3 (index 1 of the aligned shapes) x has size 2 and y has size 3; expected equal sizes, or one of them 1
    """
    shapes = _operands(operands, named)
    aligned, result, clash = _align(shapes)
    if clash is not None:
        raise clash
    final = tuple(int(n) for n in result if n is not None)
    rows = tuple(
        BroadcastRow(
            name=name,
            shape=shape,
            aligned=sizes,
            stretched=tuple(
                (n is None or n == 1) and r != 1 for n, r in zip(sizes, final, strict=True)
            ),
        )
        for (name, shape), sizes in zip(shapes, aligned, strict=True)
    )
    return BroadcastTable(rows=rows, result=final)


def plot_broadcast(
    *operands: Any, ax: Axes | None = None, title: str | None = None, **named: Any
) -> Axes:
    """Draw shapes aligned from the right, one row of boxes per operand, and the result.

    Boxes: blue, a size kept as it is; orange, a size 1 repeated; dashed, a missing
    dimension (repeated when the result's size is not 1); red, the dimension where the
    shapes clash (then the result shows ``?`` there). Unlike :func:`explain_broadcast`,
    shapes that do not broadcast are drawn, not refused.

    Args:
        *operands: shapes or tensors, named ``arg0``, ``arg1``, ... by position.
        ax: the matplotlib axes to draw on; a new figure by default.
        title: the axes' title.
        **named: shapes or tensors, named by keyword (``ax`` and ``title`` are taken).

    Returns:
        The axes drawn on.

    Raises:
        TypeError: an operand is neither a shape nor a tensor, a size is not an int,
            ``ax`` is not matplotlib axes or ``title`` not a str.
        ValueError: no operand, a negative size, a keyword clashing with a positional
            name, or more than :data:`MAX_PLOTTED` operands or dimensions.

    Example:
        >>> ax = plot_broadcast(x=(0,), y=(2, 2))
        >>> [t.get_text() for t in ax.texts if t.get_color() == "red"]
        ['?']
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    check_axes("ax", ax)
    check_type("title", title, (str, type(None)), "a str or None")
    shapes = _operands(operands, named)
    if len(shapes) > MAX_PLOTTED:
        names = ", ".join(name for name, _ in shapes)
        msg = f"got {len(shapes)} operands ({names}); plot_broadcast draws at most {MAX_PLOTTED}"
        raise ValueError(msg)
    for name, shape in shapes:
        if len(shape) > MAX_PLOTTED:
            msg = (
                f"{name} has {len(shape)} dimensions; plot_broadcast draws at most "
                f"{MAX_PLOTTED}, got shape {shape}"
            )
            raise ValueError(msg)
    aligned, result, clash = _align(shapes)
    ndim = len(result)
    bad = None if clash is None else clash.index
    rows = len(shapes) + 1
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 0.7 * max(ndim, 2), 0.45 * rows + 0.6))
    for r, ((name, _), sizes) in enumerate(zip(shapes, aligned, strict=True)):
        y = rows - r
        ax.text(-0.2, y + 0.4, name, ha="right", va="center", fontsize=9)
        for i, n in enumerate(sizes):
            target = result[i]
            if i == bad and n is not None and n != 1:
                face, style = "#f4a6a6", "solid"
            elif n is None:
                face, style = "white", "dashed"
            elif n == 1 and target != 1:
                face, style = "#fdc998", "solid"
            else:
                face, style = "#b3cde3", "solid"
            ax.add_patch(
                Rectangle((i, y), 0.9, 0.8, facecolor=face, edgecolor="0.3", linestyle=style)
            )
            label = MISSING if n is None else str(n)
            ax.text(i + 0.45, y + 0.4, label, ha="center", va="center", fontsize=9)
    ax.text(-0.2, 0.9 + 0.4, "result", ha="right", va="center", fontsize=9, weight="bold")
    for i, n in enumerate(result):
        face = "#f4a6a6" if n is None else "#ccebc5"
        ax.add_patch(Rectangle((i, 0.9), 0.9, 0.8, facecolor=face, edgecolor="0.1", lw=1.5))
        ax.text(
            i + 0.45, 1.3, "?" if n is None else str(n), ha="center", va="center",
            fontsize=9, weight="bold", color="red" if n is None else "black",
        )  # fmt: skip
        ax.text(i + 0.45, rows + 1.05, str(i - ndim), ha="center", va="bottom", fontsize=7)
    ax.plot([-0.1, max(ndim, 1)], [1.85, 1.85], color="0.3", lw=0.8)
    ax.set_xlim(-1.6, max(ndim, 1) + 0.1)
    ax.set_ylim(0.8, rows + 1.5)
    ax.set_axis_off()
    if title is not None:
        ax.set_title(title, fontsize=9, loc="left")
    return ax

"""What a tensor is made of: shape, dtype, device, strides, storage and autograd flags.

Used from the chapter *Creating tensors* on; :func:`describe` is the book's way of
showing several tensors side by side.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from pytorch_memo._checks import check_tensor
from pytorch_memo.layout import shares_memory

__all__ = ["TensorInfo", "TensorTable", "describe"]

_HEADERS = (
    "name",
    "shape",
    "dtype",
    "device",
    "stride",
    "offset",
    "contiguous",
    "requires_grad",
    "shares memory with",
)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's row of a :class:`TensorTable`."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    stride: tuple[int, ...]
    storage_offset: int
    is_contiguous: bool
    requires_grad: bool
    shares_memory_with: tuple[str, ...]

    def cells(self) -> tuple[str, ...]:
        """The row as display strings, in the order of the table's columns."""
        return (
            self.name,
            _tuple(self.shape),
            str(self.dtype).removeprefix("torch."),
            str(self.device),
            _tuple(self.stride),
            str(self.storage_offset),
            str(self.is_contiguous),
            str(self.requires_grad),
            ", ".join(self.shares_memory_with) or "-",
        )


def _tuple(values: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


@dataclass(frozen=True)
class TensorTable:
    """Rows of :class:`TensorInfo`, shown as a text table or, in Jupyter, an HTML table."""

    rows: tuple[TensorInfo, ...]

    def __getitem__(self, name: str) -> TensorInfo:
        for row in self.rows:
            if row.name == name:
                return row
        msg = f"name must be one of {[r.name for r in self.rows]}, got {name!r}"
        raise KeyError(msg)

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        table = [_HEADERS, *(row.cells() for row in self.rows)]
        widths = [max(len(line[i]) for line in table) for i in range(len(_HEADERS))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in table]
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in _HEADERS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>"
            for row in self.rows
        )
        return (
            '<table class="memo-describe"><thead><tr>'
            f"{head}</tr></thead><tbody>{body}</tbody></table>"
        )


def describe(*tensors: torch.Tensor, **named: torch.Tensor) -> TensorTable:
    """Describe tensors side by side: layout, dtype, device, autograd and shared memory.

    Tensors passed by position are named ``t0``, ``t1``, ...; by keyword, by their
    keyword. The last column lists the other tensors of the same call whose memory
    overlaps this one's (see :func:`pytorch_memo.layout.shares_memory`).

    Args:
        *tensors: tensors to describe, named by position.
        **named: tensors to describe, named by keyword.

    Returns:
        A :class:`TensorTable`; its rows hold the values as torch types, and it prints
        as a text table (an HTML table in Jupyter).

    Raises:
        TypeError: an argument is not a tensor.
        ValueError: no tensor was given, an argument is not strided, or a keyword
            clashes with a positional name.

    Example:
        >>> import torch
        >>> x = torch.zeros(2, 3)
        >>> print(describe(x=x, xt=x.t()))
        name  shape   dtype    device  stride  offset  contiguous  requires_grad  shares memory with
        x     (2, 3)  float32  cpu     (3, 1)  0       True        False          xt
        xt    (3, 2)  float32  cpu     (1, 3)  0       False       False          x
    """
    items = [(f"t{i}", t) for i, t in enumerate(tensors)]
    for name, _ in items:
        if name in named:
            msg = f"keyword {name!r} clashes with the name of positional argument {name}"
            raise ValueError(msg)
    items += list(named.items())
    if not items:
        msg = "describe() needs at least one tensor, got none"
        raise ValueError(msg)
    for name, tensor in items:
        check_tensor(name, tensor)
    rows = tuple(
        TensorInfo(
            name=name,
            shape=tuple(tensor.shape),
            dtype=tensor.dtype,
            device=tensor.device,
            stride=tuple(tensor.stride()),
            storage_offset=int(tensor.storage_offset()),
            is_contiguous=tensor.is_contiguous(),
            requires_grad=tensor.requires_grad,
            shares_memory_with=tuple(
                other for other, t in items if other != name and shares_memory(tensor, t)
            ),
        )
        for name, tensor in items
    )
    return TensorTable(rows)

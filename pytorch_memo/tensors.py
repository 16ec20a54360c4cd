"""What a tensor is made of: shape, dtype, device, strides, storage and autograd flags.

Used from the chapter *Creating tensors* on; :func:`describe` is the book's way of
showing several tensors side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pytorch_memo._checks import check_tensor
from pytorch_memo._table import NamedRows, ResultTable, named_arguments, shape_text
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
            shape_text(self.shape),
            str(self.dtype).removeprefix("torch."),
            str(self.device),
            shape_text(self.stride),
            str(self.storage_offset),
            str(self.is_contiguous),
            str(self.requires_grad),
            ", ".join(self.shares_memory_with) or "-",
        )


@dataclass(frozen=True, repr=False)
class TensorTable(NamedRows[TensorInfo], ResultTable):
    """Rows of :class:`TensorInfo`, shown as a text table or, in Jupyter, an HTML table."""

    rows: tuple[TensorInfo, ...]
    _css_class = "memo-describe"

    def _headers(self) -> tuple[str, ...]:
        return _HEADERS

    def _cells(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]


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
    items = named_arguments(tensors, named, prefix="t")
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

"""What tensors a module holds: parameters, buffers and plain tensor attributes.

:func:`inventory` lists
every tensor of a module and its submodules with what torch does with it (is it in
``parameters()``, in ``state_dict()``, trained, shared with another name).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import nn

from pytorch_memo._checks import _shown, check_type
from pytorch_memo._table import NamedRows, ResultTable, shape_text

__all__ = ["ModuleTable", "ModuleTensorInfo", "inventory"]

Kind = Literal["parameter", "buffer", "attribute"]
_KINDS: tuple[Kind, ...] = get_args(Kind)

_HEADERS = (
    "name",
    "kind",
    "persistent",
    "shape",
    "dtype",
    "device",
    "trainable",
    "in state_dict",
    "same tensor as",
)


@dataclass(frozen=True)
class ModuleTensorInfo:
    """One tensor of a module: a row of :class:`ModuleTable`.

    Attributes:
        name: the dotted name, as ``named_parameters()``/``named_buffers()`` give it.
        kind: ``"parameter"`` (an ``nn.Parameter``), ``"buffer"`` (from
            ``register_buffer``) or ``"attribute"`` (a plain tensor attribute, which
            torch ignores).
        persistent: parameters and persistent buffers are saved by ``state_dict()``;
            buffers registered with ``persistent=False`` and attributes are not. Read
            from ``state_dict()``'s keys for a buffer (the public view of
            ``persistent=False``), so it is True for every parameter and saved buffer.
        shape: the tensor's shape.
        dtype: the tensor's dtype.
        device: the tensor's device.
        trainable: a parameter with ``requires_grad=True``, what an optimizer built
            from ``module.parameters()`` updates.
        in_state_dict: whether ``module.state_dict()`` has the name as a key.
        same_as: the other names of this same tensor object (tied weights, a submodule
            used twice).
    """

    name: str
    kind: Kind
    persistent: bool
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    trainable: bool
    in_state_dict: bool
    same_as: tuple[str, ...]

    def cells(self) -> tuple[str, ...]:
        """The row as display strings, in the order of the table's columns."""
        shape = self.shape
        return (
            self.name,
            self.kind,
            str(self.persistent),
            shape_text(shape),
            str(self.dtype).removeprefix("torch."),
            str(self.device),
            str(self.trainable),
            str(self.in_state_dict),
            ", ".join(self.same_as) or "-",
        )


def _check_kind(kind: object) -> None:
    """Refuse a ``kind`` that is neither ``None`` nor one of the kinds of a row."""
    if kind is None or (isinstance(kind, str) and kind in _KINDS):
        return
    expected = f"None or one of {', '.join(repr(k) for k in _KINDS)}"
    if not isinstance(kind, str):
        msg = f"kind must be {expected}, got {type(kind).__name__}: {_shown(kind)}"
        raise TypeError(msg)
    msg = f"kind must be {expected}, got {kind!r}"
    raise ValueError(msg)


@dataclass(frozen=True, repr=False)
class ModuleTable(NamedRows[ModuleTensorInfo], ResultTable):
    """Rows of :class:`ModuleTensorInfo`, shown as a text table or, in Jupyter, HTML."""

    rows: tuple[ModuleTensorInfo, ...]
    _css_class = "memo-describe"

    def names(self, *, kind: Kind | None = None) -> tuple[str, ...]:
        """The rows' names, all of them or those of one ``kind``.

        Args:
            kind: ``"parameter"``, ``"buffer"`` or ``"attribute"`` for the names of
                that kind only (``()`` when there is none); ``None`` for all.

        Returns:
            The names, in the order of the rows.

        Raises:
            TypeError: ``kind`` is neither ``None`` nor a string.
            ValueError: ``kind`` is a string other than the three kinds (``"buffers"``).
        """
        _check_kind(kind)
        return tuple(r.name for r in self.rows if kind is None or r.kind == kind)

    def _headers(self) -> tuple[str, ...]:
        return _HEADERS

    def _cells(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]


def _tensors(
    module: nn.Module, attributes: bool, saved: Collection[str]
) -> Iterator[tuple[str, Kind, bool, torch.Tensor]]:
    """Every (name, kind, persistent, tensor) of ``module``, in ``state_dict`` order.

    A buffer is persistent when ``state_dict()`` (whose keys are ``saved``) holds it:
    the public view of ``register_buffer(..., persistent=False)``.
    """
    for prefix, sub in module.named_modules(remove_duplicate=False):
        dot = prefix + "." if prefix else ""
        for name, param in sub.named_parameters(recurse=False, remove_duplicate=False):
            yield dot + name, "parameter", True, param
        for name, buffer in sub.named_buffers(recurse=False, remove_duplicate=False):
            yield dot + name, "buffer", dot + name in saved, buffer
        if attributes:
            for name, value in vars(sub).items():
                if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                    yield dot + name, "attribute", False, value


def _check_materialised(name: str, module: nn.Module) -> None:
    """Refuse a module with parameters or buffers not materialised yet (lazy modules).

    An ``nn.LazyLinear`` holds ``nn.UninitializedParameter`` objects until its first
    forward call gives them a shape: they have no shape, size or values to report.
    """
    tensors = [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]
    lazy = [
        n for n, t in tensors if isinstance(t, (nn.UninitializedParameter, nn.UninitializedBuffer))
    ]
    if lazy:
        shown = ", ".join(repr(n) for n in lazy[:4])
        if len(lazy) > 4:
            shown += f" and {len(lazy) - 4} more"
        msg = (
            f"{name} has parameters or buffers that are not materialised yet: {shown} "
            "(a lazy module such as nn.LazyLinear gives them a shape at its first "
            f"forward call); call {name} once on an example input first"
        )
        raise ValueError(msg)


def inventory(module: nn.Module, *, attributes: bool = True) -> ModuleTable:
    """List every tensor a module holds and what torch does with it.

    Walks ``module`` and its submodules (a submodule used twice is listed under both
    names, as ``state_dict()`` does) and reports parameters, buffers and, optionally,
    plain tensor attributes, in ``state_dict()`` order: each module's parameters, then
    its buffers, then its attributes.

    Args:
        module: the module to inspect.
        attributes: also list tensors stored as plain attributes (``self.t = tensor``),
            which ``parameters()``, ``buffers()``, ``state_dict()`` and ``.to()`` all
            ignore.

    Returns:
        A :class:`ModuleTable`; it prints as a text table (an HTML table in Jupyter).

    Raises:
        TypeError: ``module`` is not an ``nn.Module`` or ``attributes`` is not a bool.
        ValueError: ``module`` holds parameters or buffers not materialised yet (a lazy
            module such as ``nn.LazyLinear`` before its first forward call), or a nested
            tensor (it has no single shape).

    Example:
        >>> from torch import nn
        >>> print(inventory(nn.BatchNorm1d(3)))
        name                 kind       persistent  shape  dtype    device  trainable  in state_dict  same tensor as
        weight               parameter  True        (3,)   float32  cpu     True       True           -
        bias                 parameter  True        (3,)   float32  cpu     True       True           -
        running_mean         buffer     True        (3,)   float32  cpu     False      True           -
        running_var          buffer     True        (3,)   float32  cpu     False      True           -
        num_batches_tracked  buffer     True        ()     int64    cpu     False      True           -
    """
    check_type("module", module, nn.Module, "a torch.nn.Module")
    check_type("attributes", attributes, bool, "a bool")
    _check_materialised("module", module)
    saved = module.state_dict(keep_vars=True).keys()
    found = list(_tensors(module, attributes, saved))
    for name, kind, _, tensor in found:
        if tensor.is_nested:  # no one shape to list: torch refuses its .shape
            msg = (
                f"module's {kind} {name!r} is a nested tensor, which has no single shape: "
                "inventory lists tensors with one shape (strided or sparse)"
            )
            raise ValueError(msg)
    rows = tuple(
        ModuleTensorInfo(
            name=name,
            kind=kind,
            persistent=persistent,
            shape=tuple(tensor.shape),
            dtype=tensor.dtype,
            device=tensor.device,
            trainable=kind == "parameter" and tensor.requires_grad,
            in_state_dict=name in saved,
            same_as=tuple(other for other, _, _, t in found if t is tensor and other != name),
        )
        for name, kind, persistent, tensor in found
    )
    return ModuleTable(rows)

"""Find the first module of a model whose output holds NaN or inf.

:func:`stop_at_nonfinite` watches every registered module of a model with forward
hooks and raises :class:`NonFiniteError` at the first module boundary where a NaN or an
infinity appears, naming the module whose own code made it; the rows of its
:class:`ActivationTable` give each module's largest finite magnitude on the way there.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Self

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from pytorch_memo._checks import check_type
from pytorch_memo._table import NamedRows, ResultTable, shape_text

__all__ = [
    "MAX_ROWS",
    "ActivationRow",
    "ActivationTable",
    "NonFiniteError",
    "NonFiniteWatch",
    "stop_at_nonfinite",
]

_TORCH_DIR = torch.__file__.rsplit("__init__.py", 1)[0]  # torch's own wrappers
MAX_ROWS = 10_000
"""The most module calls one forward pass lists; later calls are counted, not listed."""
MODEL = "(model)"
"""How the table names the watched model itself (``named_modules()`` names it ``""``)."""

Shapes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ActivationRow:
    """One module call seen by :func:`stop_at_nonfinite`: a row of :class:`ActivationTable`.

    Attributes:
        name: the module's name as ``named_modules()`` gives it (``encoder.0``); ``""``
            for the watched model itself, shown as ``(model)``.
        type: the module's class name (``Linear``).
        outputs: the shapes of the floating-point and complex tensors it returned (found
            inside tuples, lists and dicts too); ``None`` while the call has not
            returned, or when it was stopped by an error.
        largest: the largest finite magnitude (``abs``) among those outputs, ``None``
            when they hold no finite value.
        nan: how many NaN values they hold.
        inf: how many infinities (either sign) they hold.
    """

    name: str
    type: str
    outputs: Shapes | None
    largest: float | None
    nan: int
    inf: int

    def cells(self) -> tuple[str, ...]:
        """The row as display strings, in the order of the table's columns."""
        if self.outputs is None:
            return (self.name or MODEL, self.type, "(stopped)", "-", "-", "-")
        return (
            self.name or MODEL,
            self.type,
            ", ".join(shape_text(s) for s in self.outputs) or "-",
            "-" if self.largest is None else f"{self.largest:.4g}",
            str(self.nan),
            str(self.inf),
        )


@dataclass(frozen=True, repr=False)
class ActivationTable(NamedRows[ActivationRow], ResultTable):
    """Rows of :class:`ActivationRow` in call order, a text table or, in Jupyter, HTML.

    A module called twice has two rows; ``table[name]`` gives the first.

    Attributes:
        rows: the calls of one forward pass, at most :data:`MAX_ROWS`.
        unlisted: the calls of a call of the model after the first :data:`MAX_ROWS`,
            counted only.
        dropped: where the model's layers were called without it (``model.forward(x)``,
            a layer of an ``nn.ModuleDict``), the rows are those of every call since the
            model was last called, the latest :data:`MAX_ROWS`: the earlier calls,
            counted only.
    """

    rows: tuple[ActivationRow, ...]
    unlisted: int = 0
    dropped: int = 0
    _css_class = "memo-describe"

    def _headers(self) -> tuple[str, ...]:
        return ("layer", "type", "output shapes", "largest |finite|", "NaN", "inf")

    def _cells(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]

    def _note(self) -> tuple[str, str]:
        if self.dropped:
            text = f"the {self.dropped} earliest calls are not listed (at most {MAX_ROWS} are)"
        elif self.unlisted:
            text = f"and {self.unlisted} more calls, not listed (at most {MAX_ROWS} are)"
        else:
            return "", ""
        return text, f"<p>{text}</p>"


class NonFiniteError(FloatingPointError):
    """A NaN or an infinity crossed a module boundary inside :func:`stop_at_nonfinite`.

    Attributes:
        layer: the name of the module whose own code made the values (``""`` for the
            watched model itself); ``None`` when they came from outside the calls of the
            watched modules (the model's input, or, when the model was run as
            ``model.forward(x)``, which runs none of its own hooks, its own code).
        where: the tensor that holds them: ``output``, ``output[0]``, ``args[0]``,
            ``kwargs['mask']``...
        nan: how many NaN values that tensor holds.
        inf: how many infinities it holds.
        table: the module calls of this forward pass up to the error; where the model's
            layers were called without it (``model.forward(x)``), of every call since
            the model was last called, the latest :data:`MAX_ROWS` of them.
    """

    def __init__(
        self,
        message: str,
        *,
        layer: str | None,
        where: str,
        nan: int,
        inf: int,
        table: ActivationTable,
    ) -> None:
        super().__init__(message)
        self.layer = layer
        self.where = where
        self.nan = nan
        self.inf = inf
        self.table = table

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the attributes (a worker process can send it back)."""
        return (
            _rebuild_error,
            (str(self), self.layer, self.where, self.nan, self.inf, self.table),
        )


def _rebuild_error(
    message: str, layer: str | None, where: str, nan: int, inf: int, table: ActivationTable
) -> NonFiniteError:
    return NonFiniteError(message, layer=layer, where=where, nan=nan, inf=inf, table=table)


@dataclass(frozen=True)
class _Count:
    """What one tensor holds: its shape and dtype, NaN and inf counts, largest finite |x|."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    nan: int
    inf: int
    largest: float | None

    @property
    def finite(self) -> bool:
        return self.nan == 0 and self.inf == 0

    def described(self, where: str) -> str:
        return (
            f"{where} (shape {shape_text(self.shape)}, {self.dtype}), which holds "
            f"{self.nan} NaN and {self.inf} inf"
        )


def _count(tensor: torch.Tensor) -> _Count | None:
    """Count a tensor's NaN and inf values; ``None`` for one that cannot hold them (ints,
    bools) or whose values cannot be read here (``meta``, sparse, nested tensors)."""
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return None
    if tensor.is_nested or tensor.layout != torch.strided or tensor.device.type == "meta":
        return None
    shape, values = tuple(tensor.shape), tensor.detach()
    if values.numel() == 0:
        return _Count(shape, tensor.dtype, 0, 0, None)
    if values.is_floating_point() and values.element_size() == 1:
        values = values.float()  # float8: the CPU has no abs or amax for it; exact in float32
    finite = torch.isfinite(values)
    magnitude = values.abs()
    if bool(finite.all()):
        return _Count(shape, tensor.dtype, 0, 0, float(magnitude.amax()))
    nan = int(torch.isnan(values).sum())
    inf = int(finite.numel() - int(finite.sum())) - nan
    largest = float(magnitude.masked_fill(~finite, 0).amax()) if bool(finite.any()) else None
    return _Count(shape, tensor.dtype, nan, inf, largest)


def _tensors(value: Any, where: str, seen: set[int]) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors in ``value`` with where they are: ``output[0]``, ``output['logits']``."""
    if isinstance(value, torch.Tensor):
        yield where, value
        return
    if id(value) in seen:
        return
    if isinstance(value, Mapping):
        seen.add(id(value))
        for key, item in value.items():
            yield from _tensors(item, f"{where}[{key!r}]", seen)
    elif isinstance(value, tuple | list):
        seen.add(id(value))
        for index, item in enumerate(value):
            yield from _tensors(item, f"{where}[{index}]", seen)


def _counted(value: Any, where: str) -> list[tuple[str, _Count]]:
    found = ((w, _count(t)) for w, t in _tensors(value, where, set()))
    return [(w, c) for w, c in found if c is not None]


def _label(name: str, module: nn.Module) -> str:
    kind = type(module).__name__
    return f"layer {name!r} ({kind})" if name else f"the model ({kind})"


class NonFiniteWatch:
    """The hooks of :func:`stop_at_nonfinite` on one model: a context manager.

    Entering registers a forward pre-hook and a forward hook on every module of the
    model; leaving removes them, also when the block raised.
    """

    def __init__(self, model: nn.Module, *, check_inputs: bool = True) -> None:
        check_type("model", model, nn.Module, "a torch.nn.Module")
        check_type("check_inputs", check_inputs, bool, "a bool")
        self._model = model
        self._check_inputs = check_inputs
        self._names: dict[int, str] = {}
        self._handles: list[RemovableHandle] = []
        self._rows: list[ActivationRow] = []
        self._unlisted = 0
        self._dropped = 0
        self._running: list[tuple[nn.Module, int | None]] = []
        self._rows_of_model = False  # the rows are those of a call of the model itself
        self._warned = False

    @property
    def table(self) -> ActivationTable:
        """The module calls of the latest forward pass.

        That is the latest call of the model, or, where its submodules were called
        without it (``model.forward(x)``), every call since the last call of the model,
        the latest :data:`MAX_ROWS` of them.
        """
        return ActivationTable(tuple(self._rows), self._unlisted, self._dropped)

    def __enter__(self) -> Self:
        if self._handles:
            msg = "this watch is active already: make another with stop_at_nonfinite(model)"
            raise RuntimeError(msg)
        self._names = {id(m): n for n, m in self._model.named_modules()}
        self._warned = False
        try:
            for module in self._model.modules():
                self._handles.append(
                    module.register_forward_pre_hook(self._before, with_kwargs=True)
                )
                self._handles.append(
                    module.register_forward_hook(self._after, with_kwargs=True, always_call=True)
                )
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._remove()
        self._running.clear()

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _name(self, module: nn.Module) -> str:
        return self._names.get(id(module), type(module).__name__)

    def _forward_caller_level(self, frame: FrameType | None) -> int | None:
        """Whether the watched model's own ``forward`` is running, called directly
        (``model.forward(x)``: none of the model's own hooks run): then the stack level,
        counting ``frame`` as 1, of the code that called it (past torch's own wrappers
        such as ``@torch.no_grad()``), else ``None``."""
        forward = getattr(type(self._model), "forward", None)
        if forward is None:
            return None
        # a decorated forward (``@torch.no_grad()``, any functools.wraps): the frame
        # that runs its body has the code of the function it wraps
        codes = {getattr(f, "__code__", None) for f in (forward, inspect.unwrap(forward))}
        codes.discard(None)
        level = 1
        try:
            while frame is not None:
                if frame.f_code in codes and frame.f_locals.get("self") is self._model:
                    frame, level = frame.f_back, level + 1
                    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
                        frame, level = frame.f_back, level + 1
                    return level
                frame, level = frame.f_back, level + 1
            return None
        finally:
            del frame

    def _unwatched(self, module: nn.Module) -> str:
        """What to add to a message blaming ``module``'s own code when it holds
        submodules that were not there when the watch began (they have no hooks)."""
        added = [n for n, m in module.named_modules() if id(m) not in self._names]
        if not added:
            return ""
        shown = ", ".join(repr(n) for n in added[:3]) + (" ..." if len(added) > 3 else "")
        return f" (or a submodule added after the watch began, which it does not see: {shown})"

    def _error(self, message: str, layer: str | None, where: str, count: _Count) -> NonFiniteError:
        return NonFiniteError(
            message, layer=layer, where=where, nan=count.nan, inf=count.inf, table=self.table
        )

    def _before(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        name = self._name(module)
        outside = not self._running and module is not self._model
        if not self._running and (self._rows_of_model or not outside):
            self._rows.clear()  # an outermost call: a new forward pass
            self._unlisted = 0
            self._dropped = 0
        if not self._running:
            self._rows_of_model = not outside
        level = self._forward_caller_level(inspect.currentframe()) if outside else None
        by_forward = level is not None
        if level is not None and not self._warned:
            self._warned = True
            warnings.warn(
                f"stop_at_nonfinite: the watched model ({type(self._model).__name__}) runs as "
                "`model.forward(x)`, which runs none of its own hooks: its layers are "
                "checked, its own code is not; call the model, `model(x)`",
                UserWarning,
                stacklevel=level,  # the line that called model.forward(x)
            )
        inputs = _counted(args, "args") + _counted(kwargs, "kwargs") if self._check_inputs else []
        for where, count in inputs:
            if count.finite:
                continue
            if self._running:  # made by the running module's own code
                parent = self._running[-1][0]
                message = (
                    f"{_label(self._name(parent), parent)} made non-finite values in its own "
                    f"forward, outside its submodules{self._unwatched(parent)}: it called "
                    f"{_label(name, module)} with {count.described(where)}"
                )
                raise self._error(message, self._name(parent), where, count)
            message = (
                f"{_label(name, module)} was called with {count.described(where)}: the "
                "values were made before the call, outside the watched modules"
            )
            if by_forward:
                message += (
                    f"; the watched model ({type(self._model).__name__}) runs as "
                    "`model.forward(x)`, which runs none of its own hooks, so its own code "
                    "may have made them: call the model, `model(x)`, to tell"
                )
            raise self._error(message, None, where, count)
        index: int | None = None  # counted from the first call, dropped ones included
        if len(self._rows) >= MAX_ROWS and not self._rows_of_model:
            del self._rows[0]  # calls without the model pile up: keep the latest
            self._dropped += 1
        if len(self._rows) < MAX_ROWS:
            self._rows.append(ActivationRow(name, type(module).__name__, None, None, 0, 0))
            index = self._dropped + len(self._rows) - 1
        else:
            self._unlisted += 1
        self._running.append((module, index))

    def _after(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        if not self._running or self._running[-1][0] is not module:
            return  # a call that began before the watch
        _, index = self._running.pop()
        if output is None and sys.exc_info()[1] is not None:
            return  # forward raised: the row stays "(stopped)"
        counts = _counted(output, "output")
        magnitudes = [c.largest for _, c in counts if c.largest is not None]
        row = ActivationRow(
            self._name(module),
            type(module).__name__,
            tuple(c.shape for _, c in counts),
            max(magnitudes) if magnitudes else None,
            sum(c.nan for _, c in counts),
            sum(c.inf for _, c in counts),
        )
        if index is not None and index >= self._dropped:
            self._rows[index - self._dropped] = row
        for where, count in counts:
            if count.finite:
                continue
            own = ""
            if next(module.children(), None) is not None:
                own = (
                    ", so its own code made them: every submodule it called returned finite "
                    f"values{self._unwatched(module)}"
                )
            finite = " from finite inputs" if self._check_inputs else ""
            if not self._check_inputs:
                own = ""  # its inputs were not checked: they may have held them already
            message = (
                f"{_label(row.name, module)} returned non-finite values{finite}: "
                f"{count.described(where)}{own}"
            )
            raise self._error(message, row.name, where, count)


def stop_at_nonfinite(model: nn.Module, *, check_inputs: bool = True) -> NonFiniteWatch:
    """Stop a forward pass at the first module boundary where NaN or inf appears.

    Inside ``with stop_at_nonfinite(model):``, every call of a registered module of
    ``model`` (the model itself included) is checked on the way in and on the way out.
    The first tensor holding a NaN or an infinity raises :class:`NonFiniteError`, which
    names the module whose own code made it: a module that returned one from finite
    inputs, or, when one reaches a submodule's input, the module running at the time,
    whose own code (outside its submodules) made it. Values that reach the watched
    model's input already non-finite are refused as coming from outside. The
    floating-point and complex tensors of inputs and outputs are checked, inside
    tuples, lists and dicts too; ``meta``, sparse and nested tensors are not. Forward
    hooks run when a module is called (``layer(x)``), not when its ``forward`` is
    called directly: run as ``model.forward(x)``, the model's own code is not checked
    (its layers still are, and their rows are kept: those of every call since the
    model was last called, the latest :data:`MAX_ROWS`), and the watch warns once.
    Submodules called without the model (a layer of an ``nn.ModuleDict``) are checked
    as the model's input is, from outside.

    A model that passes inf on purpose between its modules (a float attention mask of
    ``-inf``, such as ``nn.Transformer.generate_square_subsequent_mask`` makes) stops
    at that mask: pass ``check_inputs=False`` to check outputs only. The error then
    names the first module that returned a non-finite value, which may have received
    it.

    A debugging tool: each check reads every value of every output (on a GPU, a
    synchronisation per module). Eager mode only (not under ``torch.compile``).

    Args:
        model: the model to watch.
        check_inputs: check each module's inputs too (the default), which tells a
            module that made non-finite values from one that received them.

    Returns:
        A :class:`NonFiniteWatch` to use in a ``with`` statement; its ``table`` lists
        the module calls of the latest forward pass with their largest finite magnitude.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``, or ``check_inputs`` not a bool.
        NonFiniteError: inside the block, at the first non-finite value.

    Example:
        >>> from torch import nn
        >>> layer = nn.Linear(2, 1, bias=False)
        >>> _ = nn.init.constant_(layer.weight, 3e38)  # 3e38 + 3e38 overflows float32
        >>> model = nn.Sequential(nn.ReLU(), layer)
        >>> with stop_at_nonfinite(model):
        ...     model(torch.ones(1, 2))
        Traceback (most recent call last):
        ...
        pytorch_memo.numerics.NonFiniteError: layer '1' (Linear) returned non-finite values from finite inputs: output (shape (1, 1), torch.float32), which holds 0 NaN and 1 inf
        >>> with stop_at_nonfinite(model) as watch:
        ...     _ = model(torch.full((1, 2), 0.5))
        >>> print(watch.table)
        layer    type        output shapes  largest |finite|  NaN  inf
        (model)  Sequential  (1, 1)         3e+38             0    0
        0        ReLU        (1, 2)         0.5               0    0
        1        Linear      (1, 1)         3e+38             0    0
    """
    return NonFiniteWatch(model, check_inputs=check_inputs)

"""What a model's submodules do with shapes, and which of them torch cannot see.

- :func:`layer_shapes` runs a model on the ``meta`` device (shapes, no data, no memory)
  and lists the input and output shapes of every registered module it calls; when a
  layer refuses its input, the error names that layer.
- :func:`unregistered` finds modules and parameters a model keeps in plain Python
  containers (a ``list``, a ``dict``), which ``parameters()``, ``state_dict()``, ``.to()``
  and ``train()``/``eval()`` never reach.
"""

from __future__ import annotations

import inspect
import math
import operator
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from pytorch_memo._checks import INT64_MAX, check_ints, check_type
from pytorch_memo._table import NamedRows, ResultTable, shape_text
from pytorch_memo.modules import _check_materialised

__all__ = [
    "HiddenItem",
    "HiddenTable",
    "LayerShape",
    "LayerShapeError",
    "ShapeTable",
    "layer_shapes",
    "unregistered",
]

MODEL = "(model)"
"""How the tables name the model itself (``named_modules()`` names it ``""``)."""

Shapes = tuple[tuple[int, ...], ...]


# ------------------------------------------------------------------------ layer_shapes


@dataclass(frozen=True)
class LayerShape:
    """One call of a module during :func:`layer_shapes`: a row of :class:`ShapeTable`.

    Attributes:
        name: the module's name as ``named_modules()`` gives it (``features.0``); ``""``
            for the model itself, shown as ``(model)``.
        type: the module's class name (``Conv2d``).
        inputs: the shapes of the tensors it was called with, positional then keyword
            arguments, found inside tuples, lists and dicts too.
        outputs: the shapes of the tensors it returned, found the same way; ``None`` if
            the call raised.
        parameters: how many scalars ``module.parameters()`` holds (its submodules'
            included, shared tensors once).
    """

    name: str
    type: str
    inputs: Shapes
    outputs: Shapes | None
    parameters: int

    def cells(self) -> tuple[str, ...]:
        """The row as display strings, in the order of the table's columns."""
        return (
            self.name or MODEL,
            self.type,
            _shapes_text(self.inputs),
            "(raised)" if self.outputs is None else _shapes_text(self.outputs),
            str(self.parameters),
        )


@dataclass(frozen=True, repr=False)
class ShapeTable(NamedRows[LayerShape], ResultTable):
    """Rows of :class:`LayerShape` in call order, shown as a text table or, in Jupyter, HTML.

    A module called twice has two rows; ``table[name]`` gives the first.
    """

    rows: tuple[LayerShape, ...]
    _css_class = "memo-describe"

    def _headers(self) -> tuple[str, ...]:
        return ("layer", "type", "input shapes", "output shapes", "parameters")

    def _cells(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]


class LayerShapeError(RuntimeError):
    """A layer refused the shapes that reached it during :func:`layer_shapes`.

    Attributes:
        layer: the name of the innermost module that was running when the error came
            (``""`` for the model itself).
        inputs: the shapes that module was called with.
        table: the calls up to the failure; the failing ones have ``outputs`` ``None``.
    """

    def __init__(self, message: str, *, layer: str, inputs: Shapes, table: ShapeTable) -> None:
        super().__init__(message)
        self.layer = layer
        self.inputs = inputs
        self.table = table

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the attributes (a worker process can send it back)."""
        return (_rebuild_error, (str(self), self.layer, self.inputs, self.table))


def _rebuild_error(message: str, layer: str, inputs: Shapes, table: ShapeTable) -> LayerShapeError:
    return LayerShapeError(message, layer=layer, inputs=inputs, table=table)


_SCALAR_TYPES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
    torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
}  # fmt: skip
"""The names torch's C++ messages give these dtypes (``c10::ScalarType``)."""


def _refusal(
    row: LayerShape, table: ShapeTable, error: Exception, made: torch.dtype | None = None
) -> LayerShapeError:
    """The error naming the module ``row`` that raised ``error``. ``made``: the dtype of
    the inputs made from shapes, if any; named (as the argument ``dtype``) when the
    error names it, as when an ``nn.Embedding`` is given floats."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    where = f"layer {row.name!r}" if row.name else "the model"
    message = (
        f"{where} ({row.type}) raised on input shapes {_shapes_text(row.inputs)}: "
        f"{type(error).__name__}: {first}"
    )
    if made is not None:
        named = re.escape(str(made))
        if made in _SCALAR_TYPES:
            named += rf"|\b{_SCALAR_TYPES[made]}\b"
        if re.search(named, first):
            message += f" (the inputs given as shapes were made with dtype={made})"
    return LayerShapeError(message, layer=row.name, inputs=row.inputs, table=table)


def _shapes_text(shapes: Shapes) -> str:
    return ", ".join(shape_text(s) for s in shapes) or "-"


def _tensor_shapes(value: Any, seen: set[int] | None = None) -> Iterator[tuple[int, ...]]:
    """The shapes of the tensors in ``value``, looking inside tuples, lists and dicts."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        yield tuple(value.shape)
        return
    if id(value) in seen:
        return
    if isinstance(value, Mapping):
        seen.add(id(value))
        for item in value.values():
            yield from _tensor_shapes(item, seen)
    elif isinstance(value, tuple | list):
        seen.add(id(value))
        for item in value:
            yield from _tensor_shapes(item, seen)


def _meta_input(index: int, value: Any, dtype: torch.dtype) -> torch.Tensor:
    name = f"inputs[{index}]"
    if isinstance(value, torch.Tensor):
        if value.is_nested or value.layout != torch.strided:
            kind = "nested" if value.is_nested else str(value.layout)
            msg = f"{name} must be a dense (strided) tensor or a shape, got a {kind} tensor"
            raise ValueError(msg)
        return torch.empty_like(value, device="meta")
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        value = tuple(_as_index(size) for size in value)  # numpy's ints, as torch takes them
    shape = check_ints(
        name,
        value,
        minimum=0,
        maximum=INT64_MAX,
        spelled="a shape (a sequence of ints) or a tensor",
    )
    elements = math.prod(shape)
    if elements * dtype.itemsize > INT64_MAX:  # torch cannot even describe its storage
        msg = (
            f"{name} must be a shape whose {dtype} tensor has fewer than 2**63 bytes, "
            f"got {tuple(shape)} ({elements} elements)"
        )
        raise ValueError(msg)
    return torch.empty(shape, dtype=dtype, device="meta")


def _as_index(size: Any) -> Any:
    """``size`` as an int where it is an integer that is not a bool (``numpy.int64``)."""
    if isinstance(size, int) or type(size).__name__ in ("bool", "bool_"):
        return size
    try:
        return operator.index(size)
    except TypeError:
        return size  # refused by check_ints, with its type named


def _check_arity(model: nn.Module, count: int) -> None:
    """Refuse ``count`` inputs where ``model.forward`` cannot take them positionally."""
    if model._forward_pre_hooks:  # a pre-hook may supply or change the arguments
        return
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return
    try:
        signature.bind(*range(count))
    except TypeError as error:
        msg = (
            f"inputs must match {type(model).__name__}.forward{signature}, "
            f"got {count} input{'' if count == 1 else 's'}: {error}"
        )
        raise TypeError(msg) from None


# The CPU computes these only when all their tensors have one dtype; the meta device
# does not check it (checked against the CPU in tests/test_submodules.py).
_ONE_DTYPE = frozenset(
    {
        "linear", "mm", "matmul", "__matmul__", "__rmatmul__", "linalg_matmul", "addmm",
        "mv", "addmv",
        "addbmm", "baddbmm", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d",
    }
)  # fmt: skip
# These take parameters of the input's dtype, or float32 ones for a float16 or bfloat16
# input (the CPU's mixed-dtype normalisation).
_NORMS = frozenset({"layer_norm", "group_norm", "batch_norm", "instance_norm"})
_REDUCED = (torch.float16, torch.bfloat16)
# F.multi_head_attention_forward (nn.MultiheadAttention, so every Transformer layer) is a
# Python function that runs its own matrix products, which a TorchFunctionMode does not
# see: its tensors must share one dtype, and a mask is bool or of the query's dtype (the
# meta kernels refuse a float mask of another dtype themselves, as the CPU does).
_ATTENTION = "multi_head_attention_forward"
_ATTENTION_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_MASKS = frozenset({"key_padding_mask", "attn_mask"})


def _tensor_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    found = [(f"argument {i}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    found += [(f"argument {k!r}", a) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
    return found


class _CpuDtypes(TorchFunctionMode):
    """Refuse the mixes of dtypes the CPU refuses and the meta device lets through."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _ONE_DTYPE or name in _NORMS:
            _check_dtypes(name, _tensor_arguments(args, kwargs))
        elif func is F.multi_head_attention_forward:
            _check_dtypes(_ATTENTION, _attention_tensors(args, kwargs))
        elif func is F.embedding:  # indices first; torch.embedding takes the weight first
            _check_indices(args[0] if args else kwargs.get("input"))
        elif func is torch.embedding:
            _check_indices(args[1] if len(args) > 1 else kwargs.get("indices"))
        return func(*args, **kwargs)


def _attention_tensors(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[tuple[str, torch.Tensor]]:
    """The tensors of a call of ``F.multi_head_attention_forward`` but its masks, named."""
    try:
        bound = _ATTENTION_SIGNATURE.bind(*args, **kwargs)
    except TypeError:
        return []  # the call itself will say what is wrong
    return [
        (f"argument {name!r}", value)
        for name, value in bound.arguments.items()
        if isinstance(value, torch.Tensor) and name not in _MASKS
    ]


def _check_indices(indices: Any) -> None:
    """Raise the CPU's refusal of an embedding's indices that are not integers: the meta
    device of torch 2.8 to 2.12 lets them through (2.13 and later refuse them there too)."""
    if isinstance(indices, torch.Tensor) and indices.dtype not in (torch.int64, torch.int32):
        msg = (
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {indices.dtype} instead"
        )
        raise RuntimeError(msg)


def _check_dtypes(name: str, tensors: list[tuple[str, torch.Tensor]]) -> None:
    """Raise the CPU's refusal of ``name`` on these tensors' dtypes, as a RuntimeError."""
    if not tensors:
        return
    cast = name not in _NORMS and torch.is_autocast_enabled("cpu")
    # CPU autocast casts every floating operand but float64 to its dtype first.
    low = torch.get_autocast_dtype("cpu") if cast else None

    def dtype(tensor: torch.Tensor) -> torch.dtype:
        plain = tensor.dtype
        eligible = plain.is_floating_point and plain != torch.float64
        return low if low is not None and eligible else plain

    first, x = tensors[0]
    for where, tensor in tensors[1:]:
        if dtype(tensor) == dtype(x):
            continue
        mixed = name in _NORMS and x.dtype in _REDUCED
        if mixed and tensor.dtype == torch.float32:
            continue
        also = " (or torch.float32)" if mixed else ""
        under = f" under CPU autocast to {low}" if low is not None else ""
        msg = (
            f"{name}: {where} has dtype {tensor.dtype}, expected {dtype(x)}{also}, "
            f"the dtype of {first}{under}: the CPU refuses this mix of dtypes "
            "(the meta device does not check it)"
        )
        raise RuntimeError(msg)


def layer_shapes(
    model: nn.Module, *inputs: Sequence[int] | torch.Tensor, dtype: torch.dtype = torch.float32
) -> ShapeTable:
    """Run ``model`` on the ``meta`` device and list the shapes each module takes and gives.

    Nothing is computed and nothing is allocated: the model's parameters and buffers
    are replaced, for this one call, by ``meta`` tensors of the same shape and dtype
    (``torch.func.functional_call``), and the inputs are ``meta`` tensors. The model's
    registered parameters and buffers are left as they were: their values and devices
    (a BatchNorm's running statistics are not updated). Whatever else ``forward`` changes
    is changed: a Python counter counts the call, and an output the model keeps in a
    plain attribute is then a ``meta`` tensor. Forward hooks on every registered module
    record each call (a call that raised, and whose error a parent caught, has no
    output shapes); a module that is not registered (see :func:`unregistered`) has no
    row.

    The ``meta`` device checks shapes, but not every dtype the CPU refuses. This checks
    the mixes of dtypes the CPU refuses in matrix products (``F.linear``, ``@``,
    ``torch.mm``, ``torch.matmul``, ``addmm``...), convolutions, normalisations (layer,
    group, batch and instance norm, which take float32 parameters for a float16 or
    bfloat16 input) and ``F.multi_head_attention_forward`` (``nn.MultiheadAttention``,
    so every Transformer layer), under CPU autocast too, and an embedding's indices,
    which must be int64 or int32 (torch 2.8 to 2.12 let others through on ``meta``).
    These are checked where ``forward`` calls them: another Python function of torch
    that calls them inside itself (as ``F.multi_head_attention_forward`` calls
    ``F.linear``) hides them. Other dtypes a CPU kernel lacks (the softmax or GELU of an
    integer tensor) are not checked.

    Args:
        model: the model; in training or evaluation mode, as it will run.
        inputs: one per positional argument of ``model``'s ``forward``: a shape such as
            ``(4, 3, 32, 32)`` (a tensor of ``dtype`` is made; its sizes are ints, or
            integers such as ``numpy.int64``), or a tensor, whose shape and dtype are
            used (its values are not).
        dtype: the dtype of the inputs given as shapes (``torch.long`` for token ids).

    Returns:
        A :class:`ShapeTable`, one row per module call in call order, the model first.

    Raises:
        TypeError: ``model`` is not a module, an input is neither a shape nor a tensor,
            ``dtype`` is not a ``torch.dtype``, or ``model.forward`` does not take as
            many inputs as were given.
        ValueError: a size is negative, or ``model`` holds parameters not materialised
            yet (a lazy module before its first call), or a nested-tensor parameter or
            buffer (torch makes no ``meta`` stand-in for one).
        LayerShapeError: a module raised, or would raise on the CPU for its dtypes; the
            error names the module that raised (the innermost one the error passed
            through) and the shapes it was called with, and holds the rows so far.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 6 * 6, 2))
        >>> print(layer_shapes(model, (4, 3, 8, 8)))
        layer    type        input shapes  output shapes  parameters
        (model)  Sequential  (4, 3, 8, 8)  (4, 2)         802
        0        Conv2d      (4, 3, 8, 8)  (4, 8, 6, 6)   224
        1        Flatten     (4, 8, 6, 6)  (4, 288)       0
        2        Linear      (4, 288)      (4, 2)         578
        >>> layer_shapes(nn.Sequential(nn.Flatten(), nn.Linear(100, 2)), (4, 3, 8, 8))
        Traceback (most recent call last):
        ...
        pytorch_memo.submodules.LayerShapeError: layer '1' (Linear) raised on input shapes (4, 192): RuntimeError: a and b must have same reduction dim, but got [4, 192] X [100, 2].
    """
    check_type("model", model, nn.Module, "a torch.nn.Module")
    check_type("dtype", dtype, torch.dtype, "a torch.dtype")
    _check_materialised("model", model)
    args = tuple(_meta_input(i, value, dtype) for i, value in enumerate(inputs))
    _check_arity(model, len(args))

    names = {id(m): n for n, m in model.named_modules()}
    counts = {id(m): sum(p.numel() for p in m.parameters()) for m in model.modules()}
    rows: list[LayerShape] = []
    running: list[tuple[int, int]] = []  # (module id, row index) of the calls not ended
    raised: list[tuple[int, BaseException | None]] = []  # (row index, error) of failed calls

    def before(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        shapes = (*_tensor_shapes(args), *_tensor_shapes(kwargs))
        key = id(module)
        rows.append(LayerShape(names[key], type(module).__name__, shapes, None, counts[key]))
        running.append((key, len(rows) - 1))

    def own_call(module: nn.Module) -> int | None:
        """The position in ``running`` of the innermost call of ``module`` not ended."""
        for place in range(len(running) - 1, -1, -1):
            if running[place][0] == id(module):
                return place
        return None

    def returned(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        place = own_call(module)  # runs only when the call returned
        if place is not None:
            index = running[place][1]
            row = rows[index]
            rows[index] = LayerShape(
                row.name, row.type, row.inputs, tuple(_tensor_shapes(output)), row.parameters
            )

    def ended(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        place = own_call(module)  # always_call: runs when the call raised too
        if place is None:
            return
        index = running[place][1]
        del running[place:]
        if rows[index].outputs is None:  # it raised: note the error passing through it
            raised.append((index, sys.exc_info()[1]))

    # Each tensor once, under all its names: tied weights stay tied.
    meta: dict[int, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    held = (
        *(("parameter", n, t) for n, t in model.named_parameters(remove_duplicate=False)),
        *(("buffer", n, t) for n, t in model.named_buffers(remove_duplicate=False)),
    )
    for kind, name, tensor in held:
        if tensor.is_nested:  # torch cannot make a meta tensor like it
            msg = (
                f"model's {kind} {name!r} is a nested tensor: layer_shapes runs the model on "
                "meta stand-ins, and torch makes none for a nested tensor"
            )
            raise ValueError(msg)
        if id(tensor) not in meta:
            meta[id(tensor)] = torch.empty_like(tensor, device="meta")
        state[name] = meta[id(tensor)]

    handles = []
    try:
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(module.register_forward_hook(returned, with_kwargs=True))
            handles.append(module.register_forward_hook(ended, with_kwargs=True, always_call=True))
        with _CpuDtypes():
            functional_call(model, state, args)
    except Exception as error:
        # The first call the escaping error passed through is the module that raised it
        # (a layer's error that its parent caught does not escape).
        failed = next((index for index, seen in raised if seen is error), None)
        if failed is None:
            raise
        made = dtype if any(not isinstance(i, torch.Tensor) for i in inputs) else None
        raise _refusal(rows[failed], ShapeTable(tuple(rows)), error, made) from error
    finally:
        for handle in handles:
            handle.remove()
    return ShapeTable(tuple(rows))


# ------------------------------------------------------------------------ unregistered


@dataclass(frozen=True)
class HiddenItem:
    """A module or parameter kept where torch does not look: a row of :class:`HiddenTable`.

    Attributes:
        name: where it is: the attribute's dotted path and its place in the container,
            ``blocks[0]``, ``heads['price']``, ``encoder.extra[1][0]``; an item of a set
            is ``name{i}``, its place in iteration order.
        kind: ``"module"`` or ``"parameter"``.
        type: its class name (``Linear``, ``Parameter``).
        parameters: how many of its scalars torch does not see: for a module, those of
            its parameters that are not registered elsewhere in the model.
    """

    name: str
    kind: Literal["module", "parameter"]
    type: str
    parameters: int

    def cells(self) -> tuple[str, ...]:
        """The row as display strings, in the order of the table's columns."""
        return (self.name, self.kind, self.type, str(self.parameters))


@dataclass(frozen=True, repr=False)
class HiddenTable(NamedRows[HiddenItem], ResultTable):
    """Rows of :class:`HiddenItem`, shown as a text table or, in Jupyter, HTML."""

    rows: tuple[HiddenItem, ...]
    _css_class = "memo-describe"

    def _headers(self) -> tuple[str, ...]:
        return ("where", "kind", "type", "parameters not seen")

    def _cells(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]

    def _note(self) -> tuple[str, str]:
        if self.rows:
            return "", ""
        text = f"nothing hidden in the {SEARCHED} of the modules' attributes"
        return text, f"<p>{text}</p>"


_CONTAINERS = (list, tuple, deque, dict, set, frozenset)
SEARCHED = "lists, tuples, deques, dict values, sets and frozensets"
"""The containers :func:`unregistered` looks inside; any other object it does not open."""
_SEARCHED_ITEMS = (nn.Module, nn.Parameter, *_CONTAINERS)  # what a container may hide


def _bare_module_attributes() -> frozenset[str]:
    """The attributes every ``nn.Module`` has (its registries, hooks, ``training``)."""
    return frozenset(vars(nn.Module()))


def _contents(path: str, value: Any) -> Iterator[tuple[str, Any]]:
    """The items of a container that may hide something (modules, parameters, other
    containers) with their paths: ``blocks[0]``, ``heads['a']``. Other items get no path
    made: a vocabulary of a million strings costs a pass, not a million paths."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, _SEARCHED_ITEMS):
                yield f"{path}[{key!r}]", item
    elif isinstance(value, list | tuple | deque):
        for index, item in enumerate(value):
            if isinstance(item, _SEARCHED_ITEMS):
                yield f"{path}[{index}]", item
    else:
        for index, item in enumerate(value):
            if isinstance(item, _SEARCHED_ITEMS):
                yield f"{path}{{{index}}}", item


def unregistered(model: nn.Module) -> HiddenTable:
    """Find the modules and parameters ``model`` keeps in plain Python containers.

    ``nn.Module`` registers a module or an ``nn.Parameter`` assigned to one of its
    attributes; one inside a ``list``, ``tuple``, ``dict`` or ``set`` attribute is not
    registered, and ``parameters()`` (so the optimizer), ``state_dict()``, ``.to()``,
    ``train()``/``eval()`` and ``print(model)`` all skip it. This walks every registered
    module's attributes and the containers in them (nested ones too: lists, tuples,
    deques, the values of dicts, sets and frozensets; not other objects, such as a
    ``SimpleNamespace``, nor the keys of a dict) and lists what it finds there that the
    model does not register anywhere. A hidden module is searched in turn: what its own
    plain containers hold gets rows of its own (``held[0].blocks[0]``). Keeping
    references to registered layers in a plain list is harmless and not listed.

    Args:
        model: the model to inspect.

    Returns:
        A :class:`HiddenTable`, empty when nothing is hidden in the containers searched;
        it prints as a text table (an HTML table in Jupyter). Each hidden parameter is
        counted in one row, so the rows add up to the scalars torch does not see.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: ``model`` holds parameters not materialised yet (a lazy module
            before its first call), registered or hidden, whose size cannot be counted.

    Example:
        >>> from torch import nn
        >>> class Blocks(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.blocks = [nn.Linear(4, 4), nn.Linear(4, 4)]  # not nn.ModuleList
        >>> print(unregistered(Blocks()))
        where      kind    type    parameters not seen
        blocks[0]  module  Linear  20
        blocks[1]  module  Linear  20
    """
    check_type("model", model, nn.Module, "a torch.nn.Module")
    _check_materialised("model", model)
    covered = {id(m) for m in model.modules()}  # registered, or under a row already
    counted = {id(p) for p in model.parameters()}  # seen by torch, or in a row already
    bare = _bare_module_attributes()
    found: list[HiddenItem] = []
    seen: set[int] = set()

    def size(path: str, parameters: list[nn.Parameter]) -> int:
        if any(nn.parameter.is_lazy(p) for p in parameters):
            msg = (
                f"model holds, at {path}, parameters not materialised yet (a lazy module such "
                "as nn.LazyLinear gives them a shape at its first forward call); call model "
                "once on an example input first"
            )
            raise ValueError(msg)
        return sum(p.numel() for p in parameters)

    def attributes(root: str, module: nn.Module) -> list[tuple[str, Any]]:
        """The attributes of ``module`` and of its submodules, with their paths."""
        items = []
        for prefix, inner in module.named_modules(prefix=root):
            dot = prefix + "." if prefix else ""
            items += [(dot + a, v) for a, v in vars(inner).items() if a not in bare]
        return items

    # Depth first, without recursion (a deep nest of lists must not overflow the stack).
    pending = list(reversed(attributes("", model)))
    while pending:
        path, value = pending.pop()
        if id(value) in seen:
            continue
        if isinstance(value, nn.Module):
            seen.add(id(value))
            if id(value) not in covered:
                hidden = [p for p in value.parameters() if id(p) not in counted]
                found.append(HiddenItem(path, "module", type(value).__name__, size(path, hidden)))
                covered.update(id(m) for m in value.modules())
                counted.update(id(p) for p in hidden)
                pending += reversed(attributes(path, value))  # its own plain containers
        elif isinstance(value, nn.Parameter):
            seen.add(id(value))
            if id(value) not in counted:
                found.append(
                    HiddenItem(path, "parameter", type(value).__name__, size(path, [value]))
                )
                counted.add(id(value))
        elif isinstance(value, _CONTAINERS):
            seen.add(id(value))
            pending += reversed(list(_contents(path, value)))
    return HiddenTable(tuple(found))

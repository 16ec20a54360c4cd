"""Indexing that moves elements around: ``gather`` explained, convolution as a matmul.

:func:`explain_gather` lists
which element of the input each output element of ``torch.gather`` comes from,
:func:`plot_gather` draws it, and :func:`conv2d_as_matmul` computes ``F.conv2d`` as
``unfold`` + matrix multiply + ``view``.
"""

from __future__ import annotations

import itertools
import numbers
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pytorch_memo._checks import (
    _shown,
    check_axes,
    check_count,
    check_int,
    check_tensor,
    check_values,
)
from pytorch_memo._table import ResultTable

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_CONV_OPTION",
    "MAX_STEPS",
    "MAX_UNFOLDED",
    "GatherExplanation",
    "GatherStep",
    "conv2d_as_matmul",
    "explain_gather",
    "plot_gather",
]

MAX_ROWS_SHOWN = 48
MAX_PLOTTED_SIDE = 12
MAX_STEPS = 2**16
"""The most output elements :func:`explain_gather` explains (a :class:`GatherStep` each)."""
MAX_UNFOLDED = 2**26
"""The most values :func:`conv2d_as_matmul`'s unfolded matrix may hold (512 MiB of
float64): unfolding copies every receptive field, ``kh * kw`` times the input."""
_INDEX_DTYPES = (torch.int64, torch.int32)


def _fmt(position: tuple[int, ...]) -> str:
    return ", ".join(map(str, position)) if position else "()"  # a 0-d tensor's element


@dataclass(frozen=True)
class GatherStep:
    """Where one output element of ``torch.gather`` comes from.

    ``output`` is its position in the output (and in ``index``); ``source`` is the
    position in ``input`` it is copied from: ``output`` with coordinate ``dim`` replaced
    by ``index[output]``. ``gather`` treats a 0-d tensor as 1-d of one element: a 0-d
    index's element has ``output == ()``, and every step of a 0-d input has
    ``source == ()`` (its only element; the index value is 0).
    """

    output: tuple[int, ...]
    source: tuple[int, ...]
    value: bool | int | float | complex

    def formula(self, dim: int) -> str:
        """The per-dimension formula with ``index[...]`` written at coordinate ``dim``.

        A 0-d index or input counts as 1-d of one element, as in ``gather``: the formula
        for a 0-d input reads ``input.reshape(1)[index[...]]``.
        """
        coords = [str(c) for c in self.output] or ["0"]
        coords[dim] = f"index[{_fmt(self.output)}]"
        tensor = "input" if self.source else "input.reshape(1)"
        return f"{tensor}[{', '.join(coords)}]"

    def cells(self, dim: int) -> tuple[str, str, str, str]:
        """The row as display strings: output, formula, source, value."""
        return (
            f"out[{_fmt(self.output)}]",
            self.formula(dim),
            f"input[{_fmt(self.source)}]",
            str(self.value),
        )


_HEADERS = ("output", "formula", "source", "value")


@dataclass(frozen=True, repr=False)
class GatherExplanation(ResultTable):
    """Every output element of a ``torch.gather`` call and its source, in output order.

    Prints as a text table (an HTML table in Jupyter) of at most 48 rows.
    """

    dim: int
    input_shape: tuple[int, ...]
    index_shape: tuple[int, ...]
    steps: tuple[GatherStep, ...]
    _css_class = "memo-gather"
    _code = True

    def __iter__(self) -> Iterator[GatherStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def sources(self) -> torch.Tensor:
        """The source positions as an ``int64`` tensor of shape ``index_shape + (ndim,)``."""
        flat = torch.tensor([s.source for s in self.steps], dtype=torch.int64)
        return flat.reshape(*self.index_shape, len(self.input_shape))

    def _headers(self) -> tuple[str, ...]:
        return _HEADERS

    def _cells(self) -> list[tuple[str, ...]]:
        return [s.cells(self.dim) for s in self.steps[:MAX_ROWS_SHOWN]]

    def _note(self) -> tuple[str, str]:
        hidden = len(self.steps) - MAX_ROWS_SHOWN
        if hidden <= 0:
            return "", ""
        return f"... {hidden} more rows", f"<p>... {hidden} more rows</p>"


def _check_gather_args(input: torch.Tensor, dim: int, index: torch.Tensor) -> int:
    """Check ``gather``'s arguments the way torch does; return ``dim`` made non-negative.

    As ``torch.gather``: a 0-d input or index counts as 1-d of one element, and an empty
    index (no elements) is checked for nothing but ``dim`` (any dtype, any shape) and
    the device: either tensor may then be on the ``meta`` device (``gather`` reads no
    value, and its meta kernel compares no devices), but not on two others.
    """
    check_tensor("input", input)
    check_tensor("index", index)
    check_int("dim", dim)
    ndim = max(input.dim(), 1)
    if not -ndim <= dim < ndim:
        treated = " (gather treats it as 1-d)" if input.dim() == 0 else ""
        msg = f"dim must be in [{-ndim}, {ndim}) for a {input.dim()}-d input{treated}, got {dim}"
        raise ValueError(msg)
    dim %= ndim
    empty = index.numel() == 0  # gather returns an empty tensor of index's shape
    if not empty:  # values to read and show
        check_values("input", input)
        check_values("index", index)
    on_meta = "meta" in (input.device.type, index.device.type)  # no device check there
    if input.device != index.device and not on_meta:
        msg = (
            "input and index must be on the same device, as torch.gather requires, "
            f"got input on {input.device} and index on {index.device}"
        )
        raise ValueError(msg)
    if empty:
        return dim
    if index.dtype not in _INDEX_DTYPES:
        msg = f"index must have dtype torch.int64 (or torch.int32), got {index.dtype}"
        raise TypeError(msg)
    if max(index.dim(), 1) != ndim:
        msg = (
            f"index must have as many dimensions as input ({input.dim()}), "
            f"got {index.dim()} (shape {tuple(index.shape)}; a 0-d tensor counts as 1-d)"
        )
        raise ValueError(msg)
    check_count(
        f"index of shape {tuple(index.shape)}", index.numel(), limit=MAX_STEPS,
        what="elements", work="explain_gather lists one GatherStep per output element",
    )  # fmt: skip
    if input.dim() > 1:  # 0-d and 1-d tensors have no dimension but dim
        for d, (n_index, n_input) in enumerate(zip(index.shape, input.shape, strict=True)):
            if d != dim and n_index > n_input:
                msg = (
                    f"index.shape[{d}] must be <= input.shape[{d}] = {n_input} "
                    f"(every dimension but dim={dim}), got {n_index}"
                )
                raise ValueError(msg)
    size = input.shape[dim] if input.dim() else 1
    sized = f"input.shape[{dim}]" if input.dim() else "a 0-d input has one element"
    low, high = int(index.min()), int(index.max())
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        msg = f"index values must be in [0, {size}) ({sized}), got {bad}"
        raise ValueError(msg)
    return dim


def explain_gather(input: torch.Tensor, dim: int, index: torch.Tensor) -> GatherExplanation:
    """List, for every output element of ``torch.gather(input, dim, index)``, its source.

    ``gather`` copies ``out[p] = input[q]`` where ``q`` is the position ``p`` with its
    coordinate ``dim`` replaced by ``index[p]``; for a 3-d input and ``dim=1``:
    ``out[i][j][k] = input[i][index[i][j][k]][k]``. The output has ``index``'s shape.

    The arguments are checked as ``gather`` checks them: a 0-d input or index counts as
    1-d of one element, and an empty index (no elements), of any dtype and shape, gives
    an empty explanation, as ``gather`` gives an empty tensor of that shape; with an
    empty index, either tensor may be on the ``meta`` device (no value is read).

    Args:
        input: the tensor gathered from.
        dim: the dimension along which ``index`` picks.
        index: an ``int64`` (or ``int32``) tensor on ``input``'s device, with as many
            dimensions as ``input``, no larger than ``input`` in every dimension but
            ``dim``.

    Returns:
        A :class:`GatherExplanation`: one :class:`GatherStep` per output element, in
        ``index.flatten()`` order; it prints as a table. Only those elements of
        ``input`` are read (on its device) and copied to the CPU.

    Raises:
        TypeError: ``input`` or ``index`` is not a tensor, ``dim`` not an int, or a
            non-empty ``index`` not an integer tensor.
        ValueError: ``input`` and ``index`` on different devices (neither of them
            ``meta`` with an empty index), ``dim`` out of range, shapes that ``gather``
            rejects, an index value outside ``[0, input.shape[dim])``, a ``meta``
            tensor with a non-empty index (no values to show), or more than
            :data:`MAX_STEPS` output elements.

    Example:
        >>> import torch
        >>> x = torch.tensor([[1, 2], [3, 4]])
        >>> print(explain_gather(x, 1, torch.tensor([[1], [0]])))
        output     formula                source       value
        out[0, 0]  input[0, index[0, 0]]  input[0, 1]  2
        out[1, 0]  input[1, index[1, 0]]  input[1, 0]  3
    """
    dim = _check_gather_args(input, dim, index)
    steps = _gather_steps(input, dim, index) if index.numel() else ()
    return GatherExplanation(
        dim=dim, input_shape=tuple(input.shape), index_shape=tuple(index.shape), steps=steps
    )


def _gather_steps(input: torch.Tensor, dim: int, index: torch.Tensor) -> tuple[GatherStep, ...]:
    """The steps of a checked, non-empty ``gather``; reads only the values they show."""
    outputs = list(itertools.product(*(range(n) for n in index.shape)))  # [()] if 0-d
    picked = index.detach().to("cpu", torch.int64).flatten().tolist()
    sources = []  # positions in input as gather sees it: a 0-d input as 1-d
    for output, k in zip(outputs, picked, strict=True):
        position = list(output) or [0]  # a 0-d index as 1-d
        position[dim] = k
        sources.append(position)
    seen = input.detach() if input.dim() else input.detach().reshape(1)
    where = torch.tensor(sources, dtype=torch.int64, device=input.device).unbind(1)
    values = seen[where].cpu().tolist()  # only these values leave input's device
    return tuple(
        GatherStep(output=output, source=tuple(source) if input.dim() else (), value=value)
        for output, source, value in zip(outputs, sources, values, strict=True)
    )


def _as_grid(shape: tuple[int, ...]) -> tuple[int, int]:
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


def _draw_grid(
    ax: Axes, values: torch.Tensor, left: float, title: str, colors: dict[tuple[int, int], str]
) -> None:
    from matplotlib.patches import Rectangle

    rows, cols = _as_grid(tuple(values.shape))
    grid = values.reshape(rows, cols)
    for r in range(rows):
        for c in range(cols):
            face = colors.get((r, c), "white")
            ax.add_patch(Rectangle((left + c, r), 1, 1, facecolor=face, edgecolor="0.4"))
            ax.text(left + c + 0.5, r + 0.5, f"{grid[r, c].item():g}", ha="center", va="center")
    ax.text(left + cols / 2, -0.3, title, ha="center", va="bottom", fontsize=10)


def plot_gather(
    input: torch.Tensor, dim: int, index: torch.Tensor, *, ax: Axes | None = None
) -> Axes:
    """Draw ``torch.gather(input, dim, index)``: input and output grids joined by arrows.

    Each arrow runs from the input cell an output element is copied from to that output
    cell. Arrows and source cells are coloured by the output element's coordinate that
    ``gather`` keeps (the column for ``dim=0``, the row for ``dim=1``).

    Args:
        input: a 1-d or 2-d tensor of at most 12 elements per side.
        dim: the dimension along which ``index`` picks.
        index: an integer tensor as for :func:`explain_gather`, 1-d or 2-d, of at most
            12 elements per side.
        ax: the matplotlib axes to draw on; a new figure by default.

    Returns:
        The axes drawn on. Each arrow is an annotation with ``gid="gather-arrow"``,
        from its source cell's centre (``xyann``) to its output cell's centre (``xy``).

    Raises:
        TypeError: as :func:`explain_gather`, or ``ax`` is not matplotlib axes.
        ValueError: as :func:`explain_gather`, ``input`` or ``index`` is not 1-d or
            2-d or has more than 12 elements in a dimension (checked first), or
            ``input`` is on the ``meta`` device (its values are drawn), even with an
            empty ``index``.

    Example:
        >>> import torch
        >>> x = torch.arange(6).reshape(2, 3)
        >>> ax = plot_gather(x, 0, torch.tensor([[1, 0, 1]]))
        >>> len([t for t in ax.texts if t.get_gid() == "gather-arrow"])
        3
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    check_axes("ax", ax)
    check_tensor("input", input)
    check_tensor("index", index)
    if (  # before explain_gather, which may list up to MAX_STEPS steps
        not (1 <= input.dim() <= 2 and 1 <= index.dim() <= 2)
        or max([*input.shape, *index.shape]) > MAX_PLOTTED_SIDE
    ):
        msg = (
            f"input and index must be 1-d or 2-d with at most {MAX_PLOTTED_SIDE} elements "
            f"per dimension, got shapes {tuple(input.shape)} and {tuple(index.shape)}"
        )
        raise ValueError(msg)
    explanation = explain_gather(input, dim, index)
    check_values("input", input)  # drawn, even where an empty index reads none of it
    in_rows, in_cols = _as_grid(tuple(input.shape))
    out_rows, out_cols = _as_grid(tuple(index.shape))
    gap = 2.5
    out_left = in_cols + gap
    if ax is None:
        width = min(0.6 * (in_cols + out_cols + gap) + 0.6, 12)
        _, ax = plt.subplots(figsize=(width, 0.6 * max(in_rows, out_rows) + 0.8))
    palette = plt.get_cmap("tab10")
    kept = 1 - explanation.dim if input.dim() == 2 else None

    def cell(position: tuple[int, ...]) -> tuple[int, int]:
        return (0, position[0]) if len(position) == 1 else (position[0], position[1])

    def color(step: GatherStep) -> str:
        group = 0 if kept is None else step.output[kept]
        return to_hex(palette(group % palette.N))

    source_colors = {cell(s.source): color(s) for s in explanation}
    light = {k: v + "55" for k, v in source_colors.items()}
    picked = index.detach().cpu() if index.numel() else torch.zeros(index.shape, dtype=torch.int64)
    gathered = torch.gather(input.detach().cpu(), explanation.dim, picked)
    _draw_grid(ax, input.detach().cpu(), 0, "input", light)
    _draw_grid(
        ax, gathered, out_left, "output", {cell(s.output): color(s) + "55" for s in explanation}
    )
    for step in explanation:
        (sr, sc), (orow, oc) = cell(step.source), cell(step.output)
        ax.annotate(
            "",
            xy=(out_left + oc + 0.5, orow + 0.5),
            xytext=(sc + 0.5, sr + 0.5),
            arrowprops={
                "arrowstyle": "->",
                "color": color(step),
                "alpha": 0.8,
                "shrinkA": 9,
                "shrinkB": 11,
                "connectionstyle": "arc3,rad=-0.15",
            },
            gid="gather-arrow",
        )
    ax.set_xlim(-0.2, out_left + out_cols + 0.2)
    ax.set_ylim(max(in_rows, out_rows) + 0.2, -0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"gather(input, dim={explanation.dim}, index)", fontsize=10, loc="left")
    return ax


MAX_CONV_OPTION = 2**20
"""The largest stride, padding or dilation :func:`conv2d_as_matmul` accepts."""


_TENSOR_ALONE = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 10)
"""Whether ``F.conv2d`` takes a one-element tensor alone as an option (from torch 2.10;
2.8 and 2.9 refuse it, and take one only inside a tuple or list)."""


def _option_int(name: str, value: object, *, first: bool) -> int:
    """An element of an option's tuple or list as an int, as ``F.conv2d`` reads it.

    torch checks the type of the first element only, so a bool is refused there and
    read as 0 or 1 after it; any element may be an int, a NumPy integer, a 0-d NumPy
    integer array, an object with ``__index__`` or a one-element integer tensor.
    """
    if isinstance(value, torch.Tensor):
        return _tensor_int(name, value, bools=False)
    if isinstance(value, bool):
        if first:
            msg = (
                f"{name} must be an int, got bool: {value!r} (F.conv2d takes a bool only "
                "after the first element)"
            )
            raise TypeError(msg)
        return int(value)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        msg = f"{name} must be an int, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg) from None


def _tensor_int(name: str, value: torch.Tensor, *, bools: bool) -> int:
    """A one-element integer (or, with ``bools``, bool) tensor's value, on the CPU."""
    integral = not (value.is_floating_point() or value.is_complex())
    if value.numel() != 1 or not integral or (value.dtype == torch.bool and not bools):
        msg = f"{name} must be an int, got a tensor of dtype {value.dtype}" + (
            f" and shape {tuple(value.shape)}" if value.numel() != 1 else ""
        )
        raise TypeError(msg)
    if value.device.type == "meta":
        msg = f"{name} must hold a value, got a tensor on the meta device"
        raise ValueError(msg)
    return int(value.item())


def _pair(
    name: str, value: object, *, minimum: int, accepted: str = "an int or a pair of ints"
) -> tuple[int, int]:
    """``value`` as (rows, columns), as ``F.conv2d`` takes it (torch 2.8 to 2.15).

    An int or a NumPy integer (not a bool), or a tuple or list of one or two elements
    (one is used for both) read by :func:`_option_int`; from torch 2.10 a one-element
    integer or bool tensor too. A ``range``, another sequence or a bool alone is refused.
    """
    if isinstance(value, tuple | list):
        if len(value) not in (1, 2):
            msg = (
                f"{name} must be an int or a pair of ints, got a sequence of {len(value)}: "
                f"{_shown(value)}"
            )
            raise ValueError(msg)
        pair = [
            check_int(
                f"{name}[{i}]",
                _option_int(f"{name}[{i}]", v, first=i == 0),
                minimum=minimum,
                maximum=MAX_CONV_OPTION,
            )
            for i, v in enumerate(value)
        ]
        return pair[0], pair[-1]
    if isinstance(value, torch.Tensor) and _TENSOR_ALONE:
        single = _tensor_int(name, value, bools=True)
    elif not isinstance(value, bool) and isinstance(value, numbers.Integral):
        single = int(value)  # an int or a NumPy integer (np.bool_ is no Integral)
    else:
        hint = (
            " (F.conv2d takes a pair as a tuple or list)"
            if isinstance(value, Sequence) and not isinstance(value, str | bytes)
            else " (F.conv2d takes a tensor alone from torch 2.10 on)"
            if isinstance(value, torch.Tensor)
            else ""
        )
        msg = f"{name} must be {accepted}, got {type(value).__name__}: {_shown(value)}{hint}"
        raise TypeError(msg)
    check_int(name, single, minimum=minimum, maximum=MAX_CONV_OPTION)
    return single, single


def _check_floating(name: str, tensor: torch.Tensor, like: torch.Tensor | None) -> None:
    if not tensor.is_floating_point():
        msg = f"{name} must be a floating-point tensor, got dtype {tensor.dtype}"
        raise TypeError(msg)
    if like is not None and (tensor.dtype, tensor.device) != (like.dtype, like.device):
        msg = (
            f"{name} must have input's dtype and device ({like.dtype}, {like.device}), "
            f"got {tensor.dtype} on {tensor.device}"
        )
        raise ValueError(msg)


_PADDINGS = "an int, a pair of ints, 'same' or 'valid'"
"""What ``conv2d_as_matmul`` takes as ``padding``, as its errors say."""


def _padding_of(
    padding: str, stride: tuple[int, int], dilation: tuple[int, int], kernel: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """``padding="same"`` or ``"valid"`` as ``F.conv2d`` reads it: the zeros on each
    side (rows, columns) and the extra zero after (right, bottom) where ``"same"`` needs
    an odd number."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding != "same":
        msg = f"padding must be {_PADDINGS}, got {padding!r}"
        raise ValueError(msg)
    if stride != (1, 1):
        msg = (
            "padding='same' needs stride 1 (F.conv2d refuses it for strided "
            f"convolutions), got stride {stride}"
        )
        raise ValueError(msg)
    total = [dilation[i] * (kernel[i] - 1) for i in (0, 1)]
    return (total[0] // 2, total[1] // 2), (total[0] % 2, total[1] % 2)


def conv2d_as_matmul(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | str = 0,
    dilation: int | Sequence[int] = 1,
) -> torch.Tensor:
    """``F.conv2d`` computed as ``unfold`` + matrix multiply + ``view``.

    ``F.unfold`` copies every receptive field (``C * kh * kw`` values) into a column,
    one column per output position; the kernel flattened to ``(O, C * kh * kw)`` times
    those columns is the convolution; ``view`` gives the columns their 2-d layout back.

    The shapes ``F.conv2d`` accepts are accepted, and those it refuses refused: an
    empty batch (``N = 0``) is fine; ``O = 0`` is refused; an input with no channels
    (``C = 0``) gives what ``F.conv2d`` gives, an empty ``(N, 0, H_out, W_out)`` tensor
    (no output channels either, whatever ``O`` and ``bias``); and an empty height or
    width is refused unless ``N = 0`` or ``C = 0``.

    Args:
        input: a ``(N, C, H, W)`` floating-point tensor.
        weight: a ``(O, C, kh, kw)`` kernel of the same dtype and device, ``O >= 1``
            (``kh`` and ``kw`` may be 0 only where ``C = 0``, as for ``F.conv2d``).
        bias: an optional ``(O,)`` tensor.
        stride: the step between receptive fields, >= 1.
        padding: zeros added on each side, >= 0; or ``"valid"`` (none) or ``"same"``
            (an output as large as the input, stride 1 only; where the dilated kernel
            needs an odd number of zeros, the extra one goes after: right, bottom), as
            ``F.conv2d`` takes them.
        dilation: the spacing of the kernel's taps, >= 1.
            Each of these three is taken as ``F.conv2d`` takes it (torch 2.8 to 2.15):
            an int or a NumPy integer, or a pair (rows, columns) given as a tuple or
            list of two (or of one, used for both), each at most
            :data:`MAX_CONV_OPTION`. An element of the pair may also be a 0-d NumPy
            integer array, an object with ``__index__`` or a one-element integer tensor,
            and, after the first, a bool (0 or 1); from torch 2.10 a one-element integer
            or bool tensor may stand alone. A bool alone or first, a ``range`` or another
            sequence and floats are refused, as ``F.conv2d`` refuses them; so are
            strings, but for ``padding="same"`` and ``"valid"`` (bytes such as
            ``b"same"``, which ``F.conv2d`` also takes, are refused).

    Returns:
        A ``(N, O, H_out, W_out)`` tensor equal (up to rounding) to
        ``F.conv2d(input, weight, bias, stride, padding, dilation)``
        (``(N, 0, H_out, W_out)`` where ``C = 0``, as that gives).

    Raises:
        TypeError: a tensor argument is not a floating-point tensor, or an option is
            not an int/pair as ``F.conv2d`` takes them.
        ValueError: wrong numbers of dimensions, channels or bias size that do not
            match, a weight with no output channel or (with ``C >= 1``) an empty
            kernel, an input with an empty height or width (and ``N, C >= 1``),
            dtypes or devices that differ, options out of range, a padding string other
            than ``"same"`` and ``"valid"``, ``"same"`` with a stride other than 1, a
            kernel larger than
            the padded input, or an unfolded matrix of more than :data:`MAX_UNFOLDED`
            values.

    Example:
        >>> import torch
        >>> x = torch.arange(16.0).reshape(1, 1, 4, 4)
        >>> w = torch.ones(1, 1, 2, 2)
        >>> conv2d_as_matmul(x, w, stride=2)
        tensor([[[[10., 18.],
                  [42., 50.]]]])
    """
    check_tensor("input", input)
    check_tensor("weight", weight)
    _check_floating("input", input, None)
    _check_floating("weight", weight, input)
    if input.dim() != 4:
        msg = f"input must be 4-d (N, C, H, W), got shape {tuple(input.shape)}"
        raise ValueError(msg)
    if weight.dim() != 4:
        msg = f"weight must be 4-d (O, C, kh, kw), got shape {tuple(weight.shape)}"
        raise ValueError(msg)
    n, c, h, w = input.shape
    o, c_w, kh, kw = weight.shape
    if c_w != c:
        msg = f"weight.shape[1] must equal input's channels ({c}), got {c_w}"
        raise ValueError(msg)
    if o == 0:
        msg = (
            "weight must have at least one output channel (weight.shape[0] >= 1, as "
            f"F.conv2d requires), got shape {tuple(weight.shape)}"
        )
        raise ValueError(msg)
    if c and (kh == 0 or kw == 0):
        msg = (
            f"weight's kernel must be at least 1 x 1 (as F.conv2d requires for an input "
            f"with channels), got shape {tuple(weight.shape)}"
        )
        raise ValueError(msg)
    if bias is not None:
        check_tensor("bias", bias)
        _check_floating("bias", bias, input)
        if tuple(bias.shape) != (o,):
            msg = f"bias must have shape ({o},) (one value per output channel), got {tuple(bias.shape)}"
            raise ValueError(msg)
    s = _pair("stride", stride, minimum=1)
    d = _pair("dilation", dilation, minimum=1)
    after = (0, 0)  # the extra zero after (bottom, right) of an odd "same" padding
    if isinstance(padding, str):
        p, after = _padding_of(padding, s, d, (kh, kw))
    else:
        p = _pair("padding", padding, minimum=0, accepted=_PADDINGS)
    padded = (h + 2 * p[0] + after[0], w + 2 * p[1] + after[1])
    h_out = (padded[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    w_out = (padded[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    if h_out < 1 or w_out < 1:
        msg = (
            f"weight's dilated kernel ({d[0] * (kh - 1) + 1}, {d[1] * (kw - 1) + 1}) must fit "
            f"in the padded input {padded}"
        )
        raise ValueError(msg)
    if n and c and (h == 0 or w == 0):
        msg = (
            "input must have a non-empty height and width (as F.conv2d requires unless "
            f"the batch or the channels are empty), got shape {tuple(input.shape)}"
        )
        raise ValueError(msg)
    check_count(
        "the unfolded input", n * c * kh * kw * h_out * w_out, limit=MAX_UNFOLDED,
        what="values", work="unfold copies every receptive field into a column",
    )  # fmt: skip
    if any(after):  # F.conv2d pads a copy of the input the same way
        input = F.pad(input, (0, after[1], 0, after[0]))
        h, w = input.shape[2:]
    if input.numel():
        columns = F.unfold(input, (kh, kw), dilation=d, padding=p, stride=s)  # (N, C*kh*kw, L)
    else:  # N = 0 or C = 0: no values to unfold (and unfold refuses); the sum keeps autograd
        columns = input.sum((1, 2, 3)).reshape(n, 1, 1).expand(n, c * kh * kw, h_out * w_out)
    kept = o if c else 0  # F.conv2d's result for an input without channels has none either
    out = weight[:kept].reshape(kept, c * kh * kw) @ columns  # (N, O, L)
    if bias is not None:
        out = out + bias[:kept, None]
    return out.view(n, kept, h_out, w_out)

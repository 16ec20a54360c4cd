"""Floating-point formats side by side, and the dtype each op gets under autocast.

:func:`dtype_ranges` tabulates what
``torch.finfo`` says of float16, bfloat16, float32 and float64 and adds what it leaves
out (the smallest subnormal, the last integer stored exactly), :func:`plot_dtype_ranges`
draws those ranges on a log scale, and :func:`autocast_dtypes` runs ops inside
``torch.autocast`` and reports, for each, the dtype of its output from a float32 input
and from an input already in the lower precision, and whether those dtypes are
autocast's doing or the op's own (the same without autocast).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from pytorch_memo._checks import (
    _shown,
    check_callable,
    check_count,
    check_mapping,
    check_number,
    check_tensor,
    check_type,
)
from pytorch_memo._table import NamedRows, html_table, text_table

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "FLOAT_DTYPES",
    "MAX_EXAMPLE_ELEMENTS",
    "MAX_MARKS",
    "AutocastRow",
    "AutocastTable",
    "DtypeRange",
    "DtypeRanges",
    "autocast_dtypes",
    "dtype_ranges",
    "plot_dtype_ranges",
]

FLOAT_DTYPES: tuple[torch.dtype, ...] = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)
"""The formats :func:`dtype_ranges` describes: each has subnormals, infinities and
round-to-nearest-even conversion, so the numbers it reports hold for real tensors."""

_LOWER = (torch.float16, torch.bfloat16)
MAX_EXAMPLE_ELEMENTS = 2**24
"""The most elements :func:`autocast_dtypes` accepts in its example: it copies the
example to float32 and to the autocast dtype, and runs every op on both, inside
autocast and without it."""
MAX_MARKS = 64
"""The most marks :func:`plot_dtype_ranges` draws (each is a labelled line)."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _number(value: float) -> str:
    """``65504`` below a million, ``3.39e+38`` above."""
    return f"{value:.0f}" if value < 1e6 else f"{value:.3g}"


def _power_of_two(value: float) -> str:
    """``2^-14 ≈ 6.1e-05`` for an exact power of two."""
    return f"2^{round(math.log2(value))} ≈ {value:.2g}"


@dataclass(frozen=True)
class DtypeRange:
    """What one floating-point dtype can hold.

    Attributes:
        dtype: the dtype described.
        bits: its size in bits (``torch.finfo(dtype).bits``).
        exponent_bits: bits of the exponent.
        mantissa_bits: bits of the fraction stored after the implicit leading 1.
        max: the largest finite value (``finfo.max``); beyond it, values round to inf.
        smallest_normal: the smallest positive value at full precision
            (``finfo.smallest_normal``, also ``finfo.tiny``).
        smallest_subnormal: the smallest positive value at all, with a single
            significant bit; half of it and less round to 0.
        eps: the gap between 1 and the next value (``finfo.eps``).
        exact_integers: every integer of magnitude up to this one is stored exactly;
            the next integer is not.
    """

    dtype: torch.dtype
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float
    exact_integers: int

    @property
    def name(self) -> str:
        """The dtype's name without ``torch.``: ``float16``."""
        return _dtype_name(self.dtype)

    def cells(self) -> tuple[str, ...]:
        """The row as display strings, in the order of the table's headers."""
        return (
            self.name,
            f"{self.bits} = 1 + {self.exponent_bits} + {self.mantissa_bits}",
            _number(self.max),
            _power_of_two(self.smallest_normal),
            _power_of_two(self.smallest_subnormal),
            _power_of_two(self.eps),
            str(self.exact_integers),
        )


_RANGE_HEADERS = (
    "dtype",
    "bits: sign + exponent + mantissa",
    "max",
    "smallest normal",
    "smallest subnormal",
    "eps",
    "integers exact up to",
)


@dataclass(frozen=True)
class DtypeRanges(NamedRows[DtypeRange]):
    """Rows of :class:`DtypeRange`, shown as a text table or, in Jupyter, HTML."""

    rows: tuple[DtypeRange, ...]

    def __str__(self) -> str:
        return text_table([_RANGE_HEADERS, *(row.cells() for row in self.rows)])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows = [row.cells() for row in self.rows]
        return html_table(_RANGE_HEADERS, rows, css_class="memo-dtypes")


def _check_float_dtype(name: str, value: object) -> torch.dtype:
    check_type(name, value, torch.dtype, "a torch.dtype")
    assert isinstance(value, torch.dtype)
    if value not in FLOAT_DTYPES:
        expected = ", ".join(f"torch.{_dtype_name(d)}" for d in FLOAT_DTYPES)
        msg = f"{name} must be one of {expected}, got {value}"
        raise ValueError(msg)
    return value


def dtype_ranges(dtypes: Sequence[torch.dtype] = FLOAT_DTYPES) -> DtypeRanges:
    """The range and precision of floating-point dtypes, from ``torch.finfo``.

    ``torch.finfo`` gives ``max``, ``smallest_normal`` and ``eps``; the smallest
    subnormal (``smallest_normal * eps``) and the last exactly stored integer
    (``2 / eps``) follow from them.

    Args:
        dtypes: dtypes among :data:`FLOAT_DTYPES` (all four by default), in the
            order of the rows.

    Returns:
        A :class:`DtypeRanges`; look a row up by name: ``ranges["float16"]``.

    Raises:
        TypeError: ``dtypes`` is not a sequence of ``torch.dtype``.
        ValueError: a dtype is not one of :data:`FLOAT_DTYPES`, or ``dtypes`` is
            empty or names one twice.

    Example:
        >>> import torch
        >>> half = dtype_ranges([torch.float16])["float16"]
        >>> half.max, half.smallest_subnormal == 2**-24, half.exact_integers
        (65504.0, True, 2048)
    """
    given: object = dtypes  # checked at run time, whatever the annotation says
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        msg = (
            f"dtypes must be a sequence of torch.dtype, got {type(given).__name__}: {_shown(given)}"
        )
        raise TypeError(msg)
    checked = [_check_float_dtype(f"dtypes[{i}]", d) for i, d in enumerate(given)]
    if not checked:
        msg = "dtypes must name at least one dtype, got an empty sequence"
        raise ValueError(msg)
    for index, dtype in enumerate(checked):
        if dtype in checked[:index]:
            msg = f"dtypes must name each dtype once, got {dtype} again at dtypes[{index}]"
            raise ValueError(msg)
    rows = []
    for dtype in checked:
        info = torch.finfo(dtype)
        mantissa = round(-math.log2(info.eps))
        rows.append(
            DtypeRange(
                dtype=dtype,
                bits=info.bits,
                exponent_bits=info.bits - 1 - mantissa,
                mantissa_bits=mantissa,
                max=info.max,
                smallest_normal=info.smallest_normal,
                smallest_subnormal=info.smallest_normal * info.eps,
                eps=info.eps,
                exact_integers=2 ** (mantissa + 1),
            )
        )
    return DtypeRanges(tuple(rows))


def plot_dtype_ranges(
    ranges: DtypeRanges | None = None,
    *,
    marks: Mapping[str, float] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Draw each dtype's positive range on a log scale: subnormal, then normal.

    Args:
        ranges: what to draw (``dtype_ranges()`` when None).
        marks: magnitudes to mark with a labelled vertical line, such as
            ``{"a gradient of 1e-8": 1e-8}``: a mapping of str labels to positive
            finite numbers, at most :data:`MAX_MARKS` of them.
        ax: the axes to draw on (a new figure when None).

    Returns:
        The axes; the x axis is ``log10`` of the magnitude.

    Raises:
        TypeError: ``ranges`` is not a :class:`DtypeRanges`, ``marks`` is not a
            mapping of str to numbers, or ``ax`` is not a matplotlib Axes.
        ValueError: ``ranges`` has no rows, a mark is not positive and finite, or
            there are more than :data:`MAX_MARKS` marks.

    Example:
        >>> ax = plot_dtype_ranges(marks={"1": 1.0})
        >>> ax.get_xlabel()
        'log10 of the magnitude'
    """
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    if ranges is None:
        ranges = dtype_ranges()
    check_type("ranges", ranges, DtypeRanges, "a DtypeRanges (from dtype_ranges) or None")
    if not ranges.rows:
        msg = "ranges must hold at least one DtypeRange, got none"
        raise ValueError(msg)
    if ax is not None:
        check_type("ax", ax, Axes, "a matplotlib Axes or None")
    given = {} if marks is None else marks
    given = check_mapping("marks", given, str, object, "a mapping of labels (str) to numbers")
    check_count("marks", len(given), limit=MAX_MARKS, what="marks", work="one line each")
    shown_marks: dict[str, float] = {}
    for label, value in given.items():
        number = check_number(f"marks[{label!r}]", value)  # also refuses NaN, inf, 10**400
        if not number > 0:
            msg = f"marks[{label!r}] must be a positive finite number, got {_shown(value)}"
            raise ValueError(msg)
        shown_marks[label] = number
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.0 + 0.55 * len(ranges)))
    for y, row in enumerate(ranges):
        low, normal, high = (
            math.log10(row.smallest_subnormal),
            math.log10(row.smallest_normal),
            math.log10(row.max),
        )
        ax.barh(y, normal - low, left=low, height=0.6, color="#a6c8e6",
                label="subnormal" if y == 0 else None)  # fmt: skip
        ax.barh(y, high - normal, left=normal, height=0.6, color="#2a6fb0",
                label="normal" if y == 0 else None)  # fmt: skip
        ax.text(high, y, f" max {_number(row.max)}", va="center", fontsize=8)
    for label, value in shown_marks.items():
        ax.axvline(math.log10(value), color="#c44e52", linewidth=1, linestyle="--")
        ax.text(math.log10(value), -0.45, f"{label} ", color="#c44e52", fontsize=8,
                va="center", ha="right")  # fmt: skip
    left = min(math.log10(row.smallest_subnormal) for row in ranges)
    right = max(math.log10(row.max) for row in ranges)
    ax.set_xlim(left - 0.03 * (right - left), right + 0.2 * (right - left))
    ax.set_yticks(range(len(ranges)), [row.name for row in ranges])
    ax.set_ylim(len(ranges) - 0.4, -0.6)
    ax.set_xlabel("log10 of the magnitude")
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=2, fontsize=8, frameon=False)
    return ax


Policy = Literal["lower precision", "float32", "input dtype", "same without autocast", "other"]


@dataclass(frozen=True)
class AutocastRow:
    """The output dtypes of one op inside ``torch.autocast`` and without it.

    Attributes:
        name: the op's name, as given.
        lower: the autocast dtype (``torch.bfloat16`` or ``torch.float16``).
        from_float32: the output's dtype when the op is given a float32 input, inside
            autocast.
        from_lower: the output's dtype when the input already has the ``lower`` dtype,
            inside autocast.
        plain_from_float32: the output's dtype from the float32 input without autocast,
            or None if the op raised there.
        plain_from_lower: the output's dtype from the ``lower`` input without autocast,
            or None if the op raised there (as a product of a bfloat16 input and a
            float32 weight does).
    """

    name: str
    lower: torch.dtype
    from_float32: torch.dtype
    from_lower: torch.dtype
    plain_from_float32: torch.dtype | None
    plain_from_lower: torch.dtype | None

    @property
    def policy(self) -> Policy:
        """What autocast did to the op, read from the four outputs.

        ``"lower precision"``: both outputs inside autocast are ``lower``, and the one
        from float32 is not without autocast: autocast cast the op down.
        ``"float32"``: both are float32, and the one from ``lower`` is not without
        autocast: autocast cast the op up. ``"input dtype"``: each output has its
        input's dtype, inside autocast and without it alike: autocast left the op
        alone. ``"same without autocast"``: any other pair of outputs that autocast
        does not change: the dtypes are the op's own (type promotion with a tensor
        it closes over, or a cast of its own) and say nothing of autocast's policy
        for the op. ``"other"``: none of these.
        """
        inside = (self.from_float32, self.from_lower)
        plain = (self.plain_from_float32, self.plain_from_lower)
        if inside == (torch.float32, self.lower) and plain == inside:
            return "input dtype"
        if plain == inside:
            return "same without autocast"
        if inside == (self.lower, self.lower) and self.plain_from_float32 != self.lower:
            return "lower precision"
        if inside == (torch.float32, torch.float32) and self.plain_from_lower != torch.float32:
            return "float32"
        return "other"

    def cells(self) -> tuple[str, str, str, str]:
        """The row as display strings: name, both output dtypes in autocast, policy."""
        return (
            self.name,
            _dtype_name(self.from_float32),
            _dtype_name(self.from_lower),
            self.policy,
        )


@dataclass(frozen=True)
class AutocastTable(NamedRows[AutocastRow]):
    """Rows of :class:`AutocastRow` for one device type and autocast dtype."""

    device_type: str
    dtype: torch.dtype
    rows: tuple[AutocastRow, ...]

    def names(self, policy: Policy) -> tuple[str, ...]:
        """The names of the ops with the given ``policy``, in row order."""
        return tuple(row.name for row in self.rows if row.policy == policy)

    def _headers(self) -> tuple[str, str, str, str]:
        lower = _dtype_name(self.dtype)
        return ("op", "from float32", f"from {lower}", f"policy ({self.device_type}, {lower})")

    def __str__(self) -> str:
        return text_table([self._headers(), *(row.cells() for row in self.rows)])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows = [row.cells() for row in self.rows]
        return html_table(self._headers(), rows, css_class="memo-autocast")


def _autocast(device_type: str, dtype: torch.dtype) -> torch.autocast:
    """``torch.autocast(device_type, dtype=dtype)``, refused when torch disables it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        region = torch.autocast(device_type, dtype=dtype)
    with region:
        enabled = torch.is_autocast_enabled(device_type)
    if not enabled:
        said = "; ".join(str(w.message).splitlines()[0] for w in caught)
        msg = (
            f"device_type={device_type!r}: torch.autocast({device_type!r}, dtype={dtype}) "
            "is not enabled here" + (f" (torch warned: {said})" if said else "")
        )
        raise RuntimeError(msg)
    return region


def _plain(device_type: str) -> torch.autocast:
    """A region with autocast off for ``device_type``, even inside an enclosing one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.autocast(device_type, enabled=False)


def _raised(name: str, error: Exception) -> Exception:
    """``error`` again, of its type where it can be made from a message, naming the op."""
    try:
        return type(error)(f"ops[{name!r}] raised: {error}")
    except Exception:  # noqa: BLE001 - a type that takes other arguments
        return RuntimeError(f"ops[{name!r}] raised {type(error).__name__}: {error}")


def _dtype_of(name: str, output: object) -> torch.dtype:
    if not isinstance(output, torch.Tensor):
        msg = f"ops[{name!r}] must return a torch.Tensor, got {type(output).__name__}: {_shown(output)}"
        raise TypeError(msg)
    return output.dtype


def _run(
    name: str,
    op: Callable[[torch.Tensor], torch.Tensor],
    example: torch.Tensor,
    region: torch.autocast,
) -> torch.dtype:
    """The dtype of ``op(example)`` inside autocast; an error is raised naming the op."""
    try:
        with region:
            output: object = op(example)
    except Exception as error:
        raise _raised(name, error) from error
    return _dtype_of(name, output)


def _run_plain(
    name: str,
    op: Callable[[torch.Tensor], torch.Tensor],
    example: torch.Tensor,
    region: torch.autocast,
) -> torch.dtype | None:
    """The dtype of ``op(example)`` without autocast, None if it raised (as a product
    of a bfloat16 input and a float32 weight does: it takes autocast to run)."""
    try:
        with region:
            output: object = op(example)
    except Exception:  # noqa: BLE001 - the row shows it; inside autocast it ran
        return None
    return _dtype_of(name, output)


def _autocast_row(
    name: str,
    op: Callable[[torch.Tensor], torch.Tensor],
    examples: tuple[torch.Tensor, torch.Tensor],
    regions: tuple[torch.autocast, torch.autocast],
) -> AutocastRow:
    """The op run on both examples inside autocast, then on both without it."""
    as_float32, as_lower = examples
    region, plain = regions
    return AutocastRow(
        name=name,
        lower=as_lower.dtype,
        from_float32=_run(name, op, as_float32, region),
        from_lower=_run(name, op, as_lower, region),
        plain_from_float32=_run_plain(name, op, as_float32, plain),
        plain_from_lower=_run_plain(name, op, as_lower, plain),
    )


def autocast_dtypes(
    ops: Mapping[str, Callable[[torch.Tensor], torch.Tensor]],
    example: torch.Tensor,
    *,
    device_type: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
) -> AutocastTable:
    """Run each op inside ``torch.autocast`` and report the dtype of its output.

    Each op is called twice inside ``torch.autocast(device_type, dtype=dtype)``: on
    ``example`` as float32 and on ``example`` cast to ``dtype``; then on both again
    with autocast off, to tell autocast's casts from the op's own dtypes. The verdict,
    :attr:`AutocastRow.policy`, is one of:

    - ``"lower precision"``: ``dtype`` both times in autocast, and not so from float32
      without it: autocast cast the op down (``mm``, ``linear``).
    - ``"float32"``: float32 both times in autocast, and not so from ``dtype`` without
      it: autocast cast the op up (``cross_entropy`` on CPU).
    - ``"input dtype"``: each output has its input's dtype, in autocast and without it:
      autocast left the op alone (``relu``; ``softmax`` on CPU).
    - ``"same without autocast"``: any other outputs that are the same with autocast
      off: they are the op's own dtypes, not autocast's, from type promotion with a
      float32 tensor the op closes over (``t * w``, ``torch.cat([t, w])``) or from a
      cast in the op (``t.to(torch.bfloat16)``).
    - ``"other"``: none of these.

    Other inputs an op needs (weights, targets) are closed over by the op itself. To
    ask for the op's own policy, make the floating-point ones in the input's dtype,
    ``lambda t: F.mse_loss(t, torch.zeros_like(t))``: a float32 target would make the
    loss float32 from a ``dtype`` input anyway, autocast or not, and the row says
    ``"same without autocast"``. A weight of a product can stay float32, since the
    product refuses mixed dtypes without autocast.

    Args:
        ops: each op's name and a function of one tensor that returns a tensor.
        example: a floating-point tensor on a device of type ``device_type``, of at
            most :data:`MAX_EXAMPLE_ELEMENTS` elements.
        device_type: the autocast device type, ``"cpu"`` or ``"cuda"``.
        dtype: the autocast dtype, ``torch.bfloat16`` or ``torch.float16``.

    Returns:
        An :class:`AutocastTable`, one row per op, in the order of ``ops``.

    Raises:
        TypeError: an argument has the wrong type, an op is not callable with one
            argument, or an op returns no tensor.
        ValueError: ``ops`` is empty, ``device_type`` or ``dtype`` is not one of the
            above, or ``example`` is not floating point, not on ``device_type`` or
            too large.
        RuntimeError: autocast does not enable itself for ``device_type`` and
            ``dtype`` here (``"cuda"`` without CUDA); torch's warning is quoted.
        Exception: an op raised inside autocast: an error of the same type (a
            RuntimeError where that type cannot be made from a message) whose message
            starts ``ops['name'] raised:``, chained to the op's own. An error without
            autocast is no error: the row shows None.

    Example:
        >>> import torch
        >>> w = torch.ones(3, 3)
        >>> table = autocast_dtypes(
        ...     {"mm": lambda t: t @ w, "exp": torch.exp}, torch.ones(2, 3)
        ... )
        >>> table["mm"].policy, table["exp"].policy
        ('lower precision', 'input dtype')
        >>> row = autocast_dtypes({"scaled": lambda t: t * w[0]}, torch.ones(2, 3))["scaled"]
        >>> row.from_lower, row.plain_from_lower, row.policy
        (torch.float32, torch.float32, 'same without autocast')
    """
    check_type("ops", ops, Mapping, "a mapping of names to functions")
    if not ops:
        msg = "ops must name at least one op, got an empty mapping"
        raise ValueError(msg)
    entries: list[tuple[object, object]] = list(ops.items())
    for name, op in entries:
        check_type("each key of ops", name, str, "a str")
        check_callable(f"ops[{name!r}]", op, arguments=1)
    check_type("device_type", device_type, str, "a str")
    if device_type not in ("cpu", "cuda"):
        msg = f"device_type must be 'cpu' or 'cuda', got {device_type!r}"
        raise ValueError(msg)
    check_type("dtype", dtype, torch.dtype, "a torch.dtype")
    if dtype not in _LOWER:
        msg = f"dtype must be torch.bfloat16 or torch.float16, got {dtype}"
        raise ValueError(msg)
    region = _autocast(device_type, dtype)
    check_tensor("example", example)
    if not example.is_floating_point():
        msg = f"example must be a floating-point tensor, got dtype {example.dtype}"
        raise ValueError(msg)
    if example.device.type != device_type:
        msg = f"example must be on a {device_type!r} device, got {str(example.device)!r}"
        raise ValueError(msg)
    check_count(
        "example", example.numel(), limit=MAX_EXAMPLE_ELEMENTS, what="elements",
        work="it is copied to float32 and to dtype; every op runs on both, twice",
    )  # fmt: skip
    examples = (example.detach().to(torch.float32), example.detach().to(dtype))
    regions = (region, _plain(device_type))
    rows = tuple(_autocast_row(name, op, examples, regions) for name, op in ops.items())
    return AutocastTable(device_type=device_type, dtype=dtype, rows=rows)

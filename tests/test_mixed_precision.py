"""pytorch_memo.mixed_precision, checked against torch.finfo, real conversions and
plain torch.autocast."""

from __future__ import annotations

import math
from collections.abc import Callable

import matplotlib as mpl
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_memo.mixed_precision import (
    FLOAT_DTYPES,
    MAX_MARKS,
    AutocastRow,
    AutocastTable,
    DtypeRanges,
    autocast_dtypes,
    dtype_ranges,
    plot_dtype_ranges,
)

mpl.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle


def as_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` stored in ``dtype`` and read back exactly (float64 holds every value)."""
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


# -- dtype_ranges -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_ranges_are_finfos(dtype: torch.dtype) -> None:
    row = dtype_ranges([dtype])[str(dtype).removeprefix("torch.")]
    info = torch.finfo(dtype)
    assert row.dtype == dtype
    assert (row.bits, row.max, row.smallest_normal, row.eps) == (
        info.bits,
        info.max,
        info.smallest_normal,
        info.eps,
    )
    assert 1 + row.exponent_bits + row.mantissa_bits == info.bits
    assert row.eps == 2.0**-row.mantissa_bits


@pytest.mark.parametrize(
    ("dtype", "exponent", "mantissa"),
    [
        (torch.float16, 5, 10),
        (torch.bfloat16, 8, 7),
        (torch.float32, 8, 23),
        (torch.float64, 11, 52),
    ],
)
def test_bit_layouts_are_ieee_and_brain_float(
    dtype: torch.dtype, exponent: int, mantissa: int
) -> None:
    row = dtype_ranges([dtype]).rows[0]
    assert (row.exponent_bits, row.mantissa_bits) == (exponent, mantissa)
    # the largest finite value follows from the layout: (2 - eps) * 2^(bias)
    assert row.max == (2 - row.eps) * 2.0 ** (2 ** (exponent - 1) - 1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_smallest_subnormal_is_held_and_half_of_it_is_not(dtype: torch.dtype) -> None:
    row = dtype_ranges([dtype]).rows[0]
    tiniest = row.smallest_subnormal
    assert 0 < tiniest < row.smallest_normal
    assert as_dtype(tiniest, dtype) == tiniest
    if dtype != torch.float64:  # half of float64's is 0 already as a Python float
        assert as_dtype(tiniest / 2, dtype) == 0.0
        assert as_dtype(tiniest * 0.75, dtype) == tiniest  # rounds up to it


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_values_beyond_max_by_half_a_gap_overflow(dtype: torch.dtype) -> None:
    row = dtype_ranges([dtype]).rows[0]
    gap = row.max * row.eps / (2 - row.eps)  # the spacing just below max
    assert as_dtype(row.max, dtype) == row.max
    assert as_dtype(row.max + gap * 0.49, dtype) == row.max
    assert as_dtype(row.max + gap / 2, dtype) == math.inf


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_exact_integers_end_where_the_table_says(dtype: torch.dtype) -> None:
    n = dtype_ranges([dtype]).rows[0].exact_integers
    if dtype == torch.float64:  # a float64 tensor from a Python int is exact up to 2^53
        assert torch.tensor(n, dtype=torch.float64).item() == n
        assert torch.tensor(n + 1, dtype=torch.float64).item() == n
        return
    ints = torch.arange(n - 3, n + 2, dtype=torch.float64)
    assert ints.to(dtype).double().tolist() == [n - 3, n - 2, n - 1, n, n]


@given(st.integers(0, 2**11))
def test_every_integer_up_to_2048_is_exact_in_float16(n: int) -> None:
    assert as_dtype(n, torch.float16) == n


@given(st.integers(0, 2**8))
def test_every_integer_up_to_256_is_exact_in_bfloat16(n: int) -> None:
    assert as_dtype(n, torch.bfloat16) == n


def test_ranges_keep_order_and_look_up_by_name() -> None:
    ranges = dtype_ranges([torch.float32, torch.float16])
    assert [row.name for row in ranges] == ["float32", "float16"]
    assert len(ranges) == 2
    assert ranges["float16"].max == 65504
    with pytest.raises(KeyError, match="name must be one of"):
        ranges["int8"]
    assert [row.dtype for row in dtype_ranges()] == list(FLOAT_DTYPES)


def test_ranges_render_as_text_and_html() -> None:
    ranges = dtype_ranges()
    text = str(ranges)
    lines = text.splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("dtype")
    assert lines[1].split()[:6] == ["float16", "16", "=", "1", "+", "5"]
    assert "65504" in lines[1]
    assert "2^-24" in lines[1]
    assert lines[1].endswith("2048")
    assert "2^-133" in lines[2]
    assert lines[2].endswith("256")
    assert repr(ranges) == text
    html = ranges._repr_html_()
    assert html.startswith('<table class="memo-dtypes">')
    assert "<td>2^-14 ≈ 6.1e-05</td>" in html


@pytest.mark.parametrize(
    ("dtypes", "error", "message"),
    [
        (torch.float16, TypeError, "dtypes must be a sequence of torch.dtype, got dtype"),
        ("float16", TypeError, "dtypes must be a sequence of torch.dtype, got str"),
        ([], ValueError, "dtypes must name at least one dtype"),
        (["float16"], TypeError, r"dtypes\[0\] must be a torch.dtype, got str"),
        ([torch.float32, torch.int8], ValueError, r"dtypes\[1\] must be one of .* got torch.int8"),
        ([torch.float8_e5m2], ValueError, r"dtypes\[0\] must be one of torch.float16"),
        (
            [torch.float16, torch.float32, torch.float16],
            ValueError,
            r"dtypes must name each dtype once, got torch.float16 again at dtypes\[2\]",
        ),
    ],
)
def test_bad_dtypes_are_named(dtypes: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        dtype_ranges(dtypes)  # type: ignore[arg-type]


# -- plot_dtype_ranges ------------------------------------------------------------------


def test_plot_draws_a_subnormal_and_a_normal_bar_per_dtype() -> None:
    ranges = dtype_ranges([torch.float16, torch.bfloat16])
    ax = plot_dtype_ranges(ranges, marks={"1e-8": 1e-8})
    bars = ax.patches
    assert len(bars) == 4
    half_sub, half_normal = bars[0], bars[1]
    assert isinstance(half_sub, Rectangle)
    assert isinstance(half_normal, Rectangle)
    assert half_sub.get_x() == pytest.approx(math.log10(2**-24))
    assert half_sub.get_x() + half_sub.get_width() == pytest.approx(math.log10(2**-14))
    assert half_normal.get_x() + half_normal.get_width() == pytest.approx(math.log10(65504))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["float16", "bfloat16"]
    assert [np.asarray(line.get_xdata())[0] for line in ax.get_lines()] == [pytest.approx(-8)]
    fig = ax.figure
    assert isinstance(fig, Figure)
    plt.close(fig)


def test_plot_uses_the_given_axes_and_defaults_to_every_dtype() -> None:
    fig, given_ax = plt.subplots()
    ax = plot_dtype_ranges(ax=given_ax)
    assert ax is given_ax
    assert len(ax.patches) == 2 * len(FLOAT_DTYPES)
    plt.close(fig)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"ranges": [torch.float16]}, TypeError, "ranges must be a DtypeRanges"),
        ({"ax": "ax"}, TypeError, "ax must be a matplotlib Axes or None, got str"),
        ({"marks": {"zero": 0.0}}, ValueError, r"marks\['zero'\] must be a positive finite"),
        ({"marks": {"inf": math.inf}}, ValueError, r"marks\['inf'\] must be a finite number"),
        ({"marks": {"s": "1e-8"}}, TypeError, r"marks\['s'\] must be a number, got str"),
        ({"marks": {"b": True}}, TypeError, r"marks\['b'\] must be a number, got bool"),
        # found by the fuzz: "OverflowError: int too large to convert to float"
        ({"marks": {"big": 10**400}}, ValueError, r"marks\['big'\] must be a finite number"),
        # found by the fuzz: marks that are no mapping failed in dict() ("'int' object is
        # not iterable", "cannot convert dictionary update sequence element #0..."), and a
        # list of pairs was taken silently
        (
            {"marks": 3},
            TypeError,
            "marks must be a mapping of labels \\(str\\) to numbers, got int",
        ),
        ({"marks": [("a", 1.0)]}, TypeError, "marks must be a mapping of labels .* got list"),
        ({"marks": {1: 1.0}}, TypeError, "marks must be a mapping of labels .* got an item int"),
        # found by the fuzz: 10**4 marks took 10 s to draw (one line and label each)
        (
            {"marks": {str(i): 1.0 for i in range(MAX_MARKS + 1)}},
            ValueError,
            "marks has 65 marks; at most 64 allowed",
        ),
        # found by the fuzz: "ValueError: min() arg is an empty sequence", naming no argument
        ({"ranges": DtypeRanges(())}, ValueError, "ranges must hold at least one DtypeRange"),
    ],
)
def test_plot_names_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        plot_dtype_ranges(**kwargs)  # type: ignore[arg-type]
    plt.close("all")


# -- autocast_dtypes --------------------------------------------------------------------

W = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
TARGET = torch.tensor([1, 0, 3, 2])

CPU_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mm": lambda t: t @ W,
    "linear": lambda t: F.linear(t, W),
    "cross_entropy": lambda t: F.cross_entropy(t, TARGET),
    "mse_loss": lambda t: F.mse_loss(t, torch.zeros_like(t)),  # the target in t's dtype
    "softmax": lambda t: t.softmax(-1),
    "exp": torch.exp,
    "sum": torch.sum,
    "relu": torch.relu,
    "max": torch.max,
}


def plain_autocast(
    op: Callable[[torch.Tensor], torch.Tensor], t: torch.Tensor, dtype: torch.dtype
) -> torch.dtype:
    with torch.autocast("cpu", dtype=dtype):
        return op(t).dtype


def without_autocast(
    op: Callable[[torch.Tensor], torch.Tensor], t: torch.Tensor
) -> torch.dtype | None:
    try:
        return op(t).dtype
    except RuntimeError:  # a product of bfloat16 and float32
        return None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_dtypes_are_plain_autocasts(dtype: torch.dtype) -> None:
    example = torch.randn(4, 8)
    table = autocast_dtypes(CPU_OPS, example, dtype=dtype)
    assert (table.device_type, table.dtype) == ("cpu", dtype)
    assert [row.name for row in table] == list(CPU_OPS)
    for name, op in CPU_OPS.items():
        assert table[name].from_float32 == plain_autocast(op, example, dtype)
        assert table[name].from_lower == plain_autocast(op, example.to(dtype), dtype)
        assert table[name].plain_from_float32 == without_autocast(op, example)
        assert table[name].plain_from_lower == without_autocast(op, example.to(dtype))
        assert table[name].lower == dtype
    assert table.names("lower precision") == ("mm", "linear")
    assert table.names("float32") == ("cross_entropy", "mse_loss")
    assert table.names("input dtype") == ("softmax", "exp", "sum", "relu", "max")
    assert table.names("same without autocast") == table.names("other") == ()
    # without autocast, a product of a lower-precision input and a float32 weight raises
    assert (table["mm"].plain_from_float32, table["mm"].plain_from_lower) == (torch.float32, None)
    assert (table["mse_loss"].plain_from_float32, table["mse_loss"].plain_from_lower) == (
        torch.float32,
        dtype,
    )


# found in review: each of these gave float32 (or the lower dtype) from both inputs, by
# type promotion with a float32 tensor or by a cast of its own, autocast or not, and was
# reported as autocast's cast up ("float32") or down ("lower precision"), or as "other"
# (a cast to the half type autocast does not use)
PROMOTING_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "times float32 w": lambda t: t * W[:4],
    "plus float32 w": lambda t: torch.add(t, W[:4]),
    "cat with float32 w": lambda t: torch.cat([t, W[:4]]),
    "mse_loss, float32 target": lambda t: F.mse_loss(t, torch.zeros(4, 8)),
    "to bfloat16": lambda t: t.to(torch.bfloat16),
    "to float16": lambda t: t.to(torch.float16),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", list(PROMOTING_OPS))
def test_type_promotion_and_an_ops_own_cast_are_not_autocasts(
    name: str, dtype: torch.dtype
) -> None:
    op = PROMOTING_OPS[name]
    example = torch.randn(4, 8)
    row = autocast_dtypes({name: op}, example, dtype=dtype)[name]
    assert row.policy == "same without autocast"
    assert (row.from_float32, row.from_lower) == (
        plain_autocast(op, example, dtype),
        plain_autocast(op, example.to(dtype), dtype),
    )
    assert (row.plain_from_float32, row.plain_from_lower) == (
        without_autocast(op, example),
        without_autocast(op, example.to(dtype)),
    )
    assert (row.plain_from_float32, row.plain_from_lower) == (row.from_float32, row.from_lower)


def test_a_target_in_the_inputs_dtype_shows_the_ops_own_policy() -> None:
    table = autocast_dtypes(
        {
            "float32 target": lambda t: F.mse_loss(t, torch.zeros(4, 8)),
            "zeros_like target": lambda t: F.mse_loss(t, torch.zeros_like(t)),
            "float32 w": lambda t: t * W[:4],
            "bfloat16 w": lambda t: t * W[:4].bfloat16(),
        },
        torch.randn(4, 8),
    )
    assert table.names("same without autocast") == ("float32 target", "float32 w")
    assert table.names("float32") == ("zeros_like target",)
    assert table.names("input dtype") == ("bfloat16 w",)


def test_an_enclosing_autocast_region_does_not_reach_the_runs_without_autocast() -> None:
    with torch.autocast("cpu", dtype=torch.float16):
        table = autocast_dtypes({"mm": CPU_OPS["mm"], "relu": torch.relu}, torch.randn(4, 8))
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.float16
    assert (table["mm"].plain_from_float32, table["mm"].policy) == (
        torch.float32,
        "lower precision",
    )
    assert table["relu"].policy == "input dtype"


@settings(deadline=None, max_examples=25)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    dtype=st.sampled_from([torch.bfloat16, torch.float16]),
    source=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
)
def test_the_example_is_used_as_float32_and_as_the_lower_dtype(
    rows: int, cols: int, dtype: torch.dtype, source: torch.dtype
) -> None:
    seen: list[torch.dtype] = []
    autocast: list[bool] = []

    def record(t: torch.Tensor) -> torch.Tensor:
        seen.append(t.dtype)
        autocast.append(torch.is_autocast_enabled("cpu"))
        assert t.shape == (rows, cols)
        assert not t.requires_grad
        return t.clone()

    example = torch.ones(rows, cols, dtype=source, requires_grad=True)
    row = autocast_dtypes({"clone": record}, example, dtype=dtype)["clone"]
    assert seen == [torch.float32, dtype, torch.float32, dtype]
    assert autocast == [True, True, False, False]
    assert (row.from_float32, row.from_lower, row.policy) == (torch.float32, dtype, "input dtype")
    assert (row.plain_from_float32, row.plain_from_lower) == (torch.float32, dtype)
    assert not torch.is_autocast_enabled("cpu")  # the region is left


def test_policy_names_every_combination() -> None:
    bf, f32, f64 = torch.bfloat16, torch.float32, torch.float64
    # (from float32, from bfloat16) in autocast, then the same without it; None: raised
    assert AutocastRow("a", bf, bf, bf, f32, None).policy == "lower precision"  # mm
    assert AutocastRow("a", bf, bf, bf, None, bf).policy == "lower precision"  # t @ w.bfloat16()
    assert AutocastRow("a", bf, bf, bf, f32, bf).policy == "lower precision"
    assert AutocastRow("a", bf, bf, bf, bf, f32).policy == "other"
    assert AutocastRow("a", bf, f32, f32, f32, bf).policy == "float32"  # cross_entropy
    assert AutocastRow("a", bf, f32, f32, f32, None).policy == "float32"  # cdist on CPU
    assert AutocastRow("a", bf, f32, f32, bf, f32).policy == "other"
    assert AutocastRow("a", bf, f32, bf, f32, bf).policy == "input dtype"  # relu
    assert AutocastRow("a", bf, f32, bf, None, bf).policy == "other"  # index_copy of bfloat16
    assert AutocastRow("a", bf, f32, f32, f32, f32).policy == "same without autocast"  # t * w
    assert AutocastRow("a", bf, bf, bf, bf, bf).policy == "same without autocast"  # t.bfloat16()
    assert AutocastRow("a", bf, f64, f64, f64, f64).policy == "same without autocast"
    assert AutocastRow("a", bf, f64, f64, f32, bf).policy == "other"
    assert AutocastRow("a", bf, bf, f32, bf, f32).policy == "same without autocast"
    assert AutocastRow("a", bf, bf, f32, f32, bf).policy == "other"


def test_autocast_table_renders_as_text_and_html() -> None:
    table = autocast_dtypes({"mm": CPU_OPS["mm"], "sum": torch.sum}, torch.randn(4, 8))
    assert isinstance(table, AutocastTable)
    assert str(table).splitlines() == [
        "op   from float32  from bfloat16  policy (cpu, bfloat16)",
        "mm   bfloat16      bfloat16       lower precision",
        "sum  float32       bfloat16       input dtype",
    ]
    assert repr(table) == str(table)
    html = table._repr_html_()
    assert html.startswith('<table class="memo-autocast">')
    assert "<td>lower precision</td>" in html


def test_an_op_that_raises_leaves_no_autocast_region_behind() -> None:
    def broken(t: torch.Tensor) -> torch.Tensor:
        raise ZeroDivisionError("op failed")

    with pytest.raises(ZeroDivisionError, match=r"^ops\['broken'\] raised: op failed$"):
        autocast_dtypes({"broken": broken}, torch.ones(2))
    assert not torch.is_autocast_enabled("cpu")


# found in review: torch's error came through naming no op: "RuntimeError: expected m1
# and m2 to have the same dtype, but got: c10::BFloat16 != double"
def test_an_op_that_raises_in_autocast_is_named_and_chained() -> None:
    ops = {"relu": torch.relu, "float64 mm": lambda t: t @ W.double()}
    with pytest.raises(RuntimeError) as caught:
        autocast_dtypes(ops, torch.randn(4, 8))
    message = str(caught.value)
    assert message.startswith("ops['float64 mm'] raised: expected m1 and m2 to have the same")
    assert type(caught.value) is RuntimeError
    cause = caught.value.__cause__
    assert type(cause) is RuntimeError
    assert message == f"ops['float64 mm'] raised: {cause}"
    assert not torch.is_autocast_enabled("cpu")


class TwoArgumentError(Exception):
    def __init__(self, code: int, why: str) -> None:
        super().__init__(code, why)


def test_an_error_that_takes_no_message_is_named_as_a_runtime_error() -> None:
    def broken(t: torch.Tensor) -> torch.Tensor:
        raise TwoArgumentError(3, "odd")

    with pytest.raises(RuntimeError, match=r"ops\['odd'\] raised TwoArgumentError: \(3, 'odd'\)"):
        autocast_dtypes({"odd": broken}, torch.ones(2))
    with pytest.raises(RuntimeError) as caught:
        autocast_dtypes({"odd": broken}, torch.ones(2))
    assert isinstance(caught.value.__cause__, TwoArgumentError)


def test_an_op_that_raises_only_without_autocast_gets_a_row() -> None:
    calls: list[bool] = []

    def only_in_autocast(t: torch.Tensor) -> torch.Tensor:
        calls.append(torch.is_autocast_enabled("cpu"))
        if not torch.is_autocast_enabled("cpu"):
            raise ValueError("needs autocast")
        return t.to(torch.bfloat16)

    row = autocast_dtypes({"only": only_in_autocast}, torch.ones(2))["only"]
    assert calls == [True, True, False, False]
    assert (row.plain_from_float32, row.plain_from_lower, row.policy) == (
        None,
        None,
        "lower precision",
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_cuda_without_cuda_is_refused_with_torchs_warning() -> None:
    with pytest.raises(
        RuntimeError, match=r"torch.autocast\('cuda'.*not enabled here.*CUDA is not available"
    ):
        autocast_dtypes({"sum": torch.sum}, torch.ones(2), device_type="cuda")


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (
            (["sum"], torch.ones(2)),
            {},
            TypeError,
            "ops must be a mapping of names to functions, got list",
        ),
        (({}, torch.ones(2)), {}, ValueError, "ops must name at least one op"),
        (
            ({1: torch.sum}, torch.ones(2)),
            {},
            TypeError,
            "each key of ops must be a str, got int: 1",
        ),
        (({"sum": 3}, torch.ones(2)), {}, TypeError, r"ops\['sum'\] must be callable, got int: 3"),
        # found by the fuzz: an op taking no argument failed when called, with
        # "<lambda>() takes 0 positional arguments but 1 was given", naming no op
        (
            ({"none": lambda: None}, torch.ones(2)),
            {},
            TypeError,
            (
                r"ops\['none'\] must be callable with 1 positional argument, got a callable "
                r"with signature \(\)"
            ),
        ),
        # found by the fuzz: an expanded example of 2**40 elements (4 bytes of memory) was
        # copied to bfloat16: "can't allocate memory: you tried to allocate 2199023255552 bytes"
        (
            ({"sum": torch.sum}, torch.zeros(1).expand(2**40)),
            {},
            ValueError,
            "example has 1099511627776 elements; at most 16777216 allowed",
        ),
        (({"sum": torch.sum}, [1.0]), {}, TypeError, "example must be a torch.Tensor, got list"),
        (
            ({"sum": torch.sum}, torch.ones(2, dtype=torch.int64)),
            {},
            ValueError,
            "example must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            ({"sum": torch.sum}, torch.ones(2)),
            {"device_type": "mps"},
            ValueError,
            "device_type must be 'cpu' or 'cuda', got 'mps'",
        ),
        (
            ({"sum": torch.sum}, torch.ones(2)),
            {"device_type": torch.device("cpu")},
            TypeError,
            "device_type must be a str, got device",
        ),
        (
            ({"sum": torch.sum}, torch.ones(2)),
            {"dtype": torch.float32},
            ValueError,
            "dtype must be torch.bfloat16 or torch.float16, got torch.float32",
        ),
        (
            ({"sum": torch.sum}, torch.ones(2)),
            {"dtype": "bfloat16"},
            TypeError,
            "dtype must be a torch.dtype, got str",
        ),
        (
            ({"tuple": lambda t: (t, t)}, torch.ones(2)),
            {},
            TypeError,
            r"ops\['tuple'\] must return a torch.Tensor, got tuple",
        ),
    ],
)
def test_bad_arguments_are_named(
    args: tuple[object, ...], kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        autocast_dtypes(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_an_example_on_the_wrong_device_is_refused() -> None:
    with pytest.raises(ValueError, match="example must be on a 'cuda' device, got 'cpu'"):
        autocast_dtypes({"sum": torch.sum}, torch.ones(2), device_type="cuda")

"""pytorch_memo.indexing, checked against torch.gather and F.conv2d themselves."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.indexing import conv2d_as_matmul, explain_gather, plot_gather


@dataclass(frozen=True)
class GatherCase:
    input: torch.Tensor
    dim: int
    index: torch.Tensor


@st.composite
def gather_cases(draw: st.DrawFn, *, max_ndim: int = 3, valid: bool = True) -> GatherCase:
    """Arguments of ``torch.gather``; with ``valid=False`` they may break its rules."""
    ndim = draw(st.integers(1, max_ndim))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    dim = draw(st.integers(-ndim, ndim - 1))
    pos = dim % ndim
    slack = 0 if valid else 2
    index_shape = tuple(
        draw(st.integers(0 if valid else 1, 4)) if d == pos else draw(st.integers(1, n + slack))
        for d, n in enumerate(shape)
    )
    low, high = (0, shape[pos] - 1) if valid else (-1, shape[pos])
    numel = 1
    for n in index_shape:
        numel *= n
    values = draw(st.lists(st.integers(low, high), min_size=numel, max_size=numel))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    index = torch.tensor(values, dtype=dtype).reshape(index_shape)
    source = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float64).reshape(shape)
    return GatherCase(source, dim, index)


@given(gather_cases())
def test_explain_gather_matches_torch_gather(case: GatherCase) -> None:
    expected = torch.gather(case.input, case.dim, case.index)
    explanation = explain_gather(case.input, case.dim, case.index)
    sources = explanation.sources()
    assert sources.shape == (*case.index.shape, case.input.dim())
    picked = case.input[tuple(sources.unbind(-1))]
    assert torch.equal(picked, expected)
    assert [s.value for s in explanation] == expected.flatten().tolist()
    assert [s.output for s in explanation] == [
        tuple(p) for p in torch.ones(case.index.shape).nonzero().tolist()
    ]


@given(gather_cases())
def test_sources_follow_the_per_dimension_formula(case: GatherCase) -> None:
    # out[i][j][k] = input[i][index[i][j][k]][k] for dim == 1, and so on.
    dim = case.dim % case.input.dim()
    for step in explain_gather(case.input, case.dim, case.index):
        expected = list(step.output)
        expected[dim] = int(case.index[step.output])
        assert step.source == tuple(expected)
        assert step.formula(dim).count("index[") == 1


@given(gather_cases(valid=False))
def test_explain_gather_rejects_what_torch_rejects(case: GatherCase) -> None:
    try:
        expected = torch.gather(case.input, case.dim, case.index)
    except RuntimeError:
        with pytest.raises(ValueError, match="index"):
            explain_gather(case.input, case.dim, case.index)
    else:
        picked = explain_gather(case.input, case.dim, case.index).sources()
        assert torch.equal(case.input[tuple(picked.unbind(-1))], expected)


def test_the_seed_example() -> None:
    tensor = torch.tensor([[57, 1, 75], [19, 85, 40], [58, 40, 6], [45, 62, 37], [75, 10, 84]])
    explanation = explain_gather(tensor, 0, torch.tensor([[1, 2], [3, 4]]))
    assert [s.source for s in explanation] == [(1, 0), (2, 1), (3, 0), (4, 1)]
    assert [s.value for s in explanation] == [19, 40, 45, 10]
    text = str(explanation).splitlines()
    assert text[0].split() == ["output", "formula", "source", "value"]
    assert text[1].split("  ")[0] == "out[0, 0]"
    assert "input[index[0, 1], 1]" in text[2]
    assert text[2].endswith("40")


def test_rendering_truncates_and_escapes() -> None:
    explanation = explain_gather(torch.arange(100), 0, torch.zeros(60, dtype=torch.int64))
    text = str(explanation)
    assert text.endswith("... 12 more rows")
    assert len(text.splitlines()) == 1 + 48 + 1
    page = explanation._repr_html_()
    assert page.count("<tr>") == 1 + 48
    assert "12 more rows" in page
    assert "&lt;" not in page
    assert "<code>out[0]</code>" in page
    assert repr(explanation) == text


def test_empty_index_gives_no_steps() -> None:
    explanation = explain_gather(torch.zeros(2, 3), 1, torch.zeros(0, 5, dtype=torch.int64))
    assert len(explanation) == 0
    assert explanation.sources().shape == (0, 5, 2)
    assert torch.gather(torch.zeros(2, 3), 1, torch.zeros(0, 5, dtype=torch.int64)).shape == (0, 5)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([1, 2], 0, torch.tensor([0])), TypeError, "input must be a torch.Tensor, got list"),
        ((torch.zeros(2), 0, [0]), TypeError, "index must be a torch.Tensor, got list"),
        ((torch.zeros(2), 0.0, torch.tensor([0])), TypeError, "dim must be an int, got float"),
        ((torch.zeros(2), 1, torch.tensor([0])), ValueError, r"dim must be in \[-1, 1\).*got 1"),
        ((torch.zeros(2), 0, torch.tensor([0.0])), TypeError, "index must have dtype torch.int64"),
        (
            (torch.tensor(1.0), 1, torch.tensor([0])),
            ValueError,
            r"dim must be in \[-1, 1\) for a 0-d input \(gather treats it as 1-d\), got 1",
        ),
        (
            (torch.tensor(1.0), 0, torch.tensor([1])),
            ValueError,
            r"index values must be in \[0, 1\) \(a 0-d input has one element\), got 1",
        ),
        (
            (torch.tensor(1.0), 0, torch.tensor([[0]])),
            ValueError,
            r"index must have as many dimensions as input \(0\), got 2 \(shape \(1, 1\); a 0-d",
        ),
        (
            (torch.zeros(2, 2), 0, torch.tensor(0)),
            ValueError,
            r"index must have as many dimensions as input \(2\), got 0 \(shape \(\)",
        ),
        (
            (torch.zeros(2, 2), 2, torch.zeros(0, dtype=torch.int64)),
            ValueError,
            r"dim must be in \[-2, 2\) for a 2-d input, got 2",
        ),
        (
            (torch.zeros(2, 2), 0, torch.tensor([0])),
            ValueError,
            r"index must have as many dimensions as input \(2\), got 1",
        ),
        (
            (torch.zeros(2, 2), 0, torch.zeros(1, 3, dtype=torch.int64)),
            ValueError,
            r"index.shape\[1\] must be <= input.shape\[1\] = 2 .*got 3",
        ),
        (
            (torch.zeros(2, 2), 1, torch.tensor([[0, 2]])),
            ValueError,
            r"index values must be in \[0, 2\) \(input.shape\[1\]\), got 2",
        ),
        ((torch.zeros(3), 0, torch.tensor([-1])), ValueError, r"must be in \[0, 3\).*got -1"),
    ],
)
def test_explain_gather_rejects_bad_input(
    args: tuple[object, object, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        explain_gather(*args)  # type: ignore[arg-type]


@pytest.fixture
def close_figures() -> Iterator[None]:
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


@pytest.mark.usefixtures("close_figures")
@given(gather_cases(max_ndim=2))
def test_plot_gather_draws_one_arrow_per_output_from_its_source(case: GatherCase) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

    ax = plot_gather(case.input, case.dim, case.index)
    arrows = [t for t in ax.texts if t.get_gid() == "gather-arrow"]
    assert len(arrows) == case.index.numel()
    in_cols = case.input.shape[-1]
    out_left = in_cols + 2.5
    for arrow, step in zip(arrows, explain_gather(case.input, case.dim, case.index), strict=True):
        src = step.source if len(step.source) == 2 else (0, *step.source)
        out = step.output if len(step.output) == 2 else (0, *step.output)
        assert isinstance(arrow, Annotation)
        assert arrow.xyann == (src[1] + 0.5, src[0] + 0.5)
        assert arrow.xy == (out_left + out[1] + 0.5, out[0] + 0.5)
    # The output grid's labels are torch.gather's values.
    gathered = torch.gather(case.input, case.dim, case.index).flatten()
    labels = [t for t in ax.texts if t.get_position()[0] > out_left and t.get_gid() is None]
    labels.sort(key=lambda t: (t.get_position()[1], t.get_position()[0]))
    assert [float(t.get_text()) for t in labels[1:]] == gathered.tolist()  # [0] is the title
    fig = ax.figure
    assert isinstance(fig, Figure)
    plt.close(fig)


@pytest.mark.usefixtures("close_figures")
def test_plot_gather_rejects_what_it_cannot_draw() -> None:
    with pytest.raises(ValueError, match=r"1-d or 2-d .* got shapes \(2, 2, 2\)"):
        plot_gather(torch.zeros(2, 2, 2), 0, torch.zeros(1, 1, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"at most 12 elements per dimension"):
        plot_gather(torch.zeros(20), 0, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="index must have dtype"):
        plot_gather(torch.zeros(2), 0, torch.zeros(2))


def _options(low: int) -> st.SearchStrategy[int | tuple[int, int] | list[int]]:
    """An int, or a pair of ints as a tuple or list, or a list of one: F.conv2d takes all."""
    value = st.integers(low, low + 2)
    return st.one_of(value, st.tuples(value, value), st.lists(value, min_size=1, max_size=2))


pairs = _options(1)
paddings = _options(0)


@given(
    n=st.integers(0, 2),
    c=st.integers(0, 3),
    o=st.integers(1, 3),
    h=st.integers(1, 7),
    w=st.integers(1, 7),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    stride=pairs,
    padding=paddings,
    dilation=pairs,
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv2d_as_matmul_matches_conv2d(
    n: int,
    c: int,
    o: int,
    h: int,
    w: int,
    kh: int,
    kw: int,
    stride: int | tuple[int, int] | list[int],
    padding: int | tuple[int, int] | list[int],
    dilation: int | tuple[int, int] | list[int],
    with_bias: bool,
    seed: int,
) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, dtype=torch.float64, generator=gen)
    weight = torch.randn(o, c, kh, kw, dtype=torch.float64, generator=gen)
    bias = torch.randn(o, dtype=torch.float64, generator=gen) if with_bias else None
    options = {"stride": stride, "padding": padding, "dilation": dilation}
    try:
        expected = F.conv2d(x, weight, bias, **options)  # type: ignore[arg-type]
    except RuntimeError:
        with pytest.raises(ValueError, match="must fit in the padded input"):
            conv2d_as_matmul(x, weight, bias, **options)
        return
    got = conv2d_as_matmul(x, weight, bias, **options)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


def test_conv2d_as_matmul_keeps_autograd() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    (g_x, g_w) = torch.autograd.grad(conv2d_as_matmul(x, weight, padding=1).sum(), (x, weight))
    (e_x, e_w) = torch.autograd.grad(F.conv2d(x, weight, padding=1).sum(), (x, weight))
    torch.testing.assert_close(g_x, e_x)
    torch.testing.assert_close(g_w, e_w)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"input": "x"}, TypeError, "input must be a torch.Tensor, got str"),
        (
            {"input": torch.zeros(2, 4, 4)},
            ValueError,
            r"input must be 4-d .* got shape \(2, 4, 4\)",
        ),
        ({"weight": torch.zeros(1, 2, 2)}, ValueError, r"weight must be 4-d"),
        ({"weight": torch.zeros(1, 3, 2, 2)}, ValueError, r"weight.shape\[1\] must equal .*\(2\)"),
        ({"bias": torch.zeros(2)}, ValueError, r"bias must have shape \(1,\).* got \(2,\)"),
        ({"bias": [0.0]}, TypeError, "bias must be a torch.Tensor, got list"),
        ({"stride": 0}, ValueError, "stride must be >= 1, got 0"),
        ({"stride": (1, 0)}, ValueError, r"stride\[1\] must be >= 1, got 0"),
        ({"stride": (1, 1, 1)}, ValueError, r"stride must be an int or a pair of ints"),
        ({"padding": -1}, ValueError, "padding must be >= 0, got -1"),
        ({"dilation": 1.5}, TypeError, "dilation must be an int or a pair of ints, got float: 1.5"),
        ({"weight": torch.zeros(1, 2, 5, 5)}, ValueError, r"\(5, 5\) must fit .* \(4, 4\)"),
    ],
)
def test_conv2d_as_matmul_rejects_bad_input(
    kwargs: dict[str, object], error: type, match: str
) -> None:
    args: dict[str, object] = {"input": torch.zeros(1, 2, 4, 4), "weight": torch.zeros(1, 2, 2, 2)}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        conv2d_as_matmul(**args)  # type: ignore[arg-type]


# -- issue 16: unbounded work and values that are not there ------------------------------


def test_explain_gather_refuses_huge_or_meta_input_before_any_allocation() -> None:
    big = torch.zeros(1, 1, dtype=torch.int64).expand(2**20, 2**20)  # 2**40 index elements
    with pytest.raises(
        ValueError,
        match=r"index of shape \(1048576, 1048576\) has 1099511627776 elements; at most 65536",
    ):
        explain_gather(torch.zeros(1, 1).expand(2**20, 2**20), 0, big)
    meta = torch.empty(2**20, 2**20, device="meta")
    with pytest.raises(ValueError, match=r"input must hold values, got a tensor on the meta"):
        explain_gather(meta, 0, torch.zeros(1, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"index must hold values, got a tensor on the meta"):
        explain_gather(torch.zeros(2, 2), 0, meta.long())


def test_explain_gather_at_its_limit() -> None:
    index = torch.zeros(2**16, dtype=torch.int64)
    assert len(explain_gather(torch.arange(3), 0, index)) == 2**16


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"input": torch.zeros(1, 1, 2**14, 2**14), "weight": torch.zeros(1, 1, 3, 3)},
            ValueError,
            r"the unfolded input has 2415329316 values; at most 67108864",
        ),
        ({"padding": 2**62}, ValueError, r"padding must be <= 1048576, got 4611686018427387904"),
        ({"stride": (1, 2**64)}, ValueError, r"stride\[1\] must be <= 1048576"),
        (
            {"input": torch.zeros(1, 2, 4, 4, dtype=torch.int64)},
            TypeError,
            r"input must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            {"weight": torch.zeros(1, 2, 2, 2, dtype=torch.float64)},
            ValueError,
            r"weight must have input's dtype and device \(torch.float32, cpu\), got torch.float64",
        ),
        (
            {"bias": torch.zeros(1, device="meta")},
            ValueError,
            r"bias must have input's dtype and device .* got torch.float32 on meta",
        ),
    ],
)
def test_conv2d_as_matmul_bounds_its_work(
    kwargs: dict[str, object], error: type, match: str
) -> None:
    args: dict[str, object] = {"input": torch.zeros(1, 2, 4, 4), "weight": torch.zeros(1, 2, 2, 2)}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        conv2d_as_matmul(**args)  # type: ignore[arg-type]


def test_plot_gather_checks_ax() -> None:
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes .*, got str: 'ax'"):
        plot_gather(torch.zeros(2), 0, torch.tensor([0]), ax="ax")  # type: ignore[arg-type]


# -- review: gather's and conv2d's own rules, devices, and work done before refusing -------


@st.composite
def any_gather_args(draw: st.DrawFn) -> GatherCase:
    """Arguments of ``torch.gather`` that it may accept or refuse: 0-d tensors, empty
    indexes of any number of dimensions and dtype, dims and values out of range."""
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    ndim = max(len(shape), 1)
    dim = draw(st.integers(-ndim - 1, ndim))
    index_shape = tuple(draw(st.lists(st.integers(0, 3), max_size=4)))
    numel = torch.Size(index_shape).numel()
    values = draw(st.lists(st.integers(-1, 3), min_size=numel, max_size=numel))
    dtype = draw(st.sampled_from([torch.int64, torch.int32, torch.float32]))
    index = torch.tensor(values, dtype=dtype).reshape(index_shape)
    source = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float64).reshape(shape)
    return GatherCase(source, dim, index)


def _check_against_gather(case: GatherCase, expected: torch.Tensor) -> None:
    """explain_gather's steps are torch.gather's output, element by element."""
    explanation = explain_gather(case.input, case.dim, case.index)
    assert explanation.index_shape == tuple(expected.shape) == tuple(case.index.shape)
    assert len(explanation) == expected.numel()
    assert [s.value for s in explanation] == expected.flatten().tolist()
    assert explanation.sources().shape == (*case.index.shape, case.input.dim())
    names = {"input": case.input, "index": case.index}
    for step in explanation:
        assert case.input[step.source].item() == expected[step.output].item()
        # The formula is Python that reads the same element (index[...] a 0-d tensor).
        formula = step.formula(explanation.dim)
        assert eval(formula, {}, names).item() == expected[step.output].item()


@given(any_gather_args())
def test_explain_gather_accepts_and_refuses_what_torch_gather_does(case: GatherCase) -> None:
    try:
        expected = torch.gather(case.input, case.dim, case.index)
    except (RuntimeError, IndexError):
        with pytest.raises((ValueError, TypeError), match=r"dim|index"):
            explain_gather(case.input, case.dim, case.index)
        return
    _check_against_gather(case, expected)


@pytest.mark.parametrize(
    ("input", "dim", "index"),
    [
        (torch.tensor(7), 0, torch.tensor([0, 0])),  # a 0-d input is 1-d of one element
        (torch.tensor(7.5), -1, torch.tensor(0)),
        (torch.tensor([7, 8]), 0, torch.tensor(1)),  # and so is a 0-d index
        (torch.arange(24).reshape(2, 3, 4), 0, torch.zeros(0, dtype=torch.int64)),
        (torch.arange(24).reshape(2, 3, 4), 1, torch.zeros(2, 0, 4, dtype=torch.int64)),
        (torch.arange(6).reshape(3, 2), 1, torch.zeros(4, 0, dtype=torch.int64)),
        (torch.arange(6).reshape(3, 2), 0, torch.zeros(0, 5, 5, dtype=torch.float32)),
        (torch.tensor(7), 0, torch.zeros(0, 3, dtype=torch.int32)),
    ],
)
def test_explain_gather_accepts_0d_tensors_and_empty_indexes_as_torch_does(
    input: torch.Tensor, dim: int, index: torch.Tensor
) -> None:
    expected = torch.gather(input, dim, index)
    _check_against_gather(GatherCase(input, dim, index), expected)


def test_explain_gather_shows_0d_positions() -> None:
    from_0d = explain_gather(torch.tensor(7), 0, torch.tensor([0, 0]))
    assert [(s.output, s.source, s.value) for s in from_0d] == [((0,), (), 7), ((1,), (), 7)]
    assert str(from_0d).splitlines()[1].split() == [
        "out[0]", "input.reshape(1)[index[0]]", "input[()]", "7",
    ]  # fmt: skip
    into_0d = explain_gather(torch.tensor([7, 8]), 0, torch.tensor(1))
    assert [(s.output, s.source, s.value) for s in into_0d] == [((), (1,), 8)]
    assert str(into_0d).splitlines()[1].split() == [
        "out[()]", "input[index[()]]", "input[1]", "8",
    ]  # fmt: skip


_META = "meta"


@pytest.mark.parametrize(
    ("input", "dim", "index"),
    [
        (torch.empty(3, 4, device=_META), 1, torch.empty(3, 0, dtype=torch.int64, device=_META)),
        (torch.zeros(3, 4), 1, torch.empty(3, 0, dtype=torch.int64, device=_META)),
        (torch.empty(3, 4, device=_META), 1, torch.empty(3, 0, dtype=torch.int64)),
        (torch.empty(3, 4, device=_META), -1, torch.empty(5, 0, 2, device=_META)),  # float32
        (torch.empty(2**20, 2**20, device=_META), 0, torch.empty(0, 5, dtype=torch.int64)),
        (torch.empty((), device=_META), 0, torch.empty(0, dtype=torch.int32, device=_META)),
    ],
    ids=["both", "index", "input", "float index", "huge input", "0-d input"],
)
def test_an_empty_index_on_the_meta_device_is_taken_as_torch_gather_takes_it(
    input: torch.Tensor, dim: int, index: torch.Tensor
) -> None:
    # before: ValueError "input must hold values, got a tensor on the meta device" (or
    # "index must ..."), though gather has no value to read and returns an empty tensor
    expected = torch.gather(input, dim, index)
    explanation = explain_gather(input, dim, index)
    assert len(explanation) == 0
    assert explanation.index_shape == tuple(expected.shape) == tuple(index.shape)
    assert explanation.input_shape == tuple(input.shape)
    assert explanation.dim == dim % max(input.dim(), 1)
    with pytest.raises((IndexError, AssertionError)):  # 2.8's meta kernel asserts
        torch.gather(input, 5, index)
    with pytest.raises(ValueError, match=r"^dim must be in \[-\d, \d\) for a \d-d input"):
        explain_gather(input, 5, index)


@pytest.mark.usefixtures("close_figures")
def test_plot_gather_draws_an_empty_index_on_the_meta_device_and_refuses_a_meta_input() -> None:
    # it draws input's values: an empty index needs none, a meta input has none to draw
    input = torch.arange(6.0).reshape(2, 3)
    ax = plot_gather(input, 1, torch.empty(2, 0, dtype=torch.int64, device=_META))
    assert not [t for t in ax.texts if t.get_gid() == "gather-arrow"]
    empty = torch.empty(2, 0, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"^input must hold values, got a tensor on the meta"):
        plot_gather(input.to(_META), 1, empty)


class _ClaimsCuda(torch.Tensor):
    """A CPU tensor that says it is on cuda:0: a device mismatch without a GPU."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)


def test_explain_gather_refuses_input_and_index_on_different_devices() -> None:
    on_cuda = torch.arange(6.0).reshape(2, 3).as_subclass(_ClaimsCuda)
    index = torch.tensor([[1, 0, 1]])
    with pytest.raises(
        ValueError,
        match=r"input and index must be on the same device.*got input on cuda:0 and index on cpu",
    ):
        explain_gather(on_cuda, 0, index)
    with pytest.raises(ValueError, match=r"got input on cpu and index on cuda:0"):
        explain_gather(torch.zeros(2, 3), 0, index.as_subclass(_ClaimsCuda))
    with pytest.raises(ValueError, match=r"got input on cuda:0 and index on cpu"):
        explain_gather(on_cuda, 0, torch.zeros(0, dtype=torch.int64))  # even an empty one


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_explain_gather_on_cuda_mirrors_torch() -> None:
    input = torch.arange(6.0, device="cuda").reshape(2, 3)
    index = torch.tensor([[1, 0, 1]])
    with pytest.raises(RuntimeError, match="same device"):
        torch.gather(input, 0, index)
    with pytest.raises(ValueError, match=r"got input on cuda:0 and index on cpu"):
        explain_gather(input, 0, index)
    explanation = explain_gather(input, 0, index.cuda())
    assert [s.value for s in explanation] == [3.0, 1.0, 5.0]


class _HostCopies(torch.overrides.TorchFunctionMode):
    """Records how many elements each call that copies to the host (or to Python) reads."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_function__(
        self,
        func: object,
        types: object,
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        copies = (torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.tolist, torch.Tensor.item)
        if func in copies and isinstance(args[0], torch.Tensor):
            self.sizes.append(args[0].numel())
        return func(*args, **(kwargs or {}))  # type: ignore[operator]


def test_explain_gather_copies_only_the_values_it_shows() -> None:
    input = torch.arange(100_000.0).reshape(100, 1000)
    index = torch.tensor([[3, 1, 4]])
    with _HostCopies() as copies:
        explanation = explain_gather(input, 0, index)
    assert copies.sizes  # the mode saw the copies
    assert max(copies.sizes) <= index.numel()
    assert [s.value for s in explanation] == [3000.0, 1001.0, 4002.0]


@pytest.mark.usefixtures("close_figures")
def test_plot_gather_checks_its_size_limit_before_explaining(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytorch_memo import indexing

    limit = r"input and index must be 1-d or 2-d with at most 12 elements per dimension"
    # An index explain_gather refuses for its values: the size is what is said.
    with pytest.raises(ValueError, match=rf"{limit}, got shapes \(20,\) and \(1,\)"):
        plot_gather(torch.zeros(20), 0, torch.tensor([25]))
    with pytest.raises(ValueError, match=rf"{limit}, got shapes \(\) and \(2,\)"):
        plot_gather(torch.tensor(7.0), 0, torch.tensor([0, 0]))

    def explain(*args: object) -> None:
        raise AssertionError("explain_gather ran before the size check")

    monkeypatch.setattr(indexing, "explain_gather", explain)
    big = torch.zeros(1, dtype=torch.int64).expand(2**16)  # 65,536 steps to list
    with pytest.raises(ValueError, match=rf"{limit}, got shapes \(3,\) and \(65536,\)"):
        plot_gather(torch.zeros(3), 0, big)


@pytest.mark.parametrize(
    ("input_shape", "weight_shape", "padding"),
    [
        ((2, 0, 6, 7), (4, 0, 3, 3), 0),  # no input channels: F.conv2d gives (2, 0, 4, 5)
        ((0, 0, 6, 7), (4, 0, 3, 3), 0),
        ((2, 0, 1, 1), (4, 0, 3, 3), 1),
        ((2, 0, 6, 7), (4, 0, 0, 3), 0),  # an empty kernel goes where C = 0
        ((0, 3, 6, 7), (4, 3, 3, 3), 0),  # an empty batch
        ((0, 3, 0, 7), (4, 3, 1, 1), 1),  # an empty batch and an empty height
    ],
)
def test_conv2d_as_matmul_gives_conv2d_result_on_empty_shapes(
    input_shape: tuple[int, ...], weight_shape: tuple[int, ...], padding: int
) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(input_shape, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(weight_shape, dtype=torch.float64, generator=gen, requires_grad=True)
    bias = torch.randn(weight_shape[0], dtype=torch.float64, generator=gen, requires_grad=True)
    expected = F.conv2d(x, weight, bias, padding=padding)
    got = conv2d_as_matmul(x, weight, bias, padding=padding)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad(got.sum(), (x, weight, bias))
    expected_grads = torch.autograd.grad(expected.sum(), (x, weight, bias))
    for g, e in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize(
    ("input_shape", "weight_shape", "padding", "match"),
    [
        (
            (2, 3, 6, 7),
            (0, 3, 3, 3),
            0,
            r"weight must have at least one output channel .* got shape \(0, 3, 3, 3\)",
        ),
        (
            (2, 0, 6, 7),
            (0, 0, 3, 3),
            0,
            r"weight must have at least one output channel .* got shape \(0, 0, 3, 3\)",
        ),
        (
            (2, 3, 0, 7),
            (4, 3, 1, 1),
            1,
            r"input must have a non-empty height and width .* got shape \(2, 3, 0, 7\)",
        ),
        ((2, 3, 6, 7), (4, 3, 0, 3), 0, r"kernel must be at least 1 x 1 .* \(4, 3, 0, 3\)"),
        ((0, 3, 6, 7), (4, 3, 3, 0), 0, r"kernel must be at least 1 x 1 .* \(4, 3, 3, 0\)"),
        ((2, 0, 2, 2), (4, 0, 3, 3), 0, r"\(3, 3\) must fit in the padded input \(2, 2\)"),
    ],
)
def test_conv2d_as_matmul_refuses_the_shapes_conv2d_refuses(
    input_shape: tuple[int, ...], weight_shape: tuple[int, ...], padding: int, match: str
) -> None:
    x, weight = torch.zeros(input_shape), torch.zeros(weight_shape)
    with pytest.raises((RuntimeError, IndexError)):
        F.conv2d(x, weight, padding=padding)
    with pytest.raises(ValueError, match=match):
        conv2d_as_matmul(x, weight, padding=padding)


@pytest.mark.parametrize(
    "options",
    [
        {"stride": [1, 2]},
        {"stride": [2]},
        {"padding": [1, 0], "dilation": [2, 1]},
        {"padding": (1,), "dilation": torch.Size([1, 2])},
        {"stride": (2, 1), "padding": [0, 2], "dilation": [1]},
    ],
)
def test_conv2d_as_matmul_takes_options_as_sequences_as_conv2d_does(
    options: dict[str, Any],
) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64, generator=gen)
    weight = torch.randn(4, 3, 3, 3, dtype=torch.float64, generator=gen)
    expected = F.conv2d(x, weight, **options)
    got = conv2d_as_matmul(x, weight, **options)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ([], ValueError, r"stride must be an int or a pair of ints, got a sequence of 0: \[\]"),
        ([1, 2, 3], ValueError, r"stride must be an int or a pair of ints, got a sequence of 3"),
        ("12", TypeError, r"stride must be an int or a pair of ints, got str: '12'"),
        ({1, 2}, TypeError, r"stride must be an int or a pair of ints, got set: \{1, 2\}"),
        ((1, 1.5), TypeError, r"stride\[1\] must be an int, got float: 1.5"),
        ([1, 0], ValueError, r"stride\[1\] must be >= 1, got 0"),
    ],
)
def test_conv2d_as_matmul_refuses_options_conv2d_refuses(
    value: Any, error: type, match: str
) -> None:
    x, weight = torch.zeros(1, 2, 5, 5), torch.zeros(1, 2, 2, 2)
    with pytest.raises((RuntimeError, TypeError)):
        F.conv2d(x, weight, stride=value)
    with pytest.raises(error, match=match):
        conv2d_as_matmul(x, weight, stride=value)


class _IntLike:
    """An integer only through ``__index__``: F.conv2d takes it inside a pair, not alone."""

    def __index__(self) -> int:
        return 2


_OPTIONS_AS_CONV2D_TAKES_THEM: list[Any] = [
    np.int64(2), np.int32(2), np.uint8(2), [np.int64(2), 1], (1, np.int64(2)),
    (np.array(2), 1), (_IntLike(), _IntLike()), (torch.tensor(2), 1), (1, torch.tensor([2])),
    (torch.tensor([[2]], dtype=torch.int32), 1), [1, True], (np.int64(1), True),
    torch.Size([2, 1]), [2],
]  # fmt: skip
"""Options F.conv2d takes, beyond plain ints and tuples or lists of them (torch 2.8-2.15)."""
_OPTIONS_CONV2D_REFUSES: list[Any] = [
    range(1, 3), range(2, 3), True, False, np.bool_(True), (True,), [True, 2], (False, 1),
    (1, np.bool_(True)), (torch.tensor(True), 1), (1, torch.tensor(2.0)),
    (1, torch.tensor([2, 1])), (torch.tensor(2, device="meta"), 1), np.array([2, 1]),
    np.array(2), _IntLike(), np.float64(2.0), (np.float64(2.0), 1), (1, None), (1, "2"),
    (1, np.array([2])), torch.tensor([2, 1]), torch.tensor(2.0), b"ab",
]  # fmt: skip
"""Options F.conv2d refuses (with a TypeError or a RuntimeError) on torch 2.8-2.15."""
_OPTIONS_FROM_2_10: list[Any] = [
    torch.tensor(2), torch.tensor([2]), torch.tensor(2, dtype=torch.uint8), torch.tensor(True),
]  # fmt: skip
"""A one-element tensor alone: F.conv2d refuses it on torch 2.8 and 2.9, takes it from 2.10."""
_OPTIONS_BY_VALUE: list[Any] = [(1, False), (0, True)]
"""A bool after the first element is 0 or 1: a padding, not a stride (or dilation) of 0."""


@pytest.mark.parametrize("name", ["stride", "padding", "dilation"])
@pytest.mark.parametrize(
    "value",
    [
        *_OPTIONS_AS_CONV2D_TAKES_THEM,
        *_OPTIONS_CONV2D_REFUSES,
        *_OPTIONS_FROM_2_10,
        *_OPTIONS_BY_VALUE,
    ],
)
def test_conv2d_as_matmul_takes_and_refuses_options_as_conv2d_does(name: str, value: Any) -> None:
    # before: NumPy integers (np.int64(2), alone or in a pair), 0-d NumPy arrays,
    # objects with __index__, one-element tensors and a bool after the first element
    # were refused, and a range was taken, each the opposite of F.conv2d
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 6, 7, dtype=torch.float64, generator=gen)
    weight = torch.randn(3, 2, 2, 2, dtype=torch.float64, generator=gen)
    try:
        expected = F.conv2d(x, weight, **{name: value})
    except (TypeError, RuntimeError, ValueError):
        assert not any(value is v for v in _OPTIONS_AS_CONV2D_TAKES_THEM)
        with pytest.raises((TypeError, ValueError), match=rf"^{name}(\[\d\])? must "):
            conv2d_as_matmul(x, weight, **{name: value})
        return
    assert not any(value is v for v in _OPTIONS_CONV2D_REFUSES)
    got = conv2d_as_matmul(x, weight, **{name: value})
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (range(1, 3), TypeError, (r"^stride must be an int or a pair of ints, got range: "
         r"range\(1, 3\) \(F\.conv2d takes a pair as a tuple or list\)$")),
        (True, TypeError, r"^stride must be an int or a pair of ints, got bool: True$"),
        ((True, 1), TypeError, (r"^stride\[0\] must be an int, got bool: True \(F\.conv2d takes "
         r"a bool only after the first element\)$")),
        ((1, torch.tensor(True)), TypeError, (r"^stride\[1\] must be an int, got a tensor of "
         r"dtype torch.bool$")),
        ((1, torch.tensor(2, device="meta")), ValueError, (r"^stride\[1\] must hold a value, "
         r"got a tensor on the meta device$")),
        ((1, np.float64(2.0)), TypeError, r"^stride\[1\] must be an int, got float64: "),
    ],
)  # fmt: skip
def test_conv2d_as_matmul_names_the_option_it_refuses(
    value: Any, error: type[Exception], match: str
) -> None:
    x, weight = torch.zeros(1, 2, 5, 5), torch.zeros(1, 2, 2, 2)
    with pytest.raises(error, match=match):
        conv2d_as_matmul(x, weight, stride=value)


def test_conv2d_as_matmul_without_channels_allocates_nothing() -> None:
    # (2, 0, 2097156, 2097157), as F.conv2d: an (N, O, L) intermediate would be 2**46 floats.
    x, weight, bias = torch.zeros(2, 0, 6, 7), torch.zeros(64, 0, 3, 3), torch.zeros(64)
    expected = F.conv2d(x, weight, bias, padding=2**20)
    got = conv2d_as_matmul(x, weight, bias, padding=2**20)
    assert got.shape == expected.shape == (2, 0, 6 + 2**21 - 2, 7 + 2**21 - 2)


@pytest.mark.parametrize("padding", ["same", "valid", np.str_("same")])
@pytest.mark.parametrize(
    ("kernel", "options"),
    [
        ((2, 3), {}),
        ((3, 3), {}),
        ((2, 2), {"dilation": (1, 2)}),
        ((3, 2), {"dilation": 2}),
        ((1, 1), {}),
    ],
)
def test_conv2d_as_matmul_takes_same_and_valid_padding_as_conv2d_does(
    padding: str, kernel: tuple[int, int], options: dict[str, Any]
) -> None:
    # before: a string padding was refused, although F.conv2d takes "same" (the extra
    # zero of an even kernel goes after: right and bottom) and "valid" (no padding)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(4, 3, *kernel, dtype=torch.float64, generator=gen)
    bias = torch.randn(4, dtype=torch.float64, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "same" with an even kernel copies
        expected = F.conv2d(x, weight, bias, padding=padding, **options)
    got = conv2d_as_matmul(x, weight, bias, padding=padding, **options)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)
    (grad,) = torch.autograd.grad(got.sum(), x)
    torch.testing.assert_close(grad, torch.autograd.grad(expected.sum(), x)[0])


@pytest.mark.parametrize("shape", [(0, 3, 6, 7), (2, 0, 6, 7), (1, 3, 1, 1)])
def test_conv2d_as_matmul_same_padding_on_small_and_empty_inputs(
    shape: tuple[int, ...],
) -> None:
    x = torch.randn(*shape)
    weight = torch.randn(4, shape[1], 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = F.conv2d(x, weight, padding="same")
    got = conv2d_as_matmul(x, weight, padding="same")
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"padding": "SAME"}, (r"^padding must be an int, a pair of ints, 'same' or 'valid', "
         r"got 'SAME'$")),
        ({"padding": "same "}, r"^padding must be .* got 'same '$"),
        ({"padding": ""}, r"^padding must be .* got ''$"),
        ({"padding": "same", "stride": 2}, (r"^padding='same' needs stride 1 \(F\.conv2d "
         r"refuses it for strided convolutions\), got stride \(2, 2\)$")),
        ({"padding": "same", "stride": (1, 2)}, r"got stride \(1, 2\)$"),
    ],
)  # fmt: skip
def test_conv2d_as_matmul_refuses_the_padding_strings_conv2d_refuses(
    options: dict[str, Any], match: str
) -> None:
    x, weight = torch.randn(1, 2, 6, 7), torch.randn(3, 2, 2, 3)
    with pytest.raises(RuntimeError):
        F.conv2d(x, weight, **options)
    with pytest.raises(ValueError, match=match):
        conv2d_as_matmul(x, weight, **options)


@pytest.mark.parametrize(
    ("padding", "shown"),
    [(None, "NoneType: None"), (1.5, "float: 1.5"), (b"same", "bytes: b'same'")],
)
def test_conv2d_as_matmul_names_the_padding_strings_when_refusing_a_padding(
    padding: object, shown: str
) -> None:
    # before: "padding must be an int or a pair of ints", without the strings it takes
    x, weight = torch.randn(1, 2, 6, 7), torch.randn(3, 2, 2, 3)
    with pytest.raises(
        TypeError, match=rf"^padding must be an int, a pair of ints, 'same' or 'valid', got {shown}"
    ):
        conv2d_as_matmul(x, weight, padding=padding)  # type: ignore[arg-type]


def test_conv2d_as_matmul_same_padding_refuses_before_copying_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # before: the input was padded (a copy of its size) before the size limit refused
    copied: list[int] = []
    pad = F.pad

    def spy(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        copied.append(input.numel())
        return pad(input, *args, **kwargs)

    monkeypatch.setattr(F, "pad", spy)
    monkeypatch.setattr("pytorch_memo.indexing.MAX_UNFOLDED", 100)
    x, weight = torch.zeros(1, 1, 20, 20), torch.zeros(1, 1, 2, 2)
    with pytest.raises(ValueError, match="the unfolded input has"):
        conv2d_as_matmul(x, weight, padding="same")
    assert copied == []
    conv2d_as_matmul(torch.zeros(1, 1, 4, 4), weight, padding="same")
    assert copied == [16]  # the spy sees the copy when the call goes ahead

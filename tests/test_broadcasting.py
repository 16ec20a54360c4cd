"""pytorch_memo.broadcasting, checked against torch.broadcast_shapes and real tensors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.broadcasting import BroadcastError, explain_broadcast, plot_broadcast

# Sizes 0, 1 and 2 make clashes, stretches and empty results all common.
small_shapes = st.lists(st.integers(0, 3), max_size=4).map(tuple)
# Shapes that mostly broadcast: each size either a common size or 1, or left out in front.
common = st.lists(st.integers(0, 3), min_size=4, max_size=4)


@st.composite
def compatible(draw: st.DrawFn, n: int) -> list[tuple[int, ...]]:
    sizes = draw(common)
    shapes = []
    for _ in range(n):
        keep = draw(st.integers(0, 4))
        shapes.append(tuple(draw(st.sampled_from([s, 1])) for s in sizes[4 - keep :]))
    return shapes


def torch_says(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | RuntimeError:
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError as error:
        return error


def check_agrees(shapes: list[tuple[int, ...]]) -> None:
    expected = torch_says(shapes)
    if isinstance(expected, RuntimeError):
        with pytest.raises(BroadcastError) as caught:
            explain_broadcast(*shapes)
        error = caught.value
        # The named dimension really clashes: the two sizes differ and neither is 1.
        a, b = error.sizes
        assert a != b
        assert 1 not in (a, b)
        ndim = max(map(len, shapes))
        assert error.index == ndim + error.dim
        first, second = (int(name.removeprefix("arg")) for name in error.names)
        assert shapes[first][error.dim] == a
        assert shapes[second][error.dim] == b
        # ... and it is the first from the right: the dimensions to its right broadcast.
        if error.dim < -1:
            tails = [s[error.dim + 1 :] for s in shapes]
            torch.broadcast_shapes(*tails)
    else:
        table = explain_broadcast(*shapes)
        assert table.result == expected
        assert [row.shape for row in table.rows] == shapes


@given(st.lists(small_shapes, min_size=2, max_size=3))
def test_agrees_with_torch_on_random_shapes(shapes: list[tuple[int, ...]]) -> None:
    check_agrees(shapes)


@given(st.integers(2, 3).flatmap(compatible))
def test_agrees_with_torch_on_mostly_compatible_shapes(shapes: list[tuple[int, ...]]) -> None:
    check_agrees(shapes)


@given(st.lists(small_shapes, min_size=2, max_size=3))
def test_tensors_give_the_same_table_as_shapes(shapes: list[tuple[int, ...]]) -> None:
    if isinstance(torch_says(shapes), RuntimeError):
        return
    tensors = [torch.zeros(s) for s in shapes]
    assert explain_broadcast(*tensors) == explain_broadcast(*shapes)
    # The result is the shape of the real element-wise sum.
    total = sum(tensors[1:], tensors[0])
    assert explain_broadcast(*shapes).result == tuple(total.shape)


@given(st.integers(2, 3).flatmap(compatible))
def test_stretched_marks_where_expand_repeats(shapes: list[tuple[int, ...]]) -> None:
    table = explain_broadcast(*shapes)
    for row in table.rows:
        expanded = torch.zeros(row.shape).expand(table.result)
        pad = len(table.result) - len(row.shape)
        zero_stride = [True] * pad + [s == 0 for s in expanded.stride()[pad:]]
        for i, (wide, size) in enumerate(zip(row.stretched, table.result, strict=True)):
            # repeated along i exactly when expand gave it stride 0 and the size is not 1
            assert wide == (zero_stride[i] and size != 1 and row.aligned[i] != size)


def test_text_and_html() -> None:
    table = explain_broadcast(x=torch.zeros(5, 3, 4, 1), y=(3, 1, 1))
    assert str(table).splitlines()[:4] == [
        "dim     -4  -3  -2  -1",
        "x        5   3   4   1",
        "y        ·   3  1*   1",
        "result   5   3   4   1",
    ]
    html = table._repr_html_()
    assert html.startswith('<table class="memo-broadcast">')
    assert '<td style="background:#fde2c8">1*</td>' in html
    assert "<td><b>5</b></td>" in html


def test_the_size_zero_case_names_the_trailing_dimension() -> None:
    with pytest.raises(
        BroadcastError,
        match=r"in dimension -1 \(index 1 of the aligned shapes\) x has size 0 and y has size 2",
    ):
        explain_broadcast(x=(0,), y=(2, 2))
    assert explain_broadcast((0,), (2, 1)).result == (2, 0)


@pytest.mark.parametrize(
    ("args", "named", "error", "match"),
    [
        ((), {}, ValueError, "operands must hold at least one shape or tensor, got none"),
        (((2, -1),), {}, ValueError, r"arg0\[1\] must be >= 0, got -1"),
        ((), {"x": (2, 1.5)}, TypeError, r"x\[1\] must be an int, got float"),
        ((), {"x": 3}, TypeError, "x must be a shape .* or a tensor, got int"),
        ((), {"x": "23"}, TypeError, "x must be a shape .* or a tensor, got str"),
        (((2,),), {"arg0": (2,)}, ValueError, "keyword 'arg0' clashes"),
    ],
)
def test_bad_input(
    args: tuple[object, ...], named: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        explain_broadcast(*args, **named)
    with pytest.raises(error, match=match):
        plot_broadcast(*args, **named)


@pytest.fixture
def close_figures() -> Iterator[None]:
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


@pytest.mark.usefixtures("close_figures")
@given(st.lists(small_shapes, min_size=1, max_size=3))
def test_plot_shows_every_size_and_the_result(shapes: list[tuple[int, ...]]) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots()
    plot_broadcast(*shapes, ax=ax, title="shapes")
    expected = torch_says(shapes)
    ndim = max(map(len, shapes))
    rectangles = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(rectangles) == len(ax.patches)  # plot_broadcast draws only boxes
    boxes = [p for p in rectangles if p.get_width() == 0.9]
    assert len(boxes) == ndim * (len(shapes) + 1)
    result_texts = [
        t.get_text() for t in ax.texts if t.get_position()[1] == 1.3 and t.get_position()[0] > 0
    ]
    if isinstance(expected, RuntimeError):
        assert "?" in result_texts
    else:
        assert result_texts == [str(n) for n in expected]
    assert ax.get_title(loc="left") == "shapes"
    plt.close(fig)


def test_plot_broadcast_checks_ax_title_and_its_size() -> None:
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes .*, got str: 'ax'"):
        plot_broadcast((2,), ax="ax")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"title must be a str or None, got int: 3"):
        plot_broadcast((2,), title=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"got 17 operands \(arg0, .*arg16\); plot_broadcast"):
        plot_broadcast(*[(1,)] * 17)
    with pytest.raises(ValueError, match=r"x has 17 dimensions; plot_broadcast draws at most 16"):
        plot_broadcast(x=(1,) * 17)


# torch warns once per process, so whether this test sees it depends on what ran before
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_sizes_beyond_int64_and_nested_tensors_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=rf"x\[0\] must be <= {2**63 - 1}, got {2**63}"):
        explain_broadcast(x=(2**63,))
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    with pytest.raises(
        ValueError, match=r"y must be a shape or a tensor with one shape, got a nested"
    ):
        explain_broadcast(x=(2,), y=nested)

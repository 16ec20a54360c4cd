"""pytorch_memo.layout, checked against torch's own indexing and NumPy's overlap solver."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.layout import (
    element_offsets,
    plot_storage,
    plot_values,
    plot_view,
    required_storage,
    shares_memory,
    storage_map,
    strided_offsets,
)
from tests.strategies import (
    DTYPES,
    NUMPY_DTYPES,
    StridedView,
    strided_views,
    tensors_and_views,
)

pytestmark = pytest.mark.early  # a long file: handed out first (tests/conftest.py)

STORAGE = 40


@given(strided_views(STORAGE))
def test_element_offsets_match_as_strided(v: StridedView) -> None:
    # In arange's storage every element's value is its own storage position.
    base = torch.arange(STORAGE)
    view = base.as_strided(v.size, v.stride, v.offset)
    assert torch.equal(element_offsets(view), view)


@given(tensors_and_views())
def test_element_offsets_of_chained_views(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    base, view = pair
    numbered = torch.arange(base.numel()).reshape(base.shape)
    same_view = numbered.as_strided(view.shape, view.stride(), view.storage_offset())
    assert torch.equal(element_offsets(view), same_view)


@given(strided_views(STORAGE), strided_views(STORAGE), st.sampled_from(NUMPY_DTYPES))
def test_shares_memory_agrees_with_numpy(
    a: StridedView, b: StridedView, dtype: torch.dtype
) -> None:
    storage = torch.zeros(STORAGE, dtype=dtype)
    ta = storage.as_strided(a.size, a.stride, a.offset)
    tb = storage.as_strided(b.size, b.stride, b.offset)
    expected = bool(np.shares_memory(ta.numpy(), tb.numpy(), max_work=-1))  # -1: exact
    assert shares_memory(ta, tb) is expected
    assert shares_memory(tb, ta) is expected


@given(strided_views(STORAGE), strided_views(STORAGE // 4))
def test_shares_memory_across_dtypes(a: StridedView, b: StridedView) -> None:
    # The same bytes seen as 40 uint8 and as 10 int32: overlap is about bytes, not elements.
    storage = torch.zeros(STORAGE, dtype=torch.uint8)
    ta = storage.as_strided(a.size, a.stride, a.offset)
    tb = storage.view(torch.int32).as_strided(b.size, b.stride, b.offset)
    expected = bool(np.shares_memory(ta.numpy(), tb.numpy(), max_work=-1))  # -1: exact
    assert shares_memory(ta, tb) is expected


@given(strided_views(STORAGE), strided_views(STORAGE))
def test_shares_memory_matches_a_write_probe(a: StridedView, b: StridedView) -> None:
    # Ground truth without any address arithmetic: write through one view, look at the other.
    storage = torch.zeros(STORAGE)
    ta = storage.as_strided(a.size, a.stride, a.offset)
    tb = storage.as_strided(b.size, b.stride, b.offset)
    ta.fill_(1.0)
    assert shares_memory(ta, tb) is bool((tb == 1.0).any())


def test_separate_storages_over_one_numpy_buffer() -> None:
    # Two tensors made from two NumPy views of one array have different storages,
    # yet share memory; comparing storages or data_ptr would miss half of this.
    array = np.zeros(10)
    left, right = torch.from_numpy(array[:6]), torch.from_numpy(array[4:])
    assert left.untyped_storage().data_ptr() != right.untyped_storage().data_ptr()
    assert shares_memory(left, right)
    assert not shares_memory(left[:4], right[2:])


def test_no_sharing_across_devices_or_when_empty() -> None:
    x = torch.arange(4)
    assert not shares_memory(x, x.to("meta"))
    assert not shares_memory(x[:0], x)
    assert shares_memory(x, x)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([1, 2], torch.zeros(1)), TypeError, "a must be a torch.Tensor, got list"),
        ((torch.zeros(1), 3.0), TypeError, "b must be a torch.Tensor, got float"),
        ((torch.zeros(1), torch.zeros(2, 2).to_sparse()), ValueError, "b must be a strided"),
    ],
)
def test_shares_memory_rejects_bad_input(
    args: tuple[object, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        shares_memory(*args)  # type: ignore[arg-type]


def test_element_offsets_rejects_bad_input() -> None:
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, got ndarray"):
        element_offsets(np.zeros(3))  # type: ignore[arg-type]


@pytest.fixture
def close_figures() -> Iterator[None]:
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


@pytest.mark.usefixtures("close_figures")
@given(strided_views(24))
def test_plot_storage_labels_each_element_at_its_offset(v: StridedView) -> None:
    import matplotlib.pyplot as plt

    storage = torch.arange(24)
    view = storage.as_strided(v.size, v.stride, v.offset)
    fig, ax = plt.subplots()
    plot_storage(view, ax=ax)
    # A cell's label lists the flatten() positions living there (two, then "…").
    flat = view.flatten()
    uses = torch.bincount(flat, minlength=24)
    labelled = set()
    for text in ax.texts:
        offset = int(text.get_position()[0] - 0.5)
        label = text.get_text()
        positions = [int(p) for p in label.split(",") if p != "…"]
        assert all(int(flat[p]) == offset for p in positions)
        assert len(positions) == min(int(uses[offset]), 2)
        assert label.endswith(",…") == (uses[offset] > 2)
        labelled.add(offset)
    assert labelled == {int(i) for i in uses.nonzero().flatten()}
    plt.close(fig)


@pytest.mark.usefixtures("close_figures")
def test_plot_storage_colors_by_dim() -> None:
    from matplotlib.patches import Rectangle

    image = torch.zeros(1, 3, 2, 2)
    ax = plot_storage(image.contiguous(memory_format=torch.channels_last), color_dim=1)
    cells = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(cells) == len(ax.patches)  # plot_storage draws only cells
    used = [p for p in cells if p.get_edgecolor()[:3] == (0.3, 0.3, 0.3)]
    colors = [p.get_facecolor() for p in sorted(used, key=lambda p: p.get_x())]
    assert colors[0] != colors[1] != colors[2]
    assert colors[0] == colors[3]  # channels_last: channel 0, 1, 2, then channel 0 again


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tensor": torch.zeros(300)}, ValueError, r"storage has 300 elements; .*at most 256"),
        (
            {"tensor": torch.zeros(2, 2), "color_dim": 2},
            ValueError,
            r"color_dim must be in \[-2, 2\), got 2",
        ),
        (
            {"tensor": torch.zeros(2), "color_dim": 0.5},
            TypeError,
            "color_dim must be an int, got float",
        ),
        ({"tensor": "x"}, TypeError, "tensor must be a torch.Tensor, got str"),
    ],
)
def test_plot_storage_rejects_bad_input(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plot_storage(**kwargs)  # type: ignore[arg-type]


# ---- strided arithmetic: strided_offsets, required_storage, storage_map, plot_view ----

layouts = st.tuples(
    st.lists(st.integers(0, 4), max_size=3),
    st.lists(st.integers(0, 9), max_size=3),
    st.integers(0, 50),
).map(lambda t: (tuple(t[0]), tuple(t[1][: len(t[0])]) + (1,) * (len(t[0]) - len(t[1])), t[2]))


@given(layouts)
def test_required_storage_decides_whether_as_strided_fits(
    layout: tuple[tuple[int, ...], tuple[int, ...], int],
) -> None:
    size, stride, offset = layout
    needed = required_storage(size, stride, storage_offset=offset)
    storage = torch.arange(STORAGE)
    if needed <= STORAGE:
        view = storage.as_strided(size, stride, offset)
        assert torch.equal(strided_offsets(size, stride, storage_offset=offset), view)
    else:
        with pytest.raises(RuntimeError, match=f"requiring a storage size of {needed * 8}"):
            storage.as_strided(size, stride, offset)


@given(strided_views(STORAGE), st.sampled_from(DTYPES))
def test_storage_map_matches_data_ptr_arithmetic(v: StridedView, dtype: torch.dtype) -> None:
    storage = torch.zeros(STORAGE, dtype=dtype)
    view = storage.as_strided(v.size, v.stride, v.offset)
    smap = storage_map(view)
    item = view.element_size()
    assert smap.storage_size == STORAGE
    assert (smap.shape, smap.stride, smap.storage_offset) == (v.size, v.stride, v.offset)
    if view.numel():  # an empty tensor's data_ptr() is 0
        assert view.data_ptr() == storage.data_ptr() + v.offset * item
    uses = [0] * STORAGE
    for index in itertools.product(*(range(n) for n in v.size)):
        # Each element's own address, as torch computes it, against the map's position.
        position = int(smap.offsets[index])
        assert view[index].data_ptr() == storage.data_ptr() + position * item
        uses[position] += 1
    assert smap.uses.tolist() == uses
    assert smap.unused == tuple(i for i, n in enumerate(uses) if n == 0)
    assert smap.overlapping == any(n > 1 for n in uses)


def test_storage_map_of_a_slice_and_an_expand() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    smap = storage_map(x[1:, ::2])
    assert smap.offsets.tolist() == [[4, 6], [8, 10]]
    assert smap.unused == (0, 1, 2, 3, 5, 7, 9, 11)
    assert not smap.overlapping
    wide = storage_map(torch.arange(3).expand(4, 3))
    assert wide.uses.tolist() == [4, 4, 4]
    assert wide.overlapping
    assert str(storage_map(torch.tensor(1.0))).endswith(
        "storage: 1 element, 1 used (each by one element)"
    )


BAD_LAYOUTS = [
    (((2, 3), (3, -1), 0), ValueError, r"stride\[1\] must be >= 0 .*no negative strides.*got -1"),
    (((2, -3), (3, 1), 0), ValueError, r"size\[1\] must be >= 0 for sizes, got -3"),
    (((2, 3), (3,), 0), ValueError, "size and stride must have the same length, got 2 sizes"),
    (((2, 3), (3, 1), -1), ValueError, "storage_offset must be >= 0, got -1"),
    (((2, 3.0), (3, 1), 0), TypeError, r"size\[1\] must be an int, got float"),
    (((2, 3), (3, True), 0), TypeError, r"stride\[1\] must be an int, got bool"),
    (("23", (3, 1), 0), TypeError, "size must be a sequence of ints, got str"),
    (((2, 3), 1, 0), TypeError, "stride must be a sequence of ints, got int"),
    (((2, 3), (3, 1), 1.5), TypeError, "storage_offset must be an int, got float"),
]


@pytest.mark.parametrize(("args", "error", "match"), BAD_LAYOUTS)
@pytest.mark.parametrize("helper", [strided_offsets, required_storage])
def test_strided_helpers_reject_bad_input(
    helper: object, args: tuple[object, object, object], error: type, match: str
) -> None:
    size, stride, offset = args
    with pytest.raises(error, match=match):
        helper(size, stride, storage_offset=offset)  # type: ignore[operator]


@pytest.mark.parametrize("helper", [storage_map, plot_view])
def test_tensor_helpers_reject_non_tensors(helper: object) -> None:
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, got list"):
        helper([1, 2])  # type: ignore[operator]


@pytest.mark.usefixtures("close_figures")
@given(strided_views(24))
def test_plot_view_links_each_element_to_its_storage_cell(v: StridedView) -> None:
    from matplotlib.patches import ConnectionPatch

    view = torch.arange(24).as_strided(v.size, v.stride, v.offset)
    fig = plot_view(view)
    grid, _strip = fig.axes
    assert [t.get_text() for t in grid.texts] == [str(i) for i in range(view.numel())]
    links = [a for a in fig.artists if isinstance(a, ConnectionPatch)]
    assert len(links) == view.numel()
    # Each link ends on top of the storage cell of its element (flatten order).
    ends = [link.xy2 for link in links]
    assert [(x - 0.5, y) for x, y in ends] == [(float(p), 1.0) for p in view.flatten().tolist()]
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.usefixtures("close_figures")
def test_plot_view_rows_are_named_by_their_index() -> None:
    fig = plot_view(torch.zeros(2, 3, 4), title="three dims")
    names = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert names[::-1] == [f"[{i}, {j}, :]" for i in range(2) for j in range(3)]
    assert fig.texts[0].get_text() == "three dims"


@pytest.mark.parametrize(
    ("tensor", "match"),
    [
        (torch.zeros(257), r"tensor has 257 elements; plot_view draws at most 256"),
        (torch.zeros(300)[:10], r"storage has 300 elements; plots draw at most 256"),
    ],
)
def test_plot_view_rejects_large_tensors(tensor: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plot_view(tensor)


# ---- plot_values: rows of numbers, cell by cell ----


@pytest.mark.usefixtures("close_figures")
def test_plot_values_draws_every_value_in_its_row_and_column() -> None:
    from matplotlib.patches import Rectangle

    # The chapter's case: a storage before and after add_(1) through overlapping windows.
    base = torch.arange(8.0)
    windows = base.unfold(0, 3, 2)
    before = base.clone()
    windows.add_(1)
    rows = {"before": before, "uses": storage_map(windows).uses, "after": base}
    ax = plot_values(rows, marked={"after": base != before + 1})
    cells = {
        (round(t.get_position()[1] - 0.5), round(t.get_position()[0] - 0.5)): t.get_text()
        for t in ax.texts
    }
    for r, row in enumerate(rows.values()):
        y = len(rows) - 1 - r
        assert [cells[y, c] for c in range(8)] == [str(int(v)) for v in row.tolist()]
    names = {round(t.get_position()[1] - 0.5): t.get_text() for t in ax.get_yticklabels()}
    assert names == {2: "before", 1: "uses", 0: "after"}  # top to bottom, in order
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(boxes) == len(ax.patches)  # plot_values draws only cells
    faces = {(round(p.get_y()), round(p.get_x())): p.get_facecolor() for p in boxes}
    warm = {c for c in range(8) if faces[0, c] != faces[1, c]}
    assert warm == {int(i) for i in (base != before + 1).nonzero().flatten()}


@pytest.mark.usefixtures("close_figures")
def test_plot_values_labels_non_integer_values() -> None:
    ax = plot_values({"x": [0.5, 2.0, True]})
    assert [t.get_text() for t in ax.texts] == ["0.5", "2", "1"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rows": {}}, ValueError, "at least one row"),
        ({"rows": [1, 2]}, TypeError, "rows must be a mapping .* got list"),
        ({"rows": {"a": [1]}, "marked": [True]}, TypeError, "marked must be a mapping"),
        (
            {"rows": {"a": [1, 2], "b": [1]}},
            ValueError,
            r"rows\['b'\] must be 1-D with 2 values .* got shape \(1,\)",
        ),
        ({"rows": {"a": torch.zeros(2, 2)}}, ValueError, r"rows\['a'\] must be 1-D"),
        ({"rows": {"a": torch.zeros(300)}}, ValueError, "at most 256"),
        (
            {"rows": {"a": [1, 2]}, "marked": {"a": [True]}},
            ValueError,
            r"marked\['a'\] must be 1-D with 2 values",
        ),
        (
            {"rows": {"a": [1]}, "marked": {"b": [True]}},
            ValueError,
            r"marked names rows that are not in rows: \['b'\]",
        ),
    ],
)
def test_plot_values_rejects_bad_input(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plot_values(**kwargs)  # type: ignore[arg-type]


@pytest.mark.usefixtures("close_figures")
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        # before: torch's "new(): invalid data type 'str'", naming no row
        ({"rows": {"a": "abc"}}, TypeError, r"rows\['a'\] must be a tensor or a sequence of numbers, got str: 'abc'"),
        ({"rows": {"a": [2**70]}}, TypeError, r"rows\['a'\] must be a tensor or a sequence of numbers, got list"),
        ({"rows": {"a": object()}}, TypeError, r"rows\['a'\] must be a tensor or a sequence of numbers, got object"),
        ({"rows": {"a": torch.zeros(2, device="meta")}}, ValueError, r"rows\['a'\] must hold values"),
        ({"rows": {"a": [1.0]}, "marked": {"a": "yes"}}, TypeError, r"marked\['a'\] must be a tensor or a sequence of bools, got str"),
        # before: any non-zero number marked its cell
        ({"rows": {"a": [1.0, 2.0]}, "marked": {"a": [2.5, 0.0]}}, TypeError, r"marked\['a'\] must be a boolean mask, got torch.float32"),
        ({"rows": {"a": [1.0]}, "marked": {"a": [1]}}, TypeError, r"marked\['a'\] must be a boolean mask, got torch.int64"),
        # before: AttributeError: 'str' object has no attribute 'add_patch'
        ({"rows": {"a": [1.0]}, "ax": "ax"}, TypeError, "ax must be a matplotlib Axes"),
        ({"rows": {"a": [1.0]}, "title": 3}, TypeError, "title must be a str or None, got int: 3"),
    ],
)  # fmt: skip
def test_plot_values_names_the_row_it_cannot_draw(
    kwargs: dict[str, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        plot_values(**kwargs)  # type: ignore[arg-type]


@pytest.mark.usefixtures("close_figures")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_plot_values_names_a_nested_row() -> None:
    # made in the test, not at collection: torch warns once per process about nested
    # tensors, and test_broadcasting checks that warning
    nested = torch.nested.nested_tensor([torch.ones(1), torch.ones(2)])
    # before: torch's "Internal error: NestedTensorImpl doesn't support sizes"
    with pytest.raises(ValueError, match=r"rows\['a'\] must be a strided \(dense\)"):
        plot_values({"a": nested})


# -- issue 16: wrap-around, unbounded work, unclear errors --------------------------------

HUGE = 2**40  # elements: 8 TiB of int64 offsets


@pytest.mark.parametrize(
    ("size", "stride", "offset", "reach"),
    [
        ((3,), (2**62,), 0, 2**63),
        ((2, 3), (2**62, 2**62), 0, 3 * 2**62),
        ((2,), (1,), 2**63 - 1, 2**63),
    ],
)
def test_strided_offsets_refuses_positions_beyond_int64(
    size: tuple[int, ...], stride: tuple[int, ...], offset: int, reach: int
) -> None:
    match = rf"size \(.*\), stride \(.*\) and storage_offset {offset} reach storage position {reach}, beyond int64"
    with pytest.raises(ValueError, match=match):
        strided_offsets(size, stride, storage_offset=offset)
    # the largest reachable position still works, exactly
    last = strided_offsets((2,), (2**63 - 2,), storage_offset=1)
    assert last.tolist() == [1, 2**63 - 1]


def test_values_beyond_int64_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=rf"stride\[0\] must be <= {2**63 - 1}, got {2**63}"):
        strided_offsets((2, 3), (2**63, 1))  # the case: it wrapped to negatives
    with pytest.raises(ValueError, match=rf"stride\[0\] must be <= {2**63 - 1}, got {2**64}"):
        required_storage((1,), (2**64,))
    with pytest.raises(ValueError, match=rf"storage_offset must be <= {2**63 - 1}"):
        strided_offsets((1,), (1,), storage_offset=2**63)


def test_huge_shapes_are_refused_before_any_allocation() -> None:
    meta = torch.empty(HUGE, device="meta")
    limit = r"1099511627776 elements; at most 16777216 allowed"
    with pytest.raises(ValueError, match=rf"tensor of shape \(1099511627776,\) has {limit}"):
        element_offsets(meta)
    with pytest.raises(ValueError, match=rf"size \(1099511627776, 1\) has {limit}"):
        strided_offsets((HUGE, 1), (1, 1))
    with pytest.raises(ValueError, match=r"tensor's storage has 1099511627776 elements; at most"):
        storage_map(meta)
    with pytest.raises(
        ValueError, match=r"tensor's storage has 1099511627776 elements; plots draw"
    ):
        plot_storage(meta)
    expanded = torch.zeros(1).expand(HUGE)  # a real tensor: one float, 2**40 elements
    with pytest.raises(ValueError, match=r"tensor has 1099511627776 elements; plot_storage draws"):
        plot_storage(expanded)


def test_shares_memory_of_huge_views_answers_without_listing_them() -> None:
    x = torch.zeros(4)
    expanded = x[:1].expand(HUGE)  # one address, 2**40 times
    assert shares_memory(expanded, x)
    assert not shares_memory(expanded, x[1:])
    wide = torch.zeros(2**21).as_strided((2**20, 2**20), (1, 1))  # 2**40 elements
    assert shares_memory(wide, x) is False  # other storages
    assert shares_memory(wide, wide.t())  # overlapping elements, yet no gap: one block
    big = torch.zeros(2**25 + 4)
    assert shares_memory(big, big[5:7])  # both gap-free: no address list
    assert not shares_memory(big[::2][: 2**24], big[1::2][:4])  # 2**24 blocks: the limit
    with pytest.raises(ValueError, match=r"a of shape \(16777217,\) and stride \(2,\) has"):
        shares_memory(big[::2][: 2**24 + 1], big[1::2][:4])


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_tensors_get_a_clear_error() -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    for helper in (element_offsets, storage_map, plot_view, plot_storage):
        with pytest.raises(
            ValueError, match=r"tensor must be a strided \(dense\) tensor, got a nested"
        ):
            helper(nested)
    with pytest.raises(ValueError, match=r"b must be a strided \(dense\) tensor, got a nested"):
        shares_memory(torch.zeros(1), nested)


@pytest.mark.parametrize("ax", ["ax", 3, object()])
def test_plot_storage_checks_ax(ax: object) -> None:
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes .* or None, got"):
        plot_storage(torch.zeros(3), ax=ax)  # type: ignore[arg-type]

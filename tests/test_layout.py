"""pytorch_memo.layout, checked against torch's own indexing and NumPy's overlap solver."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.layout import element_offsets, plot_storage, shares_memory
from tests.strategies import NUMPY_DTYPES, StridedView, strided_views, tensors_and_views

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
    expected = bool(np.shares_memory(ta.numpy(), tb.numpy(), max_work=None))
    assert shares_memory(ta, tb) is expected
    assert shares_memory(tb, ta) is expected


@given(strided_views(STORAGE), strided_views(STORAGE // 4))
def test_shares_memory_across_dtypes(a: StridedView, b: StridedView) -> None:
    # The same bytes seen as 40 uint8 and as 10 int32: overlap is about bytes, not elements.
    storage = torch.zeros(STORAGE, dtype=torch.uint8)
    ta = storage.as_strided(a.size, a.stride, a.offset)
    tb = storage.view(torch.int32).as_strided(b.size, b.stride, b.offset)
    expected = bool(np.shares_memory(ta.numpy(), tb.numpy(), max_work=None))
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
    # Labels sit at the element's storage position; the label is its flatten() position.
    placed = {}
    for text in ax.texts:
        placed.setdefault(int(text.get_position()[0] - 0.5), []).append(int(text.get_text()))
    flat = view.flatten()
    for offset, positions in placed.items():
        assert all(int(flat[p]) == offset for p in positions)
    assert sorted(p for ps in placed.values() for p in ps) == list(range(view.numel()))
    plt.close(fig)


@pytest.mark.usefixtures("close_figures")
def test_plot_storage_colors_by_dim() -> None:
    image = torch.zeros(1, 3, 2, 2)
    ax = plot_storage(image.contiguous(memory_format=torch.channels_last), color_dim=1)
    used = [p for p in ax.patches if p.get_edgecolor()[:3] == (0.3, 0.3, 0.3)]
    colors = [p.get_facecolor() for p in sorted(used, key=lambda p: p.get_x())]
    assert colors[0] != colors[1] != colors[2]
    assert colors[0] == colors[3]  # channels_last: channel 0, 1, 2, then channel 0 again


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tensor": torch.zeros(300)}, ValueError, r"storage has 300 elements; .* at most 256"),
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

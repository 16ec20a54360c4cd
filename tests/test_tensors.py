"""pytorch_memo.tensors.describe, every field checked against torch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.layout import shares_memory
from pytorch_memo.tensors import TensorTable, describe
from tests.strategies import DTYPES, shapes, tensors_and_views


@given(shapes, st.sampled_from(DTYPES), st.booleans())
def test_fields_of_a_new_tensor(shape: tuple[int, ...], dtype: torch.dtype, grad: bool) -> None:
    x = torch.zeros(shape, dtype=dtype)
    if grad and (dtype.is_floating_point or dtype.is_complex):
        x.requires_grad_()
    row = describe(x=x)["x"]
    assert row.shape == tuple(x.shape)
    assert row.dtype is x.dtype
    assert row.device == x.device
    assert row.stride == x.stride()
    assert row.storage_offset == x.storage_offset() == 0
    assert row.is_contiguous is x.is_contiguous() is True
    assert row.requires_grad is x.requires_grad
    assert row.shares_memory_with == ()


@given(tensors_and_views())
def test_fields_of_a_view(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    base, view = pair
    table = describe(base=base, view=view)
    row = table["view"]
    assert row.shape == tuple(view.shape)
    assert row.stride == view.stride()
    assert row.storage_offset == view.storage_offset()
    assert row.is_contiguous is view.is_contiguous()
    overlap = shares_memory(base, view)
    assert row.shares_memory_with == (("base",) if overlap else ())
    assert table["base"].shares_memory_with == (("view",) if overlap else ())


def test_positional_names_and_a_copy() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    table = describe(x, x.t(), x.clone())
    assert [row.name for row in table] == ["t0", "t1", "t2"]
    assert table["t0"].shares_memory_with == ("t1",)
    assert table["t2"].shares_memory_with == ()
    assert len(table) == 3


def test_text_and_html_rendering() -> None:
    x = torch.zeros(2, 3, requires_grad=True)
    table = describe(x=x, row=x[1])
    text = str(table)
    assert text == repr(table)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["name", "shape", "dtype"]
    assert lines[1].split() == [
        "x",
        "(2,",
        "3)",
        "float32",
        "cpu",
        "(3,",
        "1)",
        "0",
        "True",
        "True",
        "row",
    ]
    assert lines[2].split() == ["row", "(3,)", "float32", "cpu", "(1,)", "3", "True", "True", "x"]
    html = table._repr_html_()
    assert html.startswith('<table class="memo-describe">')
    assert html.count("<tr>") == 3
    assert "<td>(3,)</td>" in html


def test_html_escapes_names() -> None:
    html = describe(**{"<b>": torch.zeros(1)})._repr_html_()
    assert "&lt;b&gt;" in html
    assert "<b>" not in html


def test_unknown_name() -> None:
    with pytest.raises(KeyError, match="name must be one of \\['x'\\], got 'y'"):
        describe(x=torch.zeros(1))["y"]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((), {}, ValueError, "needs at least one tensor, got none"),
        (([1, 2],), {}, TypeError, "t0 must be a torch.Tensor, got list"),
        ((), {"w": 3}, TypeError, "w must be a torch.Tensor, got int: 3"),
        ((torch.zeros(1),), {"t0": torch.zeros(1)}, ValueError, "keyword 't0' clashes"),
        ((), {"s": torch.eye(2).to_sparse()}, ValueError, "s must be a strided"),
    ],
)
def test_bad_input(
    args: tuple[object, ...], kwargs: dict[str, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        describe(*args, **kwargs)  # type: ignore[arg-type]


def test_table_type() -> None:
    assert isinstance(describe(torch.zeros(1)), TensorTable)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_nested_tensors_get_a_clear_error(layout: torch.layout) -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=layout)
    with pytest.raises(ValueError, match=r"nt must be a strided \(dense\) tensor, got a nested"):
        describe(x=torch.zeros(1), nt=nested)


def test_huge_expanded_tensors_are_described_without_listing_their_elements() -> None:
    x = torch.zeros(3)
    table = describe(x=x, wide=x[:1].expand(2**40), rest=x[1:])
    assert table["wide"].shares_memory_with == ("x",)
    assert table["rest"].shares_memory_with == ("x",)

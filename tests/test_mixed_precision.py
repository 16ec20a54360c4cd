"""pytorch_memo.mixed_precision, checked against plain torch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.mixed_precision import element_count


@given(st.lists(st.integers(0, 5), max_size=4))
def test_element_count_is_torchs_numel(shape: list[int]) -> None:
    assert element_count(shape) == torch.zeros(shape).numel()


@pytest.mark.parametrize(
    ("shape", "error", "message"),
    [
        ("23", TypeError, "shape must be a sequence of ints, got str"),
        ((2, -1), ValueError, r"shape\[1\] must be >= 0, got -1"),
        ((2, 1.5), TypeError, r"shape\[1\] must be an int, got float"),
    ],
)
def test_bad_shapes_are_named(shape: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        element_count(shape)  # type: ignore[arg-type]

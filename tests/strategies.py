"""Hypothesis strategies shared by the unit tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
)
NUMPY_DTYPES = tuple(d for d in DTYPES if d is not torch.bfloat16)

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


@dataclass(frozen=True)
class StridedView:
    """Arguments of ``as_strided`` that stay inside a storage of ``numel`` elements."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


@st.composite
def strided_views(draw: st.DrawFn, numel: int) -> StridedView:
    """A size/stride/offset triple whose elements all lie in ``range(numel)``."""
    ndim = draw(st.integers(0, 3))
    size = tuple(draw(st.integers(0, 4)) for _ in range(ndim))
    stride = tuple(draw(st.integers(0, 6)) for _ in range(ndim))
    span = sum((n - 1) * s for n, s in zip(size, stride, strict=True) if n > 0)
    if 0 in size:
        span = 0
    offset = draw(st.integers(0, max(0, numel - 1 - span)))
    if offset + span >= numel:  # cannot fit: fall back to a scalar view
        return StridedView((), (), draw(st.integers(0, numel - 1)))
    return StridedView(size, stride, offset)


@st.composite
def tensors_and_views(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """A contiguous tensor and a view of it made by a random chain of view operations."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple))
    dtype = draw(st.sampled_from(DTYPES))
    base = torch.zeros(shape, dtype=dtype)
    view = base
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["t", "slice", "unsqueeze", "expand", "permute", "narrow"]))
        dim = draw(st.integers(0, view.dim() - 1)) if view.dim() else 0
        if op == "t" and view.dim() >= 2:
            view = view.transpose(0, view.dim() - 1)
        elif op == "slice" and view.dim() and view.shape[dim] > 0:
            step = draw(st.integers(1, 3))
            start = draw(st.integers(0, view.shape[dim] - 1))
            view = view[(slice(None),) * dim + (slice(start, None, step),)]
        elif op == "unsqueeze":
            view = view.unsqueeze(draw(st.integers(0, view.dim())))
        elif op == "expand" and 1 in view.shape:
            view = view.expand(*[3 if n == 1 else n for n in view.shape])
        elif op == "permute" and view.dim():
            view = view.permute(*draw(st.permutations(range(view.dim()))))
        elif op == "narrow" and view.dim() and view.shape[dim] > 0:
            start = draw(st.integers(0, view.shape[dim] - 1))
            view = view.narrow(dim, start, view.shape[dim] - start)
    return base, view

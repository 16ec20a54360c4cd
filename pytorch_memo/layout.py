"""Where a tensor's elements sit in memory.

Used by the chapters *Creating tensors* and *Views, strides and storage*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pytorch_memo._checks import check_int, check_tensor

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["element_offsets", "plot_storage", "shares_memory"]

MAX_PLOTTED = 256


def element_offsets(tensor: torch.Tensor) -> torch.Tensor:
    """Storage position of every element of ``tensor``, in elements, shaped like it.

    Element ``tensor[i, j, ...]`` lives at ``storage_offset + i*stride[0] + j*stride[1]
    + ...`` of the tensor's storage, counted in elements of its dtype.

    Args:
        tensor: a strided tensor on any device.

    Returns:
        An ``int64`` CPU tensor with ``tensor``'s shape.

    Raises:
        TypeError: ``tensor`` is not a tensor.
        ValueError: ``tensor`` is not strided (sparse, nested, ...).

    Example:
        >>> import torch
        >>> x = torch.arange(6).reshape(2, 3)
        >>> element_offsets(x.t())
        tensor([[0, 3],
                [1, 4],
                [2, 5]])
    """
    check_tensor("tensor", tensor)
    offsets = torch.tensor(tensor.storage_offset(), dtype=torch.int64)
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        steps = torch.arange(size, dtype=torch.int64) * stride
        offsets = offsets.unsqueeze(-1) + steps
    return offsets


def _byte_starts(tensor: torch.Tensor, base: int) -> torch.Tensor:
    """Sorted unique start addresses (relative to ``base``) of the elements' bytes."""
    item = tensor.element_size()
    first = tensor.data_ptr() - tensor.storage_offset() * item - base
    starts = element_offsets(tensor).flatten() * item + first
    unique: torch.Tensor = torch.unique(starts)  # sorted
    return unique


def _byte_extent(tensor: torch.Tensor) -> tuple[int, int]:
    """Half-open byte range ``[lo, hi)`` that holds every element of ``tensor``."""
    last = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))
    lo = tensor.data_ptr()
    return lo, lo + (last + 1) * tensor.element_size()


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` use at least one common byte of memory.

    Unlike comparing ``data_ptr()`` (which only says where element 0 sits), this
    looks at every element's bytes: two slices of one storage that do not overlap
    share no memory, and a view that starts at another offset still does. Tensors
    on different devices never share memory; empty tensors share none.

    The exact check builds an index of every element's address, so it costs about
    8 bytes per element when the byte ranges overlap; disjoint ranges answer at once.

    Args:
        a: a strided tensor.
        b: a strided tensor.

    Returns:
        True when writing to some element of one would change an element of the other.

    Raises:
        TypeError: ``a`` or ``b`` is not a tensor.
        ValueError: ``a`` or ``b`` is not strided.

    Example:
        >>> import torch
        >>> x = torch.arange(10)
        >>> shares_memory(x[:5], x[5:]), shares_memory(x[:6], x[5:])
        (False, True)
        >>> shares_memory(x[::2], x[1::2])  # interleaved, never the same element
        False
    """
    check_tensor("a", a)
    check_tensor("b", b)
    if a.device != b.device or a.device.type == "meta" or a.numel() == 0 or b.numel() == 0:
        return False
    a_lo, a_hi = _byte_extent(a)
    b_lo, b_hi = _byte_extent(b)
    if a_hi <= b_lo or b_hi <= a_lo:
        return False
    base = min(a_lo, b_lo)
    a_starts = _byte_starts(a, base)
    b_starts = _byte_starts(b, base)
    # Every interval of ``a`` has the same length, so the latest-starting one that begins
    # before an interval of ``b`` ends is also the one that reaches furthest.
    b_last_byte = b_starts + (b.element_size() - 1)
    idx = torch.searchsorted(a_starts, b_last_byte, right=True) - 1
    found = idx >= 0
    reach = a_starts[idx.clamp(min=0)] + a.element_size()
    return bool((found & (reach > b_starts)).any())


def plot_storage(
    tensor: torch.Tensor,
    *,
    color_dim: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw ``tensor``'s storage as a strip of cells, in memory order.

    Each cell is one storage element. A cell that an element of ``tensor`` lives in is
    labelled with that element's position when ``tensor`` is read row by row
    (``tensor.flatten()`` order), so the labels show in which order the tensor visits
    its memory; storage that ``tensor`` does not use stays blank.

    Args:
        tensor: a strided tensor whose storage has at most 256 elements.
        color_dim: colour each cell by the element's index along this dimension (e.g.
            the channel dimension of an image); by default all used cells share a colour.
        ax: the matplotlib axes to draw on; a new figure by default.
        title: the axes' title.

    Returns:
        The axes drawn on.

    Raises:
        TypeError: ``tensor`` is not a tensor, or ``color_dim`` is not an int.
        ValueError: ``tensor`` is not strided, its storage is too large to draw, or
            ``color_dim`` is out of range.

    Example:
        >>> import torch
        >>> ax = plot_storage(torch.arange(6).reshape(2, 3).t(), title="a transpose")
        >>> labels = sorted(ax.texts, key=lambda t: t.get_position()[0])
        >>> [t.get_text() for t in labels]  # in storage order
        ['0', '2', '4', '1', '3', '5']
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    check_tensor("tensor", tensor)
    if color_dim is not None:
        check_int("color_dim", color_dim)
        if not -tensor.dim() <= color_dim < tensor.dim():
            msg = f"color_dim must be in [{-tensor.dim()}, {tensor.dim()}), got {color_dim}"
            raise ValueError(msg)
    cells = tensor.untyped_storage().nbytes() // tensor.element_size()
    if cells > MAX_PLOTTED:
        msg = f"tensor's storage has {cells} elements; plot_storage draws at most {MAX_PLOTTED}"
        raise ValueError(msg)
    offsets = element_offsets(tensor).flatten().tolist()
    if color_dim is None:
        groups = [0] * len(offsets)
        n_groups = 1
    else:
        shape = [1] * tensor.dim()
        shape[color_dim] = tensor.shape[color_dim]
        index = torch.arange(tensor.shape[color_dim]).reshape(shape).expand(tensor.shape)
        groups = index.flatten().tolist()
        n_groups = max(tensor.shape[color_dim], 1)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(0.45 * max(cells, 4) + 0.6, 14), 0.9))
    light = plt.get_cmap("Pastel1")  # light colours keep the black labels readable
    palette = light if n_groups <= light.N else plt.get_cmap("viridis", n_groups)
    for cell in range(cells):
        ax.add_patch(Rectangle((cell, 0), 1, 1, facecolor="white", edgecolor="0.6"))
    for position, (offset, group) in enumerate(zip(offsets, groups, strict=True)):
        ax.add_patch(Rectangle((offset, 0), 1, 1, facecolor=palette(group), edgecolor="0.3"))
        ax.text(offset + 0.5, 0.5, str(position), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, max(cells, 1))
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_xticks([c + 0.5 for c in range(cells)], [str(c) for c in range(cells)], fontsize=6)
    ax.set_xlabel("storage position", fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title is not None:
        ax.set_title(title, fontsize=9, loc="left")
    return ax

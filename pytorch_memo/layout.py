"""Where a tensor's elements sit in memory."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pytorch_memo._checks import (
    INT64_MAX,
    _shown,
    check_axes,
    check_count,
    check_int,
    check_ints,
    check_tensor,
    check_type,
    check_values,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "MAX_OFFSETS",
    "MAX_PLOTTED",
    "StorageMap",
    "element_offsets",
    "plot_storage",
    "plot_values",
    "plot_view",
    "required_storage",
    "shares_memory",
    "storage_map",
    "strided_offsets",
]

MAX_PLOTTED = 256
"""The most storage elements (and tensor elements) a picture draws."""
MAX_OFFSETS = 2**24
"""The most elements whose storage positions a helper lists (16,777,216, which is
128 MiB of ``int64`` offsets), in ``element_offsets``, ``strided_offsets``,
``storage_map``, and ``shares_memory`` when it must compare element by element."""


def _check_layout(size: Any, stride: Any, storage_offset: Any) -> tuple[tuple[int, ...], ...]:
    """Validate ``as_strided``-style arguments; return size and stride as int tuples."""
    checked = []
    for name, values in (("size", size), ("stride", stride)):
        ints = check_ints(name, values, maximum=INT64_MAX)
        for i, value in enumerate(ints):
            if value < 0:
                what = "sizes" if name == "size" else "strides (torch has no negative strides)"
                msg = f"{name}[{i}] must be >= 0 for {what}, got {value}"
                raise ValueError(msg)
        checked.append(ints)
    if len(checked[0]) != len(checked[1]):
        msg = (
            f"size and stride must have the same length, got {len(checked[0])} sizes "
            f"{checked[0]} and {len(checked[1])} strides {checked[1]}"
        )
        raise ValueError(msg)
    check_int("storage_offset", storage_offset, minimum=0, maximum=INT64_MAX)
    return checked[0], checked[1]


def _last_position(sizes: tuple[int, ...], strides: tuple[int, ...], storage_offset: int) -> int:
    """The storage position of the last element (``storage_offset`` when there is none)."""
    if 0 in sizes:
        return storage_offset
    return storage_offset + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True))


def _numel(sizes: tuple[int, ...]) -> int:
    return math.prod(sizes)


def strided_offsets(
    size: Sequence[int], stride: Sequence[int], *, storage_offset: int = 0
) -> torch.Tensor:
    """Storage position of every element of a view with this size, stride and offset.

    Element ``[i, j, ...]`` sits at ``storage_offset + i*stride[0] + j*stride[1] + ...``,
    counted in elements: the arithmetic of ``torch.as_strided(size, stride,
    storage_offset)``, done without a storage.

    Args:
        size: the view's shape, non-negative ints.
        stride: one non-negative int per dimension, in elements.
        storage_offset: where element ``[0, 0, ...]`` sits, in elements.

    Returns:
        An ``int64`` CPU tensor of shape ``size``.

    Raises:
        TypeError: an argument is not an int, or ``size``/``stride`` not a sequence.
        ValueError: a size, stride or the offset is negative, the lengths differ, the
            view has more than :data:`MAX_OFFSETS` elements, or a position does not fit
            in ``int64`` (torch's index type; it would wrap around).

    Example:
        >>> strided_offsets((2, 3), (1, 2), storage_offset=1)
        tensor([[1, 3, 5],
                [2, 4, 6]])
    """
    sizes, strides = _check_layout(size, stride, storage_offset)
    check_count(
        f"size {sizes}", _numel(sizes), limit=MAX_OFFSETS, what="elements",
        work="strided_offsets returns one int64 position per element",
    )  # fmt: skip
    last = _last_position(sizes, strides, storage_offset)
    if last > INT64_MAX:
        msg = (
            f"size {sizes}, stride {strides} and storage_offset {storage_offset} reach "
            f"storage position {last}, beyond int64's maximum {INT64_MAX}: expected "
            "positions torch can index"
        )
        raise ValueError(msg)
    offsets = torch.tensor(storage_offset, dtype=torch.int64)
    for n, s in zip(sizes, strides, strict=True):
        offsets = offsets.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * s
    return offsets


def required_storage(size: Sequence[int], stride: Sequence[int], *, storage_offset: int = 0) -> int:
    """How many storage elements a view with this size, stride and offset reaches into.

    That is one past its last element's position (0 for a view with no elements).
    ``as_strided`` refuses a view whose requirement exceeds the storage's length.

    Args:
        size: the view's shape, non-negative ints.
        stride: one non-negative int per dimension, in elements.
        storage_offset: where element ``[0, 0, ...]`` sits, in elements.

    Returns:
        The smallest storage length, in elements, that holds every element.

    Raises:
        TypeError: an argument is not an int, or ``size``/``stride`` not a sequence.
        ValueError: a size, stride or the offset is negative, or the lengths differ.

    Example:
        >>> required_storage((5, 5), (1, 1))  # the last element sits at 4 + 4 = 8
        9
        >>> required_storage((0, 5), (100, 1), storage_offset=50)
        0
    """
    sizes, strides = _check_layout(size, stride, storage_offset)
    if 0 in sizes:
        return 0
    return _last_position(sizes, strides, storage_offset) + 1


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
        ValueError: ``tensor`` is not strided (sparse, nested, ...), or it has more than
            :data:`MAX_OFFSETS` elements.

    Example:
        >>> import torch
        >>> x = torch.arange(6).reshape(2, 3)
        >>> element_offsets(x.t())
        tensor([[0, 3],
                [1, 4],
                [2, 5]])
    """
    check_tensor("tensor", tensor)
    _check_offsets_count("tensor", tensor, "element_offsets")
    return strided_offsets(
        tuple(tensor.shape), tensor.stride(), storage_offset=int(tensor.storage_offset())
    )


def _check_offsets_count(name: str, tensor: torch.Tensor, helper: str) -> None:
    check_count(
        f"{name} of shape {tuple(tensor.shape)}", tensor.numel(), limit=MAX_OFFSETS,
        what="elements", work=f"{helper} lists one int64 storage position per element",
    )  # fmt: skip


def _storage_elements(tensor: torch.Tensor) -> int:
    """Length of ``tensor``'s storage, in elements of its dtype."""
    return tensor.untyped_storage().nbytes() // tensor.element_size()


@dataclass(frozen=True)
class StorageMap:
    """Where each element of a view lives in its storage (see :func:`storage_map`)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    storage_size: int
    """Length of the whole storage, in elements of the tensor's dtype."""
    offsets: torch.Tensor
    """Storage position of each element, shaped like the tensor (``int64``)."""
    uses: torch.Tensor
    """For each storage position, how many elements of the tensor live there."""

    @property
    def unused(self) -> tuple[int, ...]:
        """Storage positions that no element of the tensor uses."""
        return tuple(int(i) for i in (self.uses == 0).nonzero().flatten())

    @property
    def overlapping(self) -> bool:
        """Whether two elements of the tensor share a storage position."""
        return bool((self.uses > 1).any())

    def __str__(self) -> str:
        n_used = int((self.uses > 0).sum())
        share = "some shared by several elements" if self.overlapping else "each by one element"
        lines = str(self.offsets)[len("tensor(") : -1].splitlines()
        grid = "\n".join(
            ("  " + line[len("tensor(") if i else 0 :]).rstrip() for i, line in enumerate(lines)
        )
        return (
            f"shape {self.shape}, stride {self.stride}, storage offset {self.storage_offset}\n"
            f"storage position of each element:\n{grid}\n"
            f"storage: {self.storage_size} element{'s' * (self.storage_size != 1)}, "
            f"{n_used} used ({share})"
        )

    def __repr__(self) -> str:
        return str(self)


def storage_map(tensor: torch.Tensor) -> StorageMap:
    """Map every element of ``tensor`` to its position in the tensor's storage.

    Args:
        tensor: a strided tensor on any device.

    Returns:
        A :class:`StorageMap`: the positions (:func:`element_offsets`), the storage's
        length and how many elements use each storage position. It prints as text.

    Raises:
        TypeError: ``tensor`` is not a tensor.
        ValueError: ``tensor`` is not strided, or it or its storage has more than
            :data:`MAX_OFFSETS` elements.

    Example:
        >>> import torch
        >>> print(storage_map(torch.arange(6).reshape(2, 3)[:, 1:]))
        shape (2, 2), stride (3, 1), storage offset 1
        storage position of each element:
          [[1, 2],
           [4, 5]]
        storage: 6 elements, 4 used (each by one element)
    """
    check_tensor("tensor", tensor)
    size = _storage_elements(tensor)
    check_count(
        "tensor's storage", size, limit=MAX_OFFSETS, what="elements",
        work="storage_map counts the uses of every storage position",
    )  # fmt: skip
    offsets = element_offsets(tensor)
    uses = torch.bincount(offsets.flatten(), minlength=size)
    return StorageMap(
        shape=tuple(tensor.shape),
        stride=tuple(tensor.stride()),
        storage_offset=int(tensor.storage_offset()),
        storage_size=size,
        offsets=offsets,
        uses=uses,
    )


def _blocks(tensor: torch.Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """The tensor's element addresses as equal blocks: ``(block length, sizes, strides)``.

    Dimensions of size 1 add no address and those of stride 0 repeat the others' (as
    ``expand`` does), so both are dropped. Taking the rest by increasing stride, a
    dimension whose stride is at most one past the addresses covered so far extends a
    gap-free range: those dimensions form one block of contiguous elements, and the
    remaining (outer) dimensions say where copies of that block start.
    """
    kept = sorted(
        ((s, n) for n, s in zip(tensor.shape, tensor.stride(), strict=True) if n > 1 and s),
    )
    span = 0  # the block covers positions [0, span]
    for i, (stride, size) in enumerate(kept):
        if stride > span + 1:
            outer = kept[i:]
            return span + 1, tuple(n for _, n in outer), tuple(s for s, _ in outer)
        span += (size - 1) * stride
    return span + 1, (), ()


def _block_starts(name: str, tensor: torch.Tensor, base: int) -> tuple[torch.Tensor, int]:
    """Sorted unique byte addresses (relative to ``base``) where ``tensor``'s blocks
    start, and the blocks' length in bytes."""
    length, sizes, strides = _blocks(tensor)
    check_count(
        f"{name} of shape {tuple(tensor.shape)} and stride {tensor.stride()}", _numel(sizes),
        limit=MAX_OFFSETS, what="separate blocks of memory to compare",
        work="shares_memory lists where each block starts when the byte ranges overlap",
    )  # fmt: skip
    item = tensor.element_size()
    starts = strided_offsets(sizes, strides) * item + (tensor.data_ptr() - base)
    unique: torch.Tensor = torch.unique(starts.flatten())  # sorted
    return unique, length * item


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

    Disjoint byte ranges answer at once. Otherwise each tensor's elements are grouped
    into equal blocks of contiguous memory (a whole contiguous, transposed or expanded
    tensor is one block; a column slice of a matrix has a block per row) and the blocks'
    start addresses are compared, about 8 bytes each, for at most :data:`MAX_OFFSETS`
    blocks per tensor.

    Args:
        a: a strided tensor.
        b: a strided tensor.

    Returns:
        True when writing to some element of one would change an element of the other.

    Raises:
        TypeError: ``a`` or ``b`` is not a tensor.
        ValueError: ``a`` or ``b`` is not strided, or the check would list more than
            :data:`MAX_OFFSETS` blocks of one of them.

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
    a_starts, a_length = _block_starts("a", a, base)
    b_starts, b_length = _block_starts("b", b, base)
    if len(a_starts) == len(b_starts) == 1:
        return True  # each fills its byte range without a gap, and the ranges overlap
    # Every block of ``a`` has the same length, so the latest-starting one that begins
    # before a block of ``b`` ends is also the one that reaches furthest.
    b_last_byte = b_starts + (b_length - 1)
    idx = torch.searchsorted(a_starts, b_last_byte, right=True) - 1
    found = idx >= 0
    reach = a_starts[idx.clamp(min=0)] + a_length
    return bool((found & (reach > b_starts)).any())


def _palette(n_groups: int) -> Any:
    """Light colours (black labels stay readable), or viridis for many groups."""
    import matplotlib.pyplot as plt

    light = plt.get_cmap("Pastel1")
    return light if n_groups <= light.N else plt.get_cmap("viridis", n_groups)


def _groups(tensor: torch.Tensor, color_dim: int | None) -> tuple[list[int], int]:
    """Each element's colour group (in flatten order) and the number of groups."""
    if color_dim is None:
        return [0] * tensor.numel(), 1
    check_int("color_dim", color_dim)
    if not -tensor.dim() <= color_dim < tensor.dim():
        msg = f"color_dim must be in [{-tensor.dim()}, {tensor.dim()}), got {color_dim}"
        raise ValueError(msg)
    shape = [1] * tensor.dim()
    shape[color_dim] = tensor.shape[color_dim]
    index = torch.arange(tensor.shape[color_dim]).reshape(shape).expand(tensor.shape)
    return index.flatten().tolist(), max(tensor.shape[color_dim], 1)


def _storage_cells(tensor: torch.Tensor) -> int:
    cells = _storage_elements(tensor)
    if cells > MAX_PLOTTED:
        msg = f"tensor's storage has {cells} elements; plots draw at most {MAX_PLOTTED}"
        raise ValueError(msg)
    return cells


def _check_plotted_elements(tensor: torch.Tensor, helper: str) -> None:
    if tensor.numel() > MAX_PLOTTED:
        msg = f"tensor has {tensor.numel()} elements; {helper} draws at most {MAX_PLOTTED}"
        raise ValueError(msg)


def _label(positions: list[int]) -> str:
    """A storage cell's label: the flatten() positions of the elements that live there."""
    shown = ",".join(map(str, positions[:2]))
    return shown + (",…" if len(positions) > 2 else "")


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
    its memory; storage that ``tensor`` does not use stays blank. A cell that several
    elements share (a zero stride, an overlapping ``as_strided``) lists the first two
    positions, then ``…`` if there are more.

    Args:
        tensor: a strided tensor with at most 256 elements, whose storage has at most
            256 elements.
        color_dim: colour each cell by the element's index along this dimension (e.g.
            the channel dimension of an image); by default all used cells share a colour.
        ax: the matplotlib axes to draw on; a new figure by default.
        title: the axes' title.

    Returns:
        The axes drawn on.

    Raises:
        TypeError: ``tensor`` is not a tensor, ``color_dim`` is not an int, or ``ax`` is
            not matplotlib axes.
        ValueError: ``tensor`` is not strided, it or its storage is too large to draw,
            or ``color_dim`` is out of range.

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
    check_axes("ax", ax)
    check_type("title", title, (str, type(None)), "a str or None")
    cells = _storage_cells(tensor)
    _check_plotted_elements(tensor, "plot_storage")
    groups, n_groups = _groups(tensor, color_dim)
    offsets = element_offsets(tensor).flatten().tolist()
    if ax is None:
        _, ax = plt.subplots(figsize=(min(0.45 * max(cells, 4) + 0.6, 14), 0.9))
    palette = _palette(n_groups)
    for cell in range(cells):
        ax.add_patch(Rectangle((cell, 0), 1, 1, facecolor="white", edgecolor="0.6"))
    living: dict[int, list[int]] = {}
    for position, (offset, group) in enumerate(zip(offsets, groups, strict=True)):
        ax.add_patch(Rectangle((offset, 0), 1, 1, facecolor=palette(group), edgecolor="0.3"))
        living.setdefault(offset, []).append(position)
    for offset, positions in living.items():
        size = 8 if len(positions) == 1 else 6
        ax.text(offset + 0.5, 0.5, _label(positions), ha="center", va="center", fontsize=size)
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


def _row_names(shape: tuple[int, ...]) -> list[str]:
    """The index of each row of the grid: ``[i, j, :]`` for the leading dimensions."""
    if not shape:
        return ["scalar"]
    rows = itertools.product(*(range(n) for n in shape[:-1]))
    return ["[" + "".join(f"{i}, " for i in row) + ":]" for row in rows]


def plot_view(tensor: torch.Tensor, *, title: str | None = None) -> Figure:
    """Draw ``tensor`` as a grid above its storage strip, each element joined to its cell.

    The grid shows the tensor row by row (the last dimension across, every index of the
    leading dimensions down; a row's index is on the left). Each element is labelled
    with its ``flatten()`` position and joined by a line to the storage cell it lives
    in, which carries the same label (see :func:`plot_storage`). Elements with the same
    index along dimension -2 share a colour in both pictures.

    Args:
        tensor: a strided tensor with at most 256 elements and 256 storage elements.
        title: the figure's title.

    Returns:
        The matplotlib figure; its first axes hold the grid, its second the strip.

    Raises:
        TypeError: ``tensor`` is not a tensor.
        ValueError: ``tensor`` is not strided, or it or its storage is too large.

    Example:
        >>> import torch
        >>> fig = plot_view(torch.arange(6).reshape(2, 3).t(), title="a transpose")
        >>> grid, strip = fig.axes
        >>> [t.get_text() for t in grid.texts]  # row by row
        ['0', '1', '2', '3', '4', '5']
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import ConnectionPatch, Rectangle

    check_tensor("tensor", tensor)
    check_type("title", title, (str, type(None)), "a str or None")
    _check_plotted_elements(tensor, "plot_view")
    cells = _storage_cells(tensor)
    shape = tuple(tensor.shape)
    cols = shape[-1] if shape else 1
    names = _row_names(shape)
    rows = len(names)
    width = max(cells, cols, 4)
    inch = min(0.45, 13.0 / width)  # one cell, in inches
    fig, (grid, strip) = plt.subplots(
        2,
        1,
        figsize=(inch * width + 1.2, inch * (rows + 1) + 1.4),
        height_ratios=[max(rows, 1), 1],
        gridspec_kw={"hspace": 1.2 / max(rows, 1)},
    )
    color_dim = -2 if tensor.dim() >= 2 else None
    groups, n_groups = _groups(tensor, color_dim)
    palette = _palette(n_groups)
    plot_storage(tensor, color_dim=color_dim, ax=strip)
    strip.set_xlim(0, width)
    left = (width - cols) / 2
    offsets = element_offsets(tensor).flatten().tolist()
    for position, (offset, group) in enumerate(zip(offsets, groups, strict=True)):
        row, col = divmod(position, cols)
        x, y = left + col, rows - 1 - row
        grid.add_patch(Rectangle((x, y), 1, 1, facecolor=palette(group), edgecolor="0.3"))
        grid.text(x + 0.5, y + 0.5, str(position), ha="center", va="center", fontsize=8)
        link = ConnectionPatch(
            (x + 0.5, y + 0.5), (offset + 0.5, 1), coordsA=grid.transData,
            coordsB=strip.transData, color=palette(group), linewidth=1.5, zorder=0,
        )  # fmt: skip
        fig.add_artist(link)
    grid.set_xlim(0, width)
    grid.set_ylim(0, max(rows, 1))
    grid.set_yticks([r + 0.5 for r in range(rows)], names[::-1], fontsize=7)
    grid.set_xticks([left + c + 0.5 for c in range(cols)], [str(c) for c in range(cols)])
    grid.tick_params(length=0, labelsize=7, labeltop=True, labelbottom=False)
    for spine in grid.spines.values():
        spine.set_visible(False)
    grid.patch.set_visible(False)
    grid.set_zorder(2)  # its cells hide the links' first stretch
    fig.suptitle(title or f"shape {shape}, stride {tensor.stride()}", fontsize=9, x=0.02, ha="left")
    return fig


def _cell_text(value: float | bool) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _as_tensor(name: str, value: Any, spelled: str) -> torch.Tensor:
    """``value`` as a tensor: a dense tensor with values as it is, else converted."""
    if isinstance(value, torch.Tensor):
        return check_values(name, check_tensor(name, value))
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        msg = f"{name} must be a tensor or {spelled}, got {type(value).__name__}: {_shown(value)} ({error})"
        raise TypeError(msg) from None


def plot_values(
    rows: Mapping[str, torch.Tensor | Sequence[float]],
    *,
    marked: Mapping[str, torch.Tensor | Sequence[bool]] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw named rows of numbers as strips of labelled cells, one column per position.

    Made to compare a storage before and after an operation, cell by cell (the position
    is the storage position when the rows are storages). Rows are drawn top to bottom in
    the order given; each cell shows its value (``5`` for ``5.0``).

    Args:
        rows: the name of each row and its values, 1-D, all of the same length (at most
            256).
        marked: for some rows (by name), a boolean mask of the cells to mark (a bool
            tensor or a sequence of bools): they are filled in a warm colour, the others
            in a light one.
        ax: the matplotlib axes to draw on; a new figure by default.
        title: the axes' title, a str or None.

    Returns:
        The axes drawn on; its y tick labels are the rows' names.

    Raises:
        TypeError: ``rows`` or ``marked`` is not a mapping, a row is not numbers, a mask
            not booleans, ``ax`` not matplotlib axes or ``title`` not a str.
        ValueError: no rows; a row or mask that is not 1-D, longer than 256, of
            another length than the first row, not dense or without values (meta); a
            mask for a row not in ``rows``.

    Example:
        >>> import torch
        >>> ax = plot_values(
        ...     {"before": torch.arange(3.0), "after": [1.0, 3.0, 3.0]},
        ...     marked={"after": [False, True, False]},
        ... )
        >>> [t.get_text() for t in ax.texts]  # row by row
        ['0', '1', '2', '1', '3', '3']
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    check_type("rows", rows, Mapping, "a mapping of names to 1-D values")
    if marked is not None:
        check_type("marked", marked, Mapping, "a mapping of row names to masks")
    check_axes("ax", ax)
    if title is not None:
        check_type("title", title, str, "a str or None")
    if not rows:
        msg = "rows must name at least one row, got an empty mapping"
        raise ValueError(msg)
    numbers, bools = "a sequence of numbers", "a sequence of bools"
    values = {name: _as_tensor(f"rows[{name!r}]", row, numbers) for name, row in rows.items()}
    masks = {name: _as_tensor(f"marked[{name!r}]", m, bools) for name, m in (marked or {}).items()}
    for name, given in masks.items():
        if given.dtype != torch.bool:
            msg = f"marked[{name!r}] must be a boolean mask, got {given.dtype}"
            raise TypeError(msg)
    length = next(iter(values.values())).numel()
    for what, named in (("rows", values), ("marked", masks)):
        for name, row in named.items():
            if row.dim() != 1 or row.numel() != length or length > MAX_PLOTTED:
                msg = (
                    f"{what}[{name!r}] must be 1-D with {length} values (the first row's "
                    f"length, at most {MAX_PLOTTED}), got shape {tuple(row.shape)}"
                )
                raise ValueError(msg)
    unknown = sorted(set(masks) - set(values))
    if unknown:
        msg = f"marked names rows that are not in rows: {unknown}; rows are {list(values)}"
        raise ValueError(msg)
    if ax is None:
        width = min(0.45 * max(length, 4) + 1.6, 14)
        _, ax = plt.subplots(figsize=(width, 0.35 * len(values) + 0.6))
    names = list(values)
    for r, name in enumerate(names):
        y = len(names) - 1 - r
        mask = masks.get(name)
        for col, value in enumerate(values[name].tolist()):
            warm = mask is not None and bool(mask[col])
            face = "#f4a582" if warm else "#e8eef4"
            ax.add_patch(Rectangle((col, y), 1, 1, facecolor=face, edgecolor="0.4"))
            ax.text(col + 0.5, y + 0.5, _cell_text(value), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, max(length, 1))
    ax.set_ylim(0, len(names))
    ax.set_yticks([len(names) - 1 - r + 0.5 for r in range(len(names))], names, fontsize=8)
    ax.set_xticks([c + 0.5 for c in range(length)], [str(c) for c in range(length)], fontsize=6)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title is not None:
        ax.set_title(title, fontsize=9, loc="left")
    return ax

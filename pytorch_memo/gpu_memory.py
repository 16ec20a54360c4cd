"""The sizes CUDA's caching allocator gives a request, as plain arithmetic.

:func:`allocator_block` says, for a request of some bytes, how large a block the
caching allocator hands out (what ``torch.cuda.memory_allocated`` counts), from which
pool, and how large a segment it reserves from the driver when no cached block fits
(what ``torch.cuda.memory_reserved`` grows by). It runs anywhere: it is arithmetic on
the allocator's constants (``c10/cuda/CUDACachingAllocator.cpp``), for its default
settings, and needs no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pytorch_memo._checks import check_int

__all__ = [
    "LARGE_BUFFER",
    "MIN_BLOCK_SIZE",
    "MIN_LARGE_ALLOC",
    "ROUND_LARGE",
    "SMALL_BUFFER",
    "SMALL_SIZE",
    "AllocatorBlock",
    "allocator_block",
]

MIN_BLOCK_SIZE = 512
"""Every block is a multiple of 512 bytes (``kMinBlockSize``)."""
SMALL_SIZE = 2**20
"""The largest request of the small pool, 1 MiB (``kSmallSize``)."""
SMALL_BUFFER = 2 * 2**20
"""The segment small requests are packed into, 2 MiB (``kSmallBuffer``)."""
LARGE_BUFFER = 20 * 2**20
"""The segment a request of the large pool under 10 MiB gets, 20 MiB (``kLargeBuffer``)."""
MIN_LARGE_ALLOC = 10 * 2**20
"""From 10 MiB on, a request gets a segment of its own size (``kMinLargeAlloc``)."""
ROUND_LARGE = 2 * 2**20
"""Such a segment is rounded up to a multiple of 2 MiB (``kRoundLarge``)."""
MAX_REQUEST = 2**62
"""The largest request :func:`allocator_block` accepts (no device holds more)."""


@dataclass(frozen=True)
class AllocatorBlock:
    """What the caching allocator gives a request, served from a new segment.

    Attributes:
        requested: the bytes asked for.
        block: the bytes of the block handed out, which ``memory_allocated`` counts.
        pool: ``"small"`` for blocks up to 1 MiB, else ``"large"``.
        segment: the bytes of the segment reserved from the driver when no cached
            block fits, which ``memory_reserved`` grows by.
    """

    requested: int
    block: int
    pool: Literal["small", "large"]
    segment: int

    @property
    def rounding(self) -> int:
        """The bytes the block holds beyond the request."""
        return self.block - self.requested


def _round_up(nbytes: int, multiple: int) -> int:
    return -(-nbytes // multiple) * multiple


def allocator_block(nbytes: int) -> AllocatorBlock:
    """The block, pool and new segment CUDA's caching allocator gives ``nbytes``.

    The rules, from ``c10/cuda/CUDACachingAllocator.cpp`` with the default settings
    (no ``PYTORCH_ALLOC_CONF``): the request is rounded up to a multiple of 512 bytes;
    up to 1 MiB it is served from the small pool, whose segments are 2 MiB; above, from
    the large pool, where a new segment is 20 MiB for a request under 10 MiB and the
    request rounded up to a multiple of 2 MiB from 10 MiB on. A block of the large pool
    is split off its segment only when more than 1 MiB would remain: otherwise the
    request gets the whole segment, and ``memory_allocated`` counts all of it. A
    request served from a cached block (after an earlier free) may get another block;
    ``expandable_segments:True`` changes the segments.

    Args:
        nbytes: the bytes requested, an int from 1 to 2**62 (a tensor's ``nbytes``;
            a request of 0 bytes allocates nothing).

    Returns:
        The :class:`AllocatorBlock` for a request served from a new segment.

    Raises:
        TypeError: ``nbytes`` is not an int.
        ValueError: ``nbytes`` is below 1 or above 2**62.

    Example:
        >>> allocator_block(20_000)
        AllocatorBlock(requested=20000, block=20480, pool='small', segment=2097152)
        >>> allocator_block(11 * 2**20).block == 12 * 2**20  # 1 MiB left: not split
        True
    """
    requested = check_int("nbytes", nbytes, minimum=1, maximum=MAX_REQUEST)
    size = _round_up(requested, MIN_BLOCK_SIZE)
    if size <= SMALL_SIZE:
        return AllocatorBlock(requested, size, "small", SMALL_BUFFER)
    segment = LARGE_BUFFER if size < MIN_LARGE_ALLOC else _round_up(size, ROUND_LARGE)
    block = size if segment - size > SMALL_SIZE else segment
    return AllocatorBlock(requested, block, "large", segment)

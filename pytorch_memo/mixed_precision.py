"""What ``pytorch_memo.mixed_precision`` holds, in one line.

Used by the chapter *Mixed precision*.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytorch_memo._checks import check_int

__all__ = ["element_count"]


def element_count(shape: Sequence[int]) -> int:
    """How many elements a tensor of ``shape`` holds (an example helper: replace it).

    Args:
        shape: the sizes of the dimensions, each an int >= 0.

    Returns:
        The product of the sizes (1 for ``()``, a scalar).

    Raises:
        TypeError: ``shape`` is not a sequence of ints.
        ValueError: a size is negative.

    Example:
        >>> element_count((2, 3))
        6
    """
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence):
        msg = f"shape must be a sequence of ints, got {type(shape).__name__}: {shape!r}"
        raise TypeError(msg)
    count = 1
    for index, size in enumerate(shape):
        count *= check_int(f"shape[{index}]", size, minimum=0)
    return count

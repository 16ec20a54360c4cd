"""Seeds, generators and DataLoader workers: the pieces worker processes must import.

A ``Dataset`` and a ``worker_init_fn`` given to a ``DataLoader`` with ``num_workers > 0``
live in this module rather than in a notebook: workers started with ``spawn`` (the
default on macOS and Windows) or ``forkserver`` (the default on Linux from Python 3.14)
unpickle them, which imports their classes and functions by module and name, and a class
or function defined in a notebook (in ``__main__``) cannot be imported by another
process.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, SupportsIndex

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from pytorch_memo._checks import INT64_MAX, check_axes, check_int, check_iterable, check_type
from pytorch_memo._compat import inductor_config

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_PLOTTED_DRAWS",
    "Draw",
    "NoisyRange",
    "deterministic_algorithms",
    "plot_draws",
    "reseed_worker",
    "seed_everything",
]

_VALUES = ("torch_value", "random_value", "numpy_value", "own_value")
MAX_PLOTTED_DRAWS = 256
"""The most draws :func:`plot_draws` shows (a bar each)."""


@dataclass(frozen=True)
class Draw:
    """What :class:`NoisyRange` drew for one item, and where.

    Attributes:
        index: the item's index.
        worker: the id of the DataLoader worker that made it; None in the main process.
        seed: the worker's seed (``get_worker_info().seed``); None in the main process.
        torch_value: a draw of ``torch.rand(())`` (torch's global generator).
        random_value: a draw of ``random.random()`` (Python's global generator).
        numpy_value: a draw of ``np.random.random()`` (NumPy's global generator).
        own_value: a draw from the dataset's own ``np.random.Generator``.
    """

    index: int
    worker: int | None
    seed: int | None
    torch_value: float
    random_value: float
    numpy_value: float
    own_value: float


class NoisyRange(Dataset[Draw]):
    """A dataset of ``length`` items, each a :class:`Draw` from four random generators.

    Item ``i`` draws one number from torch's, Python's and NumPy's global generators and
    one from the dataset's own ``np.random.Generator`` (NumPy's recommended API), made
    once in ``__init__`` from ``seed``: the random augmentation of a real dataset, reduced
    to the draws. In DataLoader workers each worker draws from its own copy of that
    generator; :meth:`reseed` (through :func:`reseed_worker`) gives each copy its seed.

    Args:
        length: the number of items, an int from 0 to ``2**63 - 1`` (what ``len()``
            returns).
        seed: the seed of the dataset's own generator, an int >= 0.

    Raises:
        TypeError: ``length`` or ``seed`` is not an int.
        ValueError: ``length`` or ``seed`` is negative, or ``length`` above ``2**63 - 1``.

    Example:
        >>> data = NoisyRange(3, seed=0)
        >>> len(data), data[2].index, data[2].worker
        (3, 2, None)
        >>> NoisyRange(1, seed=7)[0].own_value == np.random.default_rng(7).random()
        True
    """

    def __init__(self, length: int, *, seed: int) -> None:
        self.length = check_int("length", length, minimum=0, maximum=INT64_MAX)  # len()'s limit
        self.rng = np.random.default_rng(check_int("seed", seed, minimum=0))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: SupportsIndex) -> Draw:
        try:
            position = operator.index(index)
        except TypeError:
            msg = f"index must be an int, got {type(index).__name__}: {index!r}"
            raise TypeError(msg) from None
        if not 0 <= position < self.length:
            msg = f"index must be in [0, {self.length}), got {position}"
            raise IndexError(msg)
        info = get_worker_info()
        return Draw(
            index=position,
            worker=None if info is None else info.id,
            seed=None if info is None else info.seed,
            torch_value=torch.rand(()).item(),
            random_value=random.random(),
            numpy_value=float(np.random.random()),  # noqa: NPY002 (the global one)
            own_value=float(self.rng.random()),
        )

    def reseed(self, seed: int) -> None:
        """Replace the dataset's own generator by ``np.random.default_rng(seed)``.

        Args:
            seed: an int >= 0 (64-bit worker seeds are fine).

        Raises:
            TypeError: ``seed`` is not an int.
            ValueError: ``seed`` is negative.

        Example:
            >>> data = NoisyRange(2, seed=0)
            >>> data.reseed(5)
            >>> data[0].own_value == np.random.default_rng(5).random()
            True
        """
        self.rng = np.random.default_rng(check_int("seed", seed, minimum=0))


def reseed_worker(worker_id: int) -> None:
    """A ``worker_init_fn``: seed the worker's copy of the dataset from its torch seed.

    The DataLoader seeds torch, ``random`` and NumPy's global generator in each worker,
    but a generator the dataset holds is copied into every worker with the same state.
    This gives the worker's copy ``reseed(torch.initial_seed())``: the worker's torch
    seed, which differs between workers and between epochs, and which a ``generator=``
    given to the DataLoader makes reproducible.

    Args:
        worker_id: the worker's id, as the DataLoader passes it.

    Raises:
        RuntimeError: called outside a DataLoader worker.
        TypeError: ``worker_id`` is not an int, or the dataset has no ``reseed`` method.
        ValueError: ``worker_id`` is not this worker's id.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> loader = DataLoader(
        ...     NoisyRange(4, seed=0), batch_size=None, num_workers=2,
        ...     worker_init_fn=reseed_worker,
        ... )
        >>> values = [draw.own_value for draw in loader]
        >>> values[0] != values[1]  # workers 0 and 1 no longer draw the same
        True
    """
    info = get_worker_info()
    if info is None:
        msg = (
            "reseed_worker runs in a DataLoader worker (pass it as worker_init_fn=), "
            "but it was called in the main process"
        )
        raise RuntimeError(msg)
    check_int("worker_id", worker_id, minimum=0)
    if worker_id != info.id:
        msg = f"worker_id must be this worker's id {info.id}, got {worker_id}"
        raise ValueError(msg)
    reseed = getattr(info.dataset, "reseed", None)
    if not callable(reseed):
        msg = (
            "the worker's dataset must have a reseed(seed) method, "
            f"got {type(info.dataset).__name__}"
        )
        raise TypeError(msg)
    reseed(torch.initial_seed())


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and CUDA).

    ``torch.manual_seed`` seeds only torch's generators; this seeds the two other
    global generators a training script usually draws from as well. It does not reach
    generators that objects hold (``np.random.default_rng``, ``random.Random``).

    Args:
        seed: an int from 0 to 2**32 - 1 (NumPy's global generator takes no more).

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is negative or not below 2**32.

    Example:
        >>> seed_everything(3)
        >>> first = (random.random(), np.random.random(), torch.rand(()).item())
        >>> seed_everything(3)
        >>> first == (random.random(), np.random.random(), torch.rand(()).item())
        True
    """
    check_int("seed", seed, minimum=0)
    if seed >= 2**32:
        msg = f"seed must be < 2**32 (NumPy's global generator takes no more), got {seed}"
        raise ValueError(msg)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (the global one, on purpose)
    torch.manual_seed(seed)


@contextmanager
def deterministic_algorithms(mode: bool = True, *, warn_only: bool = False) -> Iterator[None]:
    """Set ``torch.use_deterministic_algorithms`` for a block, then restore it.

    torch's switch is global; this puts back both the mode and ``warn_only`` as they
    were, also when the block raises. From torch 2.10, ``use_deterministic_algorithms``
    also sets TorchInductor's option ``torch._inductor.config.deterministic`` to
    ``mode``; that option is put back as it was on entry too, not set to the mode put
    back (it may have been set by hand, and :func:`torch.set_deterministic_debug_mode`
    turns the mode on without it). Older torch has no such option.

    Args:
        mode: deterministic algorithms on (True) or off (False) inside the block.
        warn_only: inside the block, ops without a deterministic implementation warn
            instead of raising.

    Yields:
        Nothing; the block runs with the setting.

    Raises:
        TypeError: ``mode`` or ``warn_only`` is not a bool.

    Example:
        >>> with deterministic_algorithms():
        ...     torch.are_deterministic_algorithms_enabled()
        True
        >>> torch.are_deterministic_algorithms_enabled()
        False
    """
    check_type("mode", mode, bool, "a bool")
    check_type("warn_only", warn_only, bool, "a bool")
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    inductor = inductor_config()
    inductor_before = inductor.deterministic if inductor is not None else None
    try:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        if inductor is not None:
            inductor.deterministic = inductor_before


def plot_draws(
    draws: Iterable[Draw],
    *,
    value: str = "own_value",
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw one bar per item: its ``value``, coloured by the worker that drew it.

    Two workers that draw the same numbers show as pairs of equal bars.

    Args:
        draws: :class:`Draw` records, as a DataLoader over :class:`NoisyRange` yields
            them (``batch_size=None``): an iterable of at most :data:`MAX_PLOTTED_DRAWS`.
        value: which draw to show: ``"own_value"``, ``"numpy_value"``,
            ``"random_value"`` or ``"torch_value"``.
        ax: the axes to draw on; a new figure's by default.
        title: the axes' title.

    Returns:
        The axes, with one bar patch per draw.

    Raises:
        TypeError: ``draws`` is not an iterable of :class:`Draw`, ``ax`` not matplotlib
            axes, or ``title`` not a str.
        ValueError: ``draws`` is empty or too long, or ``value`` is not one of the four
            names.

    Example:
        >>> ax = plot_draws([NoisyRange(2, seed=0)[i] for i in range(2)])
        >>> len(ax.patches)
        2
    """
    import matplotlib.pyplot as plt

    records = check_iterable(
        "draws", draws, spelled="an iterable of Draws", limit=MAX_PLOTTED_DRAWS,
        work="plot_draws draws a bar per item",
    )  # fmt: skip
    for position, draw in enumerate(records):
        check_type(f"draws[{position}]", draw, Draw, "a Draw")
    if not records:
        msg = "draws must hold at least one Draw, got none"
        raise ValueError(msg)
    if value not in _VALUES:
        msg = f"value must be one of {', '.join(_VALUES)}, got {value!r}"
        raise ValueError(msg)
    check_axes("ax", ax)
    if title is not None:
        check_type("title", title, str, "a str or None")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 2.4), layout="constrained")
    workers = sorted({d.worker for d in records}, key=lambda w: -1 if w is None else w)
    palette = plt.get_cmap("tab10")
    for number, worker in enumerate(workers):
        mine = [d for d in records if d.worker == worker]
        label = "main process" if worker is None else f"worker {worker}"
        ax.bar(
            [d.index for d in mine],
            [getattr(d, value) for d in mine],
            color=palette(number % 10),
            label=label,
        )
    ax.set_xlabel("item index")
    ax.set_ylabel(value.replace("_", " "))
    ax.set_ylim(0, 1.3)  # room above the bars for the legend
    ax.set_yticks([0, 0.5, 1])
    ax.legend(loc="upper center", ncols=len(workers), fontsize="small", frameon=False)
    if title is not None:
        ax.set_title(title)
    return ax

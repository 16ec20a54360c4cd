"""Datasets and a collate function that DataLoader workers can import, a picture of
how ``DistributedSampler`` splits a dataset across ranks, epoch by epoch, and what a
worker's private memory does while it reads (Linux).

With ``num_workers > 0`` a ``DataLoader`` hands its
dataset and its ``collate_fn`` to worker processes. Under the ``spawn`` and
``forkserver`` start methods they travel pickled, their classes and functions by
reference to the module that defines them, so a class or function defined in a notebook
cannot be found there: the ones the chapter runs in workers live here. All data is made up on the spot.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import (
    Dataset,
    DistributedSampler,
    IterableDataset,
    default_collate,
    get_worker_info,
)

from pytorch_memo._checks import (
    INT64_MAX,
    _shown,
    check_axes,
    check_callable,
    check_choice,
    check_count,
    check_int,
    check_ints,
    check_seconds,
    check_tensor,
    check_type,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_LENGTH",
    "MAX_PADDED",
    "MAX_RECORDS",
    "MAX_SPLIT_CELLS",
    "MAX_SPLIT_WORK",
    "CountingStream",
    "HeldRecords",
    "PaddedBatch",
    "StallingDataset",
    "TracingDataset",
    "TransformedRange",
    "VariableLengths",
    "distributed_split",
    "pad_collate",
    "plot_distributed_split",
    "private_memory",
]


MAX_LENGTH = 2**24
"""The longest sequence :class:`VariableLengths` makes (64 MiB of float32)."""
MAX_PADDED = 2**28
"""The most elements :func:`pad_collate` pads a batch into (1 GiB of float32)."""
MAX_SPLIT_WORK = 2**22
"""The most indices :func:`distributed_split` orders: every rank's sampler orders (and pads)
``max(length, num_replicas)`` indices in each epoch."""
MAX_SPLIT_CELLS = 512
"""The most indices :func:`plot_distributed_split` draws (a cell each)."""
MAX_RECORDS = 2**24
"""The most records :class:`HeldRecords` holds (512 MiB of Python ints in a list)."""
SEED_MAX = 2**64 - 1
"""The largest seed ``torch.Generator.manual_seed`` takes."""


def _is_list(value: Any) -> bool:
    """A sequence that is not a str or bytes (whose items are characters)."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _worker_id() -> int:
    """The id of the DataLoader worker running this code, -1 in the main process."""
    info = get_worker_info()
    return -1 if info is None else info.id


def _check_index(index: Any, length: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int):
        msg = f"index must be an int, got {type(index).__name__}: {index!r}"
        raise TypeError(msg)
    if not 0 <= index < length:
        msg = f"index must be in range(0, {length}), got {index}"
        raise IndexError(msg)
    return index


class TracingDataset(Dataset[dict[str, int]]):
    """A map-style dataset whose items say which process loaded them.

    Item ``i`` is ``{"index": i, "tag": tag, "worker": w, "pid": os.getpid()}``: ``tag``
    is the dataset's ``tag`` attribute when the item was loaded, ``w`` the id of the
    DataLoader worker that loaded it (-1 in the main process). Every load also appends
    ``i`` to ``loaded``, the list of the copy of the dataset that ran it.

    Args:
        length: the number of items, an int from 0 to ``2**63 - 1`` (what ``len()`` returns).
        tag: an int copied into every item; set the attribute to change it.

    Raises:
        TypeError: ``length`` or ``tag`` is not an int.
        ValueError: ``length`` is negative or above ``2**63 - 1``.

    Example:
        >>> data = TracingDataset(3, tag=7)
        >>> item = data[2]
        >>> item["index"], item["tag"], item["worker"], data.loaded
        (2, 7, -1, [2])
    """

    def __init__(self, length: int, *, tag: int = 0) -> None:
        self.length = check_int("length", length, minimum=0, maximum=INT64_MAX)  # len()'s limit
        self.tag = check_int("tag", tag)
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, int]:
        """Item ``index``; an IndexError outside ``range(0, len(self))``."""
        index = _check_index(index, self.length)
        self.loaded.append(index)
        return {"index": index, "tag": self.tag, "worker": _worker_id(), "pid": os.getpid()}


class CountingStream(IterableDataset[int]):
    """An iterable dataset that yields ``0, 1, ..., stop - 1``.

    Each DataLoader worker iterates its own copy. With ``shard=False`` every copy
    yields the whole stream, as a naive ``__iter__`` does, so ``n`` workers deliver
    every value ``n`` times. With ``shard=True`` the copy in worker ``w`` of ``n``
    yields only the values ``v`` with ``v % n == w`` (``get_worker_info()``), so the
    workers share the stream out between them. In the main process (no worker)
    both yield everything.

    Args:
        stop: the end of the stream (excluded), an int >= 0.
        shard: whether to split the stream across workers.

    Raises:
        TypeError: ``stop`` is not an int or ``shard`` not a bool.
        ValueError: ``stop`` is negative.

    Example:
        >>> list(CountingStream(4, shard=True))  # main process: no worker to shard for
        [0, 1, 2, 3]
    """

    def __init__(self, stop: int, *, shard: bool = False) -> None:
        self.stop = check_int("stop", stop, minimum=0)
        check_type("shard", shard, bool, "a bool")
        self.shard = shard

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None or not self.shard:
            return iter(range(self.stop))
        return iter(range(info.id, self.stop, info.num_workers))


class VariableLengths(Dataset[tuple[torch.Tensor, int]]):
    """A map-style dataset of sequences of different lengths, with a label each.

    Item ``i`` is ``(torch.full((1 + i % max_length,), float(i)), i % 2)``: a float32
    sequence whose length cycles through ``1 ... max_length``, filled with ``i`` so
    that its origin shows once it is padded into a batch.

    Args:
        count: the number of items, an int from 0 to ``2**63 - 1`` (what ``len()`` returns).
        max_length: the longest sequence, an int from 1 to :data:`MAX_LENGTH`.

    Raises:
        TypeError: ``count`` or ``max_length`` is not an int.
        ValueError: ``count`` or ``max_length`` is out of range.

    Example:
        >>> data = VariableLengths(4, max_length=3)
        >>> [len(sequence) for sequence, _ in (data[i] for i in range(len(data)))]
        [1, 2, 3, 1]
    """

    def __init__(self, count: int, *, max_length: int = 3) -> None:
        self.count = check_int("count", count, minimum=0, maximum=INT64_MAX)  # len()'s limit
        self.max_length = check_int("max_length", max_length, minimum=1, maximum=MAX_LENGTH)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """Item ``index``; an IndexError outside ``range(0, len(self))``."""
        index = _check_index(index, self.count)
        return torch.full((1 + index % self.max_length,), float(index)), index % 2


class TransformedRange(Dataset[Any]):
    """A map-style dataset of the numbers ``0 ... length - 1``, passed through ``transform``.

    Item ``i`` is ``transform(i)``, or ``i`` while ``transform`` is None. The attribute
    ``transform`` is read at every load, as torchvision's datasets read theirs: set it
    to change what every later item is. Setting it checks it as ``__init__`` does.

    Args:
        length: the number of items, an int from 0 to ``2**63 - 1`` (what ``len()`` returns).
        transform: a callable of one argument, or None.

    Raises:
        TypeError: ``length`` is not an int or ``transform`` (given or set) is not callable
            with one argument.
        ValueError: ``length`` is out of range.

    Example:
        >>> data = TransformedRange(3)
        >>> data[2], TransformedRange(3, transform=str)[2]
        (2, '2')
    """

    def __init__(self, length: int, *, transform: Callable[[int], Any] | None = None) -> None:
        self.length = check_int("length", length, minimum=0, maximum=INT64_MAX)  # len()'s limit
        self.transform = transform

    @property
    def transform(self) -> Callable[[int], Any] | None:
        """The callable applied to every item loaded from now on, or None."""
        return self._transform

    @transform.setter
    def transform(self, transform: Callable[[int], Any] | None) -> None:
        if transform is not None:
            check_callable("transform", transform, arguments=1)
        self._transform = transform

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        """Item ``index``; an IndexError outside ``range(0, len(self))``."""
        index = _check_index(index, self.length)
        return index if self.transform is None else self.transform(index)


class StallingDataset(Dataset[int]):
    """A map-style dataset whose item ``stall_at`` waits until :meth:`release` is called.

    Item ``i`` is ``i``. Loading item ``stall_at`` blocks, in whichever process loads it
    (a DataLoader worker, or the main process), until :meth:`release` is called in any
    process that shares the dataset's event (the main process, for workers it started),
    as a worker stuck on a lock or a network read would. It never waits longer than
    ``seconds``: then it raises TimeoutError. The event is made in the ``spawn``
    context, which workers started by ``fork``, ``spawn`` and ``forkserver`` all accept
    (one made in the ``fork`` context cannot be handed to the other two).

    Args:
        length: the number of items, an int from 1 to ``2**63 - 1``.
        stall_at: the item that blocks, an int in ``range(0, length)``.
        seconds: the longest wait, a positive number of seconds (at most a year); no
            default, so that every caller states how long a load may block.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range.

    Example:
        >>> data = StallingDataset(3, stall_at=1, seconds=0.01)
        >>> data[0]
        0
        >>> data.release()
        >>> data[1]  # released: no wait
        1
    """

    def __init__(self, length: int, *, stall_at: int = 0, seconds: float) -> None:
        self.length = check_int("length", length, minimum=1, maximum=INT64_MAX)
        self.stall_at = check_int("stall_at", stall_at, minimum=0, maximum=self.length - 1)
        self.seconds = check_seconds("seconds", seconds)
        self._released = multiprocessing.get_context("spawn").Event()  # see the docstring

    def __len__(self) -> int:
        return self.length

    def release(self) -> None:
        """Let every load of item ``stall_at``, waiting or to come, return at once."""
        self._released.set()

    def __getitem__(self, index: int) -> int:
        """Item ``index``, after the wait for item ``stall_at``; an IndexError outside the range."""
        index = _check_index(index, self.length)
        if index == self.stall_at and not self._released.wait(self.seconds):
            msg = (
                f"StallingDataset: item {index} (stall_at) was not released within "
                f"seconds={self.seconds:g}"
            )
            raise TimeoutError(msg)
        return index


_ROLLUP = Path("/proc/self/smaps_rollup")


def private_memory() -> int:
    """The memory only this process maps, in bytes (its USS), from ``/proc/self/smaps_rollup``.

    The sum of its ``Private_Clean`` and ``Private_Dirty``: pages that no other process
    maps. A page a forked child still shares with its parent is not counted; once either
    writes to it, the writer gets its own copy, which is.

    Returns:
        The private memory of the calling process, in bytes.

    Raises:
        RuntimeError: the system has no ``/proc/self/smaps_rollup`` (it needs Linux 4.14
            or later).

    Example:
        >>> private_memory() > 0  # Linux
        True
    """
    if not sys.platform.startswith("linux") or not _ROLLUP.exists():
        msg = (
            "private_memory reads /proc/self/smaps_rollup, which needs Linux 4.14 or later; "
            f"this system ({sys.platform}) has none"
        )
        raise RuntimeError(msg)
    fields = dict(line.split(":", 1) for line in _ROLLUP.read_text().splitlines()[1:])
    kib = sum(int(fields[key].split()[0]) for key in ("Private_Clean", "Private_Dirty"))
    return kib * 1024


class HeldRecords(Dataset[dict[str, int]]):
    """``count`` records held as a Python list of ints or as one int64 tensor (Linux only).

    The records are the numbers ``2**40 + k`` for ``k`` in ``range(count)``: in a list,
    ``count`` distinct int objects of 32 bytes each (not the small ints Python caches).
    The dataset has ``blocks`` items; item ``i`` reads every ``blocks``-th record from
    record ``i`` on, as an epoch of shuffled samples reads records from all over the
    data; a list's records are read one at a time (no slice of the list is built, whose
    memory would count). Item ``i`` is ``{"worker": w, "total": t, "growth": g}``: ``w``
    the id of the DataLoader worker that loaded it (-1 in the main process), ``t`` the
    sum of the records it read, and ``g`` how many bytes the :func:`private_memory` of
    the process that loaded it grew since that process began its first load of this
    dataset (a forked worker takes its own starting point, even when the main process
    had loaded items before the fork).

    Args:
        count: the number of records, an int from 1 to :data:`MAX_RECORDS`.
        held: ``"list"`` (a Python list of ints) or ``"tensor"`` (an int64 tensor).
        blocks: the number of items, an int from 1 to ``count``.

    Raises:
        TypeError: ``count`` or ``blocks`` is not an int, or ``held`` not a str.
        ValueError: ``count`` or ``blocks`` is out of range, or ``held`` is neither choice.

    Example:
        >>> data = HeldRecords(6, held="tensor", blocks=2)
        >>> data[1]["total"] == 3 * 2**40 + 1 + 3 + 5
        True
    """

    def __init__(self, count: int, *, held: str, blocks: int = 8) -> None:
        self.count = check_int("count", count, minimum=1, maximum=MAX_RECORDS)
        self.held = check_choice("held", held, ("list", "tensor"))
        self.blocks = check_int("blocks", blocks, minimum=1, maximum=self.count)
        start = 2**40
        self.records: list[int] | torch.Tensor = (
            list(range(start, start + count))
            if held == "list"
            else torch.arange(start, start + count, dtype=torch.int64)
        )
        self._before: tuple[int, int] | None = None  # (pid, private memory) at its first load

    def __len__(self) -> int:
        return self.blocks

    def __getitem__(self, index: int) -> dict[str, int]:
        """Item ``index``; an IndexError outside ``range(0, len(self))``."""
        index = _check_index(index, self.blocks)
        pid = os.getpid()
        if self._before is None or self._before[0] != pid:  # a copy inherited by a fork
            self._before = (pid, private_memory())
        records = self.records
        if isinstance(records, torch.Tensor):
            total = int(records[index :: self.blocks].sum())  # a view: nothing copied
        else:
            total = sum(records[k] for k in range(index, self.count, self.blocks))
        return {
            "worker": _worker_id(),
            "total": total,
            "growth": private_memory() - self._before[1],
        }


class PaddedBatch(NamedTuple):
    """What :func:`pad_collate` returns."""

    sequences: torch.Tensor
    """``(batch, longest, *)``: the sequences, padded at the end to the longest."""
    lengths: torch.Tensor
    """``(batch,)`` int64: each sequence's length before padding."""
    labels: torch.Tensor
    """``(batch,)``: the labels, collated by ``default_collate``."""


def pad_collate(
    batch: Sequence[tuple[torch.Tensor, Any]], *, padding_value: float = 0.0
) -> PaddedBatch:
    """A ``collate_fn`` for ``(sequence, label)`` items of different lengths.

    The default ``collate_fn`` stacks the sequences and so refuses different lengths;
    this one pads them at the end with ``torch.nn.utils.rnn.pad_sequence`` and keeps
    the lengths (a model needs them to mask the padding). To choose the padding
    value, pass ``functools.partial(pad_collate, padding_value=...)`` as the
    ``collate_fn``: a partial of a module-level function can be pickled for workers,
    a lambda cannot.

    Args:
        batch: the items, each ``(sequence, label)`` with ``sequence`` a dense tensor of
            shape ``(length, *)``; every sequence has the same trailing shape ``*``,
            dtype and device (``pad_sequence`` would silently convert the others to the
            first one's dtype), and the padded batch holds at most :data:`MAX_PADDED`
            elements.
        padding_value: the value written after the end of the shorter sequences,
            which the sequences' dtype must hold exactly: an integer in its range for
            integer dtypes; for floating point (and complex) dtypes, a number that
            converting to the dtype leaves unchanged (``-1.0``, ``0.5`` or ``2**24``
            for float32, not ``0.1`` nor ``1e-50``, which would become other numbers),
            or an infinity or NaN where the dtype has one; 0, 1, False or True for
            bool. A bool is taken for bool sequences only.

    Returns:
        A :class:`PaddedBatch` of ``sequences`` ``(batch, longest, *)``, ``lengths``
        and ``labels``.

    Raises:
        ValueError: ``batch`` is empty or too large once padded, an item is not a pair,
            a sequence is not dense, the sequences' trailing shapes, dtypes or devices
            differ, or their dtype cannot hold ``padding_value``.
        TypeError: ``batch`` is not a sequence, a sequence is not a tensor of at least
            one dimension, or ``padding_value`` is not a number (or is a bool, and the
            sequences are not bool).

    Example:
        >>> out = pad_collate([(torch.ones(2), 0), (torch.ones(1), 1)], padding_value=-1.0)
        >>> out.sequences.tolist(), out.lengths.tolist(), out.labels.tolist()
        ([[1.0, 1.0], [1.0, -1.0]], [2, 1], [0, 1])
    """
    items: Any = batch  # checked one by one: a collate_fn gets what it gets
    if not _is_list(items):
        msg = (
            "batch must be a sequence of (sequence, label) pairs, "
            f"got {type(items).__name__}: {_shown(items)}"
        )
        raise TypeError(msg)
    if len(items) == 0:
        msg = "batch must hold at least one (sequence, label) item, got an empty batch"
        raise ValueError(msg)
    sequences: list[torch.Tensor] = []
    for position, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) != 2:
            msg = f"batch[{position}] must be a (sequence, label) pair, got {type(item).__name__}"
            raise ValueError(msg)
        sequence = check_tensor(f"batch[{position}][0]", item[0])
        if sequence.dim() == 0:
            msg = (
                f"batch[{position}][0] must be a tensor of shape (length, *), "
                f"got a 0-dim tensor {sequence!r}"
            )
            raise TypeError(msg)
        if sequences:
            first = sequences[0]
            if sequence.shape[1:] != first.shape[1:]:
                msg = (
                    f"batch[{position}][0] has trailing shape {tuple(sequence.shape[1:])}, but "
                    f"batch[0][0] has {tuple(first.shape[1:])}: only the first dimension "
                    "(the length) may differ"
                )
                raise ValueError(msg)
            if (sequence.dtype, sequence.device) != (first.dtype, first.device):
                msg = (
                    f"batch[{position}][0] is {sequence.dtype} on {sequence.device}, but "
                    f"batch[0][0] is {first.dtype} on {first.device}: pad_sequence would "
                    "convert it to the first one's; convert the sequences first"
                )
                raise ValueError(msg)
        sequences.append(sequence)
    longest = max(len(s) for s in sequences)
    check_count(
        "batch", len(sequences) * longest * math.prod(sequences[0].shape[1:]),
        limit=MAX_PADDED, what="elements once padded",
        work="pad_collate writes every sequence padded to the longest",
    )  # fmt: skip
    _check_fits("padding_value", padding_value, sequences[0].dtype)
    if float(padding_value) == padding_value or math.isnan(padding_value):
        # pad_sequence takes the value as a C double
        padded = pad_sequence(sequences, batch_first=True, padding_value=padding_value)
    else:  # an integer beyond 2**53: a double would round it (or overflow at 2**63 - 1)
        first = sequences[0]
        padded = first.new_full((len(sequences), longest, *first.shape[1:]), padding_value)
        for row, sequence in enumerate(sequences):
            padded[row, : len(sequence)] = sequence
    return PaddedBatch(
        sequences=padded,
        lengths=torch.tensor([len(s) for s in sequences], dtype=torch.int64),
        labels=default_collate([item[1] for item in batch]),
    )


def _check_fits(name: str, value: Any, dtype: torch.dtype) -> None:
    """Refuse a number that ``dtype`` cannot hold exactly (torch would round or fail),
    and a bool unless ``dtype`` is bool."""
    if isinstance(value, bool) and dtype != torch.bool:
        msg = (
            f"{name} must be a number, got bool: {value!r} (a bool only for bool "
            f"sequences; these are {dtype})"
        )
        raise TypeError(msg)
    if not isinstance(value, int | float):
        msg = f"{name} must be a number, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    why = ""
    if dtype == torch.bool:
        fits = value in (0, 1)
    elif dtype.is_floating_point or dtype.is_complex:
        why = _changed_by(value, dtype)
        fits = not why
    else:
        info = torch.iinfo(dtype)
        integral = isinstance(value, int) or value.is_integer()
        fits = integral and info.min <= value <= info.max
    if not fits:
        msg = f"{name} must fit {dtype}, the sequences' dtype, got {_shown(value)}{why}"
        raise ValueError(msg)


def _changed_by(value: float, dtype: torch.dtype) -> str:
    """How converting ``value`` (an int or a float) to the floating point or complex
    ``dtype`` would change it, or "" if it would not (NaN: if it stays NaN)."""
    largest = torch.finfo(dtype).max
    infinite = isinstance(value, float) and math.isinf(value)
    if not infinite and abs(value) > largest:  # exact for huge ints; False for NaN
        return f": beyond its largest finite number, {largest}"
    held = torch.tensor(float(value), dtype=dtype).item()
    if isinstance(value, float) and math.isnan(value):
        same = math.isnan(complex(held).real)
    else:
        same = held == value  # exact for ints: 2**53 + 1 is not 2.0**53
    return "" if same else f": it would become {_shown(held)}"


def distributed_split(
    length: int,
    *,
    num_replicas: int,
    epochs: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    set_epoch: bool = True,
) -> list[list[list[int]]]:
    """The indices each rank's ``DistributedSampler`` yields, epoch after epoch.

    Builds one ``torch.utils.data.DistributedSampler`` per rank, with ``num_replicas``
    and ``rank`` given (so no process group is needed), as the processes of a job
    would, and iterates each one ``epochs`` times, calling ``set_epoch(epoch)`` before
    each epoch when ``set_epoch`` is True.

    Args:
        length: the dataset's length, an int >= 1.
        num_replicas: the number of ranks, an int >= 1.
        epochs: how many epochs to iterate, an int >= 1. Every rank's sampler orders
            (and pads) ``max(length, num_replicas)`` indices in each epoch:
            ``epochs x num_replicas x max(length, num_replicas)`` is at most
            :data:`MAX_SPLIT_WORK`.
        shuffle: passed to the samplers.
        seed: passed to the samplers, an int >= 0 (every rank must use the same); the
            samplers seed a ``torch.Generator`` with ``seed + epoch``, so at most
            ``2**64 - epochs``.
        drop_last: passed to the samplers.
        set_epoch: call ``set_epoch(epoch)`` on every sampler before each epoch.

    Returns:
        ``split[epoch][rank]``: the indices rank ``rank`` yields in epoch ``epoch``.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: a number is out of range.

    Example:
        >>> distributed_split(5, num_replicas=2, epochs=1, shuffle=False)
        [[[0, 2, 4], [1, 3, 0]]]
    """
    check_int("length", length, minimum=1)
    check_int("num_replicas", num_replicas, minimum=1)
    check_int("epochs", epochs, minimum=1)
    work = epochs * num_replicas * max(length, num_replicas)
    if work > MAX_SPLIT_WORK:
        msg = (
            f"epochs x num_replicas x max(length, num_replicas) must be at most "
            f"{MAX_SPLIT_WORK} (every rank's sampler orders the indices in each epoch), "
            f"got {epochs} x {num_replicas} x {max(length, num_replicas)}"
        )
        raise ValueError(msg)
    check_int("seed", seed, minimum=0)
    if seed + epochs - 1 > SEED_MAX:
        msg = (
            f"seed must be <= {SEED_MAX - epochs + 1} (2**64 - epochs: the samplers seed "
            f"a torch.Generator with seed + epoch, at most 2**64 - 1), got {seed}"
        )
        raise ValueError(msg)
    for name, flag in (("shuffle", shuffle), ("drop_last", drop_last), ("set_epoch", set_epoch)):
        check_type(name, flag, bool, "a bool")
    indices = cast("Dataset[int]", range(length))  # the sampler only asks for len()
    samplers: list[DistributedSampler[int]] = [
        DistributedSampler(
            indices,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        for rank in range(num_replicas)
    ]
    split = []
    for epoch in range(epochs):
        if set_epoch:
            for sampler in samplers:
                sampler.set_epoch(epoch)
        split.append([list(sampler) for sampler in samplers])
    return split


def _check_split(split: Any) -> list[list[list[int]]]:
    """``split`` as :func:`distributed_split` returns it: epochs of ranks of indices."""
    spelled = "a list of epochs, each a list of ranks' indices"
    if not _is_list(split):
        msg = f"split must be {spelled}, got {type(split).__name__}: {_shown(split)}"
        raise TypeError(msg)
    checked = []
    for e, epoch in enumerate(split):
        if not _is_list(epoch):
            msg = f"split[{e}] must be a list of ranks' indices, got {type(epoch).__name__}"
            raise TypeError(msg)
        checked.append(
            [check_ints(f"split[{e}][{r}]", rank, minimum=0) for r, rank in enumerate(epoch)]
        )
    if not checked or not checked[0]:
        msg = "split must hold at least one epoch of at least one rank, got an empty split"
        raise ValueError(msg)
    cells = sum(len(rank) for epoch in checked for rank in epoch)
    check_count(
        "split", cells, limit=MAX_SPLIT_CELLS, what="cells",
        work="plot_distributed_split draws a cell per index",
    )  # fmt: skip
    return [[list(rank) for rank in epoch] for epoch in checked]


def plot_distributed_split(
    split: list[list[list[int]]], *, ax: Axes | None = None, title: str = ""
) -> Axes:
    """Draw :func:`distributed_split`'s result: one row per epoch, one block per rank.

    Each cell is an index, coloured by the rank that receives it; an index that occurs
    a second time in an epoch (the padding that evens out the ranks) is hatched.

    Args:
        split: ``split[epoch][rank]`` -> indices, as :func:`distributed_split` returns.
        ax: where to draw; a new figure when None.
        title: the axes' title.

    Returns:
        The axes drawn on.

    Raises:
        TypeError: ``split`` is not a list of lists of lists of ints, ``ax`` not matplotlib
            axes, or ``title`` not a str.
        ValueError: ``split`` is empty, has a negative index or more than
            :data:`MAX_SPLIT_CELLS` indices, or its epochs differ in their number of ranks.

    Example:
        >>> ax = plot_distributed_split(distributed_split(4, num_replicas=2, epochs=2))
        >>> len(ax.patches)  # 2 epochs x 4 indices
        8
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    split = _check_split(split)
    check_axes("ax", ax)
    check_type("title", title, str, "a str")
    ranks = len(split[0])
    if any(len(epoch) != ranks for epoch in split):
        msg = f"split must have the same number of ranks in every epoch, got {[len(e) for e in split]}"
        raise ValueError(msg)
    widest = [max(len(epoch[rank]) for epoch in split) for rank in range(ranks)]
    starts = [sum(widest[:rank]) + rank for rank in range(ranks)]  # a gap between ranks
    total = starts[-1] + widest[-1]
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.42 * total + 1.2), 0.45 * len(split) + 0.9))
    colours = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]
    for row, epoch in enumerate(split):
        seen: set[int] = set()
        y = len(split) - 1 - row
        for rank, indices in enumerate(epoch):
            for k, index in enumerate(indices):
                again = index in seen
                seen.add(index)
                ax.add_patch(
                    Rectangle(
                        (starts[rank] + k, y + 0.08),
                        0.94,
                        0.84,
                        facecolor=colours[rank % len(colours)],
                        alpha=0.45 if again else 0.85,
                        hatch="///" if again else None,
                        edgecolor="black",
                        linewidth=0.6,
                    )
                )
                ax.text(starts[rank] + k + 0.47, y + 0.5, str(index), ha="center", va="center")
    ax.set_xlim(-0.2, total + 0.2)
    ax.set_ylim(0, len(split))
    ax.set_yticks([len(split) - 1 - row + 0.5 for row in range(len(split))])
    ax.set_yticklabels([f"epoch {row}" for row in range(len(split))])
    ax.set_xticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    handles = [Patch(color=colours[r % len(colours)], label=f"rank {r}") for r in range(ranks)]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="repeated"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    if title:
        ax.set_title(title)
    return ax

"""What autograd keeps for backward: the tensors it saves, counted in bytes.

:func:`record_saved_tensors` watches every
tensor autograd saves while a block runs (through
``torch.autograd.graph.saved_tensors_hooks``) and adds up the memory they keep alive,
which is what activation checkpointing reduces.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from pytorch_memo._checks import _shown, check_iterable

__all__ = [
    "MAX_IGNORED",
    "SavedTensor",
    "SavedTensors",
    "record_saved_tensors",
]

_StorageKey = tuple[str, int]
MAX_IGNORED = 2**18
"""The most tensors ``ignore`` may hold (a model's parameters are far fewer)."""


@dataclass(frozen=True)
class SavedTensor:
    """One tensor autograd saved for backward, as :func:`record_saved_tensors` saw it.

    Attributes:
        shape: the saved tensor's shape.
        dtype: its dtype.
        device: its device.
        nbytes: the bytes of its whole storage (a saved view keeps its base alive), or
            ``None`` where there is no storage to measure (sparse, meta, or tensor
            subclasses without one).
        counted: whether its storage adds to :attr:`SavedTensors.nbytes`: ``False``
            when an earlier saved tensor that is still saved holds the same storage, or
            when the storage is one of ``ignore``.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    nbytes: int | None
    counted: bool


@dataclass
class SavedTensors:
    """What autograd saved while a :func:`record_saved_tensors` block ran.

    Attributes:
        records: one :class:`SavedTensor` per tensor saved, in the order saved.
        unpacked: how many times backward (or ``grad_fn._saved_*``) read a saved tensor
            back while the block ran.
    """

    records: list[SavedTensor] = field(default_factory=list)
    unpacked: int = 0

    @property
    def count(self) -> int:
        """How many tensors autograd saved (a tensor saved twice counts twice)."""
        return len(self.records)

    @property
    def nbytes(self) -> int:
        """The bytes of the distinct storages saved, without those of ``ignore``.

        Raises:
            ValueError: a saved tensor has no storage whose bytes can be counted.
        """
        total = 0
        for index, record in enumerate(self.records):
            if record.nbytes is None:
                msg = (
                    f"saved tensor {index} (shape {record.shape}, {record.dtype} on "
                    f"{record.device}) has no storage whose bytes can be counted: "
                    "expected strided tensors with memory (not sparse, not meta)"
                )
                raise ValueError(msg)
            if record.counted:
                total += record.nbytes
        return total

    def __repr__(self) -> str:
        try:
            size = f"nbytes={self.nbytes}"
        except ValueError:
            size = "nbytes=unknown"
        return f"SavedTensors(count={self.count}, {size}, unpacked={self.unpacked})"


def _storage(tensor: torch.Tensor) -> tuple[_StorageKey | None, int | None]:
    """The storage's identity (device, address) and its bytes; ``None`` where unknown."""
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return None, None
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # e.g. wrapper subclasses
        return None, None
    nbytes = storage.nbytes()
    address = storage.data_ptr()
    if address == 0:
        return (None, 0) if nbytes == 0 else (None, None)
    return (str(tensor.device), address), nbytes


class _Packed(NamedTuple):
    """What a pack hook of this package hands autograd for one saved tensor.

    Attributes:
        tensor: a detached alias of the saved tensor (the same memory and version
            counter).
        version: the tensor's ``_version`` when autograd saved it, or ``None`` for a
            tensor without a version counter (an inference tensor).
        position: the tensor's place among those saved in the block (0 for the
            first).
    """

    tensor: torch.Tensor
    version: int | None
    position: int


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter, or ``None`` when it has none (inference tensors)."""
    try:
        return tensor._version
    except RuntimeError:  # "Inference tensors do not track version counter."
        return None


def _pack(tensor: torch.Tensor, position: int) -> _Packed:
    """A detached alias of ``tensor`` with its version now, for :func:`_unpack`.

    The graph keeps a detached alias (the same memory, and the same version counter),
    as torch's documentation of saved tensor hooks advises: the tensor itself, when
    it is an output of the graph, would hold its own grad_fn, a cycle that Python's gc
    cannot collect (it passes through autograd's C++ nodes), so the tensor outlives the
    graph.
    """
    return _Packed(tensor.detach(), _version(tensor), position)


def _unpack(packed: _Packed, *, reader: str) -> torch.Tensor:
    """The saved tensor, refused as torch would refuse it if it changed in place.

    Torch skips its version-counter check for a tensor saved through
    ``saved_tensors_hooks`` (it cannot know what the pack hook returned), so an
    in-place change after the forward pass would give a silently wrong gradient; this
    makes torch's check with the version :func:`_pack` kept.

    Raises:
        RuntimeError: the tensor was modified in place since autograd saved it.
    """
    tensor, saved, position = packed
    current = _version(tensor)
    if saved is not None and current != saved:
        msg = (
            "one of the variables needed for gradient computation has been modified by "
            f"an inplace operation: saved tensor {position} of the {reader} block (shape "
            f"{tuple(tensor.shape)}, {tensor.dtype} on {tensor.device}) is at version "
            f"{current}; expected version {saved} instead. Torch skips this check for "
            f"tensors saved through saved_tensors_hooks, so {reader} makes it. Hint: "
            "look for an in-place operation (a method ending in _, an augmented "
            "assignment, an indexed assignment) on that tensor or a view of it after "
            "autograd saved it, or change a clone() of it instead."
        )
        raise RuntimeError(msg)
    return tensor


def _ignored_keys(ignore: object, *, reader: str = "record_saved_tensors") -> set[_StorageKey]:
    """The storages of ``ignore``, checked as the argument of ``reader``."""
    tensors = check_iterable(
        "ignore", ignore, spelled="an iterable of tensors (e.g. model.parameters())",
        limit=MAX_IGNORED, work=f"{reader} reads the storage of each",
    )  # fmt: skip
    keys = set()
    for index, tensor in enumerate(tensors):
        if not isinstance(tensor, torch.Tensor):
            msg = f"ignore[{index}] must be a torch.Tensor, got {type(tensor).__name__}: {_shown(tensor)}"
            raise TypeError(msg)
        key, _ = _storage(tensor)
        if key is not None:
            keys.add(key)
    return keys


@contextmanager
def record_saved_tensors(*, ignore: Iterable[torch.Tensor] = ()) -> Iterator[SavedTensors]:
    """Record every tensor autograd saves for backward while the block runs.

    A pack hook (``torch.autograd.graph.saved_tensors_hooks``) notes each saved
    tensor's shape and storage and hands autograd a detached alias of it (the same
    memory, so autograd keeps what it would have kept, without the reference cycle a
    saved output would make); the record holds no reference to it. Storages
    are told apart by device and address among the tensors still saved, so a storage
    saved twice counts once, and one freed by a ``backward`` in the block and
    allocated again counts again. Inside a non-reentrant checkpoint region the
    checkpoint's own hooks take over and this one sees nothing, which is the point
    of checkpointing. A Python number that an operation saves as a 0-dim tensor (the
    ``2`` of ``x * 2``) does not pass through the hooks and is not counted.

    Autograd skips its check that a saved tensor was not modified in place (its
    version counter) for tensors that go through such hooks; the unpack hook makes the
    check itself, so a saved tensor changed in place after autograd saved it raises
    torch's own error (one of the variables needed for gradient computation has been
    modified by an inplace operation) when backward reads it, as it would without
    the helper, instead of giving a wrong gradient.

    What the hooks do not see is not counted: tensors a custom
    ``torch.autograd.Function`` keeps as attributes of ``ctx`` (``ctx.x = x``) rather
    than through ``ctx.save_for_backward``, and everything saved while an inner
    ``saved_tensors_hooks`` pair is active in the block (torch applies only the
    innermost pair; a non-reentrant checkpoint region is one case). The in-place check
    of what such an inner pair saves is then up to that pair.

    Args:
        ignore: tensors whose storages not to count, typically ``model.parameters()``
            (a layer saves its weight, which exists anyway); at most
            :data:`MAX_IGNORED` of them.

    Yields:
        A :class:`SavedTensors` that fills while the block runs.

    Raises:
        TypeError: ``ignore`` is not an iterable of tensors.
        ValueError: ``ignore`` holds more than :data:`MAX_IGNORED` tensors (an endless
            iterator, say).
        RuntimeError: from backward (in the block or after it) or a read of
            ``grad_fn._saved_*``, when a tensor saved in the block was modified in
            place after autograd saved it.

    Example:
        >>> x = torch.ones(4, requires_grad=True)  # 16 bytes
        >>> with record_saved_tensors() as saved:
        ...     y = x * x  # saves x twice: one storage
        >>> saved.count, saved.nbytes
        (2, 16)
    """
    ignored = _ignored_keys(ignore)
    saved = SavedTensors()
    live: dict[_StorageKey, list[weakref.ref[torch.Tensor]]] = {}

    def pack(tensor: torch.Tensor) -> _Packed:
        packed = _pack(tensor, len(saved.records))
        key, nbytes = _storage(tensor)
        counted = nbytes is not None and key not in ignored
        if key is not None:
            holders = [ref for ref in live.get(key, []) if ref() is not None]
            counted = counted and not holders
            live[key] = [*holders, weakref.ref(packed.tensor)]
        saved.records.append(
            SavedTensor(tuple(tensor.shape), tensor.dtype, tensor.device, nbytes, counted)
        )
        return packed

    def unpack(packed: _Packed) -> torch.Tensor:
        tensor = _unpack(packed, reader="record_saved_tensors")
        saved.unpacked += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield saved

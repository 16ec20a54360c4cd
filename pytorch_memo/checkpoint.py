"""Checkpoints that survive a crash mid-save and refuse files they cannot trust.

:func:`save_checkpoint` writes a model's ``state_dict`` (plus, optionally, an optimizer,
a learning-rate scheduler, the random number generators' states and a dict of your
own) to a temporary file in the target's directory, flushes and fsyncs it, renames it
over the target with :func:`os.replace` and fsyncs the directory: at every moment the
target is either the previous checkpoint or the new one, never half of each.

:func:`load_checkpoint` reads with ``weights_only=True`` (nothing in the file can run
code), checks the zip records' CRC-32 so flipped bits are caught rather than loaded as
wrong weights (a file written without CRCs loads with an
:class:`UnverifiedCheckpointWarning`), checks that the checkpoint fits the objects it is
loaded into (keys, shapes, dtypes) *before* changing any of them, and turns torch's
errors into :class:`CheckpointError` subclasses whose message names the file and what
is wrong with it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import pickletools
import random
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import torch
from torch import nn

from pytorch_memo._checks import check_device, check_type
from pytorch_memo._files import atomic_file, check_file_path, open_regular
from pytorch_memo.archive import (
    LEGACY_HEAD,
    DamagedZipError,
    ZipView,
    legacy_format,
    record_start,
)

__all__ = [
    "FORMAT",
    "CheckpointError",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "UnsafeCheckpointError",
    "UnsupportedCheckpointError",
    "UnverifiedCheckpointWarning",
    "get_rng_state",
    "load_checkpoint",
    "save_checkpoint",
    "set_rng_state",
]

FORMAT = "pytorch_memo.checkpoint/1"
"""The tag every checkpoint carries under ``"format"``; :func:`load_checkpoint` checks it."""
_ZIP_MAGIC = b"PK\x03\x04"
_OPCODES = {ord(op.code): op.name for op in pickletools.opcodes}
_TORCH_PROTOCOL = 2  # what torch.save writes by default; torch.load warns about any other
_QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
_SHOWN_KEYS = 5
_MT_WORDS = 624  # the state of NumPy's legacy generator, MT19937: 624 32-bit words
_CHUNK = 1 << 20
_DEPTH = 8  # nesting allowed in an optimizer's per-parameter state
# torch.OutOfMemoryError (any device) is newer than torch.cuda.OutOfMemoryError.
_OUT_OF_MEMORY: type[Exception] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class CheckpointError(Exception):
    """A checkpoint file that cannot be loaded; ``path`` is the file, ``problem`` why."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"checkpoint {os.fspath(path)!r} {problem}")


class CorruptCheckpointError(CheckpointError):
    """The file is empty, truncated, corrupt, or not a torch checkpoint at all."""


class UnsafeCheckpointError(CheckpointError):
    """The file names Python objects that ``weights_only=True`` refuses to load, or (from
    :func:`save_checkpoint`) would hold an object that pickle cannot save."""


class CheckpointMismatchError(CheckpointError):
    """The file is readable but does not fit: missing entries, keys, shapes or dtypes."""


class UnsupportedCheckpointError(CheckpointError):
    """The file is in a form :func:`load_checkpoint` does not read, which is no sign
    of damage: torch's legacy format (``torch.save(...,
    _use_new_zipfile_serialization=False)`` or torch before 1.6; the tar format of
    torch before 0.4), or a well-formed pickle whose opcodes (protocols 0, 1, 4 and 5)
    ``torch.load(weights_only=True)`` cannot read in the torch installed."""


class UnverifiedCheckpointWarning(UserWarning):
    """A checkpoint was loaded without its bytes being verified: it has no CRC-32
    checksums (``torch.serialization.set_crc32_options(False)`` was on when it was
    written), so bytes changed on disk cannot be told from the data saved."""


# ----------------------------------------------------------------------------- RNG state


def get_rng_state() -> dict[str, Any]:
    """The states of torch's, Python's and NumPy's global random number generators.

    Every value is a tensor, a number, a string or a tuple of them, so the result loads
    with ``torch.load(..., weights_only=True)`` (NumPy's own ``get_state()`` tuple holds
    an ``ndarray``, which ``weights_only`` refuses; here its keys are an ``int64``
    tensor). CUDA generators are included only when CUDA is already initialised, so
    asking never starts CUDA.

    Returns:
        A dict with entries ``"torch"``, ``"python"``, ``"numpy"`` and maybe ``"cuda"``.

    Example:
        >>> state = get_rng_state()
        >>> first = torch.rand(2), random.random()
        >>> set_rng_state(state)
        >>> torch.equal(first[0], torch.rand(2)) and first[1] == random.random()
        True
    """
    legacy = np.random.get_state(legacy=True)  # noqa: NPY002 - the global generator
    name, keys, pos, has_gauss, cached = legacy
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "bit_generator": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore the generators from a dict made by :func:`get_rng_state`.

    A ``"cuda"`` entry is restored when CUDA is available (each GPU present that has a
    saved state; saved states of GPUs this machine lacks are ignored) and ignored
    otherwise (a CPU run of a checkpoint made on a GPU). Every entry is checked before
    any generator is set, and if a generator refuses its state all of them are put
    back: they change together or not at all.

    Args:
        state: the dict :func:`get_rng_state` returned (tensors may be on any device).

    Raises:
        TypeError: ``state`` is not a mapping, or an entry has the wrong type.
        ValueError: an entry is missing or out of range, or a generator refuses it.

    Example:
        >>> state = get_rng_state()
        >>> a = np.random.rand()
        >>> set_rng_state(state)
        >>> a == np.random.rand()
        True
    """
    check_type("state", state, Mapping, "a mapping from get_rng_state()")
    missing = [k for k in ("torch", "python", "numpy") if k not in state]
    if missing:
        msg = f"state must have entries torch, python and numpy; missing {', '.join(missing)}"
        raise ValueError(msg)
    torch_state = _generator_state("state['torch']", state["torch"])
    python_state = _python_state(state["python"])
    numpy_state = _numpy_state(state["numpy"])
    cuda_states = None
    if "cuda" in state and torch.cuda.is_available():
        saved = state["cuda"]
        if not isinstance(saved, list | tuple):
            msg = f"state['cuda'] must be a list of uint8 tensors, got {type(saved).__name__}"
            raise TypeError(msg)
        cuda_states = [_generator_state(f"state['cuda'][{i}]", s) for i, s in enumerate(saved)]
        cuda_states = cuda_states[: torch.cuda.device_count()]

    before = _rng_snapshot(cuda=cuda_states is not None)
    entry = "state['torch']"
    try:
        torch.set_rng_state(torch_state)
        entry = "state['python']"
        random.setstate(python_state)
        entry = "state['numpy']"
        np.random.set_state(numpy_state)  # noqa: NPY002 - the global generator
        for index, cuda_state in enumerate(cuda_states or []):
            entry = f"state['cuda'][{index}]"
            torch.cuda.set_rng_state(cuda_state, index)
    except Exception as error:
        _rng_restore(before)
        msg = f"{entry} was refused: {type(error).__name__}: {_first_line(error)}"
        raise ValueError(msg) from error


def _generator_state(name: str, value: Any) -> torch.Tensor:
    """A torch generator's state: a 1-D uint8 tensor holding data, copied to the CPU."""
    if not isinstance(value, torch.Tensor):
        msg = f"{name} must be a uint8 tensor (a generator's state), got {type(value).__name__}"
        raise TypeError(msg)
    if value.dtype != torch.uint8 or value.dim() != 1 or value.layout != torch.strided:
        msg = (
            f"{name} must be a 1-D uint8 tensor (a generator's state), got a "
            f"{value.dim()}-D {value.dtype} tensor with layout {value.layout}"
        )
        raise ValueError(msg)
    if value.device.type == "meta":
        msg = f"{name} is a meta tensor, which holds no data"
        raise ValueError(msg)
    return value.detach().cpu().contiguous()


def _python_state(value: Any) -> tuple[Any, ...]:
    """``random.setstate`` wants ``(version, tuple of 625 ints, gauss)`` (tuples, not lists)."""
    name = "state['python']"
    if not isinstance(value, list | tuple) or len(value) != 3:
        msg = (
            f"{name} must be random.getstate()'s (version, internal state, gauss_next) "
            f"triple, got {type(value).__name__}"
            + (f" of length {len(value)}" if isinstance(value, list | tuple) else "")
        )
        raise TypeError(msg)
    version, internal, gauss = value
    if not isinstance(internal, list | tuple):
        msg = f"{name}[1] must be a tuple of ints, got {type(internal).__name__}"
        raise TypeError(msg)
    if gauss is not None and (isinstance(gauss, bool) or not isinstance(gauss, float | int)):
        msg = f"{name}[2] (gauss_next) must be a float or None, got {type(gauss).__name__}"
        raise TypeError(msg)
    return (version, tuple(internal), gauss)


def _numpy_state(value: Any) -> tuple[Any, ...]:
    """The tuple ``np.random.set_state`` takes, from the dict :func:`get_rng_state` made."""
    name = "state['numpy']"
    if not isinstance(value, Mapping):
        msg = f"{name} must be a mapping, got {type(value).__name__}"
        raise TypeError(msg)
    needed = ["bit_generator", "keys", "pos", "has_gauss", "cached_gaussian"]
    missing = [k for k in needed if k not in value]
    if missing:
        msg = f"{name} must have entries {', '.join(needed)}; missing {', '.join(missing)}"
        raise ValueError(msg)
    if not isinstance(value["bit_generator"], str) or value["bit_generator"] != "MT19937":
        msg = f"{name}['bit_generator'] must be 'MT19937' (NumPy's global generator)"
        raise ValueError(msg)
    keys = value["keys"]
    integer = isinstance(keys, torch.Tensor) and not (
        keys.is_floating_point() or keys.is_complex() or keys.dtype == torch.bool
    )
    if not isinstance(keys, torch.Tensor) or not integer or keys.layout != torch.strided:
        msg = f"{name}['keys'] must be an integer tensor, got {_described(keys)}"
        raise TypeError(msg)
    if tuple(keys.shape) != (_MT_WORDS,) or keys.device.type == "meta":
        msg = f"{name}['keys'] must hold {_MT_WORDS} numbers, got shape {tuple(keys.shape)}"
        raise ValueError(msg)
    words = keys.detach().cpu().to(torch.int64)
    if bool((words < 0).any()) or bool((words >= 2**32).any()):
        msg = f"{name}['keys'] must hold 32-bit unsigned numbers (0 to 2**32 - 1)"
        raise ValueError(msg)
    pos, has_gauss, cached = value["pos"], value["has_gauss"], value["cached_gaussian"]
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= _MT_WORDS:
        msg = f"{name}['pos'] must be an int from 0 to {_MT_WORDS}, got {_described(pos)}"
        raise ValueError(msg)
    if not isinstance(has_gauss, int) or has_gauss not in (0, 1):
        msg = f"{name}['has_gauss'] must be 0 or 1, got {_described(has_gauss)}"
        raise ValueError(msg)
    if isinstance(cached, bool) or not isinstance(cached, float | int):
        msg = f"{name}['cached_gaussian'] must be a float, got {_described(cached)}"
        raise TypeError(msg)
    return ("MT19937", words.numpy().astype(np.uint32), pos, int(has_gauss), float(cached))


def _rng_snapshot(*, cuda: bool) -> tuple[Any, ...]:
    legacy = np.random.get_state(legacy=True)  # noqa: NPY002 - the global generator
    cuda_states = torch.cuda.get_rng_state_all() if cuda else None
    return torch.get_rng_state(), random.getstate(), legacy, cuda_states


def _rng_restore(snapshot: tuple[Any, ...]) -> None:
    torch_state, python_state, numpy_state, cuda_states = snapshot
    torch.set_rng_state(torch_state)
    random.setstate(python_state)
    np.random.set_state(numpy_state)  # noqa: NPY002 - the global generator
    if cuda_states is not None:
        torch.cuda.set_rng_state_all(cuda_states)


def _described(value: Any) -> str:
    """A short description of a value read from a file: never its (maybe huge) repr."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    return f"a {type(value).__name__}"


# -------------------------------------------------------------------------- argument checks


def _check_objects(model: Any, optimizer: Any, scheduler: Any) -> None:
    check_type("model", model, nn.Module, "a torch.nn.Module")
    optimizers = (torch.optim.Optimizer, type(None))
    check_type("optimizer", optimizer, optimizers, "a torch.optim.Optimizer or None")
    schedulers = (torch.optim.lr_scheduler.LRScheduler, type(None))
    check_type("scheduler", scheduler, schedulers, "an LRScheduler or None")


def _check_map_location(value: Any) -> torch.device:
    """The device ``map_location`` names, if this machine has it (checked before reading)."""
    device = check_device("map_location", value)  # "cpu:0" comes back as "cpu"
    assert device is not None  # not optional
    if device.type == "cpu":
        return device
    if device.type == "meta":
        msg = f"map_location {value!r}: meta tensors hold no data to load; use 'cpu'"
        raise ValueError(msg)
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if not callable(is_available) or not is_available():
        msg = (
            f"map_location {value!r} names a {device.type} device, which is not available "
            f"on this machine (torch.{device.type}.is_available() is not True); use 'cpu'"
        )
        raise RuntimeError(msg)
    count = getattr(backend, "device_count", None)
    if device.index is not None and callable(count) and device.index >= count():
        msg = (
            f"map_location {value!r} names {device.type} device {device.index}, but this "
            f"machine has {count()} {device.type} device(s)"
        )
        raise RuntimeError(msg)
    return device


# ------------------------------------------------------------------------------------ save


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    extra: Mapping[str, Any] | None = None,
    rng: bool = True,
) -> Path:
    """Write a checkpoint atomically: the old file stays intact until the new one is whole.

    The data go to a hidden temporary file ``.NAME.PID.XXXXXXXX.tmp`` next to ``path``
    (same directory, so the rename cannot cross file systems), which is flushed and
    fsynced, then renamed over ``path`` with :func:`os.replace`; the directory is
    fsynced so the rename itself survives a power cut. If anything raises, the temporary
    file is removed and ``path`` is untouched. A process killed mid-save (SIGKILL) leaves
    its temporary file behind, never a damaged ``path``; the next save to ``path``
    removes it (on POSIX: each writer holds a lock on its temporary file, and only files
    whose process has ended and whose lock is free are removed, so concurrent saves
    never remove each other's files).

    ``path`` must be a new name, a regular file, or a symbolic link: a link is replaced
    by the new file (as ``os.replace`` and ``mv`` do), and the file it pointed to keeps
    the previous checkpoint (``torch.save`` would write through the link instead). A
    directory, FIFO, device or socket is refused before anything is written. The new
    file keeps the permission bits of the file it replaces (of the file a link named),
    as ``torch.save`` writing over it would: a private ``0o600`` checkpoint stays
    private. A new one gets ``0o666`` less the umask.

    Before the rename the new file is checked to hold nothing that ``weights_only=True``
    would refuse, so every checkpoint written here can be read by :func:`load_checkpoint`.
    It is written with ``torch.save``'s defaults (the zip format, pickle protocol 2),
    and with CRC-32 checksums unless ``torch.serialization.set_crc32_options(False)``
    is on: :func:`load_checkpoint` then loads it with an
    :class:`UnverifiedCheckpointWarning`.

    Args:
        path: the checkpoint file to create or replace.
        model: whose ``state_dict()`` is saved.
        optimizer: saved when given (its state: momenta, step counts, ...).
        scheduler: saved when given.
        extra: your own entries (epoch, step, metrics): plain data only (numbers,
            strings, tensors, lists, tuples, dicts), as ``weights_only`` allows.
        rng: save the global generators' states (:func:`get_rng_state`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``path`` is empty or contains a NUL byte; ``model`` has tensors
            on the meta device (they hold no values to save).
        FileNotFoundError: the directory of ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        shutil.SpecialFileError: ``path`` is a FIFO, a device or a socket.
        OSError: writing failed (a full disk: errno ``ENOSPC``, a file size limit:
            ``EFBIG``, no permission: PermissionError, ...); the message names ``path``
            and the cause, and ``path`` is unchanged.
        UnsafeCheckpointError: ``extra`` holds objects ``weights_only`` refuses, or
            objects pickle cannot save (a local function, a generator); nothing is
            written.

    Example:
        >>> import tempfile
        >>> model = nn.Linear(2, 1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_checkpoint(f"{d}/ckpt.pt", model=model, extra={"step": 3})
        ...     load_checkpoint(path, model=model)
        {'step': 3}
    """
    target = check_file_path("path", path)
    _check_objects(model, optimizer, scheduler)
    if extra is not None:
        check_type("extra", extra, Mapping, "a mapping (or None)")
    check_type("rng", rng, bool, "a bool")

    payload: dict[str, Any] = {"format": FORMAT, "model": model.state_dict()}
    empty = [k for k, v in payload["model"].items() if isinstance(v, torch.Tensor) and v.is_meta]
    if empty:
        msg = (
            f"model must hold data to save, but its {_listed(empty)} are on the meta "
            "device (shapes without values); materialise it first (model.to_empty(...))"
        )
        raise ValueError(msg)
    if optimizer is not None:
        payload["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        payload["scheduler"] = scheduler.state_dict()
    if rng:
        payload["rng"] = get_rng_state()
    payload["extra"] = dict(extra) if extra is not None else {}
    _write_atomically(target, payload, shown=os.fspath(path))
    return target


def _write_atomically(target: Path, payload: dict[str, Any], *, shown: str) -> None:
    with atomic_file(target, shown=shown) as (file, temporary):
        try:
            torch.save(payload, file)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            # what pickle raises for an object it cannot save (a local function, a
            # generator, a lambda found under another name): the same refusal as below
            held = f"an object pickle cannot save ({error})"
            raise UnsafeCheckpointError(shown, _blamed(payload, held)) from error
        except RuntimeError as error:
            # A failed write (full disk, size limit) reaches torch's zip writer as an
            # OSError, which it reports as "[enforce fail ...] unexpected pos": raise the
            # OSError, which atomic_file names with the path.
            cause = _os_error_behind(error)
            if cause is None:
                raise
            raise OSError(cause.errno, cause.strerror) from error
        file.flush()
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(temporary)
        if unsafe:
            held = f"{', '.join(sorted(unsafe))}, which torch.load(weights_only=True) refuses"
            raise UnsafeCheckpointError(shown, _blamed(payload, held))


def _refused(payload: dict[str, Any]) -> list[str]:
    """The entries of ``payload`` (``model['name']``, ``optimizer``, ``extra['key']``,
    ...) that pickle cannot save or ``torch.load(weights_only=True)`` refuses: each is
    saved alone to memory (only once the whole payload was refused)."""
    import io

    entries: list[tuple[str, Any]] = []
    for part, value in payload.items():
        if part in ("model", "extra") and isinstance(value, Mapping):
            entries += [(f"{part}[{key!r}]", item) for key, item in value.items()]
        else:
            entries.append((part, value))
    refused = []
    for name, value in entries:
        if type(value) in (torch.Tensor, nn.Parameter) and not (
            value.is_nested or value.is_quantized or value.layout != torch.strided
        ):
            continue  # a plain dense tensor: always safe
        memory = io.BytesIO()
        try:
            torch.save(value, memory)
        except (pickle.PicklingError, AttributeError, TypeError):
            refused.append(name)
            continue
        memory.seek(0)
        if torch.serialization.get_unsafe_globals_in_checkpoint(memory):
            refused.append(name)
    return refused


def _blamed(payload: dict[str, Any], held: str) -> str:
    """Why the checkpoint was not written: which entries would hold what, and what to do."""
    refused = _refused(payload)
    shown = ", ".join(refused[:4]) + (f" and {len(refused) - 4} more" if len(refused) > 4 else "")
    advice = []
    if not refused or any(name.startswith("model[") for name in refused):
        advice.append(
            "a module's state must be plain tensors and data (a nested tensor is not: "
            "convert it, or register the buffer with persistent=False to leave it out; "
            "a get_extra_state must return plain data)"
        )
    if not refused or any(name.startswith("extra[") for name in refused):
        advice.append("keep extra to plain data")
    if any(name in ("optimizer", "scheduler") for name in refused):
        advice.append("an optimizer's and a scheduler's state must be plain data too")
    return f"was not written: {shown or 'it'} would hold {held}; {'; '.join(advice)}"


def _os_error_behind(error: BaseException) -> OSError | None:
    """The OSError (with an errno) that ``error`` was raised while handling, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = current.__cause__ or current.__context__
    return None


# ------------------------------------------------------------------------------------ load


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    rng: bool = True,
    map_location: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` into the given objects.

    ``map_location`` is checked first (a device this machine lacks is an error about
    ``map_location``, never about the file). The file is opened once (a FIFO or device
    is refused), checked (its zip records' CRC-32, read once more: about as long as the
    load itself), read with ``weights_only=True``, then checked against ``model`` (every
    key, every shape, every dtype, tensors where the model has tensors), ``optimizer``
    (parameter groups, their sizes and options, its per-parameter state and, for
    torch.optim's own optimizers, the shapes of that state's tensors: see
    *Optimizer state* below), ``scheduler`` (its entries) and the generator states.
    Only when everything fits is anything changed:
    the generators, optimizer and scheduler are set first and put back if a later step
    fails, and the model is loaded last. (A module whose own ``_load_from_state_dict``
    hook raises on a state that passed these checks may be left partly loaded; torch's
    modules do not.)

    **CRC-32.** A file written while ``torch.serialization.set_crc32_options(False)``
    was on has no checksums (every record's CRC-32 is 0; ``torch.load`` never checks
    them). It loads, with an :class:`UnverifiedCheckpointWarning`: bytes changed on disk
    cannot be detected then, so its values are not verified; its zip structure, pickle,
    entries, keys, shapes and dtypes are still checked.

    **Dtypes.** ``model.load_state_dict`` copies each tensor into the model's own with
    ``copy_``, which casts anything to anything (on CPU with torch 2.15, NaN becomes
    -9223372036854775808 in an int64 buffer, any nonzero float True in a bool one). Here a tensor whose dtype
    differs from the model's is accepted only if the cast keeps its kind or widens it,
    as :func:`torch.can_cast` allows (bool to integer to floating point to complex), and
    every value lies within the model dtype's range (no integer wraps around, no
    finite value becomes infinite); such a cast only rounds, as ``copy_`` does
    (float32 to float16 keeps about 3 significant digits; int64 beyond 2**24 to float32
    rounds). A cast to a lower kind (floating point to integer or bool, integer to
    bool, complex to real), a value out of range, or any change of a quantized dtype
    is a :class:`CheckpointMismatchError` naming the key and both dtypes, raised before
    anything changes.

    **Optimizer state** is matched to the optimizer's parameters by position, as
    ``Optimizer.load_state_dict`` does (the file's parameter ids, group by group, to the
    optimizer's parameters in order), never by name. For torch.optim's own optimizers
    (not subclasses) every state tensor whose shape follows from its parameter's
    (Adam's ``exp_avg``, SGD's ``momentum_buffer``, Adafactor's factored ``row_var``
    and ``col_var``...) must have that shape, or the load is refused before anything
    changes (torch would accept it and fail at the first ``optimizer.step()``, or not at
    all): an optimizer built over the parameters in another order, or over another
    model's. Parameters of the same shapes in another order cannot be told apart this
    way: when the file's model entry lists the model's parameters in another order than
    ``model.state_dict()`` (modules defined in another order since it was saved) and
    the saved optimizer has state, a :class:`UserWarning` says so, naming the first
    parameter that moved: an optimizer built from ``model.parameters()`` would get its
    state on the wrong parameters.

    **Formats.** Only the zip archive ``torch.save`` writes by default (pickle
    protocol 2 or 3) is read. Torch's legacy format
    (``_use_new_zipfile_serialization=False``) has no checksums, and ``torch.load``
    allocates its tensors at the sizes the file claims before reading them: it is an
    :class:`UnsupportedCheckpointError`, as is a pickle of protocol 0, 1, 4 or 5,
    which ``torch.load(weights_only=True)`` cannot read (torch 2.15's weights-only
    unpickler lacks their opcodes); the message names the protocol and the opcode.

    Args:
        path: the checkpoint file.
        model: receives the saved ``state_dict`` (strictly: same keys, same shapes,
            dtypes as above); it stays on its device, whatever ``map_location`` is, and
            must not be on the meta device (``model.to_empty(device=...)`` first).
        optimizer: receives the saved optimizer state (required in the file if given).
        scheduler: receives the saved scheduler state (required in the file if given).
        rng: restore the saved generator states (required in the file if True).
        map_location: where the file's tensors land while loading (``torch.load``'s
            argument): ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``... on a
            device this machine has; ``"cpu"`` loads any checkpoint on any machine.

    Returns:
        The ``extra`` dict that was saved.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``map_location`` names no device, or ``"meta"``, or a CPU other
            than ``"cpu"``/``"cpu:0"`` (the one rule for device strings of every helper:
            a CPU has index 0 or none); ``path`` is empty or contains a NUL byte;
            ``model`` has tensors of its ``state_dict`` on the meta device (nothing
            would be loaded into them). Raised before the file is read.
        RuntimeError: ``map_location`` names a device this machine does not have.
        FileNotFoundError: ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        shutil.SpecialFileError: ``path`` is a FIFO, a device or a socket.
        CorruptCheckpointError: the file is empty, truncated, corrupt (a damaged zip
            end record or index included) or not a torch checkpoint.
        UnsafeCheckpointError: the file names objects ``weights_only=True`` refuses.
        UnsupportedCheckpointError: the file is in torch's legacy format, or its
            pickle's protocol (0, 1, 4, 5) is one ``torch.load(weights_only=True)``
            cannot read.
        CheckpointMismatchError: entries are missing or malformed, or keys, shapes,
            dtypes, groups, options, optimizer state shapes or generator states do
            not fit.
        OSError: reading failed (an I/O error); the message names ``path``.

    Warns:
        UnverifiedCheckpointWarning: the file has no CRC-32 checksums (see above).
        UserWarning: an optimizer with saved state is loaded while the model's
            parameters are in another order than in the file (see above).

    Example:
        >>> import tempfile
        >>> _ = torch.manual_seed(0)
        >>> saved, fresh = nn.Linear(2, 1), nn.Linear(2, 1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = save_checkpoint(f"{d}/ckpt.pt", model=saved)
        ...     load_checkpoint(f"{d}/ckpt.pt", model=fresh)
        {}
        >>> torch.equal(saved.weight, fresh.weight)
        True
    """
    source = check_file_path("path", path)
    _check_objects(model, optimizer, scheduler)
    check_type("rng", rng, bool, "a bool")
    device = _check_map_location(map_location)
    shown = os.fspath(path)
    expected = model.state_dict()
    empty = [k for k, v in expected.items() if isinstance(v, torch.Tensor) and v.is_meta]
    if empty:
        msg = (
            f"model must hold tensors to load into, but its {_listed(empty)} "
            f"{'is' if len(empty) == 1 else 'are'} on the meta device (shapes without "
            "storage: torch would load nothing into them); "
            "materialise it first with model.to_empty(device=...)"
        )
        raise ValueError(msg)

    with open_regular(source, shown, expected="a checkpoint file") as file:
        archive = _check_archive(file, shown)
        if not archive.verified:
            message = (
                f"checkpoint {shown!r} has no CRC-32 checksums (it was written while "
                "torch.serialization.set_crc32_options(False) was on): bytes changed on "
                "disk cannot be detected, so its values are loaded unverified (its "
                "structure, keys, shapes and dtypes are still checked)"
            )
            warnings.warn(message, UnverifiedCheckpointWarning, stacklevel=2)
        checkpoint = _read(file, shown, device, archive.pickle)
    _check_entries(checkpoint, shown, optimizer=optimizer, scheduler=scheduler, rng=rng)
    _check_model(checkpoint["model"], model, expected, shown)
    reordered = None
    if optimizer is not None:
        reordered = _order_change(checkpoint["model"], expected, model)
        _check_optimizer(checkpoint["optimizer"], optimizer, model, shown, reordered=reordered)
    if scheduler is not None:
        _check_scheduler(checkpoint["scheduler"], scheduler, shown)
    extra = checkpoint["extra"]
    if not isinstance(extra, dict):
        problem = f"has an extra entry that is {_described(extra)}, not a dict"
        raise CheckpointMismatchError(shown, problem)
    if reordered is not None and checkpoint["optimizer"]["state"]:
        message = (
            f"checkpoint {shown!r}: {reordered}. An optimizer's state is matched to its "
            "parameters by position, not by name: if the optimizer's parameters are now "
            "in another order than when it was saved, their state (momenta, ...) is "
            "loaded onto the wrong ones. Build the optimizer over the parameters in the "
            "file's order, or define the modules in their old order"
        )
        warnings.warn(message, UserWarning, stacklevel=2)

    undo: list[Callable[[], None]] = []
    step = "rng"
    try:
        if rng:
            saved_rng = checkpoint["rng"]
            cuda = isinstance(saved_rng, Mapping) and "cuda" in saved_rng
            before = _rng_snapshot(cuda=cuda and torch.cuda.is_available())
            undo.append(lambda: _rng_restore(before))
            set_rng_state(saved_rng)
        if optimizer is not None:
            step = "optimizer"
            undo.append(_restorer(optimizer))
            optimizer.load_state_dict(checkpoint["optimizer"])
        if scheduler is not None:
            step = "scheduler"
            undo.append(_restorer(scheduler, scheduler.state_dict()))
            scheduler.load_state_dict(dict(checkpoint["scheduler"]))
        step = "model"
        model.load_state_dict(checkpoint["model"])
    except Exception as error:
        for restore in reversed(undo):
            restore()
        if step == "model":
            after = "the rest was put back, but the model may be partly loaded"
        else:
            after = "nothing was changed"
        problem = (
            f"does not fit: its {step} entry was refused "
            f"({type(error).__name__}: {_first_line(error)}); {after}"
        )
        raise CheckpointMismatchError(shown, problem) from error
    return extra


def _restorer(owner: Any, state: dict[str, Any] | None = None) -> Callable[[], None]:
    """Undo a ``load_state_dict`` of an optimizer or scheduler: it rebinds attributes
    (so the old ones are kept whole), and schedulers that hold others load their states
    into them (hence the scheduler's own ``state_dict`` loaded back)."""
    before = dict(owner.__dict__)
    saved = copy.deepcopy(state) if state is not None else None

    def restore() -> None:
        owner.__dict__.clear()
        owner.__dict__.update(before)
        if saved is not None:
            owner.load_state_dict(copy.deepcopy(saved))

    return restore


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


class _Archive(NamedTuple):
    """What :func:`_check_archive` learnt: whether the CRCs were checked (False for an
    archive written without them: every record's CRC-32 is 0, as torch.save writes with
    ``torch.serialization.set_crc32_options(False)``), and where the pickle's bytes lie
    (start and size)."""

    verified: bool
    pickle: tuple[int, int]


def _check_archive(file: IO[bytes], shown: str) -> _Archive:
    """Empty, not a zip, truncated (zip start, no end), damaged offsets, a record that is
    compressed, encrypted or damaged, or whose CRC fails. Reads every record once, in
    chunks."""
    size = os.fstat(file.fileno()).st_size
    if size == 0:
        raise CorruptCheckpointError(shown, "is empty (0 bytes)")
    view = ZipView(file, size)
    try:
        archive = zipfile.ZipFile(view)
    except DamagedZipError as error:
        raise _not_a_zip(file, shown, size, error) from error
    except OSError as error:
        raise _reading_failed(error, shown) from error
    except Exception as error:
        raise _not_a_zip(file, shown, size, error) from error
    with archive:
        infos = archive.infolist()
        verified = not infos or any(info.CRC != 0 for info in infos)
        for info in infos:
            _check_record(archive, info, shown, verified=verified)
    pickles = [info for info in infos if info.filename.endswith("/data.pkl")]
    if len(pickles) != 1:
        problem = (
            f"is a zip archive, but not one torch.save writes: it has {len(pickles)} "
            f"data.pkl records (torch.save writes one, beside the tensors' data)"
        )
        raise CorruptCheckpointError(shown, problem)
    try:  # the records were all read: no I/O error or damaged offset expected here
        start = record_start(view, pickles[0], size)
    except OSError as error:
        problem = f"is corrupt: record {pickles[0].filename!r} cannot be read ({error})"
        raise CorruptCheckpointError(shown, problem) from error
    return _Archive(verified, (start, pickles[0].compress_size))


def _not_a_zip(file: IO[bytes], shown: str, size: int, error: Exception) -> CheckpointError:
    """Why a file that zipfile cannot open is refused: a damaged zip, torch's legacy
    format (a pickle starting with its magic number, or a tar archive), or no checkpoint."""
    file.seek(0)
    head = file.read(LEGACY_HEAD)
    file.seek(0)
    if head.startswith(_ZIP_MAGIC):
        problem = (
            f"is truncated or damaged: it starts like torch.save's zip archive but "
            f"cannot be read as one ({size} bytes; {_first_line(error)})"
        )
        return CorruptCheckpointError(shown, problem)
    kind = legacy_format(head)
    if kind is not None:
        allocates = (  # read in torch/serialization.py: UntypedStorage(nbytes), then data
            ", and torch.load allocates each tensor at the size the file claims before reading it"
            if kind == "legacy format"
            else ""
        )
        problem = (
            f"is in torch's {kind}, not the zip archive torch.save writes by default "
            "(torch.save(..., _use_new_zipfile_serialization=False) writes the legacy "
            "one), and load_checkpoint does not read it: that format has no checksums of "
            f"its data, so damaged bytes would load as wrong values{allocates}. If you "
            "trust the file, load it with torch.load and save it again with "
            "save_checkpoint"
        )
        return UnsupportedCheckpointError(shown, problem)
    problem = (
        f"is not a torch checkpoint: it is neither a zip archive, the format torch.save "
        f"writes, nor torch's legacy format (first bytes {head[:4]!r})"
    )
    return CorruptCheckpointError(shown, problem)


def _check_record(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, shown: str, *, verified: bool
) -> None:
    name = info.filename
    if info.flag_bits & 0x1:
        problem = f"is damaged: record {name!r} is marked encrypted, which torch.save never does"
        raise CorruptCheckpointError(shown, problem)
    if info.compress_type != zipfile.ZIP_STORED:
        problem = (
            f"is not as torch.save writes it: record {name!r} is compressed (zip method "
            f"{info.compress_type}); torch.save stores every record uncompressed"
        )
        raise CorruptCheckpointError(shown, problem)
    try:
        with archive.open(info) as record:
            while record.read(_CHUNK):
                pass
    except zipfile.BadZipFile as error:
        if str(error).startswith("Bad CRC-32"):
            if not verified:  # raised at the record's end: all of it was read
                return
            problem = f"is corrupt: record {name!r} fails its CRC-32 check (its bytes changed)"
        else:
            problem = f"is corrupt: record {name!r} cannot be read ({_first_line(error)})"
        raise CorruptCheckpointError(shown, problem) from error
    except DamagedZipError as error:
        problem = f"is corrupt: record {name!r} cannot be read ({_first_line(error)})"
        raise CorruptCheckpointError(shown, problem) from error
    except OSError as error:
        raise _reading_failed(error, shown) from error
    except Exception as error:
        problem = f"is corrupt: record {name!r} cannot be read ({type(error).__name__}: {_first_line(error)})"
        raise CorruptCheckpointError(shown, problem) from error


def _pickle_bytes(file: IO[bytes], where: tuple[int, int], count: int = -1) -> bytes:
    """The first ``count`` bytes (all if -1) of the pickle record ``where`` points to."""
    start, size = where
    file.seek(start)
    return file.read(size if count < 0 else min(count, size))


def _protocol(head: bytes) -> int | None:
    """The protocol a pickle declares (its PROTO opcode); None for protocols 0 and 1."""
    return head[1] if len(head) > 1 and head[:1] == b"\x80" else None


def _protocol_problem(file: IO[bytes], where: tuple[int, int], error: BaseException) -> str | None:
    """Why torch's weights-only unpickler refused a pickle that is not damaged: the
    pickle is a well-formed stream of opcodes, one of which (FRAME, MEMOIZE... of
    protocols 4 and 5; the text opcodes of protocol 0...) that unpickler lacks. None if
    torch's error names no such opcode, or the bytes are no valid pickle (corrupt)."""
    found = re.search(r"Unsupported operand (\d+)", str(error))
    code = int(found.group(1)) if found is not None else -1
    if code not in _OPCODES:
        return None
    try:
        data = _pickle_bytes(file, where)
        used = max(op.proto for op, _, _ in pickletools.genops(data))  # raises on junk
    except Exception:  # noqa: BLE001 - unreadable or no pickle: the caller says corrupt
        return None
    protocol = _protocol(data)
    if protocol is None:  # protocols 0 and 1 have no PROTO opcode
        protocol = used
    how = f" (torch.save(..., pickle_protocol={protocol}))" if protocol != _TORCH_PROTOCOL else ""
    return (
        f"uses pickle protocol {protocol}{how}: its pickle is well-formed but holds the opcode {_OPCODES[code]} ({code}), which torch.load(weights_only=True) "
        f"cannot read in torch {torch.__version__} (its unpickler lacks that opcode). Save "
        "it again with torch.save's default protocol (save_checkpoint always uses it), "
        "loading it with torch.load(weights_only=False) only if you trust the file"
    )


def _read(file: IO[bytes], shown: str, device: torch.device, where: tuple[int, int]) -> Any:
    protocol = _protocol(_pickle_bytes(file, where, 2))
    file.seek(0)
    quiet: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if protocol != _TORCH_PROTOCOL:  # torch warns even about protocols it reads (3)
        quiet = warnings.catch_warnings()
    try:
        with quiet:
            if protocol != _TORCH_PROTOCOL:
                warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            return torch.load(file, map_location=device, weights_only=True)
    except pickle.UnpicklingError as error:
        names: list[str] = []
        if "Weights only load failed" in str(error):
            unsupported = _protocol_problem(file, where, error)
            if unsupported is not None:
                raise UnsupportedCheckpointError(shown, unsupported) from error
            try:
                file.seek(0)
                names = torch.serialization.get_unsafe_globals_in_checkpoint(file)
            except Exception:  # noqa: BLE001 - a pickle too damaged to list: corrupt
                names = []
        if not names:
            problem = f"is corrupt: its pickle cannot be read ({_unpickler_reason(error)})"
            raise CorruptCheckpointError(shown, problem) from error
        problem = (
            f"was refused by torch.load(weights_only=True): it would import or call "
            f"{', '.join(names)}, and a pickle can run code when loaded; load it with "
            "weights_only=False only if you trust where it came from"
        )
        raise UnsafeCheckpointError(shown, problem) from error
    except MemoryError as error:
        msg = f"loading checkpoint {shown!r} ran out of memory: {_first_line(error)}"
        raise MemoryError(msg) from error
    except _OUT_OF_MEMORY as error:  # a device's memory: not the file's fault
        msg = f"loading checkpoint {shown!r} onto {device} ran out of memory: {_first_line(error)}"
        raise type(error)(msg) from error
    except OSError as error:  # reading failed (an I/O error): the file may be fine
        raise _reading_failed(error, shown) from error
    except Exception as error:
        problem = f"could not be read: {type(error).__name__}: {_first_line(error)}"
        raise CorruptCheckpointError(shown, problem) from error


def _reading_failed(error: OSError, shown: str) -> OSError:
    """An I/O error while reading is not a damaged file: an OSError naming the file."""
    if error.errno is None:
        return OSError(f"reading checkpoint {shown!r} failed: {error}")
    return OSError(error.errno, f"reading checkpoint {shown!r} failed: {error.strerror}")


def _unpickler_reason(error: BaseException) -> str:
    """What torch's weights-only message says is wrong (after "WeightsUnpickler error:")."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        rest = [line.strip() for line in text.split(marker, 1)[1].splitlines() if line.strip()]
        if rest:
            return f"{marker} {rest[0]}"
    return _first_line(error)


def _keys_shown(mapping: Mapping[Any, Any]) -> str:
    keys = [_described(k) for _, k in zip(range(_SHOWN_KEYS), mapping, strict=False)]
    more = f" and {len(mapping) - _SHOWN_KEYS} more" if len(mapping) > _SHOWN_KEYS else ""
    return "[" + ", ".join(keys) + "]" + more


def _check_entries(
    checkpoint: Any,
    shown: str,
    *,
    optimizer: torch.optim.Optimizer | None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    rng: bool,
) -> None:
    tag = checkpoint.get("format") if isinstance(checkpoint, dict) else None
    if not isinstance(tag, str) or tag != FORMAT:
        kind = type(checkpoint).__name__
        keys = _keys_shown(checkpoint) if isinstance(checkpoint, dict) and checkpoint else ""
        problem = (
            f"is not a pytorch_memo checkpoint (no format entry {FORMAT!r}); it holds a "
            f"{kind}" + (f" with keys {keys}" if keys else "") + ". A bare state_dict "
            "loads with model.load_state_dict(torch.load(path))"
        )
        raise CheckpointMismatchError(shown, problem)
    wanted = ["model", "extra"]
    wanted += ["optimizer"] if optimizer is not None else []
    wanted += ["scheduler"] if scheduler is not None else []
    wanted += ["rng"] if rng else []
    missing = [name for name in wanted if name not in checkpoint]
    if missing:
        problem = f"lacks the entries {missing} (it has {_keys_shown(checkpoint)})"
        raise CheckpointMismatchError(shown, problem)


def _listed(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN_KEYS} more" if len(keys) > _SHOWN_KEYS else ""
    return ", ".join(keys[:_SHOWN_KEYS]) + more


def _check_model(saved: Any, model: nn.Module, expected: Mapping[str, Any], shown: str) -> None:
    """``expected`` is ``model.state_dict()``."""
    name = type(model).__name__
    if not isinstance(saved, Mapping):
        problem = f"has a model entry that is {_described(saved)}, not a state_dict"
        raise CheckpointMismatchError(shown, problem)
    odd = [_described(k) for k in saved if not isinstance(k, str)]
    if odd:
        problem = f"has a model entry whose keys are not all names: {_listed(odd)}"
        raise CheckpointMismatchError(shown, problem)
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    kinds: list[str] = []
    shapes: list[str] = []
    dtypes: list[str] = []
    for key, value in expected.items():
        if key not in saved or not isinstance(value, torch.Tensor):
            continue  # a module's extra state (get_extra_state) may be anything
        found = saved[key]
        if not isinstance(found, torch.Tensor):
            kinds.append(f"{key}: {_described(found)} in the file, a tensor in the model")
        elif found.layout != value.layout:
            kinds.append(f"{key}: layout {found.layout} in the file, {value.layout} in the model")
        elif found.is_meta and not value.is_meta:
            kinds.append(f"{key}: a meta tensor (no values) in the file")
        elif not nn.parameter.is_lazy(value) and found.shape != value.shape:
            shapes.append(
                f"{key}: {tuple(found.shape)} in the file, {tuple(value.shape)} in the model"
            )
        else:
            wrong = _dtype_problem(found, value.dtype)
            if wrong:
                dtypes.append(
                    f"{key}: {found.dtype} in the file, {value.dtype} in the model ({wrong})"
                )
    problems = []
    if missing:
        problems.append(f"missing keys {_listed(missing)}")
    if unexpected:
        problems.append(f"unexpected keys {_listed(unexpected)}")
    if kinds:
        problems.append(f"wrong kinds of values {_listed(kinds)}")
    if shapes:
        problems.append(f"shape mismatches {_listed(shapes)}")
    if dtypes:
        problems.append(f"dtype mismatches {_listed(dtypes)}")
    if problems:
        raise CheckpointMismatchError(shown, f"does not fit the {name}: {'; '.join(problems)}")


_KINDS = ("bool", "integer", "floating-point", "complex")


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return _KINDS[0]
    if dtype.is_complex:
        return _KINDS[3]
    return _KINDS[2] if dtype.is_floating_point else _KINDS[1]


def _bounds(dtype: torch.dtype) -> tuple[float, float]:
    """The smallest and largest finite values of ``dtype`` (of each part, if complex)."""
    if dtype == torch.bool:
        return 0, 1
    if dtype.is_floating_point or dtype.is_complex:
        largest = torch.finfo(dtype).max
        return -largest, largest
    info = torch.iinfo(dtype)
    return info.min, info.max


def _value_range(tensor: torch.Tensor) -> tuple[float, float] | None:
    """The smallest and largest finite values in ``tensor`` (of their real and imaginary
    parts), exactly for integers; None if it holds none. Read in pieces of ``_CHUNK``
    elements, so the copies it makes stay small."""
    flat = tensor.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    low: float | None = None
    high: float | None = None
    for start in range(0, flat.numel(), _CHUNK):
        part = flat[start : start + _CHUNK]
        values: list[float]
        if part.dtype == torch.uint64:  # no min/max kernels; above 2**63 is negative as int64
            signed = part.view(torch.int64)
            small, big = signed[signed >= 0], signed[signed < 0]
            values = [*_extremes(small), *_extremes(big, shift=2**64)]
        elif part.is_floating_point():
            wide = part.to(torch.float64)
            values = list(_extremes(wide[torch.isfinite(wide)]))
        else:
            values = list(_extremes(part.to(torch.int64)))
        if values:
            low = min(values) if low is None else min(low, *values)
            high = max(values) if high is None else max(high, *values)
    return None if low is None or high is None else (low, high)


def _extremes(part: torch.Tensor, shift: int = 0) -> tuple[float, ...]:
    if part.numel() == 0:
        return ()
    low, high = torch.aminmax(part)
    return low.item() + shift, high.item() + shift


def _dtype_problem(found: torch.Tensor, wanted: torch.dtype) -> str | None:
    """Why the file's tensor cannot be copied into a tensor of dtype ``wanted`` without
    changing its values' kind or overflowing; None when it can (see load_checkpoint)."""
    have = found.dtype
    if have == wanted:
        return None
    if found.is_quantized or wanted in _QUANTIZED:
        return "a quantized tensor must keep its dtype"
    if not torch.can_cast(have, wanted):
        return f"{_kind(have)} values would be cast to {_kind(wanted)} ones"
    try:
        low, high = _bounds(wanted)
        have_low, have_high = _bounds(have)
        if (low <= have_low and have_high <= high) or found.is_meta:
            return None  # every value of the file's dtype fits (or it holds none)
        extremes = _value_range(found)
    except (TypeError, RuntimeError, NotImplementedError):  # torch.bits8: no range, no min
        return "torch cannot tell whether its values fit"
    if extremes is None or (low <= extremes[0] and extremes[1] <= high):
        return None

    def shown(number: float) -> str:
        return str(number) if isinstance(number, int) else f"{number:g}"

    finite = "finite " if wanted.is_floating_point or wanted.is_complex else ""
    return (
        f"its values from {shown(extremes[0])} to {shown(extremes[1])} do not fit "
        f"{wanted}, whose {finite}range is {shown(low)} to {shown(high)}"
    )


def _tree_problem(value: Any) -> str | None:
    """Why ``value`` is not plain data that torch can copy in bounded time: tensors,
    numbers, strings and None in lists, tuples and dicts, at most ``_DEPTH`` deep, none
    reached twice (torch's optimizer copies a shared container once per reference: a
    pickle of shared lists can make that exponential)."""
    seen: set[int] = set()
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if item is None or isinstance(item, bool | int | float | str | torch.Tensor):
            continue
        if not isinstance(item, list | tuple | dict):
            return f"holds {_described(item)}"
        if depth >= _DEPTH:
            return f"is nested more than {_DEPTH} deep"
        if id(item) in seen:
            return "holds the same container twice"
        seen.add(id(item))
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children)
    return None


def _check_optimizer(
    saved: Any,
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    shown: str,
    *,
    reordered: str | None = None,
) -> None:
    """``reordered`` (from :func:`_order_change`) is added to a shape mismatch's message."""
    name = type(optimizer).__name__
    groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise CheckpointMismatchError(shown, "has an optimizer entry without param_groups")
    state = saved.get("state")
    if not isinstance(state, Mapping):
        problem = f"has an optimizer entry whose state is {_described(state)}, not a dict"
        raise CheckpointMismatchError(shown, problem)
    ids: list[int] = []
    for index, group in enumerate(groups):
        params = group.get("params")
        if not isinstance(params, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in params
        ):
            problem = f"has optimizer param_groups[{index}] without a list of parameter ids"
            raise CheckpointMismatchError(shown, problem)
        ids += params
    sizes = [len(g["params"]) for g in groups]
    wanted = [len(g["params"]) for g in optimizer.param_groups]
    if sizes != wanted:
        problem = (
            f"does not fit the {name}: parameters per group "
            f"{sizes} in the file, {wanted} in the optimizer"
        )
        raise CheckpointMismatchError(shown, problem)
    if len(set(ids)) != len(ids):
        raise CheckpointMismatchError(
            shown, "has optimizer param_groups that repeat a parameter id"
        )
    for index, (group, current) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        where = f"optimizer param_groups[{index}]"
        _check_kind_of_state(group, current, shown, where, f"the {name}'s", skip={"params"})
        for key in sorted(current.keys() & group.keys() - {"params", "param_names"}):
            wrong = _kind_problem(group[key], current[key])
            if wrong:
                raise CheckpointMismatchError(shown, f"does not fit: {where}[{key!r}] {wrong}")
    known = set(ids)
    for key, entry in state.items():
        if key not in known:
            problem = (
                f"has optimizer state for parameter id {_described(key)}, which no group lists"
            )
            raise CheckpointMismatchError(shown, problem)
        if not isinstance(entry, Mapping):
            problem = f"has optimizer state for parameter {key} that is not a dict"
            raise CheckpointMismatchError(shown, problem)
        wrong = _tree_problem(dict(entry))
        if wrong:
            problem = f"has optimizer state for parameter {key} that {wrong}"
            raise CheckpointMismatchError(shown, problem)
    _check_state_shapes(groups, state, optimizer, model, shown, reordered=reordered)


def _same_shape(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return shape


def _row_factor(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return (*shape[:-1], 1) if len(shape) > 1 else None


def _column_factor(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return (*shape[:-2], 1, shape[-1]) if len(shape) > 1 else None


def _unfactored(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return shape if len(shape) <= 1 else None


_Shape = Callable[[tuple[int, ...]], tuple[int, ...] | None]


def _state_shapes() -> dict[type[torch.optim.Optimizer], dict[str, _Shape]]:
    """The per-parameter state tensors of torch.optim's optimizers whose shape follows
    from their parameter's (None: a parameter of that shape has no such entry), as
    torch 2.8 to 2.15 create them. Other entries (``step``; ASGD's ``eta`` and ``mu``,
    NAdam's ``mu_product``: scalars; all of LBFGS's, kept for its first parameter over
    all of them flattened) and other optimizers (subclasses included) are not checked."""
    same = ("exp_avg", "exp_avg_sq")
    keys: dict[str, dict[str, _Shape]] = {
        "SGD": dict.fromkeys(["momentum_buffer"], _same_shape),
        "Adam": dict.fromkeys([*same, "max_exp_avg_sq"], _same_shape),
        "AdamW": dict.fromkeys([*same, "max_exp_avg_sq"], _same_shape),
        "NAdam": dict.fromkeys(same, _same_shape),
        "RAdam": dict.fromkeys(same, _same_shape),
        "SparseAdam": dict.fromkeys(same, _same_shape),
        "Adamax": dict.fromkeys(["exp_avg", "exp_inf"], _same_shape),
        "Adadelta": dict.fromkeys(["square_avg", "acc_delta"], _same_shape),
        "Adagrad": dict.fromkeys(["sum"], _same_shape),
        "ASGD": dict.fromkeys(["ax"], _same_shape),
        "RMSprop": dict.fromkeys(["square_avg", "momentum_buffer", "grad_avg"], _same_shape),
        "Rprop": dict.fromkeys(["prev", "step_size"], _same_shape),
        "Muon": dict.fromkeys(["momentum_buffer"], _same_shape),
        "Adafactor": {"row_var": _row_factor, "col_var": _column_factor, "variance": _unfactored},
    }
    found = {getattr(torch.optim, name, None): shapes for name, shapes in keys.items()}
    return {kind: shapes for kind, shapes in found.items() if isinstance(kind, type)}


_STATE_SHAPES = _state_shapes()


def _check_state_shapes(
    groups: list[Mapping[str, Any]],
    state: Mapping[Any, Any],
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    shown: str,
    *,
    reordered: str | None,
) -> None:
    """Refuse per-parameter state whose tensors cannot fit the parameter they attach to:
    saved ids are matched to the optimizer's parameters by position, group by group, as
    ``Optimizer.load_state_dict`` does. Only the entries :func:`_state_shapes` knows."""
    shapes = _STATE_SHAPES.get(type(optimizer))
    if not shapes:
        return
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    where: dict[int, tuple[int, int, torch.Tensor]] = {}
    for index, (group, current) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        for position, (key, param) in enumerate(
            zip(group["params"], current["params"], strict=True)
        ):
            where[key] = (index, position, param)
    kind = type(optimizer).__name__
    for key, entry in state.items():
        index, position, param = where[key]
        if nn.parameter.is_lazy(param):
            continue  # no shape yet: the model's entry gives it one
        here = tuple(param.shape)
        for entry_key, value in entry.items():
            expected = shapes.get(entry_key) if isinstance(entry_key, str) else None
            if expected is None or not isinstance(value, torch.Tensor):
                continue
            fits = expected(here)
            if fits == tuple(value.shape):
                continue
            named = f" ({names[id(param)]!r} in the model)" if id(param) in names else ""
            if fits == here:
                wanted = f"the parameter's shape {here} here"
            else:
                takes = f"one of shape {fits}" if fits is not None else "none"
                wanted = f"where a parameter of shape {here}, as here, takes {takes}"
            problem = (
                f"does not fit the {kind}: the state {entry_key!r} of optimizer "
                f"param_groups[{index}] parameter {position}{named} has shape "
                f"{tuple(value.shape)} in the file, {wanted}"
            )
            if reordered is not None:
                problem += f"; {reordered}, and optimizer state is matched by position"
            raise CheckpointMismatchError(shown, problem)


def _order_change(
    saved_model: Mapping[str, Any], expected: Mapping[str, Any], model: nn.Module
) -> str | None:
    """Where the file's model entry (checked by :func:`_check_model`: the same keys)
    lists the model's parameters in another order than ``expected``
    (``model.state_dict()``), or None. Modules defined in another order since the file
    was saved: an optimizer built from ``model.parameters()`` then holds them in another
    order too, and its saved state attaches to them by position."""
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    in_file = [k for k in saved_model if k in names]
    here = [k for k in expected if k in names]
    for position, (old, new) in enumerate(zip(in_file, here, strict=False)):
        if old != new:
            return (
                f"the model's parameters are in another order in the file than in the "
                f"{type(model).__name__}: parameter {position} is {old!r} in the file, "
                f"{new!r} here"
            )
    return None


def _check_kind_of_state(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    shown: str,
    where: str,
    whose: str,
    *,
    skip: Iterable[str] = (),
) -> None:
    """Refuse a state saved from another kind of optimizer or scheduler: it has public
    entries ``current`` lacks *and* lacks some that ``current`` has. (Entries only added
    or only dropped are what a newer or older torch version does; torch fills in missing
    ones, so that is accepted.)"""
    ignored = {"verbose", "param_names", *skip}  # verbose: dropped from torch's schedulers

    def public(keys: Iterable[Any]) -> set[str]:
        return {k for k in keys if isinstance(k, str) and not k.startswith("_")} - ignored

    odd = [_described(k) for k in saved if not isinstance(k, str)]
    if odd:
        problem = f"has {where} whose keys are not all names: {_listed(odd)}"
        raise CheckpointMismatchError(shown, problem)
    unexpected = sorted(public(saved) - public(current))
    missing = sorted(public(current) - public(saved))
    if unexpected and missing:
        problem = (
            f"does not fit: its {where} was saved from another kind of object than "
            f"{whose}: it has {_listed(unexpected)}, which {whose} lacks, and lacks "
            f"{_listed(missing)}"
        )
        raise CheckpointMismatchError(shown, problem)


def _kind_problem(saved: Any, current: Any) -> str | None:
    """Why ``saved`` cannot stand for ``current`` (driven by ``current``, so bounded)."""
    if saved is None or current is None:
        return None
    number = (int, float, torch.Tensor)
    if isinstance(current, bool):
        ok = isinstance(saved, bool)
    elif isinstance(current, number):
        ok = isinstance(saved, number) and not isinstance(saved, bool)
        if ok and isinstance(saved, torch.Tensor):
            ok = saved.numel() == 1 or (
                isinstance(current, torch.Tensor) and saved.shape == current.shape
            )
    elif isinstance(current, str):
        ok = isinstance(saved, str)
    elif isinstance(current, list | tuple):
        if not isinstance(saved, list | tuple):
            ok = False
        elif len(saved) != len(current):
            return f"has {len(saved)} entries in the file, {len(current)} here"
        else:
            for index, (s, c) in enumerate(zip(saved, current, strict=True)):
                problem = _kind_problem(s, c)
                if problem:
                    return f"[{index}] {problem}"
            return None
    elif isinstance(current, Mapping):
        if not isinstance(saved, Mapping):
            ok = False
        else:
            for key in current.keys() & saved.keys():
                problem = _kind_problem(saved[key], current[key])
                if problem:
                    return f"[{key!r}] {problem}"
            return None
    else:
        return None  # an object of the scheduler's own (a callable): torch handles it
    if ok:
        return None
    return f"is {_described(saved)} in the file, {_described(current)} here"


def _check_scheduler(
    saved: Any, scheduler: torch.optim.lr_scheduler.LRScheduler, shown: str
) -> None:
    name = type(scheduler).__name__
    if not isinstance(saved, Mapping):
        problem = f"has a scheduler entry that is {_described(saved)}, not a state_dict"
        raise CheckpointMismatchError(shown, problem)
    current = scheduler.state_dict()
    _check_kind_of_state(saved, current, shown, "scheduler state", f"the {name}")
    for key in sorted(current.keys() & saved.keys()):
        wrong = _kind_problem(saved[key], current[key])
        if wrong:
            raise CheckpointMismatchError(shown, f"does not fit the {name}: {key} {wrong}")

"""Checkpoints that survive a crash mid-save and refuse files they cannot trust.

:func:`save_checkpoint` writes a model's ``state_dict`` (plus, optionally, an optimizer,
a learning-rate scheduler, the random number generators' states and a dict of your
own) to a temporary file in the target's directory, flushes and fsyncs it, renames it
over the target with :func:`os.replace` and fsyncs the directory: at every moment the
target is either the previous checkpoint or the new one, never half of each.

:func:`load_checkpoint` reads with ``weights_only=True`` (nothing in the file can run
code), checks the zip records' CRC-32 so flipped bits are caught rather than loaded as
wrong weights, checks that the checkpoint fits the objects it is loaded into *before*
changing any of them, and turns torch's errors into :class:`CheckpointError` subclasses
whose message names the file and what is wrong with it.

Used by the chapter *Saving and loading*.
"""

from __future__ import annotations

import os
import pickle
import random
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pytorch_memo._checks import check_path, check_type
from pytorch_memo._files import atomic_file

__all__ = [
    "FORMAT",
    "CheckpointError",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "UnsafeCheckpointError",
    "get_rng_state",
    "load_checkpoint",
    "save_checkpoint",
    "set_rng_state",
]

FORMAT = "pytorch_memo.checkpoint/1"
"""The tag every checkpoint carries under ``"format"``; :func:`load_checkpoint` checks it."""
_ZIP_MAGIC = b"PK\x03\x04"
_SHOWN_KEYS = 5


class CheckpointError(Exception):
    """A checkpoint file that cannot be loaded; ``path`` is the file, ``problem`` why."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"checkpoint {os.fspath(path)!r} {problem}")


class CorruptCheckpointError(CheckpointError):
    """The file is empty, truncated, corrupt, or not a torch checkpoint at all."""


class UnsafeCheckpointError(CheckpointError):
    """The file names Python objects that ``weights_only=True`` refuses to load."""


class CheckpointMismatchError(CheckpointError):
    """The file is readable but does not fit: missing entries, keys or shapes."""


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

    A ``"cuda"`` entry is restored when CUDA is available and ignored otherwise (a CPU
    run of a checkpoint made on a GPU).

    Args:
        state: the dict :func:`get_rng_state` returned (tensors may be on any device).

    Raises:
        TypeError: ``state`` is not a mapping.
        ValueError: an entry is missing.

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
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(_as_tuples(state["python"]))
    legacy = state["numpy"]
    keys = legacy["keys"].cpu().numpy().astype(np.uint32)
    np.random.set_state(  # noqa: NPY002 - the global generator is the one to restore
        (
            legacy["bit_generator"],
            keys,
            legacy["pos"],
            legacy["has_gauss"],
            legacy["cached_gaussian"],
        )
    )
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _as_tuples(value: Any) -> Any:
    """``random.setstate`` wants tuples all the way down (a round trip keeps them)."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value


# -------------------------------------------------------------------------- argument checks


def _check_objects(model: Any, optimizer: Any, scheduler: Any) -> None:
    check_type("model", model, nn.Module, "a torch.nn.Module")
    optimizers = (torch.optim.Optimizer, type(None))
    check_type("optimizer", optimizer, optimizers, "a torch.optim.Optimizer or None")
    schedulers = (torch.optim.lr_scheduler.LRScheduler, type(None))
    check_type("scheduler", scheduler, schedulers, "an LRScheduler or None")


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

    The data go to a hidden temporary file next to ``path`` (same directory, so the
    rename cannot cross file systems), which is flushed and fsynced, then renamed over
    ``path`` with :func:`os.replace`; the directory is fsynced so the rename itself
    survives a power cut. If anything raises, the temporary file is removed and
    ``path`` is untouched. A process killed mid-save (SIGKILL) leaves its temporary
    file ``.NAME.XXXX.tmp`` behind, never a damaged ``path``.

    Before the rename the new file is checked to hold nothing that ``weights_only=True``
    would refuse, so every checkpoint written here can be read by :func:`load_checkpoint`.

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
        FileNotFoundError: the directory of ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        UnsafeCheckpointError: ``extra`` holds objects ``weights_only`` refuses (nothing
            is written).

    Example:
        >>> import tempfile
        >>> model = nn.Linear(2, 1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_checkpoint(f"{d}/ckpt.pt", model=model, extra={"step": 3})
        ...     load_checkpoint(path, model=model)
        {'step': 3}
    """
    target = check_path("path", path)
    _check_objects(model, optimizer, scheduler)
    if extra is not None:
        check_type("extra", extra, Mapping, "a mapping (or None)")
    check_type("rng", rng, bool, "a bool")
    if target.is_dir():
        msg = f"path {os.fspath(path)!r} is a directory; expected a checkpoint file name"
        raise IsADirectoryError(msg)
    directory = target.parent
    if not directory.is_dir():
        msg = f"path {os.fspath(path)!r}: its directory does not exist"
        raise FileNotFoundError(msg)

    payload: dict[str, Any] = {"format": FORMAT, "model": model.state_dict()}
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
    with atomic_file(target) as (file, temporary):
        torch.save(payload, file)
        file.flush()
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(temporary)
        if unsafe:
            problem = (
                f"was not written: it would hold {', '.join(unsafe)}, which "
                "torch.load(weights_only=True) refuses; keep extra to plain data"
            )
            raise UnsafeCheckpointError(shown, problem)


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

    The file is checked first (its zip records' CRC-32, read once more: about as long
    as the load itself), read with ``weights_only=True``, then checked against
    ``model`` (every key and shape), ``optimizer`` (parameter groups and their sizes),
    and the entries asked for; only when everything fits is anything changed.

    Args:
        path: the checkpoint file.
        model: receives the saved ``state_dict`` (strictly: same keys, same shapes);
            it stays on its device, whatever ``map_location`` is.
        optimizer: receives the saved optimizer state (required in the file if given).
        scheduler: receives the saved scheduler state (required in the file if given).
        rng: restore the saved generator states (required in the file if True).
        map_location: where the file's tensors land while loading (``torch.load``'s
            argument); ``"cpu"`` loads any checkpoint on any machine.

    Returns:
        The ``extra`` dict that was saved.

    Raises:
        TypeError: an argument has the wrong type.
        FileNotFoundError: ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        CorruptCheckpointError: the file is empty, truncated, corrupt or not a checkpoint.
        UnsafeCheckpointError: the file names objects ``weights_only=True`` refuses.
        CheckpointMismatchError: entries are missing, or keys/shapes/groups differ.

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
    source = check_path("path", path)
    _check_objects(model, optimizer, scheduler)
    check_type("rng", rng, bool, "a bool")
    shown = os.fspath(path)
    if source.is_dir():
        msg = f"path {shown!r} is a directory; expected a checkpoint file"
        raise IsADirectoryError(msg)
    if not source.exists():
        msg = f"path {shown!r} does not exist"
        raise FileNotFoundError(msg)

    _check_archive(source, shown)
    checkpoint = _read(source, shown, map_location)
    _check_entries(checkpoint, shown, optimizer=optimizer, scheduler=scheduler, rng=rng)
    _check_model(checkpoint["model"], model, shown)
    if optimizer is not None:
        _check_optimizer(checkpoint["optimizer"], optimizer, shown)

    model.load_state_dict(checkpoint["model"])
    try:
        if optimizer is not None:
            optimizer.load_state_dict(checkpoint["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(checkpoint["scheduler"])
    except (KeyError, ValueError, RuntimeError) as error:
        problem = f"does not fit: {type(error).__name__}: {_first_line(error)}"
        raise CheckpointMismatchError(shown, problem) from error
    if rng:
        set_rng_state(checkpoint["rng"])
    extra: dict[str, Any] = checkpoint.get("extra", {})
    return extra


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else "(no message)"


def _check_archive(source: Path, shown: str) -> None:
    """Empty, not a zip, truncated (zip start, no end), or a record whose CRC fails."""
    size = source.stat().st_size
    if size == 0:
        raise CorruptCheckpointError(shown, "is empty (0 bytes)")
    try:
        with zipfile.ZipFile(source) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        with source.open("rb") as file:
            head = file.read(len(_ZIP_MAGIC))
        if head == _ZIP_MAGIC:
            problem = (
                f"is truncated or damaged: it starts like torch.save's zip archive but "
                f"cannot be read as one ({size} bytes; {error})"
            )
        else:
            problem = (
                f"is not a torch checkpoint: it is not a zip archive, the format "
                f"torch.save writes (first bytes {head!r})"
            )
        raise CorruptCheckpointError(shown, problem) from error
    if bad is not None:
        problem = f"is corrupt: record {bad!r} fails its CRC-32 check (its bytes changed)"
        raise CorruptCheckpointError(shown, problem)


def _read(source: Path, shown: str, map_location: str | torch.device) -> Any:
    try:
        return torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if "Weights only load failed" not in str(error):
            problem = f"is corrupt: its pickle cannot be read ({_first_line(error)})"
            raise CorruptCheckpointError(shown, problem) from error
        try:
            names = ", ".join(torch.serialization.get_unsafe_globals_in_checkpoint(source))
        except Exception:  # noqa: BLE001 - the names only improve the message
            names = ""
        problem = (
            f"was refused by torch.load(weights_only=True): it would import or call "
            f"{names or 'objects outside the allowlist'}, and a pickle can run code when "
            "loaded; load it with weights_only=False only if you trust where it came from"
        )
        raise UnsafeCheckpointError(shown, problem) from error
    except Exception as error:
        problem = f"could not be read: {type(error).__name__}: {_first_line(error)}"
        raise CorruptCheckpointError(shown, problem) from error


def _check_entries(
    checkpoint: Any,
    shown: str,
    *,
    optimizer: torch.optim.Optimizer | None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    rng: bool,
) -> None:
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        kind = type(checkpoint).__name__
        keys = list(checkpoint)[:_SHOWN_KEYS] if isinstance(checkpoint, dict) else []
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
        problem = f"lacks the entries {missing} (it has {sorted(checkpoint)})"
        raise CheckpointMismatchError(shown, problem)


def _listed(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN_KEYS} more" if len(keys) > _SHOWN_KEYS else ""
    return ", ".join(keys[:_SHOWN_KEYS]) + more


def _check_model(saved: Mapping[str, Any], model: nn.Module, shown: str) -> None:
    expected = model.state_dict()
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    shapes = [
        f"{k}: {tuple(saved[k].shape)} in the file, {tuple(v.shape)} in the model"
        for k, v in expected.items()
        if k in saved and isinstance(v, torch.Tensor) and saved[k].shape != v.shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys {_listed(missing)}")
    if unexpected:
        problems.append(f"unexpected keys {_listed(unexpected)}")
    if shapes:
        problems.append(f"shape mismatches {_listed(shapes)}")
    if problems:
        name = type(model).__name__
        raise CheckpointMismatchError(shown, f"does not fit the {name}: {'; '.join(problems)}")


def _check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, shown: str) -> None:
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list):
        raise CheckpointMismatchError(shown, "has an optimizer entry without param_groups")
    sizes = [len(g["params"]) for g in groups]
    wanted = [len(g["params"]) for g in optimizer.param_groups]
    if sizes != wanted:
        problem = (
            f"does not fit the {type(optimizer).__name__}: parameters per group "
            f"{sizes} in the file, {wanted} in the optimizer"
        )
        raise CheckpointMismatchError(shown, problem)

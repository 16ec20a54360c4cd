"""Choosing a device at run time, so that one notebook runs on a laptop and on a GPU.

Nothing here asks the hardware
at import time: :func:`pick_device` looks when it is called.
"""

from __future__ import annotations

import torch

from pytorch_memo._checks import _shown, check_device

__all__ = ["pick_device"]


_SUPPORTED = ("cpu", "cuda", "mps", "meta")
"""The device types :func:`pick_device` takes."""


def _available(device: torch.device) -> tuple[bool, str]:
    """Whether ``device`` (of a type in ``_SUPPORTED``) can hold tensors here, and
    why not when it cannot."""
    kind = device.type
    if kind in ("cpu", "meta"):
        return True, ""
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = 0 if device.index is None else device.index
        if index < count:
            return True, ""
        return False, f"torch.cuda.device_count() is {count}"
    if torch.backends.mps.is_available():  # its index is 0 or None (pick_device checks)
        return True, ""
    return False, "torch.backends.mps.is_available() is False"


def pick_device(prefer: str | torch.device | None = None) -> torch.device:
    """The device to compute on: ``prefer`` if it is usable here, else the best one.

    With ``prefer=None`` the choice is ``cuda`` if CUDA is available, else ``mps``
    (Apple GPUs) if available, else ``cpu``. With ``prefer`` given, that device is
    returned if it exists on this machine, and an error says why otherwise; there is
    no silent fallback, because running a "GPU" job on the CPU is a bug to report.

    Args:
        prefer: a device or a device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``,
            ``"mps"``, ``"meta"``), or None for the automatic choice.

    Returns:
        A :class:`torch.device`.

    Raises:
        TypeError: ``prefer`` is neither a string, a device nor None.
        ValueError: ``prefer`` is not a device string torch understands, names a
            device type other than cpu, cuda, mps and meta (``"xpu"``, ``"xla"``...),
            or names a CPU or meta device other than the one there is: torch has one
            CPU device and one meta device (a tensor made on ``"cpu:1"`` or ``"meta:5"``
            lands on ``"cpu"`` or ``"meta"``), so ``"cpu:1"`` and ``"meta:5"`` are
            refused, and ``"cpu:0"`` and ``"meta:0"`` give ``device(type='cpu')`` and
            ``device(type='meta')``; or an MPS device other than ``"mps"`` or
            ``"mps:0"``, which no machine has (torch has at most one MPS device).
        RuntimeError: ``prefer`` names a cuda device this machine does not have (an
            index at or beyond ``torch.cuda.device_count()``), or ``"mps"`` where
            ``torch.backends.mps.is_available()`` is False.

    Example:
        >>> pick_device("cpu")
        device(type='cpu')
        >>> pick_device().type in ("cuda", "mps", "cpu")
        True
    """
    if prefer is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = check_device("prefer", prefer, optional=True)
    assert device is not None  # None was handled above
    if device.type not in _SUPPORTED:
        msg = (
            "prefer must be a cpu, cuda, mps or meta device (the types pick_device "
            f"supports), got {_shown(prefer)}"
        )
        raise ValueError(msg)
    if device.type == "meta":
        if device.index not in (None, 0):
            msg = (
                f"prefer must be 'meta' or 'meta:0' for the meta device, got "
                f"{_shown(prefer)}: torch has one meta device (a tensor made on 'meta:1' "
                "lands on 'meta')"
            )
            raise ValueError(msg)
        device = torch.device("meta")  # "meta:0" is the same device
    if device.type == "mps" and device.index not in (None, 0):
        msg = (
            f"prefer must be 'mps' or 'mps:0' for the MPS device, got {_shown(prefer)}: "
            "torch has at most one MPS device (torch.mps.device_count() is 0 or 1)"
        )
        raise ValueError(msg)
    ok, why = _available(device)
    if not ok:
        msg = f"prefer={prefer!r} is not available on this machine: {why}"
        raise RuntimeError(msg)
    return device

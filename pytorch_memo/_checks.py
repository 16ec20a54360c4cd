"""Argument checks shared by the helpers: each error names the argument, the value
it got and what was expected."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_type(name: str, value: Any, expected: type | tuple[type, ...], spelled: str) -> None:
    """Raise a TypeError naming ``name`` unless ``value`` is an instance of ``expected``.

    ``spelled`` says what was expected in the message: ``"a bool"``, ``"a torch.nn.Module"``.
    """
    if not isinstance(value, expected):
        msg = f"{name} must be {spelled}, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)


def check_tensor(name: str, value: Any) -> torch.Tensor:
    """Return ``value`` if it is a strided tensor; raise a TypeError/ValueError otherwise."""
    if not isinstance(value, torch.Tensor):
        msg = f"{name} must be a torch.Tensor, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if value.layout != torch.strided:
        msg = f"{name} must be a strided (dense) tensor, got layout {value.layout}"
        raise ValueError(msg)
    return value


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if minimum is not None and value < minimum:
        msg = f"{name} must be >= {minimum}, got {value}"
        raise ValueError(msg)
    return value


def check_seconds(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a positive int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of seconds, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if not value > 0:  # also refuses NaN
        msg = f"{name} must be > 0 seconds, got {value!r}"
        raise ValueError(msg)
    return float(value)


def check_path(name: str, value: Any) -> Path:
    """Return ``value`` as a Path if it is a str or os.PathLike (not bytes); raise TypeError."""
    if not isinstance(value, str | os.PathLike):
        msg = f"{name} must be a str or os.PathLike, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    return Path(value)

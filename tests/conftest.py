"""Shared pytest configuration.

Also loaded as a plugin (``-p tests.conftest``) by the nbval runs of `nox -s notebooks`
and `nox -s gpu`, where it skips the cells tagged ``gpu`` when CUDA is unavailable.
"""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import settings

# Timing deadlines flake on a loaded 2-core machine; CI also fixes the examples drawn.
settings.register_profile("memo", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("memo")

GPU_TAG = "gpu"


@functools.cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA device (asked once, lazily)."""
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's notebook-cell items carry their cell
        if cell is None:
            continue
        if GPU_TAG in cell.get("metadata", {}).get("tags", []) and not cuda_available():
            item.add_marker(pytest.mark.skip(reason="cell tagged 'gpu': CUDA is not available"))

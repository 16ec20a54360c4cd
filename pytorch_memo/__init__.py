"""Verified helpers for pytorch-memo, an executable PyTorch handbook.

Each module holds the helpers of one topic and names the chapter that uses them:

- :mod:`pytorch_memo.tensors`: :func:`~pytorch_memo.tensors.describe`, a table of
  what a tensor is made of (chapter *Creating tensors*).
- :mod:`pytorch_memo.layout`: storage and memory sharing (chapter *Views, strides and
  storage*).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytorch-memo")
except PackageNotFoundError:  # pragma: no cover - only when run from a bare checkout
    __version__ = "0+unknown"

__all__ = ["__version__"]

"""Verified helpers for pytorch-memo, an executable PyTorch handbook.

One module per topic (``pytorch_memo.layout``, ``pytorch_memo.checkpoint``, ...), each
with an explicit ``__all__``, typed and tested against plain torch. The book's API
reference lists every module with the chapters that use it, generated from the
chapters' own imports; modules whose names start with ``_`` are private.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytorch-memo")
except PackageNotFoundError:  # pragma: no cover - only when run from a bare checkout
    __version__ = "0+unknown"

__all__ = ["__version__"]

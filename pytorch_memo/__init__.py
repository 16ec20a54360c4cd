"""Verified helpers for pytorch-memo, an executable PyTorch handbook.

One module per topic, each naming the chapter that uses it:

- :mod:`pytorch_memo.tensors`: ``describe``, a table of what tensors are made of
  (*Creating tensors* and later chapters).
- :mod:`pytorch_memo.layout`: storage positions, shared memory and storage pictures
  (*Views, strides and storage*).
- :mod:`pytorch_memo.broadcasting`: shape alignment explained and drawn (*Broadcasting*).
- :mod:`pytorch_memo.indexing`: ``gather`` explained, convolution as a matrix product
  (*Indexing, reductions and einsum*).
- :mod:`pytorch_memo.autograd`: the autograd graph behind a tensor (*Detach, clone and
  the autograd graph*).
- :mod:`pytorch_memo.modules`: an inventory of a module's tensors (*Parameters, buffers
  and register_buffer*).
- :mod:`pytorch_memo.checkpoint` and :mod:`pytorch_memo.archive`: atomic, checked
  checkpoints and what a ``.pt`` file holds (*Saving and loading*).
- :mod:`pytorch_memo.profiling`: parameter counts, memory reports, peak memory, timing
  (*Profiling and memory*).
- :mod:`pytorch_memo.extensions`: C++ extension builds that recover from a killed build
  (*C++ extensions and custom operators*).
- :mod:`pytorch_memo.devices` and :mod:`pytorch_memo.distributed`: device choice and
  real multi-process runs on the CPU (*Devices and distributed basics*).
- :mod:`pytorch_memo.losses`: cross entropy by hand and sampling checks (*Losses and
  sampling*).
- :mod:`pytorch_memo.checks`: ``raises``, how chapters assert an error (every chapter).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytorch-memo")
except PackageNotFoundError:  # pragma: no cover - only when run from a bare checkout
    __version__ = "0+unknown"

__all__ = ["__version__"]

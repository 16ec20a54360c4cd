"""Every use of torch's private or unstable internals, in one place (private).

The helpers use torch's public API everywhere else. What only an internal can give is
read here, one function per internal, so that when torch changes one there is a single
place to fix and a single test to read: tests/test_compat.py tests each function on the
torch at hand and names, in its docstring, the torch versions it was checked on.

- :func:`cpu_allocations`: the profiler's event tree
  (``kineto_results.experimental_event_tree()``, ``torch._C._profiler._EventType``),
  the only record of CPU allocations in time order (``peak_memory``).
- :func:`cpp_extension_lock_is_a_file`: whether ``torch.utils.cpp_extension`` guards a
  build directory with ``FileBaton`` (torch < 2.14) or an OS lock (``FileLock``).
- :func:`cuda_toolkit_home`: ``torch.utils.cpp_extension.CUDA_HOME``, where torch found
  the CUDA toolkit (``build_extension`` with ``cuda_sources``).
- :func:`inductor_config`: ``torch._inductor.config``, whose ``deterministic`` option
  ``torch.use_deterministic_algorithms`` sets from torch 2.10 on
  (``deterministic_algorithms`` restores it).
- :func:`ddp_lazy_imports`: the private modules ``DistributedDataParallel`` imports on
  construction (``torch._dynamo``), preloaded once in ``run_workers``' fork server.

What public API can give is derived from it instead: a module's persistent buffers are
the buffers whose names ``state_dict()`` holds (not ``_non_persistent_buffers_set``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from typing import Any

import torch


class TorchInternalsChanged(RuntimeError):
    """A torch internal that a helper reads is missing or changed in this torch version."""

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(
            f"{what} relies on a torch internal that torch {torch.__version__} does not "
            f"have as expected ({type(error).__name__}: {error}); see pytorch_memo._compat"
        )


def _walk(nodes: Iterable[Any]) -> Iterator[Any]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


def cpu_allocations(prof: Any) -> list[tuple[int, int]]:
    """CPU allocations and frees of a finished ``torch.profiler.profile(profile_memory=True)``.

    Reads the profiler's event tree, whose ``Allocation`` events carry each allocation's
    start time and size (negative for a free). ``prof.key_averages()`` only has sums per
    operator, which cannot give a peak.

    Args:
        prof: the profiler, after its ``with`` block.

    Returns:
        ``(start_time_ns, bytes)`` of every CPU allocation (bytes > 0) and free
        (bytes < 0), in time order.

    Raises:
        RuntimeError: the profiler recorded nothing.
        TorchInternalsChanged: this torch lacks the event tree or its fields.
    """
    try:
        from torch._C._profiler import _EventType

        profiler = prof.profiler
        results = None if profiler is None else profiler.kineto_results
        if results is None:
            msg = "the profiler recorded no results"
            raise RuntimeError(msg)
        tree = results.experimental_event_tree()
        events = [
            (int(node.start_time_ns), int(node.extra_fields.alloc_size))
            for node in _walk(tree)
            if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu"
        ]
    except (ImportError, AttributeError, TypeError) as error:
        raise TorchInternalsChanged("peak_memory on the CPU", error) from error
    return sorted(events, key=lambda event: event[0])


def cpp_extension_lock_is_a_file() -> bool:
    """Whether this torch's C++ builds wait while the ``lock`` file merely exists.

    Up to torch 2.13, ``torch.utils.cpp_extension`` guarded a build directory with a
    ``FileBaton`` (the file's existence is the lock); torch 2.14 holds an OS lock on the
    file with ``FileLock`` (imported from the private ``torch.utils._filelock``).
    """
    from torch.utils import cpp_extension

    return hasattr(cpp_extension, "FileBaton") or not hasattr(cpp_extension, "FileLock")


def cuda_toolkit_home() -> str | None:
    """Where torch found the CUDA toolkit for C++/CUDA builds, or None.

    ``torch.utils.cpp_extension.CUDA_HOME``: a module constant, set at import from
    ``CUDA_HOME``/``CUDA_PATH``, ``nvcc`` on ``PATH`` or ``/usr/local/cuda``.
    """
    from torch.utils import cpp_extension

    home = getattr(cpp_extension, "CUDA_HOME", None)
    return None if home is None else str(home)


def ddp_lazy_imports() -> tuple[str, ...]:
    """The private modules ``DistributedDataParallel`` imports when constructed.

    Importing them once in the fork server of ``run_workers`` saves every rank the time;
    a module this torch does not have is left out.
    """
    return tuple(name for name in ("torch._dynamo",) if importlib.util.find_spec(name))


def inductor_config() -> Any:
    """``torch._inductor.config``, whose ``deterministic`` option
    ``torch.use_deterministic_algorithms`` sets from torch 2.10 on (importing it anyway),
    or None on older torch, which lacks the option (then nothing is imported). Typed
    Any: a config module, whose options are set as attributes."""
    if torch.__version__ < "2.10":  # TorchVersion compares as a version
        return None
    from torch._inductor import config  # only where torch imports it anyway

    return config

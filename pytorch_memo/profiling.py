"""Where time and memory go: parameter counts, memory reports, peak memory and timings.


Nothing here probes hardware at import: every function looks at the device it is given
when it is called, and a CUDA device on a machine without one gets an honest "not
available" answer (from :func:`memory_report`) or a clear error, never a crash inside
torch.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pytorch_memo._checks import (
    _shown,
    check_axes,
    check_callable,
    check_device,
    check_int,
    check_type,
)
from pytorch_memo._compat import cpu_allocations
from pytorch_memo.modules import _check_materialised

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_CALLS",
    "MemoryPeak",
    "MemoryReport",
    "ParameterCount",
    "Timing",
    "allocated_bytes",
    "count_parameters",
    "memory_report",
    "peak_memory",
    "plot_self_cpu_time",
    "self_cpu_times",
    "time_call",
]

MAX_CALLS = 100_000
"""The most calls :func:`time_call` makes, warm-up and measured each: the median of more
tells nothing new, and a slow ``fn`` would keep the caller waiting for hours."""


def _as_device(name: str, value: object) -> torch.device:
    """``value`` as a CPU or CUDA :class:`torch.device`; errors name ``name``."""
    device = check_device(name, value, types=("cpu", "cuda"))
    assert device is not None  # not optional
    return device


def _cuda_index(device: torch.device) -> int:
    """The index of a CUDA ``device`` (the current device when none was given)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def _require_cuda(device: torch.device) -> None:
    if not torch.cuda.is_available():
        msg = f"device {str(device)!r} needs CUDA, but torch.cuda.is_available() is False"
        raise RuntimeError(msg)


# -- parameters -------------------------------------------------------------------------


@dataclass(frozen=True)
class ParameterCount:
    """How many parameters (scalars, not tensors) a model has."""

    total: int
    trainable: int

    @property
    def frozen(self) -> int:
        """Parameters with ``requires_grad=False``."""
        return self.total - self.trainable

    def __str__(self) -> str:
        return f"{self.total:,} parameters ({self.trainable:,} trainable, {self.frozen:,} frozen)"


def count_parameters(model: nn.Module) -> ParameterCount:
    """Count the scalars in ``model.parameters()``, in total and trainable.

    Parameters shared between layers count once (``parameters()`` yields each once),
    and buffers (running means, ...) are not parameters. The counts are exact integers:
    divide by 1e6 for millions when printing, not before comparing.

    Args:
        model: any ``torch.nn.Module``.

    Returns:
        A :class:`ParameterCount`.

    Raises:
        TypeError: ``model`` is not a module.
        ValueError: ``model`` holds parameters not materialised yet (a lazy module
            such as ``nn.LazyLinear`` before its first forward call).

    Example:
        >>> from torch import nn
        >>> layer = nn.Linear(3, 2)  # 3*2 weights + 2 biases
        >>> _ = layer.bias.requires_grad_(False)
        >>> print(count_parameters(layer))
        8 parameters (6 trainable, 2 frozen)
    """
    check_type("model", model, nn.Module, "a torch.nn.Module")
    _check_materialised("model", model)
    params = list(model.parameters())
    return ParameterCount(
        total=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in params if p.requires_grad),
    )


# -- memory report ----------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryReport:
    """Memory figures of one device, in bytes; ``None`` where the platform has none.

    For CUDA: ``allocated``/``peak_allocated`` are the bytes held by tensors (now and
    at most since the last peak reset), ``reserved``/``peak_reserved`` what the caching
    allocator holds from the driver, ``total`` the device's memory. For the CPU:
    ``allocated`` is this process's resident memory, ``peak_allocated`` its high-water
    mark, ``total`` the machine's physical memory; ``reserved`` has no CPU meaning.
    """

    device: str
    available: bool
    reason: str = ""
    name: str | None = None
    allocated: int | None = None
    peak_allocated: int | None = None
    reserved: int | None = None
    peak_reserved: int | None = None
    total: int | None = None

    def __str__(self) -> str:
        if not self.available:
            return f"{self.device}: not available ({self.reason})"
        figures = [
            ("allocated", self.allocated),
            ("peak allocated", self.peak_allocated),
            ("reserved", self.reserved),
            ("peak reserved", self.peak_reserved),
            ("total", self.total),
        ]
        shown = ", ".join(f"{label} {_gib(v)}" for label, v in figures if v is not None)
        return f"{self.device} ({self.name}): {shown}"


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _cpu_report(device: torch.device) -> MemoryReport:
    rss: int | None = None
    try:
        with open("/proc/self/statm") as statm:  # Linux: size resident shared ... (pages)
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        rss = None
    peak: int | None = None
    try:
        import resource

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = maxrss if sys.platform == "darwin" else maxrss * 1024  # KiB on Linux
    except ImportError:  # Windows has no resource module
        peak = None
    if peak is not None and rss is not None:
        peak = max(peak, rss)  # the kernel updates ru_maxrss lazily
    total: int | None = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    return MemoryReport(
        device=str(device),
        available=True,
        name="process memory",
        allocated=rss,
        peak_allocated=peak,
        total=total,
    )


def memory_report(device: str | torch.device) -> MemoryReport:
    """Memory figures of ``device``: a CUDA GPU, or this process on the CPU.

    On a machine without CUDA, a CUDA device gets a report with ``available=False``
    and the reason, instead of the errors that ``torch.cuda.get_device_properties``
    raises there (``torch.cuda.memory_allocated`` would quietly say 0).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a ``torch.device``.

    Returns:
        A :class:`MemoryReport` (bytes; printing it shows GiB).

    Raises:
        TypeError: ``device`` is not a str or device.
        ValueError: ``device`` is neither CPU nor CUDA, or names a CPU other than
            ``"cpu"`` (``"cpu:1"``: a CPU has index 0 or none, as torch.load requires).

    Example:
        >>> import torch
        >>> memory_report("cpu").available
        True
        >>> torch.cuda.is_available() or not memory_report("cuda").available
        True
    """
    dev = _as_device("device", device)
    if dev.type == "cpu":
        return _cpu_report(dev)
    if not torch.cuda.is_available():
        return MemoryReport(
            device=str(dev), available=False, reason="torch.cuda.is_available() is False"
        )
    index = _cuda_index(dev)
    if index >= torch.cuda.device_count():
        reason = f"this machine has {torch.cuda.device_count()} CUDA device(s)"
        return MemoryReport(device=str(dev), available=False, reason=reason)
    props = torch.cuda.get_device_properties(index)
    return MemoryReport(
        device=f"cuda:{index}",
        available=True,
        name=props.name,
        allocated=torch.cuda.memory_allocated(index),
        peak_allocated=torch.cuda.max_memory_allocated(index),
        reserved=torch.cuda.memory_reserved(index),
        peak_reserved=torch.cuda.max_memory_reserved(index),
        total=props.total_memory,
    )


# -- peak memory of a call --------------------------------------------------------------


@dataclass(frozen=True)
class MemoryPeak:
    """Tensor memory a call needed, in bytes, counted from where it started."""

    device: str
    peak: int
    retained: int

    def __str__(self) -> str:
        return f"{self.device}: peak {self.peak:,} bytes, retained {self.retained:,} bytes"


def _cuda_allocations() -> int | None:
    """How many CUDA allocations this process has made on the current device (None where
    CUDA is not initialized: then ``fn`` made none)."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return None
    return int(torch.cuda.memory_stats().get("allocation.all.allocated", 0))


def _cuda_work_pending() -> bool:
    """Whether the current CUDA stream still has work queued (False where CUDA is not
    initialized: then nothing was queued)."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return False
    return not torch.cuda.current_stream().query()


def _cpu_peak(fn: Callable[[], object]) -> MemoryPeak:
    from torch.profiler import ProfilerActivity, profile

    cuda_before = _cuda_allocations()
    # acc_events: torch 2.10 and 2.11 warn once per process without it ("Profiler clears
    # events at the end of each cycle"); one cycle here, so accumulating changes nothing.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        result = fn()  # kept alive until the profile ends: it counts as retained
    del result
    cuda_after = _cuda_allocations()
    if cuda_after is not None and cuda_after != (cuda_before or 0):
        warnings.warn(
            f"fn allocated CUDA memory ({cuda_after - (cuda_before or 0)} allocations), "
            "which peak_memory on the CPU does not count: pass device='cuda' to measure it",
            UserWarning,
            stacklevel=3,
        )
    level = peak = 0
    for _, size in cpu_allocations(prof):
        level += size
        peak = max(peak, level)
    return MemoryPeak(device="cpu", peak=peak, retained=level)


def allocated_bytes(prof: Any) -> int:
    """The bytes a finished CPU memory profile allocated, frees not subtracted.

    Unlike the rows of ``prof.key_averages()``, which subtract what an operator freed
    while it ran, this counts every CPU allocation the profiler recorded, the
    temporaries an operator frees before it returns included.

    Args:
        prof: a ``torch.profiler.profile(profile_memory=True)``, after its ``with`` block.

    Returns:
        The sum of the sizes of its CPU allocations, in bytes.

    Raises:
        TypeError: ``prof`` is not a ``torch.profiler.profile``.
        ValueError: ``prof`` was run without ``profile_memory=True`` (it recorded no
            allocations).
        RuntimeError: the profiler recorded nothing (it has not run).

    Example:
        >>> from torch.profiler import ProfilerActivity, profile
        >>> with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ...     _ = torch.ones(1000)
        >>> allocated_bytes(prof) >= 4000
        True
    """
    from torch.profiler import profile

    if not isinstance(prof, profile):
        msg = (
            "prof must be a torch.profiler.profile run with profile_memory=True, "
            f"got {type(prof).__name__}"
        )
        raise TypeError(msg)
    if not getattr(prof, "profile_memory", False):
        msg = "prof must be run with profile_memory=True, got profile_memory=False"
        raise ValueError(msg)
    return sum(size for _, size in cpu_allocations(prof) if size > 0)


def _cuda_peak(fn: Callable[[], object], device: torch.device) -> MemoryPeak:
    _require_cuda(device)
    index = _cuda_index(device)
    torch.cuda.synchronize(index)
    torch.cuda.reset_peak_memory_stats(index)
    start = torch.cuda.memory_allocated(index)
    result = fn()
    torch.cuda.synchronize(index)
    retained = torch.cuda.memory_allocated(index) - start
    peak = torch.cuda.max_memory_allocated(index) - start
    del result
    return MemoryPeak(device=f"cuda:{index}", peak=peak, retained=retained)


def peak_memory(fn: Callable[[], object], *, device: str | torch.device = "cpu") -> MemoryPeak:
    """Measure the most tensor memory that ``fn()`` held at once, above where it started.

    On the CPU, torch's allocations bypass Python's allocator (so ``tracemalloc`` does
    not see them); this replays the allocation and free records of
    ``torch.profiler.profile(profile_memory=True)`` in time order. On CUDA it resets the
    peak statistics and reads ``torch.cuda.max_memory_allocated`` (which counts every
    allocation on that device, also other threads').

    ``retained`` is what was still allocated when ``fn`` returned, its return value
    included. Frees of tensors made before the call are not seen on the CPU. The device
    is not inferred from what ``fn`` does: on the CPU (the default) CUDA allocations are
    not counted, and a warning says so when ``fn`` made some.

    Args:
        fn: a callable taking no arguments (wrap arguments with a lambda).
        device: where to count: ``"cpu"`` or a CUDA device.

    Returns:
        A :class:`MemoryPeak` in bytes.

    Raises:
        TypeError: ``fn`` is not callable without arguments, or ``device`` is not a str
            or device.
        ValueError: ``device`` is neither CPU nor CUDA, or names a CPU other than
            ``"cpu"`` (``"cpu:1"``: a CPU has index 0 or none, as torch.load requires).
        RuntimeError: ``device`` is CUDA on a machine without it.

    Warns:
        UserWarning: on the CPU, ``fn`` allocated CUDA memory (not counted).

    Example:
        >>> import torch
        >>> def two_then_one():
        ...     a, b = torch.empty(1000), torch.empty(1000)  # 8,000 bytes at once
        ...     del a, b
        ...     return torch.empty(500)  # 2,000 bytes kept
        >>> print(peak_memory(two_then_one))
        cpu: peak 8,000 bytes, retained 2,000 bytes
    """
    check_callable("fn", fn, no_arguments=True)
    dev = _as_device("device", device)
    if dev.type == "cuda":
        return _cuda_peak(fn, dev)
    return _cpu_peak(fn)


# -- timing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls: the median and every measurement."""

    median: float
    times: tuple[float, ...]
    warmup: int
    device: str

    @property
    def repeats(self) -> int:
        """How many calls were measured (warm-up calls excluded)."""
        return len(self.times)

    @property
    def best(self) -> float:
        """The fastest call."""
        return min(self.times)

    def __str__(self) -> str:
        return (
            f"median {self.median * 1e3:.3f} ms over {self.repeats} calls "
            f"(best {self.best * 1e3:.3f} ms, {self.warmup} warm-up) on {self.device}"
        )


def time_call(
    fn: Callable[[], object],
    *,
    repeats: int = 10,
    warmup: int = 1,
    device: str | torch.device = "cpu",
) -> Timing:
    """Time ``fn()`` ``repeats`` times after ``warmup`` untimed calls; report the median.

    CUDA kernels run asynchronously: a call returns once its work is queued. On a CUDA
    device every measured call is bracketed by ``torch.cuda.synchronize`` so that the
    time includes the work itself, not only its launch. The device is not inferred from
    what ``fn`` does: on the CPU (the default) the calls are not synchronized, and a
    warning says so when CUDA work was still running on the current stream after them
    (their times are then those of the launches). Where CUDA is initialized, CUDA work
    queued before the call is waited for first, so that the warning is about what ``fn``
    queued; work of ``fn`` that finished before the calls ended goes unwarned. The median resists the odd slow call (another process,
    a page fault) better than the mean.

    Args:
        fn: a callable taking no arguments.
        repeats: measured calls, at least 1 and at most :data:`MAX_CALLS`.
        warmup: untimed calls first (caches, lazy initialisation), at least 0 and at
            most :data:`MAX_CALLS`.
        device: ``"cpu"``, or the CUDA device to synchronize.

    Returns:
        A :class:`Timing` (seconds).

    Raises:
        TypeError: ``fn`` is not callable without arguments, or a count is not an int.
        ValueError: ``repeats < 1``, ``warmup < 0``, an unknown device, or a CPU
            other than ``"cpu"`` (``"cpu:1"``).
        RuntimeError: ``device`` is CUDA on a machine without it.

    Warns:
        UserWarning: on the CPU, CUDA work that ``fn`` queued was still running after the
            calls (timed as launches).

    Example:
        >>> import torch
        >>> x = torch.ones(1000)
        >>> timing = time_call(lambda: x.sum(), repeats=5, warmup=2)
        >>> timing.repeats, timing.warmup, timing.best <= timing.median
        (5, 2, True)
    """
    check_callable("fn", fn, no_arguments=True)
    check_int("repeats", repeats, minimum=1, maximum=MAX_CALLS)
    check_int("warmup", warmup, minimum=0, maximum=MAX_CALLS)
    dev = _as_device("device", device)
    index: int | None = None
    if dev.type == "cuda":
        _require_cuda(dev)
        index = _cuda_index(dev)

    def sync() -> None:
        if index is not None:
            torch.cuda.synchronize(index)

    if index is None and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()  # work queued before the call is not fn's
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    if index is None and _cuda_work_pending():
        warnings.warn(
            "fn queued CUDA work that was still running after the timed calls: on the CPU "
            "the calls are not synchronized, so the times are those of the launches; pass "
            "device='cuda' to time the work",
            UserWarning,
            stacklevel=2,
        )
    name = "cpu" if index is None else f"cuda:{index}"
    return Timing(median=statistics.median(times), times=tuple(times), warmup=warmup, device=name)


# -- profiler tables --------------------------------------------------------------------


def self_cpu_times(averages: Iterable[Any], *, top: int | None = None) -> dict[str, float]:
    """Self CPU time (microseconds) per operator, largest first.

    Rows with the same name (``key_averages(group_by_input_shape=True)`` has one per
    input shape) add up to one entry.

    Args:
        averages: ``prof.key_averages()`` of a ``torch.profiler.profile`` run.
        top: keep only the first ``top`` operators (all when ``None``).

    Returns:
        ``{operator name: self CPU microseconds}``, sorted by time, descending.

    Raises:
        TypeError: an entry is not a profiler average, or ``top`` is not an int.
        ValueError: ``top < 1``.

    Example:
        >>> import torch
        >>> from torch.profiler import profile
        >>> with profile() as prof:
        ...     _ = torch.ones(100).sum()
        >>> times = self_cpu_times(prof.key_averages())
        >>> "aten::sum" in times and "aten::ones" in times
        True
    """
    if top is not None:
        check_int("top", top, minimum=1)
    if isinstance(averages, str | bytes | torch.Tensor) or not isinstance(averages, Iterable):
        msg = (
            "averages must be an iterable of profiler averages (prof.key_averages()), "
            f"got {type(averages).__name__}: {_shown(averages)}"
        )
        raise TypeError(msg)
    totals: dict[str, float] = {}  # rows of one operator (one per input shape...) add up
    for entry in averages:
        if not (hasattr(entry, "key") and hasattr(entry, "self_cpu_time_total")):
            msg = (
                "averages must hold profiler averages (from prof.key_averages()), "
                f"got {type(entry).__name__}: {_shown(entry)}"
            )
            raise TypeError(msg)
        key = str(entry.key)
        totals[key] = totals.get(key, 0.0) + float(entry.self_cpu_time_total)
    pairs = sorted(totals.items(), key=lambda pair: pair[1], reverse=True)
    return dict(pairs[:top] if top is not None else pairs)


def plot_self_cpu_time(averages: Iterable[Any], *, top: int = 10, ax: Axes | None = None) -> Axes:
    """Horizontal bars: the ``top`` operators by self CPU time, as a share of the total.

    Args:
        averages: ``prof.key_averages()`` of a profiler run.
        top: how many operators to draw; the rest is summed into one "other" bar.
        ax: axes to draw on (a new figure when ``None``).

    Returns:
        The axes, with one bar per operator (largest at the top) plus "other" when
        operators were left out.

    Raises:
        TypeError: see :func:`self_cpu_times`.
        ValueError: ``top < 1``, or the run recorded no time.

    Example:
        >>> import torch
        >>> from torch.profiler import profile
        >>> with profile() as prof:
        ...     _ = torch.ones(100).sum()
        >>> ax = plot_self_cpu_time(prof.key_averages(), top=1)
        >>> len(ax.patches)  # the top operator and "other"
        2
    """
    import matplotlib.pyplot as plt

    check_int("top", top, minimum=1)
    check_axes("ax", ax)
    times = self_cpu_times(averages)
    total = sum(times.values())
    if total <= 0:
        msg = "averages recorded no self CPU time to plot"
        raise ValueError(msg)
    names = list(times)[:top]
    shares = [100 * times[n] / total for n in names]
    rest = total - sum(times[n] for n in names)
    if len(times) > top:
        names.append(f"other ({len(times) - top} operators)")
        shares.append(100 * rest / total)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1))
    positions = list(range(len(names)))[::-1]  # the largest at the top
    ax.barh(positions, shares, color="tab:blue")
    ax.set_yticks(positions, names)
    ax.set_xlabel("share of self CPU time (%)")
    ax.set_title("Where the CPU time goes (self time per operator)")
    return ax

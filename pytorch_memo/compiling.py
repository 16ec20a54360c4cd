"""What ``torch.compile`` does, watched from the inside: graphs, recompiles, logs, cost.

What it holds:

- :class:`GraphRecorder` is a ``torch.compile`` backend (the public extension point:
  ``torch.compile(fn, backend=recorder)``) that records every FX graph Dynamo hands it,
  with its operations and whether its sizes are symbolic, then runs the graph as it is.
  Counting its graphs counts compilations, graph breaks and recompiles.
- :func:`record_torch_logs` keeps what torch logs while a block runs (graph-break and
  recompile reasons, the code Inductor generates) and off the notebook's stderr.
- :func:`best_times` times functions taking turns, and :func:`break_even_calls` says
  after how many calls compiling has paid for itself.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from pytorch_memo._checks import check_callable, check_int, check_seconds, check_type
from pytorch_memo.profiling import MAX_CALLS

__all__ = [
    "GraphRecorder",
    "RecordedGraph",
    "TorchLogs",
    "best_times",
    "break_even_calls",
    "record_torch_logs",
]

_CALLS = ("call_function", "call_method", "call_module")


def _op_name(node: fx.Node) -> str:
    """A readable name for what a call node calls: ``sin``, ``mul``, ``lin``."""
    target = node.target
    if isinstance(target, str):  # call_method and call_module name their target
        return target
    return str(getattr(target, "__name__", target))


@dataclass(frozen=True)
class RecordedGraph:
    """One FX graph Dynamo compiled, as :class:`GraphRecorder` received it.

    Attributes:
        graph_module: the ``torch.fx.GraphModule`` itself.
        ops: what each call node of the graph calls, in order (``"sin"``, ``"mul"``).
        symbolic_sizes: the names of the graph's size inputs (``"s77"``): a graph with
            any is compiled for a range of sizes rather than one (a dynamic graph).
    """

    graph_module: fx.GraphModule
    ops: tuple[str, ...]
    symbolic_sizes: tuple[str, ...]

    @property
    def op_count(self) -> int:
        """How many operations the graph calls (its call nodes)."""
        return len(self.ops)

    @property
    def dynamic(self) -> bool:
        """Whether the graph takes symbolic sizes (it serves more than one shape)."""
        return bool(self.symbolic_sizes)


@dataclass
class GraphRecorder:
    """A ``torch.compile`` backend that records each graph, then runs it unchanged.

    Dynamo calls a backend once per graph it captures: at the first call, after each
    graph break, and at each recompilation. The recorder keeps a :class:`RecordedGraph`
    per call and returns the graph's own ``forward``, so the compiled function computes
    what eager PyTorch computes, with no code generation (fast to compile).

    Attributes:
        graphs: the graphs received, in order.

    Example:
        >>> import torch
        >>> recorder = GraphRecorder()
        >>> compiled = torch.compile(lambda x: x.sin() + 1, backend=recorder)
        >>> recorder.compiles  # nothing is compiled before the first call
        0
        >>> compiled(torch.zeros(3))
        tensor([1., 1., 1.])
        >>> recorder.compiles, recorder.graphs[0].ops
        (1, ('sin', 'add'))
        >>> torch.compiler.reset()  # forget the compiled code
    """

    graphs: list[RecordedGraph] = field(default_factory=list)

    def __call__(
        self, graph_module: fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        """Record ``graph_module`` and return its ``forward`` (the backend protocol).

        Args:
            graph_module: the FX graph Dynamo captured.
            example_inputs: its inputs as Dynamo saw them (not used).

        Returns:
            ``graph_module.forward``.

        Raises:
            TypeError: ``graph_module`` is not a ``torch.fx.GraphModule``.
        """
        check_type("graph_module", graph_module, fx.GraphModule, "a torch.fx.GraphModule")
        nodes = list(graph_module.graph.nodes)
        ops = tuple(_op_name(n) for n in nodes if n.op in _CALLS)
        sizes = tuple(
            n.name
            for n in nodes
            if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.SymInt)
        )
        self.graphs.append(RecordedGraph(graph_module, ops, sizes))
        return graph_module.forward

    @property
    def compiles(self) -> int:
        """How many graphs were compiled (each first call, graph break or recompile)."""
        return len(self.graphs)

    @property
    def op_counts(self) -> list[int]:
        """The number of operations of each graph, in order."""
        return [g.op_count for g in self.graphs]

    def clear(self) -> None:
        """Forget the graphs recorded so far (compiled code stays compiled)."""
        self.graphs.clear()


@dataclass
class TorchLogs:
    """What torch logged while a :func:`record_torch_logs` block ran.

    Attributes:
        records: the ``logging.LogRecord`` objects, in order.
    """

    records: list[logging.LogRecord] = field(default_factory=list)

    @property
    def messages(self) -> list[str]:
        """Each record's message, formatted (``record.getMessage()``)."""
        return [r.getMessage() for r in self.records]

    def find(self, fragment: str) -> list[str]:
        """The messages that contain ``fragment``.

        Raises:
            TypeError: ``fragment`` is not a str.
        """
        check_type("fragment", fragment, str, "a str")
        return [m for m in self.messages if fragment in m]


class _Keep(logging.Handler):
    def __init__(self, logs: TorchLogs) -> None:
        super().__init__(logging.NOTSET)
        self._logs = logs

    def emit(self, record: logging.LogRecord) -> None:
        self._logs.records.append(record)


_TRACE_LOGGER = "torch.__trace"  # TORCH_TRACE's structured log: left alone


@contextmanager
def record_torch_logs() -> Iterator[TorchLogs]:
    """Keep what torch's loggers emit while the block runs, instead of printing it.

    torch attaches its own stderr handlers to its loggers (``torch``,
    ``torch._dynamo``, ``torch._inductor``, ... and the artifact loggers that
    ``torch._logging.set_logs`` turns on), none of which propagate to the root logger.
    For the duration of the block, each of those handlers is replaced by one that keeps
    the records; on exit, even on an error, the original handlers are put back. Which
    messages torch emits is unchanged: the logging levels set by ``TORCH_LOGS`` or
    ``torch._logging.set_logs`` still decide; call ``set_logs`` before the block, not
    inside it (it installs handlers of its own, which the exit would undo). The
    structured trace of ``TORCH_TRACE`` keeps its handler.

    Yields:
        A :class:`TorchLogs` that fills as the block runs.

    Example:
        >>> import logging
        >>> with record_torch_logs() as logs:
        ...     logging.getLogger("torch._dynamo").warning("kept, not printed")
        >>> logs.messages
        ['kept, not printed']
    """
    logs = TorchLogs()
    keep = _Keep(logs)
    replaced: dict[logging.Logger, list[logging.Handler]] = {}
    loggers = [logging.getLogger("torch")]
    loggers += [
        logger
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if name.startswith("torch.") and isinstance(logger, logging.Logger)
    ]
    try:
        for logger in loggers:
            if logger.name != _TRACE_LOGGER and logger.handlers:
                replaced[logger] = list(logger.handlers)
                logger.handlers[:] = [keep]
        yield logs
    finally:
        for logger, handlers in replaced.items():
            logger.handlers[:] = handlers


def break_even_calls(
    *, compile_seconds: float, eager_seconds: float, compiled_seconds: float
) -> float:
    """After how many calls a compiled function has saved its compile time.

    ``n`` eager calls take ``n * eager_seconds``; compiled, they take
    ``compile_seconds + n * compiled_seconds``. They are equal at
    ``n = compile_seconds / (eager_seconds - compiled_seconds)``; from there on the
    compiled function is ahead. Where a compiled call is no faster than an eager one,
    compiling never pays: the result is ``math.inf``.

    Args:
        compile_seconds: the one-time cost, > 0: the first compiled call's time less
            one compiled call's.
        eager_seconds: the time of one eager call, > 0.
        compiled_seconds: the time of one compiled call once compiled, > 0.

    Returns:
        The break-even number of calls (a float; ``math.inf`` when there is no saving).

    Raises:
        TypeError: a time is not a number.
        ValueError: a time is not > 0.

    Example:
        >>> break_even_calls(compile_seconds=2.0, eager_seconds=0.5, compiled_seconds=0.25)
        8.0
        >>> break_even_calls(compile_seconds=2.0, eager_seconds=1e-5, compiled_seconds=2e-5)
        inf
    """
    cost = check_seconds("compile_seconds", compile_seconds)
    eager = check_seconds("eager_seconds", eager_seconds)
    compiled = check_seconds("compiled_seconds", compiled_seconds)
    saving = eager - compiled
    return cost / saving if saving > 0 else math.inf


def best_times(*fns: Callable[[], object], repeats: int = 20) -> tuple[float, ...]:
    """The best wall-clock time of each function's call, the functions taking turns.

    Each round calls every function once, in order, timing each call with
    ``time.perf_counter``; after ``repeats`` rounds, each function's fastest call is
    returned. Taking turns exposes the functions to the same disturbances (other
    processes, a busy memory bus), and the fastest call is the one least disturbed,
    so the comparison holds on a loaded machine where medians of separate runs swing.
    CPU work only: CUDA calls return before their kernels finish (see
    ``pytorch_memo.profiling.time_call``).

    Args:
        *fns: callables taking no arguments, at least one.
        repeats: rounds, at least 1 and at most :data:`~pytorch_memo.profiling.MAX_CALLS`
            (as many as ``time_call`` makes).

    Returns:
        The best time of each function, in seconds, in the order given.

    Raises:
        TypeError: a function is not callable without arguments, or ``repeats`` is
            not an int.
        ValueError: no function, or ``repeats`` is out of range.

    Example:
        >>> import torch
        >>> x = torch.ones(1000)
        >>> one, two = best_times(lambda: x.sum(), lambda: x.sum().sum(), repeats=5)
        >>> 0 < one and 0 < two
        True
    """
    if not fns:
        msg = "fns must hold at least one callable, got none"
        raise ValueError(msg)
    for index, fn in enumerate(fns):
        check_callable(f"fns[{index}]", fn, no_arguments=True)
    check_int("repeats", repeats, minimum=1, maximum=MAX_CALLS)
    best = [math.inf] * len(fns)
    for _ in range(repeats):
        for index, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[index] = min(best[index], time.perf_counter() - start)
    return tuple(best)

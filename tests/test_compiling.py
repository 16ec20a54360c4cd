"""pytorch_memo.compiling, checked against plain torch.compile and its own tools.

Checked on torch 2.8.0, 2.11.0, 2.14.1 and 2.15.0: the recorder's counts agree with
``torch._dynamo.testing.CompileCounter`` and ``torch._dynamo.explain``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._dynamo.testing import CompileCounter

from pytorch_memo.compiling import (
    GraphRecorder,
    best_times,
    break_even_calls,
    record_torch_logs,
)
from pytorch_memo.profiling import MAX_CALLS


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _with_print(x: torch.Tensor) -> torch.Tensor:
    y = x.sin() * 2
    print("a graph break")
    return y.cos() + 1


def _with_branch(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x.exp()
    return -x


def _plain(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 3 - x.mean()


FUNCTIONS = [_plain, _with_print, _with_branch]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_recorder_counts_what_compile_counter_counts(
    fn: Callable[[torch.Tensor], torch.Tensor], capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.linspace(-1, 2, 5)
    recorder, counter = GraphRecorder(), CompileCounter()
    result = torch.compile(fn, backend=recorder)(x)
    torch._dynamo.reset()
    torch.compile(fn, backend=counter)(x)
    assert recorder.compiles == counter.frame_count
    assert sum(recorder.op_counts) == counter.op_count
    torch.testing.assert_close(result, fn(x))  # the recorder runs the graph unchanged


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_recorder_counts_the_graphs_explain_counts(
    fn: Callable[[torch.Tensor], torch.Tensor], capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.linspace(-1, 2, 5)
    recorder = GraphRecorder()
    torch.compile(fn, backend=recorder)(x)
    explained = torch._dynamo.explain(fn)(x)
    assert recorder.compiles == explained.graph_count == explained.graph_break_count + 1


def test_ops_are_the_functions_operations_in_order() -> None:
    recorder = GraphRecorder()
    torch.compile(_with_print, backend=recorder)(torch.ones(3))
    assert [g.ops for g in recorder.graphs] == [("sin", "mul"), ("cos", "add")]
    assert recorder.op_counts == [2, 2]


def test_module_calls_are_named_by_their_path() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    recorder = GraphRecorder()
    torch.compile(model, backend=recorder)(torch.ones(1, 2))
    (graph,) = recorder.graphs
    assert graph.op_count == 2  # Dynamo inlines the modules: linear, relu
    assert any("linear" in op for op in graph.ops)
    assert any("relu" in op for op in graph.ops)


@settings(max_examples=25)  # each example compiles up to twice
@given(st.lists(st.integers(2, 40), min_size=1, max_size=6))
def test_compiles_and_dynamic_graphs_match_automatic_dynamic_shapes(sizes: list[int]) -> None:
    torch._dynamo.reset()

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    recorder = GraphRecorder()
    compiled = torch.compile(double, backend=recorder)
    for n in sizes:
        torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0))
    distinct = len(set(sizes))
    # A static graph for the first size; at the first other size, one dynamic graph
    # that serves every later size (sizes >= 2: 0 and 1 are specialized).
    assert recorder.compiles == min(distinct, 2)
    assert [g.dynamic for g in recorder.graphs] == [False, True][: recorder.compiles]
    torch._dynamo.reset()


def test_dynamic_false_records_static_graphs_and_clear_forgets() -> None:
    recorder = GraphRecorder()
    compiled = torch.compile(lambda x: x + 1, backend=recorder, dynamic=False)
    for n in (3, 4, 5):
        compiled(torch.ones(n))
    assert recorder.compiles == 3
    assert not any(g.dynamic for g in recorder.graphs)
    recorder.clear()
    compiled(torch.ones(4))  # already compiled: nothing new
    assert recorder.compiles == 0


def test_recorder_refuses_what_is_not_a_graph_module() -> None:
    with pytest.raises(TypeError, match=r"graph_module must be a torch\.fx\.GraphModule, got str"):
        GraphRecorder()("graph", [])  # type: ignore[arg-type]


def test_record_torch_logs_keeps_records_off_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    dynamo = logging.getLogger("torch._dynamo")
    before = list(dynamo.handlers)
    assert before, "torch attaches its own handler to torch._dynamo"
    with record_torch_logs() as logs:
        dynamo.warning("from %s", "dynamo")
        logging.getLogger("torch._inductor.some.child").warning("from a child")
    assert logs.messages == ["from dynamo", "from a child"]
    assert logs.find("child") == ["from a child"]
    assert dynamo.handlers == before
    assert capfd.readouterr().err == ""


def test_record_torch_logs_restores_handlers_on_error() -> None:
    saved = {
        name: list(logger.handlers)
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.startswith("torch")
    }
    with pytest.raises(ZeroDivisionError), record_torch_logs():
        1 / 0  # noqa: B018
    for name, handlers in saved.items():
        assert logging.getLogger(name).handlers == handlers, name


def test_record_torch_logs_catches_a_recompile_limit_warning(
    capfd: pytest.CaptureFixture[str],
) -> None:
    recorder = GraphRecorder()
    compiled = torch.compile(lambda x: x * 3, backend=recorder, dynamic=False)
    with record_torch_logs() as logs, torch._dynamo.config.patch(recompile_limit=1):
        for n in (2, 3):
            torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 3.0))
    assert recorder.compiles == 1  # the second size ran eagerly
    assert logs.find("hit config.recompile_limit (1)")
    assert "recompile_limit" not in capfd.readouterr().err


def test_graph_break_logs_are_recorded() -> None:
    # set_logs is documented as torch._logging.set_logs, but that package re-exports it
    # from torch._logging._internal without __all__, so mypy sees no explicit export.
    torch._logging.set_logs(graph_breaks=True)  # type: ignore[attr-defined]
    try:
        with record_torch_logs() as logs:
            torch.compile(_with_print, backend="eager")(torch.ones(2))
    finally:
        torch._logging.set_logs()  # type: ignore[attr-defined]
    assert len(logs.find("Graph break in user code")) == 1


def test_find_refuses_a_fragment_that_is_not_a_string() -> None:
    with record_torch_logs() as logs:
        pass
    with pytest.raises(TypeError, match="fragment must be a str, got int: 3"):
        logs.find(3)  # type: ignore[arg-type]


@given(
    st.floats(1e-3, 100.0),
    st.floats(1e-7, 1.0),
    st.floats(1e-7, 1.0),
    st.integers(0, 10**6),
)
def test_break_even_is_where_compiled_total_time_catches_up(
    cost: float, eager: float, compiled: float, calls: int
) -> None:
    n = break_even_calls(compile_seconds=cost, eager_seconds=eager, compiled_seconds=compiled)
    eager_total = calls * eager
    compiled_total = cost + calls * compiled
    if compiled >= eager:
        assert n == math.inf
        assert compiled_total > eager_total
    elif not math.isclose(calls, n, rel_tol=1e-9):
        assert (calls > n) == (compiled_total < eager_total)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"compile_seconds": 0.0}, ValueError, "compile_seconds must be > 0 seconds, got 0.0"),
        ({"eager_seconds": -1.0}, ValueError, "eager_seconds must be > 0 seconds, got -1.0"),
        ({"compiled_seconds": "1"}, TypeError, "compiled_seconds must be a number of seconds"),
        ({"eager_seconds": float("nan")}, ValueError, "eager_seconds must be > 0 seconds, got nan"),
    ],
)
def test_bad_times_are_named(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    times: dict[str, object] = {
        "compile_seconds": 1.0,
        "eager_seconds": 2.0,
        "compiled_seconds": 1.0,
    }
    times.update(kwargs)
    with pytest.raises(error, match=message):
        break_even_calls(**times)  # type: ignore[arg-type]


def test_best_times_take_turns_and_keep_each_fastest_call() -> None:
    order: list[str] = []

    def slow() -> None:
        order.append("slow")
        time.sleep(0.002)

    def fast() -> None:
        order.append("fast")

    slow_best, fast_best = best_times(slow, fast, repeats=3)
    assert order == ["slow", "fast"] * 3
    assert slow_best >= 0.002 > fast_best >= 0


def test_best_times_is_the_minimum_of_perf_counter_differences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter([0.0, 5.0, 10.0, 11.0, 20.0, 22.0, 30.0, 30.5])  # start, end of 4 calls
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    assert best_times(lambda: None, lambda: None, repeats=2) == (2.0, 0.5)


@pytest.mark.parametrize(
    ("fns", "repeats", "error", "message"),
    [
        ((), 3, ValueError, "fns must hold at least one callable, got none"),
        ((print, 3), 3, TypeError, r"fns\[1\] must be callable, got int: 3"),
        ((print,), 0, ValueError, "repeats must be >= 1, got 0"),
        ((print,), 2.0, TypeError, "repeats must be an int, got float"),
        # found by the fuzz: a function that needs an argument failed at its first call
        # with "<lambda>() missing 1 required positional argument: 'x'", naming no fns
        (
            (print, lambda x: x),
            3,
            TypeError,
            (
                r"fns\[1\] must be callable without arguments \(wrap them in a lambda\), "
                r"got a callable with signature \(x\)"
            ),
        ),
        # found by the fuzz: repeats=2**63 ran for ever (a hang), unbounded
        ((print,), 2**63, ValueError, "repeats must be <= 100000, got 9223372036854775808"),
        ((print,), MAX_CALLS + 1, ValueError, "repeats must be <= 100000, got 100001"),
    ],
)
def test_best_times_refuses_bad_arguments(
    fns: tuple[object, ...], repeats: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        best_times(*fns, repeats=repeats)  # type: ignore[arg-type]

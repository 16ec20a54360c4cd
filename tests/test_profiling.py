"""pytorch_memo.profiling, checked against plain torch (and torchinfo, and the clock)."""

from __future__ import annotations

import re
import statistics
import time
import warnings
from collections.abc import Iterator
from unittest import mock

import matplotlib.pyplot as plt
import pytest
import torch
import torchinfo
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.profiler import profile

from pytorch_memo.profiling import (
    count_parameters,
    memory_report,
    peak_memory,
    plot_self_cpu_time,
    self_cpu_times,
    time_call,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
without_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
FLOAT = 4  # bytes of a float32


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


# -- count_parameters -------------------------------------------------------------------


@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6), st.booleans()), min_size=1),
    st.data(),
)
def test_count_parameters_matches_plain_torch(
    layers: list[tuple[int, int, bool]], data: st.DataObject
) -> None:
    model = nn.Sequential(*(nn.Linear(i, o, bias=b) for i, o, b in layers))
    for p in model.parameters():
        p.requires_grad_(data.draw(st.booleans()))
    count = count_parameters(model)
    assert count.total == sum(p.numel() for p in model.parameters())
    assert count.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count.frozen == count.total - count.trainable


def test_shared_parameters_count_once_and_buffers_not_at_all() -> None:
    layer = nn.Linear(4, 4)
    model = nn.Sequential(layer, nn.ReLU(), layer, nn.BatchNorm1d(4))
    assert count_parameters(model).total == 4 * 4 + 4 + 4 + 4  # shared linear once, bn w+b


def test_resnet18_agrees_with_torchinfo() -> None:
    model = torchvision.models.resnet18(weights=None)
    count = count_parameters(model)
    stats = torchinfo.summary(model, input_size=(1, 3, 64, 64), verbose=0)
    assert count.total == stats.total_params == 11_689_512
    assert count.trainable == stats.trainable_params
    assert str(count) == "11,689,512 parameters (11,689,512 trainable, 0 frozen)"


def test_count_parameters_rejects_a_non_module() -> None:
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module, got list"):
        count_parameters([nn.Linear(1, 1)])  # type: ignore[arg-type]


# -- memory_report ----------------------------------------------------------------------


def test_cpu_report_sees_a_touched_allocation() -> None:
    before = memory_report("cpu")
    block = torch.ones(16 * 2**20)  # 64 MiB, written, so its pages are resident
    after = memory_report(torch.device("cpu"))
    assert before.available
    assert after.available
    assert before.allocated is not None
    assert after.allocated is not None
    assert after.allocated - before.allocated >= 48 * 2**20
    assert after.peak_allocated is not None
    assert after.peak_allocated >= after.allocated
    assert after.total is not None
    assert after.total > after.allocated
    assert str(after).startswith("cpu (process memory): allocated ")
    del block


@without_cuda
def test_cuda_report_without_cuda_says_not_available() -> None:
    report = memory_report("cuda:0")
    assert not report.available
    assert report.allocated is None
    assert report.total is None
    assert str(report) == "cuda:0: not available (torch.cuda.is_available() is False)"


@needs_cuda
def test_cuda_report_matches_torch_cuda() -> None:
    x = torch.ones(2**20, device="cuda")
    report = memory_report("cuda")
    index = torch.cuda.current_device()
    assert report.available
    assert report.device == f"cuda:{index}"
    assert report.allocated == torch.cuda.memory_allocated(index) >= x.nbytes
    assert report.total == torch.cuda.get_device_properties(index).total_memory
    assert report.name == torch.cuda.get_device_name(index)


@pytest.mark.parametrize(
    ("device", "error", "match"),
    [
        (0, TypeError, r"device must be a str or a torch.device, got int: 0"),
        ("meta", ValueError, r"device must be a cpu or cuda device, got 'meta'"),
        ("gpu", ValueError, r"device='gpu' is not a device string: expected e.g. 'cpu', 'cuda'"),
        (float("nan"), TypeError, r"device must be a str or a torch.device, got float: nan"),
        # issue 24, D14: accepted before, though torch has one CPU device
        ("cpu:1", ValueError, r"device must be 'cpu' or 'cpu:0' for the CPU, got 'cpu:1'"),
    ],
)
def test_memory_report_rejects_bad_devices(device: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        memory_report(device)  # type: ignore[arg-type]


# -- peak_memory ------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=5))
def test_cpu_peak_of_tensors_alive_together_is_their_sum(sizes: list[int]) -> None:
    def together() -> None:
        tensors = [torch.empty(n) for n in sizes]
        del tensors

    measured = peak_memory(together)
    expected = sum(torch.empty(n).nbytes for n in sizes)
    assert (measured.peak, measured.retained, measured.device) == (expected, 0, "cpu")


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=5), st.integers(0, 100))
def test_cpu_peak_of_tensors_one_at_a_time_is_the_largest(sizes: list[int], kept: int) -> None:
    def one_at_a_time() -> torch.Tensor:
        for n in sizes:
            t = torch.empty(n)
            del t
        return torch.empty(kept)

    measured = peak_memory(one_at_a_time)
    assert measured.peak == max(FLOAT * max(sizes), FLOAT * kept)
    assert measured.retained == FLOAT * kept


def test_cpu_peak_counts_temporaries_inside_an_operator_chain() -> None:
    x = torch.randn(100, 100)
    measured = peak_memory(lambda: (x @ x).relu().sum())  # 40,000-byte intermediates
    assert measured.peak >= x.nbytes
    assert measured.retained == torch.tensor(0.0).nbytes  # only the scalar result


@without_cuda
def test_cuda_peak_without_cuda_raises() -> None:
    with pytest.raises(RuntimeError, match=r"device 'cuda' needs CUDA"):
        peak_memory(lambda: None, device="cuda")


def test_cpu_peak_warns_when_fn_allocated_cuda_memory() -> None:
    """A CPU measurement does not count CUDA allocations: it says so rather than
    reporting a GPU workload's CPU bytes as if they were its memory."""
    stats = iter([{"allocation.all.allocated": 5}, {"allocation.all.allocated": 7}])
    with (
        mock.patch.object(torch.cuda, "is_initialized", return_value=True),
        mock.patch.object(torch.cuda, "memory_stats", side_effect=lambda: next(stats)),
        pytest.warns(UserWarning, match=r"fn allocated CUDA memory .* device='cuda'"),
    ):
        measured = peak_memory(lambda: None)
    assert measured.device == "cpu"


def test_cpu_peak_without_cuda_work_does_not_warn() -> None:
    stats = {"allocation.all.allocated": 5}
    with (
        mock.patch.object(torch.cuda, "is_initialized", return_value=True),
        mock.patch.object(torch.cuda, "memory_stats", return_value=stats),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")
        peak_memory(lambda: torch.ones(10))


@needs_cuda
def test_cuda_peak_matches_the_allocation() -> None:
    measured = peak_memory(lambda: torch.empty(2**20, device="cuda"), device="cuda")
    assert measured.peak >= 4 * 2**20
    assert measured.retained >= 4 * 2**20


def test_peak_memory_rejects_a_non_callable() -> None:
    with pytest.raises(TypeError, match=r"fn must be callable, got Tensor"):
        peak_memory(torch.ones(1))  # type: ignore[arg-type]


# -- time_call --------------------------------------------------------------------------


@given(st.integers(1, 8), st.integers(0, 3))
def test_time_call_calls_warmup_plus_repeats_times(repeats: int, warmup: int) -> None:
    calls: list[int] = []
    timing = time_call(lambda: calls.append(1), repeats=repeats, warmup=warmup)
    assert len(calls) == warmup + repeats
    assert timing.repeats == repeats
    assert timing.warmup == warmup
    assert timing.median == statistics.median(timing.times)
    assert timing.best == min(timing.times) <= timing.median


def test_time_call_measures_the_call() -> None:
    timing = time_call(lambda: time.sleep(0.01), repeats=3, warmup=0)
    assert timing.best >= 0.01
    assert str(timing).startswith("median ")
    assert str(timing).endswith("on cpu")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"repeats": 0}, ValueError, r"repeats must be >= 1, got 0"),
        ({"repeats": 2.0}, TypeError, r"repeats must be an int, got float"),
        ({"warmup": -1}, ValueError, r"warmup must be >= 0, got -1"),
        ({"device": "mps"}, ValueError, r"device must be a cpu or cuda device, got 'mps'"),
        ({"repeats": 100_001}, ValueError, r"repeats must be <= 100000, got 100001"),
        ({"warmup": 10**12}, ValueError, r"warmup must be <= 100000, got 1000000000000"),
    ],
)
def test_time_call_rejects_bad_options(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        time_call(lambda: None, **kwargs)  # type: ignore[arg-type]


def test_time_call_rejects_a_non_callable() -> None:
    with pytest.raises(TypeError, match=r"fn must be callable, got int: 3"):
        time_call(3)  # type: ignore[arg-type]


def test_time_call_on_the_cpu_warns_when_cuda_work_is_left_running() -> None:
    """Timed on the CPU (the default), CUDA work is timed as its launches: say so."""
    stream = mock.Mock(query=mock.Mock(return_value=False))  # work still queued
    with (
        mock.patch.object(torch.cuda, "is_initialized", return_value=True),
        mock.patch.object(torch.cuda, "current_stream", return_value=stream),
        mock.patch.object(torch.cuda, "synchronize"),
        pytest.warns(UserWarning, match=r"CUDA work that was still running.*device='cuda'"),
    ):
        timing = time_call(lambda: None, repeats=3)
    assert timing.device == "cpu"
    stream.query.return_value = True  # nothing left on the GPU: CPU work, no warning
    with (
        mock.patch.object(torch.cuda, "is_initialized", return_value=True),
        mock.patch.object(torch.cuda, "current_stream", return_value=stream),
        mock.patch.object(torch.cuda, "synchronize"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")
        time_call(lambda: None, repeats=3)


def test_time_call_on_the_cpu_does_not_blame_fn_for_cuda_work_queued_before() -> None:
    """CUDA work queued before the call (a previous step's) is waited for first: the
    warning is about what fn queued."""
    state = {"busy": True}  # the stream has work from before the call

    def synchronize(device: object = None) -> None:
        state["busy"] = False

    stream = mock.Mock(query=lambda: not state["busy"])
    with (
        mock.patch.object(torch.cuda, "is_initialized", return_value=True),
        mock.patch.object(torch.cuda, "current_stream", return_value=stream),
        mock.patch.object(torch.cuda, "synchronize", side_effect=synchronize) as sync,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")
        time_call(lambda: sum(range(100)), repeats=2)  # CPU work only
    assert sync.call_count == 1  # once, before the calls; never around them


@without_cuda
def test_time_call_on_cuda_without_cuda_raises() -> None:
    with pytest.raises(RuntimeError, match=r"needs CUDA"):
        time_call(lambda: None, device="cuda")


@needs_cuda
def test_cuda_work_measured_on_the_cpu_gets_a_warning() -> None:
    x = torch.randn(4096, 4096, device="cuda")
    with pytest.warns(UserWarning, match=r"CUDA work that was still running"):
        time_call(lambda: x @ x, repeats=3)
    with pytest.warns(UserWarning, match=r"fn allocated CUDA memory"):
        peak_memory(lambda: torch.empty(2**20, device="cuda"))


@needs_cuda
def test_time_call_synchronizes_cuda() -> None:
    x = torch.randn(2048, 2048, device="cuda")
    timing = time_call(lambda: x @ x, repeats=3, device="cuda")
    assert timing.device == f"cuda:{torch.cuda.current_device()}"
    assert timing.best > 0


# -- profiler tables --------------------------------------------------------------------


@pytest.fixture(scope="module")
def averages() -> object:
    x = torch.randn(64, 64)
    with profile() as prof:
        for _ in range(3):
            (x @ x).relu().sum()
    return prof.key_averages()


def test_self_cpu_times_match_key_averages(averages: list) -> None:  # type: ignore[type-arg]
    times = self_cpu_times(averages)
    assert times == {e.key: e.self_cpu_time_total for e in averages}
    assert list(times.values()) == sorted(times.values(), reverse=True)
    assert list(self_cpu_times(averages, top=2)) == list(times)[:2]


def test_self_cpu_times_adds_up_rows_of_one_operator() -> None:
    """`key_averages(group_by_input_shape=True)` has a row per shape: one operator's
    time is their sum, not whichever row came last."""
    a, b = torch.randn(256, 256), torch.randn(8, 8)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            a @ a
        b @ b
    rows = [r for r in prof.key_averages(group_by_input_shape=True) if r.key == "aten::mm"]
    assert len(rows) == 2
    by_shape = self_cpu_times(prof.key_averages(group_by_input_shape=True))
    assert by_shape["aten::mm"] == pytest.approx(sum(r.self_cpu_time_total for r in rows))
    plain = self_cpu_times(prof.key_averages())
    assert by_shape["aten::mm"] == pytest.approx(plain["aten::mm"])
    assert list(by_shape.values()) == sorted(by_shape.values(), reverse=True)


def test_self_cpu_times_rejects_other_things() -> None:
    with pytest.raises(TypeError, match=r"averages must hold profiler averages"):
        self_cpu_times([1.5])
    with pytest.raises(ValueError, match=r"top must be >= 1, got 0"):
        self_cpu_times([], top=0)


def test_plot_draws_top_operators_and_the_rest(averages: list) -> None:  # type: ignore[type-arg]
    times = self_cpu_times(averages)
    ax = plot_self_cpu_time(averages, top=2)
    widths = [bar.get_width() for bar in ax.patches]  # type: ignore[attr-defined]
    assert len(widths) == 3 == len(ax.get_yticklabels())
    total = sum(times.values())
    assert widths[:2] == pytest.approx([100 * t / total for t in list(times.values())[:2]])
    assert sum(widths) == pytest.approx(100)
    by_height = sorted(ax.get_yticklabels(), key=lambda t: t.get_position()[1])
    assert by_height[-1].get_text() == next(iter(times))  # the largest is drawn at the top
    assert by_height[0].get_text() == f"other ({len(times) - 2} operators)"


def test_plot_rejects_an_empty_run() -> None:
    with pytest.raises(ValueError, match=r"recorded no self CPU time"):
        plot_self_cpu_time([])


def test_plot_and_averages_are_checked_by_name() -> None:
    with profile() as prof:
        torch.ones(10).sum()
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes .*, got str: 'ax'"):
        plot_self_cpu_time(prof.key_averages(), ax="ax")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"averages must be an iterable of profiler averages"):
        self_cpu_times(3)  # type: ignore[arg-type]


def test_allocated_bytes_counts_what_an_operator_freed_inside() -> None:
    from torch.profiler import ProfilerActivity, profile

    from pytorch_memo.profiling import allocated_bytes

    def scratch() -> torch.Tensor:
        return (torch.ones(250_000) * 2).sum()  # a 1 MB temporary, freed at once

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        scratch()
    net = sum(row.self_cpu_memory_usage for row in prof.key_averages())
    assert allocated_bytes(prof) >= 2 * 1_000_000 > net  # ones and its double


def test_allocated_bytes_refuses_what_is_not_a_profile() -> None:
    from pytorch_memo.profiling import allocated_bytes

    with pytest.raises(
        TypeError,
        match=re.escape(
            "prof must be a torch.profiler.profile run with profile_memory=True, got list"
        ),
    ):
        allocated_bytes([])


def test_allocated_bytes_refuses_a_profile_run_without_profile_memory() -> None:
    from torch.profiler import ProfilerActivity, profile

    from pytorch_memo.profiling import allocated_bytes

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(1000)
    with pytest.raises(ValueError, match="prof must be run with profile_memory=True"):
        allocated_bytes(prof)

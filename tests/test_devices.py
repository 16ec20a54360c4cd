"""pytorch_memo.devices against torch's own availability checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pytorch_memo.checkpoint import load_checkpoint, save_checkpoint
from pytorch_memo.devices import pick_device
from pytorch_memo.parallel import save_on_rank0
from pytorch_memo.profiling import memory_report, peak_memory, time_call


def test_automatic_choice_follows_torch() -> None:
    expected = (
        "cuda"
        if torch.cuda.is_available()
        else "mps"
        if torch.backends.mps.is_available()
        else "cpu"
    )
    assert pick_device() == torch.device(expected)


@pytest.mark.parametrize("prefer", ["cpu", torch.device("cpu"), "meta"])
def test_always_available(prefer: str | torch.device) -> None:
    device = pick_device(prefer)
    assert device == torch.device(prefer)
    assert torch.empty(1, device=device).device.type == device.type


def test_cuda_index_beyond_the_count_is_refused() -> None:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(RuntimeError, match=rf"prefer='cuda:{count}' is not available.*is {count}"):
        pick_device(f"cuda:{count}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_cuda_without_cuda_is_refused() -> None:
    with pytest.raises(
        RuntimeError, match=r"prefer='cuda' is not available.*device_count\(\) is 0"
    ):
        pick_device("cuda")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", ""])
def test_bad_strings(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"prefer={bad!r} is not a device string"):
        pick_device(bad)


@pytest.mark.parametrize("other", ["xpu", "xla", "hpu:1", torch.device("xpu")])
def test_a_device_type_pick_device_does_not_support_is_a_value_error(other: Any) -> None:
    # before: RuntimeError "prefer='xpu' is not available on this machine: pick_device
    # knows cpu, cuda, mps and meta, not 'xpu'", false on a machine with an XPU
    shown = re.escape(repr(other))
    with pytest.raises(
        ValueError,
        match=rf"^prefer must be a cpu, cuda, mps or meta device .*pick_device supports.*, got {shown}$",
    ):
        pick_device(other)


@pytest.mark.parametrize("meta", ["meta:5", "meta:1", torch.device("meta", 3)])
def test_a_meta_index_is_refused_like_a_cpu_index(meta: Any) -> None:
    # before: accepted and returned as device(type='meta', index=5), though torch has
    # one meta device: a tensor made there lands on 'meta'
    assert torch.empty(1, device=meta).device == torch.device("meta")
    shown = re.escape(repr(meta))
    with pytest.raises(
        ValueError,
        match=rf"^prefer must be 'meta' or 'meta:0' for the meta device, got {shown}: torch has one",
    ):
        pick_device(meta)


@pytest.mark.parametrize("mps_available", [False, True], ids=["without mps", "with mps"])
@pytest.mark.parametrize("mps", ["mps:1", "mps:7", torch.device("mps", 1)])
def test_an_mps_index_is_refused_like_a_cpu_index(
    monkeypatch: pytest.MonkeyPatch, mps: Any, mps_available: bool
) -> None:
    # before: RuntimeError "prefer='mps:1' is not available on this machine:
    # torch.backends.mps.is_available() is False or the index is not 0", on every
    # machine: torch has at most one MPS device (torch.mps.device_count() is 0 or 1), so
    # no machine has 'mps:1'; a string no machine can satisfy is a ValueError, as for
    # 'cpu:1' and 'meta:5'
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps_available)
    shown = re.escape(repr(mps))
    with pytest.raises(
        ValueError,
        match=rf"^prefer must be 'mps' or 'mps:0' for the MPS device, got {shown}: torch has "
        r"at most one MPS device \(torch\.mps\.device_count\(\) is 0 or 1\)$",
    ):
        pick_device(mps)


@pytest.mark.parametrize("mps", ["mps", "mps:0", torch.device("mps", 0)])
def test_the_mps_device_where_there_is_one(monkeypatch: pytest.MonkeyPatch, mps: Any) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device(mps) == torch.device(mps)


@pytest.mark.parametrize("mps", ["mps", "mps:0"])
def test_the_mps_device_where_there_is_none_says_why(
    monkeypatch: pytest.MonkeyPatch, mps: str
) -> None:
    # before: "...is False or the index is not 0", though the index was 0
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(
        RuntimeError,
        match=rf"^prefer='{mps}' is not available on this machine: "
        r"torch\.backends\.mps\.is_available\(\) is False$",
    ):
        pick_device(mps)


@pytest.mark.parametrize("meta", ["meta", "meta:0", torch.device("meta", 0)])
def test_the_meta_device_however_spelled(meta: Any) -> None:
    device = pick_device(meta)
    assert device == torch.device("meta")  # before: device(type='meta', index=0) for "meta:0"
    assert device.index is None


def test_bad_type() -> None:
    with pytest.raises(TypeError, match=r"prefer must be a str, a torch\.device or None, got int"):
        pick_device(0)  # type: ignore[arg-type]


# -- issue 24, D14: one rule for device strings, in every helper that takes a device --


def _device_takers(tmp_path: Path) -> list[tuple[str, Callable[[Any], object]]]:
    """Every public helper with a device argument (grep check_device): its argument's
    name, and a call of it with a given device."""
    model = nn.Linear(2, 2)
    checkpoint = save_checkpoint(tmp_path / "c.pt", model=model, rng=False)
    return [
        ("prefer", pick_device),
        ("device", memory_report),
        ("device", lambda d: peak_memory(lambda: None, device=d)),
        ("device", lambda d: time_call(lambda: None, repeats=1, warmup=0, device=d)),
        (
            "map_location",
            lambda d: load_checkpoint(checkpoint, model=model, rng=False, map_location=d),
        ),
        ("map_location", lambda d: save_on_rank0(str(tmp_path), map_location=d)),
    ]


@pytest.mark.parametrize("cpu", ["cpu:1", "cpu:7", torch.device("cpu", 1)])
def test_every_helper_refuses_a_cpu_index_alike(tmp_path: Path, cpu: Any) -> None:
    # torch.device parses "cpu:1", but a tensor made there lands on "cpu" and
    # torch.load(map_location="cpu:1") fails. Before, pick_device and memory_report
    # accepted it and load_checkpoint refused it, each in its own words.
    assert torch.zeros(1, device=cpu).device == torch.device("cpu")
    shown = re.escape(repr(cpu))
    for name, call in _device_takers(tmp_path):
        expected = rf"^{name} must be 'cpu' or 'cpu:0' for the CPU, got {shown}: torch has one"
        with pytest.raises(ValueError, match=expected):
            call(cpu)


@pytest.mark.parametrize("cpu", ["cpu", "cpu:0", torch.device("cpu", 0)])
def test_every_helper_takes_the_cpu_however_spelled(tmp_path: Path, cpu: Any) -> None:
    calls = [call for _, call in _device_takers(tmp_path)]
    assert calls[0](cpu) == torch.device("cpu")
    assert [call(cpu).device for call in calls[1:4]] == ["cpu"] * 3  # type: ignore[attr-defined]
    assert calls[4](cpu) == {}
    with pytest.raises(RuntimeError, match="needs a joined process group"):
        calls[5](cpu)  # the device passed; the worker needs run_workers

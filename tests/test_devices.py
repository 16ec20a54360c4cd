"""pytorch_memo.devices against torch's own availability checks."""

from __future__ import annotations

import pytest
import torch

from pytorch_memo.devices import pick_device


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


def test_known_to_torch_but_not_here() -> None:
    with pytest.raises(RuntimeError, match="knows cpu, cuda, mps and meta, not 'xla'"):
        pick_device("xla")


def test_bad_type() -> None:
    with pytest.raises(TypeError, match=r"prefer must be a str, a torch\.device or None, got int"):
        pick_device(0)  # type: ignore[arg-type]

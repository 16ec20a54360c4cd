"""pytorch_memo.parallel, run for real in two CPU processes joined by gloo, and checked
against plain torch in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.tensor import Shard

from pytorch_memo.distributed import make_batch, make_model, reference_step, run_workers
from pytorch_memo.parallel import (
    TwoHeads,
    accumulate_no_sync,
    ddp_broadcast,
    fsdp2_step,
    practice,
    save_on_rank0,
    sync_batchnorm_on_cpu,
    unused_parameter,
)

SEED, BATCH = 3, 8


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every worker of the module, in one launch of two ranks."""
    folder = tmp_path_factory.mktemp("checkpoints")
    found = run_workers(practice, str(folder), SEED, BATCH, world_size=2, timeout=120)
    assert sorted(p.name for p in Path(folder).iterdir()) == ["model.pt"]
    return found


def test_ddp_starts_every_rank_from_rank_0s_weights(ranks: list[dict[str, Any]]) -> None:
    rank0 = dict(make_model(0).named_parameters())
    rank1 = dict(make_model(1).named_parameters())
    for r in ranks:
        for name, p in rank0.items():
            assert torch.equal(r["broadcast"][name], p)
    assert any(not torch.equal(rank0[n], rank1[n]) for n in rank0)  # really overwritten


def test_saved_on_rank_0_and_loaded_everywhere(ranks: list[dict[str, Any]]) -> None:
    plain = make_model(0).state_dict()
    for r in ranks:
        save = r["save"]
        assert save["wrapper_keys"] == [f"module.{k}" for k in plain]
        assert list(save["loaded"]) == list(plain)
        for key, value in plain.items():
            assert torch.equal(save["loaded"][key], value)
        assert save["devices"] == ["cpu"]


def _local_gradient(rank: int, micro: int) -> dict[str, torch.Tensor]:
    """The gradient rank ``rank`` accumulates alone over its first ``micro`` parts of 2."""
    model = make_model(SEED)
    x, y = make_batch(SEED, BATCH)
    share = BATCH // 2
    parts = zip(
        x[rank * share : (rank + 1) * share].chunk(2),
        y[rank * share : (rank + 1) * share].chunk(2),
        strict=True,
    )
    for _, (inputs, targets) in zip(range(micro), parts, strict=False):
        (nn.functional.mse_loss(model(inputs), targets) / 2).backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def test_no_sync_accumulates_locally_then_all_reduces_once(ranks: list[dict[str, Any]]) -> None:
    whole = reference_step(SEED, BATCH)["grads"]
    for rank, r in enumerate(ranks):
        acc = r["no_sync"]
        assert acc["all_reduces_in_no_sync"] == 0
        assert acc["all_reduces"] >= 1
        for name, grad in _local_gradient(rank, 1).items():
            torch.testing.assert_close(acc["local_grads"][name], grad, rtol=0, atol=1e-12)
        for name, grad in whole.items():
            torch.testing.assert_close(acc["grads"][name], grad, rtol=0, atol=1e-12)
    first = ranks[0]["no_sync"]["local_grads"]
    assert any(not torch.equal(first[n], ranks[1]["no_sync"]["local_grads"][n]) for n in first)


def test_unused_parameter(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        unused = r["unused"]
        assert unused["backwards_before_error"] == 1
        assert "Expected to have finished reduction in the prior iteration" in unused["error"]
        assert "find_unused_parameters=True" in unused["error"]
        assert unused["grads"]["unused.weight"] is None
        assert unused["grads"]["unused.bias"] is None
        assert unused["grads"]["used.weight"] is not None


def test_sync_batchnorm_refuses_cpu_tensors_in_a_group(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        sbn = r["sync_batchnorm"]
        assert sbn["layer"] == "SyncBatchNorm"
        assert "expected input tensor to be on GPU" in sbn["train_error"]
        assert "SyncBatchNorm layers only work with GPU modules" in sbn["ddp_error"]
        assert torch.equal(sbn["eval_output"], sbn["eval_reference"])


def test_fsdp2_shards_and_steps_like_one_process(ranks: list[dict[str, Any]]) -> None:
    whole = reference_step(SEED, BATCH)
    model = make_model(SEED)
    for name, p in model.named_parameters():
        after_step = torch.cat([r["fully_shard"]["local"][name] for r in ranks])  # dim-0 slices
        torch.testing.assert_close(after_step, whole["params"][name], rtol=0, atol=1e-12)
        for r in ranks:
            f = r["fully_shard"]
            assert f["type"][name] == "DTensor"
            assert f["placements"][name] == [repr(Shard(0))] == ["Shard(dim=0)"]
            assert f["shapes"][name] == p.shape
            assert f["grad_local_shapes"][name] == f["local"][name].shape
            assert f["state_local_shapes"][name] == f["local"][name].shape
            torch.testing.assert_close(f["grads"][name], whole["grads"][name], rtol=0, atol=1e-12)
            torch.testing.assert_close(f["params"][name], whole["params"][name], rtol=0, atol=1e-12)


def test_two_heads_uses_one_layer() -> None:
    model = TwoHeads()
    model(torch.ones(2, 2)).sum().backward()
    assert model.used.weight.grad is not None
    assert model.unused.weight.grad is None


def test_micro_batches_must_be_at_least_two() -> None:
    with pytest.raises(ValueError, match="micro_batches must be >= 2, got 1"):
        accumulate_no_sync(0, 8, micro_batches=1)
    with pytest.raises(TypeError, match="micro_batches must be an int, got float"):
        accumulate_no_sync(0, 8, micro_batches=2.0)  # type: ignore[arg-type]


def test_a_batch_that_does_not_split_is_refused_on_every_rank() -> None:
    with pytest.raises(RuntimeError, match=r"rank 1 of 2: failed:(.|\n)*batch_size must be"):
        run_workers(fsdp2_step, 0, 3, world_size=2)


WORKERS_OUTSIDE_A_GROUP: list[tuple[str, Any]] = [
    ("ddp_broadcast", lambda folder: ddp_broadcast()),
    ("save_on_rank0", lambda folder: save_on_rank0(folder)),
    ("accumulate_no_sync", lambda folder: accumulate_no_sync(0, 8)),
    ("unused_parameter", lambda folder: unused_parameter()),
    ("sync_batchnorm_on_cpu", lambda folder: sync_batchnorm_on_cpu()),
    ("fsdp2_step", lambda folder: fsdp2_step(0, 8)),
    ("practice", lambda folder: practice(folder)),
]


@pytest.mark.parametrize(("name", "call"), WORKERS_OUTSIDE_A_GROUP)
def test_workers_called_outside_a_process_group_say_so(
    name: str, call: Any, tmp_path: Path
) -> None:
    # before: torch's "Default process group has not been initialized" (naming no call),
    # and sync_batchnorm_on_cpu returned a result that meant nothing
    with pytest.raises(
        RuntimeError, match=f"{name} is a worker for run_workers: it needs a joined"
    ):
        call(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda d: save_on_rank0(3), TypeError, "folder must be a str or os.PathLike, got int"),  # type: ignore[arg-type]
        (lambda d: save_on_rank0(f"{d}/missing"), ValueError, "folder must be an existing directory"),
        (lambda d: save_on_rank0(d, map_location="gpu"), ValueError, "map_location='gpu' is not a device"),
        (lambda d: save_on_rank0(d, map_location=3), TypeError, "map_location must be a str or a torch.device"),  # type: ignore[arg-type]
        (lambda d: accumulate_no_sync("3", 8), TypeError, "seed must be an int, got str"),  # type: ignore[arg-type]
        (lambda d: accumulate_no_sync(0, 0), ValueError, "batch_size must be >= 1, got 0"),
        (lambda d: fsdp2_step(0, 8, lr=float("nan")), ValueError, "lr must be a finite number"),
        (lambda d: fsdp2_step(0, 2**40), ValueError, "batch_size must be <= 1048576"),
        (lambda d: practice(d, seed=None), TypeError, "seed must be an int, got NoneType"),  # type: ignore[arg-type]
        (lambda d: practice(d, batch_size=True), TypeError, "batch_size must be an int, got bool"),
        (lambda d: practice(f"{d}/missing"), ValueError, "folder must be an existing directory"),
    ],
)  # fmt: skip
def test_worker_arguments_are_checked_before_the_process_group(
    call: Any, error: type[Exception], match: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=match):
        call(str(tmp_path))


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (3, TypeError, "x must be a torch.Tensor, got int"),
        (torch.ones(3, 3), ValueError, r"x must be a torch.float32 tensor on cpu of shape \(\.\.\., 2\), got torch.float32 on cpu of shape \(3, 3\)"),
        (torch.tensor(1.0), ValueError, r"x must be .* got torch.float32 on cpu of shape \(\)"),
        (torch.ones(3, 2, dtype=torch.float64), ValueError, r"x must be a torch.float32 tensor .* got torch.float64"),
        (torch.ones(3, 2, device="meta"), ValueError, r"x must be .* got torch.float32 on meta"),
        (torch.eye(2).to_sparse(), ValueError, "x must be a strided"),
    ],
)  # fmt: skip
def test_two_heads_names_a_wrong_input(x: object, error: type[Exception], match: str) -> None:
    # before: torch's "mat1 and mat2 shapes cannot be multiplied (3x3 and 2x1)"
    with pytest.raises(error, match=match):
        TwoHeads()(x)

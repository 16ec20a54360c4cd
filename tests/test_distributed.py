"""pytorch_memo.distributed, run for real: two (or three) CPU processes joined by gloo."""

from __future__ import annotations

import socket

import pytest
import torch

from pytorch_memo.distributed import (
    ENV_VARS,
    all_reduce_sum,
    ddp_step,
    free_port,
    rank_info,
    reference_step,
    run_torchrun,
    run_workers,
)


def test_free_port_can_be_bound_on_localhost() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_rank_info_sees_torchrun_variables() -> None:
    info = run_workers(rank_info, world_size=2)
    assert [i["rank"] for i in info] == [0, 1]
    for rank, i in enumerate(info):
        assert i["world_size"] == 2
        assert i["backend"] == "gloo"
        assert set(i["env"]) == set(ENV_VARS)
        assert i["env"]["RANK"] == i["env"]["LOCAL_RANK"] == str(rank)
        assert i["env"]["WORLD_SIZE"] == "2"
        assert i["env"]["MASTER_ADDR"] == "127.0.0.1"
    assert info[0]["env"]["MASTER_PORT"] == info[1]["env"]["MASTER_PORT"]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_all_reduce_sums_over_ranks(world_size: int) -> None:
    out = run_workers(all_reduce_sum, world_size=world_size)
    befores = torch.stack([before for before, _ in out])
    for rank, (before, after) in enumerate(out):
        assert torch.equal(before, torch.tensor([rank + 1.0, 10.0 * (rank + 1)]))
        assert torch.equal(after, befores.sum(0))


@pytest.mark.parametrize(("world_size", "batch_size"), [(2, 8), (2, 2), (3, 6)])
def test_ddp_gradients_equal_across_ranks_and_the_full_batch(
    world_size: int, batch_size: int
) -> None:
    ranks = run_workers(ddp_step, 7, batch_size, world_size=world_size)
    ref = reference_step(7, batch_size)
    assert [r["rank"] for r in ranks] == list(range(world_size))
    for name, grad in ref["grads"].items():
        for r in ranks:
            assert torch.equal(r["grads"][name], ranks[0]["grads"][name])  # bit for bit
            assert torch.equal(r["params"][name], ranks[0]["params"][name])
        torch.testing.assert_close(ranks[0]["grads"][name], grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(ranks[0]["params"][name], ref["params"][name])
    # each rank's loss is its shard's mean; their mean is the full batch's mean
    mean_loss = sum(r["loss"] for r in ranks) / world_size
    assert mean_loss == pytest.approx(ref["loss"], rel=1e-12)


def test_a_failing_rank_is_reported_with_its_traceback() -> None:
    with pytest.raises(RuntimeError, match=r"rank 0 of 2: failed:(.|\n)*batch_size must be"):
        run_workers(ddp_step, 0, 3, world_size=2)


def test_an_unpicklable_worker_is_refused_before_any_process_runs() -> None:
    with pytest.raises(TypeError, match=r"worker must be a module-level function .*<lambda>"):
        run_workers(lambda: 0, world_size=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"world_size": 0}, ValueError, "world_size must be >= 1, got 0"),
        ({"world_size": 2.0}, TypeError, "world_size must be an int, got float"),
        ({"timeout": 0}, ValueError, "timeout must be > 0 seconds, got 0"),
        ({"timeout": float("nan")}, ValueError, "timeout must be > 0 seconds, got nan"),
        ({"timeout": "5"}, TypeError, "timeout must be a number of seconds, got str: '5'"),
        ({"timeout": True}, TypeError, "timeout must be a number of seconds, got bool: True"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        run_workers(rank_info, **kwargs)  # type: ignore[arg-type]


def test_reference_step_rejects_a_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        reference_step(0, 0)


def test_torchrun_sets_the_variables() -> None:
    ranks = run_torchrun(nproc=2)
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank, r in enumerate(ranks):
        env = r["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"


def test_torchrun_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="nproc must be >= 1, got 0"):
        run_torchrun(nproc=0)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got NoneType"):
        run_torchrun(timeout=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be > 0 seconds, got -1"):
        run_torchrun(timeout=-1)

"""Data-parallel training in practice: workers for :func:`~pytorch_memo.distributed.run_workers`.

Each worker runs inside a joined
``gloo`` group, on CPU tensors, and returns plain data (tensors, strings, shapes) that
the chapter checks against plain torch in one process:

- :func:`ddp_broadcast`: ``DistributedDataParallel`` starts every rank from rank 0's
  weights;
- :func:`save_on_rank0`: rank 0 saves, ``dist.barrier()``, every rank loads with
  ``map_location``;
- :func:`accumulate_no_sync`: gradient accumulation under ``no_sync``, all-reduces
  counted by a communication hook;
- :func:`unused_parameter`: what DDP does with a parameter that gets no gradient, with
  and without ``find_unused_parameters``;
- :func:`sync_batchnorm_on_cpu`: ``SyncBatchNorm`` given CPU tensors inside a group;
- :func:`fsdp2_step`: one step of a model sharded with FSDP2's ``fully_shard``;
- :func:`practice`: all of them, one after the other, in one launch (starting processes
  is the slow part).

The models and batches are :func:`~pytorch_memo.distributed.make_model` and
:func:`~pytorch_memo.distributed.make_batch` (float64), so that a rank's result can be
compared with :func:`~pytorch_memo.distributed.reference_step` or any single-process
computation to within rounding.
"""

# No `from __future__ import annotations` here: DDP's register_comm_hook reads the hook's
# annotations at run time and accepts only the real classes, not strings.
import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from pytorch_memo._checks import (
    check_device,
    check_int,
    check_number,
    check_path,
    check_process_group,
    check_tensor,
)
from pytorch_memo.distributed import MAX_BATCH, SEED_RANGE, make_batch, make_model

__all__ = [
    "TwoHeads",
    "accumulate_no_sync",
    "ddp_broadcast",
    "fsdp2_step",
    "practice",
    "save_on_rank0",
    "sync_batchnorm_on_cpu",
    "unused_parameter",
]


def _check_seed_and_batch(seed: Any, batch_size: Any) -> None:
    check_int("seed", seed, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1])
    check_int("batch_size", batch_size, minimum=1, maximum=MAX_BATCH)


def _check_folder(folder: Any) -> Path:
    path = check_path("folder", folder)
    if not path.is_dir():
        msg = (
            f"folder must be an existing directory (rank 0 saves model.pt in it), got {str(path)!r}"
        )
        raise ValueError(msg)
    return path


def _parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _shard(batch_size: int, parts: int) -> slice:
    """This rank's contiguous share of a batch that must split evenly into ``parts``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if batch_size % parts:
        msg = f"batch_size must be a multiple of {parts} (ranks x micro-batches), got {batch_size}"
        raise ValueError(msg)
    size = batch_size // world
    return slice(rank * size, (rank + 1) * size)


def ddp_broadcast() -> dict[str, torch.Tensor]:
    """Worker: each rank builds a *different* model (seeded by its rank) and wraps it in DDP.

    Returns:
        The parameters after ``DistributedDataParallel(...)`` was built, by name: rank 0's
        initial weights on every rank.

    Raises:
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> from pytorch_memo.distributed import run_workers
        >>> first, second = run_workers(ddp_broadcast, world_size=2)
        >>> all(torch.equal(first[n], second[n]) for n in first)
        True
    """
    check_process_group("ddp_broadcast")
    model = DistributedDataParallel(make_model(dist.get_rank()))
    return _parameters(model.module)


def save_on_rank0(folder: str, map_location: str = "cpu") -> dict[str, Any]:
    """Worker: rank 0 saves the model's weights, a barrier, then every rank loads them.

    The file holds ``model.module.state_dict()`` (the wrapped model's keys, without
    DDP's ``module.`` prefix). ``dist.barrier()`` keeps every rank from reading before
    rank 0 has written.

    Args:
        folder: an existing folder that every rank can read (one machine here).
        map_location: where ``torch.load`` puts the loaded tensors.

    Returns:
        ``rank``, the keys of the DDP wrapper's own ``state_dict`` (``wrapper_keys``),
        the ``loaded`` state dict, the ``devices`` it landed on and the model's own
        ``weights``.

    Raises:
        TypeError: ``folder`` is not a path, or ``map_location`` not a str or device.
        ValueError: ``folder`` is not an existing directory, or ``map_location`` not a
            device string.
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> import tempfile
        >>> from pytorch_memo.distributed import run_workers
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     ranks = run_workers(save_on_rank0, folder, world_size=2)
        >>> sorted(ranks[1]["loaded"]) == sorted(ranks[0]["weights"])
        True
    """
    path = _check_folder(folder) / "model.pt"
    device = check_device("map_location", map_location)  # "cpu:0" as "cpu", for torch.load
    check_process_group("save_on_rank0")
    rank = dist.get_rank()
    model = DistributedDataParallel(make_model(0))
    if rank == 0:
        torch.save(model.module.state_dict(), path)
    dist.barrier()  # no rank goes on before rank 0 has written the file
    loaded = torch.load(path, map_location=device, weights_only=True)
    return {
        "rank": rank,
        "wrapper_keys": list(model.state_dict()),
        "loaded": loaded,
        "devices": sorted({str(t.device) for t in loaded.values()}),
        "weights": _parameters(model.module),
    }


def accumulate_no_sync(seed: int, batch_size: int, micro_batches: int = 2) -> dict[str, Any]:
    """Worker: accumulate gradients over micro-batches, all-reducing only at the last one.

    Each rank takes its contiguous share of :func:`~pytorch_memo.distributed.make_batch` and splits it into
    ``micro_batches`` equal parts. Every part but the last runs forward and backward
    under ``model.no_sync()``; each part's mean loss is divided by ``micro_batches``, so
    the accumulated gradient is that of the rank's whole share, and the final all-reduce
    makes it the whole batch's. A communication hook counts DDP's all-reduces.

    Args:
        seed: seeds the model and the batch.
        batch_size: the global batch; a multiple of ranks x ``micro_batches``.
        micro_batches: parts per rank, at least 2.

    Returns:
        ``rank``; ``local_grads`` and ``all_reduces_in_no_sync`` right after the parts run
        under ``no_sync``; ``grads`` and ``all_reduces`` after the last part.

    Raises:
        TypeError: ``seed``, ``batch_size`` or ``micro_batches`` is not an int.
        ValueError: ``seed`` or ``batch_size`` is out of range, ``micro_batches`` < 2, or
            ``batch_size`` does not split evenly.
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> from pytorch_memo.distributed import run_workers
        >>> ranks = run_workers(accumulate_no_sync, 0, 8, world_size=2)
        >>> [(r["all_reduces_in_no_sync"], r["all_reduces"] > 0) for r in ranks]
        [(0, True), (0, True)]
    """
    _check_seed_and_batch(seed, batch_size)
    check_int("micro_batches", micro_batches, minimum=2)
    check_process_group("accumulate_no_sync")
    share = _shard(batch_size, dist.get_world_size() * micro_batches)
    model = DistributedDataParallel(make_model(seed))
    calls: list[int] = []

    def counting_allreduce(
        state: Any,
        bucket: dist.GradBucket,  # type: ignore[name-defined]
    ) -> torch.futures.Future[torch.Tensor]:
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)  # DDP's own: average over ranks

    model.register_comm_hook(None, counting_allreduce)
    x, y = make_batch(seed, batch_size)
    parts = list(zip(x[share].chunk(micro_batches), y[share].chunk(micro_batches), strict=True))
    found: dict[str, Any] = {"rank": dist.get_rank()}
    for index, (inputs, targets) in enumerate(parts):
        last = index == len(parts) - 1
        context: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if last else model.no_sync()
        )
        with context:
            loss = nn.functional.mse_loss(model(inputs), targets) / micro_batches
            torch.autograd.backward(loss)
        if index == len(parts) - 2:
            found["local_grads"] = _grads(model.module)
            found["all_reduces_in_no_sync"] = len(calls)
    found["grads"] = _grads(model.module)
    found["all_reduces"] = len(calls)
    return found


def _grads(module: nn.Module) -> dict[str, torch.Tensor | None]:
    return {
        name: None if p.grad is None else p.grad.detach().clone()
        for name, p in module.named_parameters()
    }


class TwoHeads(nn.Module):
    """A model with a layer that its ``forward`` never uses (``unused``).

    ``forward`` takes tensors of shape ``(..., 2)`` of the layers' dtype and device
    (float32 on CPU as built) and refuses another input, naming ``x``.

    Example:
        >>> TwoHeads()(torch.ones(3, 2)).shape
        torch.Size([3, 1])
    """

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(2, 1)
        self.unused = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Only ``self.used`` takes part."""
        _check_input(x, self.used)
        out: torch.Tensor = self.used(x)
        return out


def _check_input(x: Any, layer: nn.Linear) -> None:
    """Refuse an ``x`` that ``layer`` cannot take, naming it (not torch's ``mat1``)."""
    check_tensor("x", x)
    weight = layer.weight
    if (
        x.dim() == 0
        or x.shape[-1] != layer.in_features
        or (x.dtype, x.device) != (weight.dtype, weight.device)
    ):
        msg = (
            f"x must be a {weight.dtype} tensor on {weight.device} of shape "
            f"(..., {layer.in_features}), got {x.dtype} on {x.device} of shape {tuple(x.shape)}"
        )
        raise ValueError(msg)


def unused_parameter() -> dict[str, Any]:
    """Worker: DDP on :class:`TwoHeads`, without and with ``find_unused_parameters``.

    Without the flag, one forward and backward run, then the next forward is tried
    (DDP refuses it); with ``find_unused_parameters=True``, two full steps run.

    Returns:
        ``backwards_before_error`` (how many backward calls went through without the
        flag), ``error`` (the message of the refused forward, or None) and ``grads``
        of the model run with the flag, by name (None where no gradient arrived).

    Raises:
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> from pytorch_memo.distributed import run_workers
        >>> ranks = run_workers(unused_parameter, world_size=2)
        >>> "find_unused_parameters=True" in ranks[0]["error"], ranks[1]["grads"]["unused.bias"]
        (True, None)
    """
    check_process_group("unused_parameter")
    torch.manual_seed(0)
    x = torch.ones(1, 2)
    plain = DistributedDataParallel(TwoHeads())
    backwards = 0
    error = None
    try:
        for _ in range(2):
            torch.autograd.backward(plain(x).sum())
            backwards += 1
    except RuntimeError as refused:
        error = str(refused)
    found = DistributedDataParallel(TwoHeads(), find_unused_parameters=True)
    for _ in range(2):
        torch.autograd.backward(found(x).sum())
    return {"backwards_before_error": backwards, "error": error, "grads": _grads(found.module)}


def sync_batchnorm_on_cpu() -> dict[str, Any]:
    """Worker: a model converted to ``SyncBatchNorm``, given CPU tensors, in a group.

    Returns:
        The converted layer's class name (``layer``); the messages of the errors that the
        training-mode forward and wrapping the model in DDP raised (``train_error``,
        ``ddp_error``; None where nothing was raised); in eval mode, the
        converted model's output and that of the same model before conversion
        (``eval_output``, ``eval_reference``).

    Raises:
        RuntimeError: called outside a process group (not through ``run_workers``), where
            ``SyncBatchNorm`` would not refuse the training-mode forward.

    Example:
        >>> from pytorch_memo.distributed import run_workers
        >>> run_workers(sync_batchnorm_on_cpu, world_size=2)[0]["layer"]
        'SyncBatchNorm'
    """
    check_process_group("sync_batchnorm_on_cpu")  # outside one, its results mean nothing
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).eval()
    x = torch.randn(5, 3)
    expected = reference(x).detach()
    convert = nn.SyncBatchNorm.convert_sync_batchnorm
    converted = convert(reference.train())  # type: ignore[no-untyped-call]
    train_error = ddp_error = None
    try:
        converted(x)
    except ValueError as refused:
        train_error = str(refused)
    try:
        DistributedDataParallel(converted)
    except ValueError as refused:
        ddp_error = str(refused)
    converted.eval()
    return {
        "layer": type(converted[1]).__name__,
        "train_error": train_error,
        "ddp_error": ddp_error,
        "eval_output": converted(x).detach(),
        "eval_reference": expected,
    }


def fsdp2_step(seed: int, batch_size: int, lr: float = 0.1) -> dict[str, Any]:
    """Worker: :func:`~pytorch_memo.distributed.make_model` sharded with FSDP2 (``fully_shard``), one SGD step.

    Each ``Linear`` and then the whole model go through ``fully_shard``; each rank runs
    its contiguous share of the batch, then ``SGD(lr, momentum=0.9)`` steps (its first
    step is ``p -= lr * grad``, the step of :func:`~pytorch_memo.distributed.reference_step`).

    Args:
        seed: seeds the model and the batch.
        batch_size: the global batch; a multiple of the world size.
        lr: the learning rate.

    Returns:
        ``rank``; by parameter name: its ``type``, its ``placements`` (as ``repr``
        strings), the ``local`` shard this rank holds after the step and the full
        ``shapes``; the local shapes of the gradient
        (``grad_local_shapes``) and of the optimizer's momentum buffer
        (``state_local_shapes``); the full gradients (``grads``) and parameters after
        the step (``params``), gathered from all ranks.

    Raises:
        TypeError: ``seed`` or ``batch_size`` is not an int, or ``lr`` not a number.
        ValueError: an argument is out of range, or ``batch_size`` does not split evenly.
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> from pytorch_memo.distributed import run_workers
        >>> ranks = run_workers(fsdp2_step, 0, 8, world_size=2)
        >>> [r["local"]["0.weight"].shape for r in ranks]
        [torch.Size([3, 4]), torch.Size([3, 4])]
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    _check_seed_and_batch(seed, batch_size)
    check_number("lr", lr)
    check_process_group("fsdp2_step")
    share = _shard(batch_size, dist.get_world_size())
    model = make_model(seed)
    # A CPU mesh: without one, fully_shard builds its mesh on the accelerator when the
    # machine has one, and moves the parameters there (the batch stays on the CPU).
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model.children():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    params: dict[str, DTensor] = {}
    for name, p in model.named_parameters():
        if not isinstance(p, DTensor):  # pragma: no cover - fully_shard makes DTensors
            msg = f"fully_shard left {name} a {type(p).__name__}, not a DTensor"
            raise TypeError(msg)
        params[name] = p
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = make_batch(seed, batch_size)
    torch.autograd.backward(nn.functional.mse_loss(model(x[share]), y[share]))
    grads = {name: _dtensor(p.grad) for name, p in params.items()}
    optimizer.step()
    state = {name: _dtensor(optimizer.state[p]["momentum_buffer"]) for name, p in params.items()}
    return {
        "rank": dist.get_rank(),
        "type": {name: type(p).__name__ for name, p in params.items()},
        "placements": {name: [repr(pl) for pl in p.placements] for name, p in params.items()},
        "local": {name: p.to_local().detach().clone() for name, p in params.items()},
        "shapes": {name: p.shape for name, p in params.items()},
        "grad_local_shapes": {name: g.to_local().shape for name, g in grads.items()},
        "state_local_shapes": {name: s.to_local().shape for name, s in state.items()},
        "grads": {name: g.full_tensor() for name, g in grads.items()},
        "params": {name: p.full_tensor().detach() for name, p in params.items()},
    }


def _dtensor(value: Any) -> Any:
    """``value`` if it is a DTensor (a sharded gradient or optimizer state)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):  # pragma: no cover - FSDP2 shards these
        msg = f"expected a DTensor under fully_shard, got {type(value).__name__}"
        raise TypeError(msg)
    return value


def practice(folder: str, seed: int = 0, batch_size: int = 8) -> dict[str, Any]:
    """Worker: every worker of this module, one after the other, in the same processes.

    Args:
        folder: for :func:`save_on_rank0`.
        seed: for :func:`accumulate_no_sync` and :func:`fsdp2_step`.
        batch_size: for the same two; a multiple of 2 x the world size.

    Returns:
        A dict of each worker's result, by topic (``broadcast``, ``save``, ``no_sync``,
        ``unused``, ``sync_batchnorm``, ``fully_shard``).

    Raises:
        TypeError, ValueError: an argument is refused, before any worker runs.
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> import tempfile
        >>> from pytorch_memo.distributed import run_workers
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     ranks = run_workers(practice, folder, world_size=2, timeout=120)
        >>> sorted(ranks[0])
        ['broadcast', 'fully_shard', 'no_sync', 'save', 'sync_batchnorm', 'unused']
    """
    _check_folder(folder)
    _check_seed_and_batch(seed, batch_size)
    check_process_group("practice")
    return {
        "broadcast": ddp_broadcast(),
        "save": save_on_rank0(folder),
        "no_sync": accumulate_no_sync(seed, batch_size),
        "unused": unused_parameter(),
        "sync_batchnorm": sync_batchnorm_on_cpu(),
        "fully_shard": fsdp2_step(seed, batch_size),
    }

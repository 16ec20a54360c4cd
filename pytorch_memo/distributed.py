"""Run ``torch.distributed`` for real on one machine: a few CPU processes, ``gloo``.

:func:`run_workers` starts
``world_size`` processes the way ``torchrun`` does (it sets ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), joins the process group in each, calls
a worker function there and hands back what every rank returned. The workers below are
module-level functions so that the ``spawn`` start method can pickle them.

Everything stays on ``127.0.0.1`` with a port chosen at run time, is bounded by a
timeout, and ends with ``destroy_process_group``.
"""

from __future__ import annotations

import datetime as dt
import inspect
import io
import json
import math
import multiprocessing as mp
import os
import pickle
import queue
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from pytorch_memo._checks import (
    _shown,
    check_callable,
    check_int,
    check_number,
    check_process_group,
    check_seconds,
)
from pytorch_memo._compat import ddp_lazy_imports
from pytorch_memo._procs import descendants, kill_tree

__all__ = [
    "ENV_VARS",
    "MAX_PROCESSES",
    "SEED_RANGE",
    "all_reduce_sum",
    "ddp_step",
    "free_port",
    "make_batch",
    "make_model",
    "rank_info",
    "reference_step",
    "run_torchrun",
    "run_workers",
]

HOST = "127.0.0.1"
MAX_PROCESSES = 64
"""The most ranks :func:`run_workers` (and processes :func:`run_torchrun`) starts."""
MAX_BATCH = 2**20
"""The largest batch :func:`make_batch` makes (40 MiB of float64 inputs and targets)."""
SEED_RANGE = (-(2**63), 2**64 - 1)
"""The seeds ``torch.manual_seed`` accepts."""
ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The variables ``torchrun`` sets in each process and ``init_process_group`` reads."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Returns:
        The port number the operating system picked for a throwaway socket.

    Example:
        >>> 1024 <= free_port() <= 65535
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


_JOIN_ATTEMPTS = 3
_JOINED, _JOIN_FAILED, _FAILED = "ok", "join failed", "failed"
_GRACE = 5.0
"""Seconds the other ranks are given to report after one rank failed; then they are
stopped (they may be waiting for the failed rank in a collective)."""
_UNLOADABLE = (
    "the started process could not load the worker (it imports the worker's module and "
    "finds the worker there by name: define it at module level in a .py file it can "
    "import)\n"
)


class _Recorder(pickle.Pickler):
    """A pickler that notes the functions and classes it pickles (by reference)."""

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self.by_reference: list[Any] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType):
            self.by_reference.append(obj)
        return NotImplemented  # pickle it as usual


class _Discard:
    """A file that forgets what is written to it: checking pickles keeps no copy."""

    def write(self, data: Any) -> int:
        return len(data)


class _ArgumentRecorder(_Recorder):
    """A :class:`_Recorder` for the worker's arguments, which multiprocessing sends.

    What multiprocessing's own pickler sends its own way (tensors and storages through
    torch's shared memory, connections, sockets: ``ForkingPickler``'s reducers) is
    taken as it is, without pickling its data, as is its type's reference.
    """

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in _forking_reducers():
            self.by_reference.append(type(obj))
            return (tuple, ())  # sent by multiprocessing's reducer: nothing to check
        return super().reducer_override(obj)


def _forking_reducers() -> Any:
    """The types ``multiprocessing``'s pickler sends with reducers of its own (torch
    registers its tensors and storages there when it is imported)."""
    from multiprocessing.reduction import ForkingPickler

    return getattr(ForkingPickler, "_extra_reducers", {})


def _main_reaches_children() -> bool:
    """Whether a started process can import the functions ``__main__`` defines.

    multiprocessing re-runs ``__main__`` in each started process, from its module name
    (``python -m mod``) or from its file (``python script.py``), but not a package's
    ``__main__`` module (``python -m pkg``), and there is neither for a notebook kernel,
    ``python -c`` or an interactive session (``multiprocessing.spawn``).
    """
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name != "__main__" and not name.endswith(".__main__")
    return getattr(main, "__file__", None) is not None


_FILELESS_MAIN = (
    "is defined in __main__, which has no file a started process could import (a "
    "notebook, python -c, an interactive session); define it in a module (a .py file next "
    "to the notebook or on sys.path) and import it from there"
)


def _unimportable(recorder: _Recorder) -> Any:
    """The first function or class ``recorder`` pickled by reference to a ``__main__``
    that started processes cannot import, or None."""
    for obj in recorder.by_reference:
        if getattr(obj, "__module__", None) == "__main__" and not _main_reaches_children():
            return obj
    return None


def _check_takes(worker: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Raise a TypeError if ``worker``'s signature does not take ``worker(*args)``,
    the call each rank makes (a callable without a signature is let through)."""
    try:
        # the wrapper's own signature: a decorator may supply arguments (follow_wrapped)
        signature = inspect.signature(worker, follow_wrapped=False)
    except (TypeError, ValueError):  # some builtins have none: the ranks will tell
        return
    try:
        signature.bind(*args)
    except TypeError as error:
        count = f"{len(args)} positional argument{'' if len(args) == 1 else 's'}"
        msg = (
            f"worker must take the {count} given after it (args), got a callable with "
            f"signature {signature} ({error})"
        )
        raise TypeError(msg) from None


def _check_args(args: tuple[Any, ...]) -> None:
    """Raise a TypeError for an argument that cannot reach the started processes.

    Each one is pickled into nothing, as a check: multiprocessing sends it for real
    (tensors through shared memory, a queue by inheritance), and refuses here what it
    would fail to send there. An argument that only its pickler may send (a queue, a
    lock: plain pickle says "should only be shared between processes through
    inheritance") is left to it.
    """
    for i, value in enumerate(args):
        expected = f"args[{i}] must be an object that pickle can send to another process"
        try:
            _dump_or_refuse(_ArgumentRecorder(_Discard()), value, expected, _shown(value))
        except RuntimeError:  # shared by inheritance only: multiprocessing's to send
            continue


def _dump_or_refuse(recorder: _Recorder, value: Any, expected: str, shown: str) -> None:
    """Pickle ``value`` with ``recorder``, or raise ``TypeError("{expected}, got {shown}
    ...")`` when pickle refuses it or it refers to a ``__main__`` that started processes
    cannot import."""
    try:
        recorder.dump(value)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise TypeError(f"{expected}, got {shown} ({error})") from None
    obj = _unimportable(recorder)
    if obj is not None:
        raise TypeError(f"{expected}, got {shown}: {obj.__qualname__!r} {_FILELESS_MAIN}")


def _pickled_worker(worker: Callable[..., Any]) -> bytes:
    """``worker`` pickled for the started processes, or a TypeError for one that pickle
    refuses or that refers to a ``__main__`` they cannot import."""
    buffer = io.BytesIO()
    expected = "worker must be a module-level function that pickle can send to another process"
    _dump_or_refuse(_Recorder(buffer), worker, expected, repr(worker))
    return buffer.getvalue()


def _entry(
    task: bytes,
    args: tuple[Any, ...],
    rank: int,
    world_size: int,
    port: int,
    timeout: float,
    results: Any,
) -> None:
    """Body of one started process: load the worker, set torchrun's variables, join,
    work, leave.

    The worker comes pickled (``task``) and is loaded here, not by multiprocessing
    before this runs: a worker this process cannot load is then reported to the parent
    with its traceback, instead of being printed on this process's stderr (out of
    sight in a notebook) before it exits with code 1.
    """
    try:
        worker = pickle.loads(task)
    except BaseException:  # noqa: BLE001 - any failure is reported to the parent
        results.put((rank, _FAILED, _UNLOADABLE + traceback.format_exc()))
        return
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),  # one machine: the rank on this machine is the rank
        WORLD_SIZE=str(world_size),
        MASTER_ADDR=HOST,
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", timeout=dt.timedelta(seconds=timeout))
    except BaseException:  # noqa: BLE001 - any failure is reported to the parent
        results.put((rank, _JOIN_FAILED, traceback.format_exc()))
        return
    try:
        try:
            value = worker(*args)
        finally:
            dist.destroy_process_group()
        # Plain pickle copies tensors' bytes (torch.multiprocessing's reducers would
        # share memory that vanishes when this process exits).
        results.put((rank, _JOINED, pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - any failure is reported to the parent
        results.put((rank, _FAILED, traceback.format_exc()))


def _context() -> Any:
    """``forkserver`` where there is one (Linux, macOS): torch is imported once, in the
    server, and each worker is forked from it in milliseconds; ``spawn`` elsewhere."""
    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - Windows
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # DDP imports torch._dynamo on construction: do it once, in the server.
    ctx.set_forkserver_preload(["torch", "torch.distributed", *ddp_lazy_imports(), __name__])
    return ctx


def _stop(procs: list[Any], deadline: float | None) -> None:
    """Let the ranks exit until ``deadline`` (None: stop them now), then kill the rest.

    A rank is killed with every process it started (its DataLoader workers, a
    subprocess...): killing the rank alone would leave those running as orphans.
    """
    for proc in procs:
        if proc.pid is None:  # never started
            continue
        if deadline is not None:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
        if proc.is_alive() or descendants(proc.pid):
            kill_tree(proc.pid)
        proc.join()


def _launch(
    task: bytes, args: tuple[Any, ...], world_size: int, deadline: float
) -> dict[int, tuple[str, Any]]:
    """Start the ranks once and collect their reports (all, or up to a failed join)."""
    ctx = _context()
    results = ctx.Queue()
    port = free_port()
    timeout = deadline - time.monotonic()
    # Not daemons: a daemonic process may not start children (DataLoader workers).
    # Every exit from here stops them, with their children, instead.
    procs = [
        ctx.Process(
            target=_entry,
            args=(task, args, rank, world_size, port, timeout, results),
            daemon=False,
        )
        for rank in range(world_size)
    ]
    got: dict[int, tuple[str, Any]] = {}
    try:
        try:
            for proc in procs:
                proc.start()
            _collect(procs, results, got, world_size, deadline)
        except BaseException:  # a timeout, a dead rank, KeyboardInterrupt: stop them now
            _stop(procs, None)
            raise
        _stop(procs, deadline)
    finally:
        results.close()
    return got


def _collect(
    procs: list[Any],
    results: Any,
    got: dict[int, tuple[str, Any]],
    world_size: int,
    deadline: float,
) -> None:
    """Read the ranks' reports into ``got``: all of them, or up to a failure (and
    whatever the others report within :data:`_GRACE` seconds after it)."""
    grace_end = math.inf
    while len(got) < world_size:
        if time.monotonic() >= grace_end:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(set(range(world_size)) - set(got))
            msg = f"ranks {missing} did not finish within the timeout"
            raise TimeoutError(msg)
        try:
            rank, status, payload = results.get(timeout=min(left, 0.5))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:  # a process died without reporting (killed, segfault)
                msg = f"a worker process exited with code {dead[0].exitcode}"
                raise RuntimeError(msg) from None
            continue
        got[rank] = (status, payload)
        if status == _JOIN_FAILED:  # the others would wait for it: stop them all
            return
        if status == _FAILED and grace_end == math.inf:  # the others may wait for it
            grace_end = time.monotonic() + _GRACE


def run_workers(
    worker: Callable[..., Any],
    *args: Any,
    world_size: int = 2,
    timeout: float = 180.0,
) -> list[Any]:
    """Run ``worker(*args)`` in ``world_size`` fresh processes joined by ``gloo``.

    Each process gets ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_ADDR``/
    ``MASTER_PORT`` as ``torchrun`` would set them, calls
    ``dist.init_process_group("gloo")`` (which reads them), runs the worker and calls
    ``dist.destroy_process_group()``. Processes start fresh (``forkserver``, or
    ``spawn``), so the worker must be importable: a function defined at module level in
    a file, not in a notebook, ``python -c`` or an interactive session (whose
    ``__main__`` a started process cannot import: such a worker is refused before
    anything starts); a script that calls this needs the ``if __name__ == "__main__":``
    guard. The worker is pickled once, here, and loaded in each process before it
    joins; a process that cannot load it reports why, as a failed rank. Before anything
    starts, ``args`` are checked too: the worker must take them (where its signature
    says), and each must be picklable without referring to such a ``__main__``; they
    are sent as multiprocessing sends them (a tensor through shared memory, a queue by
    inheritance).

    Joining the group on localhost occasionally fails with gloo's "Connection closed
    by peer" (PyTorch's own gloo tests saw the same); such a failed join is retried
    with a fresh port, up to three attempts in all, within ``timeout``. When a rank
    fails, the others are stopped at once (they may be waiting for it in a collective)
    and its traceback is raised.

    Args:
        worker: a module-level function, or a ``functools.partial`` of one; it finds
            its rank with ``dist.get_rank()``.
        *args: positional arguments for ``worker`` (picklable).
        world_size: how many processes (ranks), at least 1 and at most
            :data:`MAX_PROCESSES`.
        timeout: seconds for the whole run, also each collective's timeout (finite).
            The default leaves room for a loaded machine, where starting each rank
            (importing torch) can take many seconds.

    Returns:
        What each rank returned, indexed by rank.

    The ranks are ordinary (not daemonic) processes, so a worker may start processes of
    its own (``DataLoader(num_workers=2)``). Whatever ends the run (every rank done, a
    failure, the timeout, ``KeyboardInterrupt``), no rank outlives it, and a rank that
    has to be stopped is killed together with every process it started.

    Raises:
        TypeError: ``worker`` is not callable, cannot be pickled (a lambda, a nested
            function), or is or refers to a function or class defined in a
            ``__main__`` that started processes cannot import (no file: a notebook,
            ``python -c``, an interactive session); the worker's signature does not take
            ``len(args)`` positional arguments; an argument cannot be pickled or refers
            to such a ``__main__``; ``world_size`` is not an int, or ``timeout`` is not
            a number.
        ValueError: ``world_size`` out of range, or ``timeout`` not positive and finite.
        RuntimeError: a rank raised or could not load the worker (the message holds
            its traceback), or every attempt to join failed.
        TimeoutError: the ranks did not all finish within ``timeout`` (they are killed).

    Example:
        >>> run_workers(rank_info, world_size=2)[1]["rank"]
        1
    """
    check_callable("worker", worker)
    check_int("world_size", world_size, minimum=1, maximum=MAX_PROCESSES)
    check_seconds("timeout", timeout)
    task = _pickled_worker(worker)
    _check_takes(worker, args)
    _check_args(args)
    deadline = time.monotonic() + timeout
    for _ in range(_JOIN_ATTEMPTS):
        got = _launch(task, args, world_size, deadline)
        if all(status != _JOIN_FAILED for status, _ in got.values()):
            break
    failed = {r: p for r, (status, p) in got.items() if status != _JOINED}
    if failed:
        report = "\n".join(f"rank {r} of {world_size}: {got[r][0]}:\n{failed[r]}" for r in failed)
        raise RuntimeError(report)
    return [pickle.loads(got[r][1]) for r in range(world_size)]


def rank_info() -> dict[str, Any]:
    """Worker: what this process knows about itself once the group is joined.

    Returns:
        ``rank``, ``world_size`` and ``backend`` from ``torch.distributed``, and the
        variables of :data:`ENV_VARS` as this process sees them.

    Raises:
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> info = run_workers(rank_info, world_size=2)
        >>> [i["rank"] for i in info], info[0]["world_size"], info[0]["backend"]
        ([0, 1], 2, 'gloo')
    """
    check_process_group("rank_info")
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
    }


def all_reduce_sum() -> tuple[torch.Tensor, torch.Tensor]:
    """Worker: rank ``r`` holds ``[r + 1, 10 * (r + 1)]``; ``all_reduce`` sums them.

    Returns:
        The tensor before and after ``dist.all_reduce(..., op=SUM)``; after it, every
        rank holds the same sum, in place.

    Raises:
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> [after.tolist() for _, after in run_workers(all_reduce_sum, world_size=3)]
        [[6.0, 60.0], [6.0, 60.0], [6.0, 60.0]]
    """
    check_process_group("all_reduce_sum")
    rank = dist.get_rank()
    tensor = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])
    before = tensor.clone()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # in place
    return before, tensor


def _check_seed(seed: object) -> int:
    return check_int("seed", seed, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1])


def _check_step(seed: object, batch_size: object, lr: object) -> float:
    """Check a step's arguments; return the learning rate as a float."""
    _check_seed(seed)
    check_int("batch_size", batch_size, minimum=1, maximum=MAX_BATCH)
    return check_number("lr", lr)


def make_model(seed: int) -> nn.Module:
    """The tiny float64 regression model of the DDP example, initialised from ``seed``.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is outside :data:`SEED_RANGE`.

    Example:
        >>> sum(p.numel() for p in make_model(0).parameters())
        37
    """
    torch.manual_seed(_check_seed(seed))
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).double()


def make_batch(seed: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``(batch_size, 4)`` and targets ``(batch_size, 1)``, float64, from ``seed``.

    Raises:
        TypeError: ``seed`` or ``batch_size`` is not an int.
        ValueError: ``seed`` is outside :data:`SEED_RANGE`, or ``batch_size`` is not in
            ``[1, MAX_BATCH]``.

    Example:
        >>> [t.shape for t in make_batch(0, 8)]
        [torch.Size([8, 4]), torch.Size([8, 1])]
    """
    gen = torch.Generator().manual_seed(_check_seed(seed))
    check_int("batch_size", batch_size, minimum=1, maximum=MAX_BATCH)
    x = torch.randn(batch_size, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(batch_size, 1, generator=gen, dtype=torch.float64)
    return x, y


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> dict[str, Any]:
    loss = nn.functional.mse_loss(model(x), y)
    torch.autograd.backward(loss)
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    grads = {n: p.grad.detach().clone() for n, p in inner.named_parameters() if p.grad is not None}
    with torch.no_grad():
        for p in inner.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    params = {n: p.detach().clone() for n, p in inner.named_parameters()}
    return {"loss": loss.item(), "grads": grads, "params": params}


def ddp_step(seed: int, batch_size: int, lr: float = 0.1) -> dict[str, Any]:
    """Worker: one SGD step of :func:`make_model` under ``DistributedDataParallel``.

    Every rank builds the model from the same seed (DDP would broadcast rank 0's
    weights anyway), takes its own contiguous shard of the batch, and calls
    ``backward``; DDP averages the gradients over the ranks during ``backward``.

    Args:
        seed: seeds the model and the batch.
        batch_size: the global batch; must divide evenly by the world size.
        lr: the SGD learning rate.

    Returns:
        ``rank``, the rank's local ``loss``, its ``grads`` and ``params`` after the step
        (dicts by parameter name).

    Raises:
        TypeError: ``seed`` or ``batch_size`` is not an int, or ``lr`` not a number.
        ValueError: an argument is out of range, or ``batch_size`` does not divide
            evenly by the world size.
        RuntimeError: called outside a process group (not through ``run_workers``).

    Example:
        >>> a, b = run_workers(ddp_step, 0, 8, world_size=2)
        >>> all(torch.equal(a["grads"][n], b["grads"][n]) for n in a["grads"])
        True
    """
    rate = _check_step(seed, batch_size, lr)
    check_process_group("ddp_step")
    rank, world = dist.get_rank(), dist.get_world_size()
    if batch_size % world:
        msg = f"batch_size must be a multiple of the world size {world}, got {batch_size}"
        raise ValueError(msg)
    model = nn.parallel.DistributedDataParallel(make_model(seed))
    x, y = make_batch(seed, batch_size)
    shard = slice(rank * batch_size // world, (rank + 1) * batch_size // world)
    return {"rank": rank, **_step(model, x[shard], y[shard], rate)}


def reference_step(seed: int, batch_size: int, lr: float = 0.1) -> dict[str, Any]:
    """The same step as :func:`ddp_step` in one process, on the whole batch.

    Raises:
        TypeError: ``seed`` or ``batch_size`` is not an int, or ``lr`` not a number.
        ValueError: an argument is out of range.

    Returns:
        ``loss`` over the whole batch, ``grads`` and ``params`` after the step.

    Example:
        >>> sorted(reference_step(0, 8)["grads"])
        ['0.bias', '0.weight', '2.bias', '2.weight']
    """
    rate = _check_step(seed, batch_size, lr)
    x, y = make_batch(seed, batch_size)
    return _step(make_model(seed), x, y, rate)


def run_torchrun(*, nproc: int = 2, timeout: float = 180.0) -> list[dict[str, Any]]:
    """Launch ``python -m torch.distributed.run`` (``torchrun``) on this module.

    ``torchrun --nproc-per-node NPROC --master-addr 127.0.0.1 --master-port PORT
    --log-dir LOGS -m pytorch_memo.distributed`` starts ``nproc`` processes; each joins a
    ``gloo`` group from the variables torchrun set and rank 0 prints what every rank saw.
    ``LOGS`` is a temporary folder removed before this returns (left to itself, torchrun
    makes a ``torchelastic_*`` folder in the temporary folder at every run and keeps it).

    On a timeout (or any exception, ``KeyboardInterrupt`` included) the launcher and
    every process it started are killed before this returns: torchrun starts each
    worker in a session of its own, out of reach of a kill of torchrun or its group.

    Args:
        nproc: processes to start, at least 1 and at most :data:`MAX_PROCESSES`.
        timeout: seconds before the launcher and its workers are killed (finite).

    Returns:
        :func:`rank_info` of every rank, indexed by rank.

    Raises:
        TypeError: ``nproc`` is not an int, or ``timeout`` is not a number.
        ValueError: ``nproc`` out of range, or ``timeout`` not positive and finite.
        RuntimeError: torchrun failed (a nonzero exit status, as when the port it was
            given is taken by the time it binds it, or no results printed); the
            message gives the exit status and ends with the last lines of its stderr.
        subprocess.TimeoutExpired: it ran past ``timeout``.

    Example:
        >>> [r["env"]["LOCAL_RANK"] for r in run_torchrun(nproc=2)]
        ['0', '1']
    """
    check_int("nproc", nproc, minimum=1, maximum=MAX_PROCESSES)
    check_seconds("timeout", timeout)
    # Without --log-dir the launcher makes a folder torchelastic_* in the temporary
    # folder at every run and leaves it there: give it one that is removed afterwards.
    with tempfile.TemporaryDirectory(prefix="memo-torchrun-") as logs:
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nproc-per-node", str(nproc),
            "--master-addr", HOST, "--master-port", str(free_port()),
            "--log-dir", logs,
            "-m", "pytorch_memo.distributed",
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        launcher = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True,  # no terminal signal reaches it but ours
        )  # fmt: skip
        try:
            stdout, stderr = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(launcher.pid)
            stdout, stderr = launcher.communicate()
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr) from None
        except BaseException:
            kill_tree(launcher.pid)
            launcher.communicate()
            raise
    ranks = _gathered(stdout) if launcher.returncode == 0 else None
    if ranks is None:
        failed = (
            f"exited with status {launcher.returncode}"
            if launcher.returncode
            else "exited with status 0 but printed no results"
        )
        msg = f"torchrun {failed}; the end of its stderr:\n{_tail(stderr)}"
        raise RuntimeError(msg)
    return ranks


_TAIL_LINES = 40
_TAIL_CHARS = 4000


def _tail(text: str) -> str:
    """The last lines of ``text`` (at most ``_TAIL_LINES`` lines and ``_TAIL_CHARS``
    characters), or a word saying it is empty."""
    lines = text.rstrip().splitlines()[-_TAIL_LINES:]
    tail = "\n".join(lines)[-_TAIL_CHARS:]
    return tail or "(nothing)"


def _gathered(stdout: str) -> list[dict[str, Any]] | None:
    """What rank 0 printed under torchrun (the last line that is a JSON list), or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("["):
            try:
                ranks = json.loads(line)
            except ValueError:
                continue
            if isinstance(ranks, list):
                return ranks
    return None


def _main() -> None:
    """What each process runs under torchrun: join, gather :func:`rank_info`, print."""
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=30))
    try:
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, rank_info())
        if dist.get_rank() == 0:
            print(json.dumps(gathered), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _main()

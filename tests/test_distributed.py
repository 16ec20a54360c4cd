"""pytorch_memo.distributed, run for real: two (or three) CPU processes joined by gloo."""

from __future__ import annotations

import functools
import importlib.machinery
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_memo.distributed
from pytorch_memo.distributed import (
    ENV_VARS,
    all_reduce_sum,
    ddp_step,
    free_port,
    make_batch,
    make_model,
    rank_info,
    reference_step,
    run_torchrun,
    run_workers,
)
from tests.processes import no_orphans
from tests.workers import (
    dataloader_sum,
    hang,
    rank1_fails_rank0_waits,
    start_a_child_then_hang,
)

pytestmark = pytest.mark.early  # a long file: handed out first (tests/conftest.py)

LOADED = 180.0
"""Timeout of the runs that should succeed: `nox` runs the checks side by side on 2 cores,
where starting each rank (importing torch) can take tens of seconds."""


def test_free_port_can_be_bound_on_localhost() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_rank_info_sees_torchrun_variables() -> None:
    info = run_workers(rank_info, world_size=2, timeout=LOADED)
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
    out = run_workers(all_reduce_sum, world_size=world_size, timeout=LOADED)
    befores = torch.stack([before for before, _ in out])
    for rank, (before, after) in enumerate(out):
        assert torch.equal(before, torch.tensor([rank + 1.0, 10.0 * (rank + 1)]))
        assert torch.equal(after, befores.sum(0))


@pytest.mark.parametrize(("world_size", "batch_size"), [(2, 8), (2, 2), (3, 6)])
def test_ddp_gradients_equal_across_ranks_and_the_full_batch(
    world_size: int, batch_size: int
) -> None:
    ranks = run_workers(ddp_step, 7, batch_size, world_size=world_size, timeout=LOADED)
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


def test_a_failing_rank_stops_the_others_at_once_with_its_traceback() -> None:
    # Rank 0 would wait in the barrier for the whole timeout; the failure of rank 1 is
    # what is raised, long before it (a GPU run once reported only "ranks [0] did not
    # finish within the timeout" here, and lost the traceback of the rank that failed).
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 of 2: failed:(.|\n)*rank 1 gives up"):
        run_workers(rank1_fails_rank0_waits, world_size=2, timeout=LOADED)
    assert time.monotonic() - start < LOADED / 2  # the grace after a failure is 5 s


def test_an_unpicklable_worker_is_refused_before_any_process_runs() -> None:
    with pytest.raises(TypeError, match=r"worker must be a module-level function .*<lambda>"):
        run_workers(lambda: 0, world_size=1)


def test_a_nested_worker_is_refused_before_any_process_runs() -> None:
    def nested() -> int:
        return 0

    with pytest.raises(TypeError, match=r"worker must be a module-level function .*<locals>"):
        run_workers(nested, world_size=1)


# -- a worker defined in a __main__ that the started processes cannot import --------------


def _no_launch(*args: object) -> object:
    raise AssertionError("run_workers started processes")


def _fake_main(monkeypatch: pytest.MonkeyPatch, **attributes: object) -> types.ModuleType:
    """Put a fresh module in place of ``__main__`` (no file, no spec unless given)."""
    main = types.ModuleType("__main__")
    for name, value in attributes.items():
        setattr(main, name, value)
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main


def _defined_in(main: types.ModuleType) -> dict[str, Any]:
    """A function and a callable class defined in ``main``, as a notebook cell would."""

    def my_worker() -> int:
        return 7

    class MyWorker:
        def __call__(self) -> int:
            return 7

    for obj in (my_worker, MyWorker):
        obj.__module__, obj.__qualname__ = "__main__", obj.__name__
        setattr(main, obj.__name__, obj)
    return {"function": my_worker, "instance": MyWorker()}


@pytest.mark.parametrize("kind", ["function", "partial", "instance"])
@pytest.mark.parametrize("spec", [None, "pkg.__main__"])
def test_a_worker_defined_in_an_unimportable_main_is_refused(
    monkeypatch: pytest.MonkeyPatch, kind: str, spec: str | None
) -> None:
    # before: pickle took it (by reference to __main__), the started processes could
    # not find it ("Can't get attribute 'my_worker' on <module '__main__' (built-in)>"
    # on their stderr, out of sight in a notebook), and the caller got only "a worker
    # process exited with code 1". A notebook kernel, python -c and an interactive
    # session have a __main__ without a file; python -m pkg runs pkg.__main__, which
    # multiprocessing does not re-run in the processes it starts.
    main = _fake_main(
        monkeypatch, __spec__=importlib.machinery.ModuleSpec(spec, None) if spec else None
    )
    defined = _defined_in(main)
    worker = {
        "function": defined["function"],
        "partial": functools.partial(ddp_step, defined["function"]),
        "instance": defined["instance"],
    }[kind]
    monkeypatch.setattr(pytorch_memo.distributed, "_launch", _no_launch)
    name = "MyWorker" if kind == "instance" else "my_worker"
    with pytest.raises(
        TypeError,
        match=rf"^worker must be a module-level function that pickle can send to another "
        rf"process, got .*: '{name}' is defined in __main__, which has no file a started "
        r"process could import .* define it in a module",
    ):
        run_workers(worker, world_size=2)


@pytest.mark.parametrize(
    "main",
    [
        {"__file__": "/somewhere/script.py"},
        {"__spec__": importlib.machinery.ModuleSpec("script", None)},
    ],
    ids=["python script.py", "python -m script"],
)
def test_a_worker_defined_in_an_importable_main_is_taken(
    monkeypatch: pytest.MonkeyPatch, main: dict[str, object]
) -> None:
    # multiprocessing re-runs the script (as __mp_main__) in each started process, which
    # finds the worker there: run_workers takes it (and starts the processes)
    defined = _defined_in(_fake_main(monkeypatch, **main))

    def launch(*args: object) -> object:  # every rank returns its rank
        return {rank: ("ok", pickle.dumps(rank)) for rank in range(2)}

    monkeypatch.setattr(pytorch_memo.distributed, "_launch", launch)
    for worker in (defined["function"], functools.partial(defined["function"])):
        assert run_workers(worker, world_size=2) == [0, 1]
    assert run_workers(defined["instance"], world_size=2) == [0, 1]


# -- arguments for the worker: checked before anything starts ----------------------------


class _Point:
    """A picklable argument whose class a test may place in a file-less ``__main__``."""


@pytest.mark.parametrize(
    ("worker", "args", "match"),
    [
        (ddp_step, (lambda: 0, 8), (r"^args\[0\] must be an object that pickle can send to "
         r"another process, got <function .*<lambda>.* \(Can't (pickle|get local object)")),
        (ddp_step, (0, [1, lambda: 0]), r"^args\[1\] must be an object that pickle can send"),
        (rank_info, (5,), (r"^worker must take the 1 positional argument given after it "
         r"\(args\), got a callable with signature \(\) -> .* \(too many positional")),
        (ddp_step, (), (r"^worker must take the 0 positional arguments given after it \(args\), "
         r"got a callable with signature \(seed: 'int', batch_size: 'int', lr: 'float' = 0.1\)"
         r" -> .* \(missing a required argument: 'seed'\)$")),
        (functools.partial(ddp_step, 0, 8), (0.1, 1), (r"^worker must take the 2 positional "
         r"arguments given after it \(args\), got a callable with signature \(lr: 'float' = ")),
    ],
    ids=["lambda", "nested lambda", "too many", "too few", "partial, too many"],
)  # fmt: skip
def test_bad_args_are_refused_before_any_process_starts(
    monkeypatch: pytest.MonkeyPatch, worker: Callable[..., Any], args: tuple[Any, ...], match: str
) -> None:
    # before: the lambda escaped from multiprocessing as AttributeError "Can't pickle
    # local object" after the resource tracker had started, and arguments the worker
    # does not take started every rank to fail there ("rank 0 of 2: failed: ...
    # TypeError: rank_info() takes 0 positional arguments but 1 was given")
    monkeypatch.setattr(pytorch_memo.distributed, "_launch", _no_launch)
    with pytest.raises(TypeError, match=match):
        run_workers(worker, *args, world_size=2)


@pytest.mark.parametrize("spec", [None, "pkg.__main__"])
def test_an_argument_from_an_unimportable_main_is_refused(
    monkeypatch: pytest.MonkeyPatch, spec: str | None
) -> None:
    # before: pickle took it (by reference to __main__), each rank died unpickling it
    # and the caller got only "a worker process exited with code 1"
    main = _fake_main(
        monkeypatch, __spec__=importlib.machinery.ModuleSpec(spec, None) if spec else None
    )
    monkeypatch.setattr(_Point, "__module__", "__main__")
    main._Point = _Point  # type: ignore[attr-defined]
    monkeypatch.setattr(pytorch_memo.distributed, "_launch", _no_launch)
    with pytest.raises(
        TypeError,
        match=r"^args\[1\] must be an object that pickle can send to another process, got "
        r"\[<.*_Point object .*\]: '_Point' is defined in __main__, which has no file a "
        r"started process could import .* define it in a module",
    ):
        run_workers(ddp_step, 0, [_Point()], world_size=2)


def test_arguments_multiprocessing_sends_itself_are_taken_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A tensor goes to the ranks through torch's shared memory and a multiprocessing
    # queue by inheritance; plain pickle copies the one and refuses the other. The check
    # does neither: each is handed to the ranks unchanged.
    queue = __import__("multiprocessing").get_context("forkserver").Queue()
    tensor = torch.zeros(3)
    launched: list[tuple[Any, ...]] = []

    def launch(task: bytes, args: tuple[Any, ...], world_size: int, deadline: float) -> object:
        launched.append(args)
        return {rank: ("ok", pickle.dumps(rank)) for rank in range(world_size)}

    def no_plain_pickling(self: torch.Tensor, protocol: int) -> object:
        raise AssertionError("the check pickled a tensor's data")

    monkeypatch.setattr(pytorch_memo.distributed, "_launch", launch)
    monkeypatch.setattr(torch.Tensor, "__reduce_ex__", no_plain_pickling)
    try:
        assert run_workers(ddp_step, tensor, queue, 0.1, world_size=2) == [0, 1]
    finally:
        queue.close()
    assert launched[0][0] is tensor
    assert launched[0][1] is queue


def test_a_partial_of_a_module_level_worker_runs() -> None:
    a, b = run_workers(functools.partial(ddp_step, 7, lr=0.5), 4, world_size=2, timeout=LOADED)
    ref = reference_step(7, 4, lr=0.5)
    for name, grad in ref["grads"].items():
        assert torch.equal(a["grads"][name], b["grads"][name])
        torch.testing.assert_close(a["grads"][name], grad, rtol=0, atol=1e-12)


def test_a_worker_a_rank_cannot_load_is_reported_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker from a module that exists only in this process: pickle takes it, the
    # started processes cannot import it. Before, each printed its traceback on its
    # stderr and the caller got only "a worker process exited with code 1".
    module = types.ModuleType("memo_only_here")
    exec("def work():\n    return 0\n", module.__dict__)  # noqa: S102 - a test's own code
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(
        RuntimeError,
        match=r"rank 0 of 2: failed:\nthe started process could not load the worker "
        r"(.|\n)*No module named 'memo_only_here'",
    ):
        run_workers(module.work, world_size=2, timeout=LOADED)


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


def test_torchrun_sets_the_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun's launcher, left to itself, makes a log folder torchelastic_* in the
    # temporary folder and leaves it there: the run must leave nothing behind.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    ranks = run_torchrun(nproc=2, timeout=LOADED)
    assert list(tmp_path.iterdir()) == [], "left in the temporary folder"
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank, r in enumerate(ranks):
        env = r["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"


def test_a_torchrun_that_cannot_bind_its_port_raises_its_status_and_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # before: IndexError "list index out of range" (its stdout had no results line)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(pytorch_memo.distributed, "free_port", lambda: taken.getsockname()[1])
        with no_orphans(), pytest.raises(RuntimeError) as failed:
            run_torchrun(nproc=2, timeout=LOADED)
    message = str(failed.value)
    assert message.startswith("torchrun exited with status 1; the end of its stderr:\n")
    assert "address already in use" in message.lower()


@pytest.mark.parametrize(
    ("exit", "expected"),
    [
        ("sys.stderr.write('launcher refused\\n'); os._exit(3)",
         "torchrun exited with status 3; the end of its stderr:\nlauncher refused"),
        ("os._exit(0)",
         "torchrun exited with status 0 but printed no results; the end of its stderr:\n(nothing)"),
    ],
    ids=["status 3", "status 0, no results"],
)  # fmt: skip
def test_a_torchrun_that_fails_or_prints_nothing_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit: str, expected: str
) -> None:
    # before: IndexError "list index out of range" for both. The launcher (the one
    # process without LOCAL_RANK) exits at startup: Python imports sitecustomize from
    # PYTHONPATH.
    (tmp_path / "sitecustomize.py").write_text(
        f"import os, sys\nif 'LOCAL_RANK' not in os.environ:\n    {exit}\n"
    )
    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{root}")
    with pytest.raises(RuntimeError) as failed:
        run_torchrun(nproc=1, timeout=LOADED)
    assert str(failed.value) == expected


def test_torchrun_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="nproc must be >= 1, got 0"):
        run_torchrun(nproc=0)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got NoneType"):
        run_torchrun(timeout=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be > 0 seconds, got -1"):
        run_torchrun(timeout=-1)


# -- issue 16: timeouts and interrupts leave no process behind; ranks may have children ---


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_rank_may_start_dataloader_workers() -> None:
    with no_orphans():
        assert run_workers(dataloader_sum, world_size=2, timeout=LOADED) == [56.0, 56.0]


def test_a_timeout_kills_each_rank_with_the_processes_it_started(tmp_path: Path) -> None:
    with no_orphans():
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] did not finish within"):
            run_workers(start_a_child_then_hang, str(tmp_path), world_size=2, timeout=15)
        assert time.monotonic() - start < 15 + 5
    children = sorted(tmp_path.glob("child-of-rank-*"))
    assert len(children) == 2, "the ranks did not get as far as starting their children"
    for record in children:
        assert not _alive(int(record.read_text()))


def test_an_interrupt_stops_the_ranks_at_once() -> None:
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        with no_orphans():
            start = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                run_workers(hang, world_size=2, timeout=100)
            assert time.monotonic() - start < 20  # not the 100 s timeout
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_torchrun_timeout_kills_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every worker torchrun starts (they have LOCAL_RANK) records its pid, then hangs:
    # Python imports sitecustomize from PYTHONPATH at startup.
    (tmp_path / "sitecustomize.py").write_text(
        "import os, time\n"
        "if 'LOCAL_RANK' in os.environ:\n"
        f"    open(os.path.join({str(tmp_path)!r}, 'rank-' + os.environ['LOCAL_RANK']), 'w')"
        ".write(str(os.getpid()))\n"
        "    time.sleep(120)\n"
    )
    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{root}")
    with no_orphans():  # torchrun's workers run in sessions of their own
        start = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            run_torchrun(nproc=2, timeout=20)
        assert time.monotonic() - start < 20 + 5
    workers = sorted(tmp_path.glob("rank-*"))
    assert len(workers) == 2, "torchrun did not get as far as starting its workers"
    for record in workers:
        assert not _alive(int(record.read_text()))


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, -float("inf")])
def test_timeouts_must_be_finite(timeout: float) -> None:
    with pytest.raises(ValueError, match=r"timeout must be (a finite number of|> 0) seconds"):
        run_workers(rank_info, timeout=timeout)
    with pytest.raises(ValueError, match=r"timeout must be (a finite number of|> 0) seconds"):
        run_torchrun(timeout=timeout)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: run_workers("rank_info"), TypeError, "worker must be callable, got str"),  # type: ignore[arg-type]
        (lambda: run_workers(rank_info, world_size=10**6), ValueError, "world_size must be <= 64"),
        (lambda: run_torchrun(nproc=65), ValueError, "nproc must be <= 64, got 65"),
        (lambda: rank_info(), RuntimeError, "rank_info is a worker for run_workers"),
        (lambda: all_reduce_sum(), RuntimeError, "all_reduce_sum is a worker for run_workers"),
        (lambda: ddp_step(0, 2), RuntimeError, "ddp_step is a worker for run_workers"),
        (lambda: ddp_step("0", 2), TypeError, "seed must be an int, got str"),  # type: ignore[arg-type]
        (lambda: ddp_step(0, 2, lr=float("nan")), ValueError, "lr must be a finite number"),
        (lambda: make_batch(0, 2**40), ValueError, r"batch_size must be <= 1048576"),
        (lambda: make_model(2**64), ValueError, rf"seed must be <= {2**64 - 1}"),
        (lambda: reference_step(0, 2, lr="0.1"), TypeError, "lr must be a number, got str"),  # type: ignore[arg-type]
    ],
)
def test_arguments_are_checked_before_any_work(
    call: Callable[[], object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call()


def test_a_worker_whose_decorator_supplies_an_argument_is_not_refused() -> None:
    """inspect.signature follows __wrapped__ by default: the wrapper's own signature
    decides what the ranks may pass."""
    import functools

    from pytorch_memo.distributed import _check_takes

    def with_rank(fn: Callable[..., int]) -> Callable[..., int]:  # supplies the rank
        @functools.wraps(fn)
        def wrapper(*args: int) -> int:
            return fn(0, *args)

        return wrapper

    @with_rank
    def worker(rank: int, scale: int) -> int:
        return rank * scale

    _check_takes(worker, (10,))  # the wrapped function alone would take 2 arguments

"""The process that runs tests/test_fuzz.py's hostile calls, under a memory limit.

Started by the test as ``python -c "from tests.fuzz_worker import main; main()" LOG DIR``
(imported under its own name, so that the :class:`Spec` objects the test pickles are
this module's). It imports every helper,
then limits its own address space (``RLIMIT_AS``: what it has mapped after the imports
plus :data:`MEMORY_BUDGET`), so a helper that tries to allocate without bound fails
here instead of taking the machine. The test sends one call at a time as a pickled
``(helper, args, kwargs)`` whose values are plain data or :class:`Spec` placeholders
(tensors, paths, modules... are built here, fresh for each call); the worker answers
with what happened. The test kills and restarts the worker when a call does not answer
in time, so a hang costs one call's time bound, not the test run.

Frames on the pipes are 8-byte big-endian lengths followed by a pickle. The helpers'
own output (``raises`` prints, warnings) goes to the log, not the pipe.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import pickle
import pkgutil
import reprlib
import resource
import stat
import struct
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


class _Repr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 1000:  # repr() refuses ints of more than 4300 digits
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_REPR = _Repr()
_REPR.maxlong = _REPR.maxstring = _REPR.maxother = 60
MEMORY_BUDGET = 2 * 2**30
"""Bytes of address space a call may add to what the worker has mapped at start."""


@dataclass(frozen=True)
class Spec:
    """A value built in the worker: ``kind`` is a catalogue below, ``name`` its entry."""

    kind: str
    name: str

    def __repr__(self) -> str:
        return f"<{self.kind}:{self.name}>"


class CallerError(Exception):
    """Raised by the callables the fuzz hands to helpers: it must pass through unchanged."""


# -- framing ------------------------------------------------------------------------------


def send(pipe: IO[bytes], value: object) -> None:
    data = pickle.dumps(value)
    pipe.write(struct.pack(">Q", len(data)) + data)
    pipe.flush()


def receive(pipe: IO[bytes]) -> Any:
    header = pipe.read(8)
    if len(header) < 8:
        raise EOFError
    (size,) = struct.unpack(">Q", header)
    return pickle.loads(pipe.read(size))  # from our own test process


# -- catalogues ---------------------------------------------------------------------------


def _tensors() -> dict[str, Callable[[], Any]]:
    import numpy as np
    import torch

    def nested() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])

    def graph_root() -> Any:
        x = torch.ones(3, requires_grad=True)
        return (x * 2).exp().sum()

    return {
        "floats": lambda: torch.arange(6.0).reshape(2, 3),
        "ints": lambda: torch.arange(6).reshape(2, 3),
        "vector": lambda: torch.tensor([0.5, 1.0, 2.0]),
        "index": lambda: torch.tensor([[1, 0, 2], [0, 0, 1]]),
        "index1": lambda: torch.tensor([2, 0]),
        "index_int32": lambda: torch.tensor([[1], [0]], dtype=torch.int32),
        "index_negative": lambda: torch.tensor([[-1, 0, 0]]),
        "index_huge_values": lambda: torch.tensor([[2**62, 0, 0]]),
        "targets": lambda: torch.tensor([0, 2]),
        "targets_out_of_range": lambda: torch.tensor([0, 7]),
        "probabilities": lambda: torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]),
        "logits": lambda: torch.randn(2, 3),
        "weights3": lambda: torch.tensor([1.0, 2.0, 3.0]),
        "image": lambda: torch.randn(1, 2, 5, 5),
        "kernel": lambda: torch.randn(3, 2, 2, 2),
        "bias3": lambda: torch.zeros(3),
        "bool": lambda: torch.tensor([[True, False], [False, True]]),
        "complex": lambda: torch.ones(2, 2, dtype=torch.complex64),
        "half": lambda: torch.ones(3, dtype=torch.float16),
        "scalar": lambda: torch.tensor(3.0),
        "empty": lambda: torch.zeros(0, 3),
        "transposed": lambda: torch.arange(12.0).reshape(3, 4).t(),
        "strided": lambda: torch.arange(20.0)[::3],
        "overlapping": lambda: torch.arange(10.0).as_strided((4, 4), (1, 1)),
        "grad_leaf": lambda: torch.ones(3, requires_grad=True),
        "grad_result": graph_root,
        "nan_inf": lambda: torch.tensor([float("nan"), float("inf"), -float("inf")]),
        "negative": lambda: torch.tensor([1.0, -1.0]),
        "zeros": lambda: torch.zeros(3),
        "big_storage": lambda: torch.zeros(300)[:4],
        "expanded_huge": lambda: torch.zeros(1).expand(2**40),
        "expanded_huge_2d": lambda: torch.zeros(1, 1, dtype=torch.int64).expand(2**20, 2**20),
        "wide_overlap": lambda: torch.zeros(2**21).as_strided((2**20, 2**20), (1, 1)),
        "meta_small": lambda: torch.empty(2, 3, device="meta"),
        "meta_huge": lambda: torch.empty(2**40, device="meta"),
        "meta_huge_2d": lambda: torch.empty(2**20, 2**20, device="meta"),
        "meta_index": lambda: torch.zeros(2**20, 2**20, dtype=torch.int64, device="meta"),
        "sparse": lambda: torch.eye(3).to_sparse(),
        "sparse_csr": lambda: torch.eye(3).to_sparse_csr(),
        "nested": nested,
        "numpy": lambda: np.arange(6.0).reshape(2, 3),
        "pairs2": lambda: torch.ones(3, 2),
        "masked_logits": lambda: torch.tensor([[2.0, -float("inf"), 0.5, 1.0]]),
        "no_candidates": lambda: torch.zeros(3, 0),
        "scalar_int": lambda: torch.tensor(1),
        "probs64": lambda: torch.tensor([0.5, 1e-6, 0.0, 1.0], dtype=torch.float64),
        "expanded_probs64": lambda: torch.zeros(1, dtype=torch.float64).expand(2**40),
    }


def _paths(folder: Path) -> dict[str, Callable[[], Any]]:
    def make(name: str, content: bytes | None = None) -> Path:
        path = folder / name
        if content is not None:
            path.write_bytes(content)
        return path

    def fifo() -> Path:
        path = folder / "fifo"
        os.mkfifo(path)
        return path

    def device(name: str, minor: int) -> Path:
        path = folder / name  # a copy of /dev/null or /dev/zero: writers cannot harm /dev
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        except PermissionError:
            return Path("/dev/null" if minor == 3 else "/dev/zero")
        return path

    def torch_file() -> Path:
        import torch

        path = folder / "tensors.pt"
        torch.save({"w": torch.zeros(4)}, path)
        return path

    def checkpoint() -> Path:
        import torch

        from pytorch_memo.checkpoint import save_checkpoint

        path = folder / "run.pt"
        torch.manual_seed(0)
        save_checkpoint(path, model=torch.nn.Linear(2, 2), rng=False)
        return path

    def checkpoint_no_crc() -> Path:  # issue 24, D2: loads, with a warning
        import torch

        from pytorch_memo.checkpoint import save_checkpoint

        before = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.manual_seed(0)
            return save_checkpoint(folder / "no_crc.pt", model=torch.nn.Linear(2, 2), rng=False)
        finally:
            torch.serialization.set_crc32_options(before)

    def legacy() -> Path:  # D8: torch's legacy format, no zip
        import torch

        path = folder / "legacy.pt"
        torch.save({"w": torch.zeros(4)}, path, _use_new_zipfile_serialization=False)
        return path

    def protocol_4() -> Path:  # D9: a pickle torch's weights-only unpickler cannot read
        import torch

        path = folder / "protocol4.pt"
        torch.save({"w": torch.zeros(4)}, path, pickle_protocol=4)
        return path

    def end_damaged() -> Path:  # D7: the index offset moved, a seek before the start
        data = bytearray(checkpoint().read_bytes())
        zip64 = bytes(data).rfind(b"PK\x06\x06")
        struct.pack_into(
            "<Q", data, zip64 + 48, struct.unpack_from("<Q", data, zip64 + 48)[0] + 4096
        )
        return make("end_damaged.pt", bytes(data))

    def zip_file() -> Path:
        import zipfile

        path = folder / "other.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("hello.txt", "hello")
        return path

    def truncated() -> Path:
        data = torch_file().read_bytes()
        return make("truncated.pt", data[: len(data) // 2])

    def build_dir() -> Path:
        path = folder / "build"
        path.mkdir()
        (path / "lock").touch()
        (path / "lock.memo").write_text("pid 1, started 2025-01-01 00:00:00")
        return path

    def unreadable() -> Path:
        path = make("unreadable.pt", b"PK\x03\x04" + b"\0" * 100)
        path.chmod(0)
        return path

    return {
        "missing": lambda: folder / "missing.pt",
        "in_missing_dir": lambda: folder / "no" / "such" / "x.pt",
        "directory": lambda: folder,
        "fifo": fifo,
        "dev_null": lambda: device("null", 3),
        "dev_zero": lambda: device("zero", 5),
        "empty": lambda: make("empty.pt", b""),
        "text": lambda: make("text.pt", b"not a checkpoint\n"),
        "tensors_pt": torch_file,
        "checkpoint": checkpoint,
        "zip": zip_file,
        "checkpoint_no_crc": checkpoint_no_crc,
        "legacy_pt": legacy,
        "protocol4_pt": protocol_4,
        "end_damaged": end_damaged,
        "truncated": truncated,
        "unreadable": unreadable,
        "build_dir": build_dir,
        "long_name": lambda: folder / ("x" * 300),
        "nul": lambda: str(folder / "a\0b"),
        "relative": lambda: "relative.pt",
        "str_dir": lambda: str(folder),
        "bytes": lambda: os.fsencode(folder / "run.pt"),
    }


def _modules() -> dict[str, Callable[[], Any]]:
    import torch
    from torch import nn

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("kept", torch.zeros(1))
            self.register_buffer("dropped", torch.zeros(1), persistent=False)
            self.register_buffer("nothing", None)
            self.plain = torch.arange(3)

    def tied() -> nn.Module:
        model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
        model[1].weight = model[0].weight
        return model

    return {
        "linear": lambda: nn.Linear(2, 2),
        "batchnorm": lambda: nn.BatchNorm1d(3),
        "empty": lambda: nn.Sequential(),
        "hidden": Hidden,
        "tied": tied,
        "other_shape": lambda: nn.Linear(3, 3),
        "meta_huge": lambda: nn.Linear(2**20, 2**20, device="meta"),
    }


def _objects(memo: dict[Spec, Any]) -> dict[str, Callable[[], Any]]:
    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    from torch.profiler import profile

    from pytorch_memo.autograd import autograd_graph
    from pytorch_memo.checkpoint import get_rng_state

    def model() -> Any:
        return build(Spec("module", "linear"), memo)

    def averages() -> Any:
        with profile(acc_events=True) as prof:
            torch.ones(50).sum()
        return prof.key_averages()

    def memory_profile() -> Any:
        with profile(profile_memory=True, acc_events=True) as prof:
            torch.ones(50).sum()
        return prof

    def time_profile() -> Any:  # no profile_memory: allocated_bytes refuses it
        with profile(acc_events=True) as prof:
            torch.ones(50).sum()
        return prof

    def raising() -> None:
        raise CallerError("from the caller's callable")

    def draws() -> list[Any]:
        from pytorch_memo.randomness import NoisyRange

        data = NoisyRange(3, seed=0)
        return [data[i] for i in range(3)]

    def sgd() -> Any:
        return torch.optim.SGD(model().parameters(), lr=0.1)

    def scheduler() -> Any:
        return torch.optim.lr_scheduler.StepLR(build(Spec("object", "sgd"), memo), 1)

    return {
        "axes": lambda: plt.subplots()[1],
        "figure": lambda: plt.figure(),
        "object": object,
        "fn_none": lambda: lambda: None,
        "fn_tensor": lambda: lambda: torch.ones(100),
        "fn_raises": lambda: raising,
        "fn_args": lambda: lambda x: x,  # needs an argument: calling it fails
        "averages": averages,
        "memory_profile": memory_profile,
        "time_profile": time_profile,
        "graph": lambda: autograd_graph(build(Spec("tensor", "grad_result"), memo)),
        "sgd": sgd,
        "adam_other": lambda: torch.optim.Adam(nn_other().parameters()),
        "scheduler": scheduler,
        "rng_state": get_rng_state,
        "rng_damaged": lambda: {**get_rng_state(), "torch": torch.zeros(3)},
        "rng_partial": lambda: {"torch": torch.get_rng_state()},
        "names": lambda: {"x": torch.ones(1)},
        "device_cpu": lambda: torch.device("cpu"),
        "device_meta": lambda: torch.device("meta"),
        "device_cuda7": lambda: torch.device("cuda", 7),
        "ValueError": lambda: ValueError,
        "lookup_errors": lambda: (KeyError, IndexError),
        "worker_rank_info": lambda: importlib.import_module("pytorch_memo.distributed").rank_info,
        "lambda": lambda: lambda: 0,
        "generator": lambda: (i for i in range(3)),
        "numpy_int": lambda: np.int64(1),
        "parameters": lambda: model().parameters(),
        "endless_tensors": lambda: itertools.repeat(torch.ones(2)),
        "draws": draws,
        "endless_draws": lambda: itertools.repeat(draws()[0]),
        "tracing_dataset": lambda: memo_module("data_loading").TracingDataset(3, tag=1),
        "variable_lengths": lambda: memo_module("data_loading").VariableLengths(4),
        "transformed_range": lambda: memo_module("data_loading").TransformedRange(3),
        # item 1 stalls, at most 0.05 s; the INDEX values read are 0 and 2
        "stalling_dataset": lambda: memo_module("data_loading").StallingDataset(
            3, stall_at=1, seconds=0.05
        ),
        "held_records": lambda: memo_module("data_loading").HeldRecords(10, held="list", blocks=4),
        "split": lambda: memo_module("data_loading").distributed_split(5, num_replicas=2, epochs=2),
        "huge_split": lambda: [[list(range(10**6))]],
        "noisy_range": lambda: memo_module("randomness").NoisyRange(3, seed=0),
        "two_heads": lambda: memo_module("parallel").TwoHeads(),
        "kv_cache": lambda: memo_module("attention").KVCache(
            batch=1, heads=2, max_len=8, head_dim=5
        ),
        "dtype_ranges": lambda: memo_module("mixed_precision").dtype_ranges(),
        "dtype_ranges_empty": lambda: memo_module("mixed_precision").DtypeRanges(()),
        "op_mm": lambda: lambda t: t.reshape(1, -1) @ torch.ones(t.numel(), 2),
        "op_raises": lambda: lambda t: raising(),
        "op_tuple": lambda: lambda t: (t, t),
        "op_float": lambda: lambda t: float(t.sum()),
    }


def memo_module(name: str) -> Any:
    return importlib.import_module(f"pytorch_memo.{name}")


def nn_other() -> Any:
    from torch import nn

    return nn.Linear(5, 5)


_catalogue: dict[str, Callable[[], Any]] = {}


def build(value: Any, memo: dict[Spec, Any]) -> Any:
    """``value`` with every :class:`Spec` in it built (each once per call, in ``memo``)."""
    if isinstance(value, Spec):
        if value not in memo:
            memo[value] = _catalogue[f"{value.kind}:{value.name}"]()
        return memo[value]
    if isinstance(value, list):
        return [build(v, memo) for v in value]
    if isinstance(value, tuple):
        return tuple(build(v, memo) for v in value)
    if isinstance(value, dict):
        return {build(k, memo): build(v, memo) for k, v in value.items()}
    return value


@contextlib.contextmanager
def _call_folder(root: Path) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(dir=root))
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)
        for path in sorted(folder.rglob("*"), reverse=True):
            with contextlib.suppress(OSError):
                path.chmod(0o700)
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


BODY_ERRORS: dict[str, Exception] = {
    "value_error": ValueError("bad value: x"),
    "key_error": KeyError("missing"),
}
"""The errors a fuzzed block raises itself, by the body's name (a fresh one each time)."""


def error_type(error: BaseException) -> str:
    """How a reply names an error's type: ``builtins.ValueError``."""
    return f"{type(error).__module__}.{type(error).__qualname__}"


def _body(name: str) -> None:
    """What the block of a context manager (``raises``...) does in a fuzzed call."""
    import torch

    if name == "autograd":  # saves tensors for backward, then runs it
        x = torch.ones(3, requires_grad=True)
        (x * x).exp().sum().backward()
    if name == "autograd_meta":  # saves tensors without storage
        x = torch.ones(3, device="meta", requires_grad=True)
        (x * x).sum()
    if name in BODY_ERRORS:
        error = BODY_ERRORS[name]
        raise type(error)(*error.args)
    if name == "caller_error":
        raise CallerError("from the block")
    if name == "torch_log":  # what record_torch_logs keeps
        import logging

        logging.getLogger("torch._dynamo").warning("from the block")


def resolve(helper: str) -> Any:
    """The object ``module.name`` (or a method, ``module.Class.method``) names."""
    module_name, _, name = helper.partition(".")
    found: Any = importlib.import_module(f"pytorch_memo.{module_name}")
    for part in name.split("."):
        found = getattr(found, part)
    return found


def _exercise(result: Any) -> None:
    """Use what a call returned as its caller would, so a result that only fails later
    (a dataset whose ``len()`` overflows, whose last item cannot be made) fails here."""
    from dataclasses import is_dataclass

    from torch.utils.data import Dataset, IterableDataset

    if isinstance(result, IterableDataset):
        list(itertools.islice(iter(result), 3))
    elif isinstance(result, Dataset):
        length = len(result)  # type: ignore[arg-type]
        if length:
            result[0]
            result[length - 1]
    elif is_dataclass(result) and not isinstance(result, type):
        repr(result)


def _global_state() -> dict[str, Any]:
    """torch's process-wide switches a helper must leave as it found them."""
    import torch

    return {
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "grad mode": torch.is_grad_enabled(),
        "default dtype": torch.get_default_dtype(),
    }


def _restore(state: dict[str, Any]) -> None:
    import torch

    torch.use_deterministic_algorithms(
        state["deterministic algorithms"], warn_only=state["deterministic warn_only"]
    )
    torch.set_grad_enabled(state["grad mode"])
    torch.set_default_dtype(state["default dtype"])


def run(helper: str, args: list[Any], kwargs: dict[str, Any], body: str | None, root: Path) -> Any:
    before = _global_state()
    reply = _run(helper, args, kwargs, body, root)
    after = _global_state()
    reply["leaked"] = [f"{k}: {before[k]} -> {after[k]}" for k in before if after[k] != before[k]]
    if reply["leaked"]:
        _restore(before)
    return reply


def _run(helper: str, args: list[Any], kwargs: dict[str, Any], body: str | None, root: Path) -> Any:
    function = resolve(helper)
    memo: dict[Spec, Any] = {}
    with _call_folder(root) as folder:
        _catalogue.update(
            {f"tensor:{k}": v for k, v in _tensors().items()}
            | {f"path:{k}": v for k, v in _paths(folder).items()}
            | {f"module:{k}": v for k, v in _modules().items()}
            | {f"object:{k}": v for k, v in _objects(memo).items()}
        )
        built_args = build(args, memo)
        built_kwargs = build(kwargs, memo)
        shown = {"paths": [str(v) for v in memo.values() if isinstance(v, Path)]}
        try:
            if body is not None:  # a context manager: run the block inside it
                with function(*built_args, **built_kwargs) as result:
                    _body(body)
            else:
                result = function(*built_args, **built_kwargs)
            _exercise(result)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            return {
                "outcome": "error",
                "type": error_type(error),
                "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__],
                "message": str(error),
                "traceback": traceback.format_exc(limit=-6),
                **shown,
            }
        finally:
            import matplotlib.pyplot as plt

            plt.close("all")
        return {"outcome": "result", "type": type(result).__name__, **shown}


def _limit_memory() -> int:
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    limit = vm + MEMORY_BUDGET
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def main() -> None:
    log = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 - open for the process's life
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    warnings.simplefilter("ignore")
    os.environ["MPLBACKEND"] = "Agg"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # imported before the memory limit
    import torch

    torch.set_num_threads(1)
    import pytorch_memo

    for info in pkgutil.iter_modules(pytorch_memo.__path__):  # every helper's module
        importlib.import_module(f"pytorch_memo.{info.name}")
    root = Path(tempfile.mkdtemp(prefix="calls-", dir=sys.argv[2]))  # the test removes it
    _warm_up()  # what the calls use lazily is mapped before the limit, not counted as theirs
    limit = _limit_memory()
    send(channel_out, {"ready": True, "limit": limit, "pid": os.getpid()})
    while True:
        try:
            helper, args, kwargs, body = receive(channel_in)
        except EOFError:
            break
        print(f"-- {helper} {_REPR.repr(args)} {_REPR.repr(kwargs)} {body!r}", file=log)
        reply = run(helper, args, kwargs, body, root)
        send(channel_out, reply)
    import shutil

    shutil.rmtree(root, ignore_errors=True)


def _warm_up() -> None:
    import matplotlib.pyplot as plt
    import torch
    from torch.profiler import profile

    with profile(acc_events=True, profile_memory=True):
        torch.ones(2).sum()
    _, ax = plt.subplots()
    ax.bar([0], [1])
    ax.add_patch(matplotlib_rectangle())
    plt.close("all")


def matplotlib_rectangle() -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((0, 0), 1, 1)

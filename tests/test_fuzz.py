"""Every public helper, called with hostile arguments: a result or a clear error, in bounds.

The helpers are found from each public module's ``__all__``, so a new helper cannot be
left out: :func:`test_every_public_callable_is_registered` fails until it has a
strategy below (or, for a class, is registered as the result type or exception it is).
A class that is neither (a dataset, a model) has its constructor fuzzed, and its
methods that take arguments (public ones and ``__getitem__``) are found and fuzzed too.
What a call returns is then used as a caller would: a dataset's ``len()`` and its first
and last items, an iterable dataset's first items, a dataclass's ``repr``. A call must
also leave torch's process-wide switches (deterministic algorithms, grad mode, default
dtype) as it found them.

Each call runs in one worker process (tests/fuzz_worker.py) whose address space is
limited (``RLIMIT_AS``: its size after the imports plus 2 GiB), with a hard time bound
per call: a call that does not answer within :data:`CALL_SECONDS` fails as a hang, and
the worker is killed and restarted. A call passes when it returns, or raises a
``TypeError``, ``ValueError``, ``RuntimeError``, ``OSError`` or one of the package's own
errors whose message names an argument (its parameter name, or the file it was given);
an allocation failure, ``MemoryError``, torch's "Internal error", a crash or a hang fail.

Arguments are drawn per parameter from values that work and hostile ones: wrong types,
bools for ints, NaN and infinities, negative and huge numbers (2**63, 10**400), empty
and huge shapes, meta, sparse, nested, complex, bool and non-contiguous tensors, a
FIFO, a directory, device nodes, missing, empty, truncated and unreadable files. The
helpers that start processes or compilers (``build_extension``, ``run_workers``,
``run_torchrun``) get one hostile argument per call, so each call is refused before the
expensive work.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import pkgutil
import re
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import pytorch_memo
from pytorch_memo._procs import kill_tree
from pytorch_memo.mixed_precision import FLOAT_DTYPES
from tests.fuzz_worker import (
    _REPR,
    BODY_ERRORS,
    Spec,
    _modules,
    _objects,
    _paths,
    _tensors,
    error_type,
    receive,
    send,
)

pytestmark = pytest.mark.early  # a long file: handed out first (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
CALL_SECONDS = 10.0
"""A call that has not answered by then is a hang (generous: the machine is shared)."""
EXAMPLES = 20
ALLOWED = (
    "builtins.TypeError",
    "builtins.ValueError",
    "builtins.RuntimeError",
    "builtins.OSError",
    "pytorch_memo.checkpoint.CheckpointError",
)
CALLER_ERROR = "tests.fuzz_worker.CallerError"
NAN, INF = math.nan, math.inf

# -- values -------------------------------------------------------------------------------


def _specs(kind: str, names: Any) -> list[Spec]:
    return [Spec(kind, name) for name in names]


TENSOR_NAMES = list(_tensors())
PATH_NAMES = list(_paths(Path("/nonexistent")))
MODULE_NAMES = list(_modules())
OBJECT_NAMES = list(_objects({}))


def T(*names: str) -> list[Spec]:
    unknown = set(names) - set(TENSOR_NAMES)
    assert not unknown, unknown
    return _specs("tensor", names)


def P(*names: str) -> list[Spec]:
    return _specs("path", names)


def M(*names: str) -> list[Spec]:
    return _specs("module", names)


def O(*names: str) -> list[Spec]:  # reads as "object"
    unknown = set(names) - set(OBJECT_NAMES)
    assert not unknown, unknown
    return _specs("object", names)


GARBAGE: list[Any] = [
    None, True, 3, -1, 2**70, 1.5, NAN, INF, "x", "", b"x", [], [1, "a"], {},
    *O("object", "generator"), *T("meta_huge", "nested", "sparse"),
]  # fmt: skip
INTS: list[Any] = [True, False, 1.5, NAN, INF, 2**63, 2**70, -(2**70), 10**400, "3", None]
NUMBERS: list[Any] = [NAN, INF, -INF, 1e308, 10**400, "0.1", True, None, -(2**70)]
SECONDS: list[Any] = [0, -1, NAN, INF, -INF, 1e300, 10**5000, "5", True, None, 1e-9]
BAD_TENSORS = T("meta_huge", "meta_huge_2d", "nested", "sparse", "sparse_csr", "numpy")
BAD_PATHS: list[Any] = [3, None, b"x", "", "a\0b"]
BAD_DEVICES: list[Any] = [
    "cuda:7", "gpu", "cpu:1", "cuda:-1", "", "cuda:x", 0, 1.5, *O("device_cuda7", "object"),
]  # fmt: skip
GOOD_SHAPES: list[Any] = [(2, 3), (4,), (), (0, 3), (1, 1, 2), [2, 3], (5, 3, 4, 1), (3, 1, 1)]
BAD_SHAPES: list[Any] = [
    (2**63,), (2**63 - 1,), (-1,), (1.5,), "23", (True,), (2**40, 2**40), (2**20, 2**20),
    (2, None), (1,) * 20, 3, None, *T("nested"),
]  # fmt: skip
GOOD_STRIDES: list[Any] = [(3, 1), (1,), (), (1, 2), (0, 0), (1, 1, 1)]
BAD_STRIDES: list[Any] = [(2**63, 1), (2**62, 2**62), (-1, 1), (2**40,), (1.0,), "31", None]
FUNCTIONS: list[Any] = O("fn_none", "fn_tensor", "fn_raises")
CALLABLES_BAD: list[Any] = [*O("fn_args"), 3, None, "f"]


def pick(values: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


@dataclass(frozen=True)
class A:
    """One argument's values: those the helper should accept, and hostile ones."""

    valid: list[Any]
    hostile: list[Any]


OMIT = object()


@dataclass(frozen=True)
class Call:
    """One fuzzed call: positional and keyword values, and the block for ``raises``."""

    args: list[Any]
    kwargs: dict[str, Any]
    body: str | None = None


VARARG_NAMES = ["x", "y", "t0", "arg1", "<b>", "w&z", "ax2"]


@dataclass(frozen=True)
class Arguments:
    """The values to try for each argument of one helper."""

    positional: list[A]
    keywords: dict[str, A]
    varargs: A | None = None
    varkw: A | None = None
    body: list[str] | None = None
    always_one: bool = False  # every call has exactly one hostile argument

    def slots(self) -> list[tuple[str, A]]:
        found = [(f"#{i}", arg) for i, arg in enumerate(self.positional)]
        found += list(self.keywords.items())
        found += [("*", self.varargs)] if self.varargs is not None else []
        return found + ([("**", self.varkw)] if self.varkw is not None else [])

    def build(self, chosen: dict[str, list[Any]], body: str | None) -> Call:
        """A call from the values ``chosen`` per slot (a keyword without any: left out)."""
        args = [chosen[f"#{i}"][0] for i in range(len(self.positional))] + chosen.get("*", [])
        kwargs = {name: chosen[name][0] for name in self.keywords if chosen.get(name)}
        for i, value in enumerate(chosen.get("**", [])):
            kwargs[VARARG_NAMES[i]] = value
        return Call(args, kwargs, body)

    def sweep(self, required: frozenset[str] = frozenset()) -> Iterator[Call]:
        """Every value of every argument once, the others at their first valid value
        (a keyword is left out unless it is ``required``: keyword-only without default)."""
        base = {
            slot: [arg.valid[0]]
            if self.always_one or slot.startswith("#") or slot in required
            else []
            for slot, arg in self.slots()
        }
        bodies: list[str | None] = list(self.body) if self.body else [None]
        if not self.always_one:  # a valid call of those would start processes or builds
            for body in bodies:
                yield self.build(base, body)
        for slot, arg in self.slots():
            for value in [*arg.valid[1:], *arg.hostile]:
                yield self.build({**base, slot: [value]}, bodies[0])


def calls(
    positional: list[A] = [],  # noqa: B006 - read only
    keywords: dict[str, A] = {},  # noqa: B006 - read only
    *,
    varargs: A | None = None,
    varkw: A | None = None,
    body: list[str] | None = None,
    always_one: bool = False,
) -> Arguments:
    return Arguments(positional, keywords, varargs, varkw, body, always_one)


@st.composite
def drawn(draw: st.DrawFn, arguments: Arguments, required: frozenset[str] = frozenset()) -> Call:
    """A call with every argument drawn from valid and hostile values, or (half of the
    calls, and all with ``always_one``) valid arguments but for one hostile one. A
    keyword may be left out (its default) unless it is ``required``."""
    slots = arguments.slots()
    hostile = [slot for slot, arg in slots if arg.hostile]
    one = arguments.always_one or draw(st.booleans())
    bad = draw(pick(hostile)) if one and hostile else None
    chosen: dict[str, list[Any]] = {}
    for slot, arg in slots:
        pool = arg.valid + arg.hostile if not one else arg.hostile if slot == bad else arg.valid
        count = 1
        if slot in ("*", "**"):
            count = draw(st.integers(1 if slot == bad else 0, 3))
        elif (
            not slot.startswith("#")
            and slot != bad
            and slot not in required
            and not arguments.always_one
        ):
            count = draw(st.integers(0, 1))  # a keyword may be left out: its default
        chosen[slot] = [draw(pick(pool)) for _ in range(count)]
    body = None if arguments.body is None else draw(pick(arguments.body))
    return arguments.build(chosen, body)


@dataclass(frozen=True)
class Entry:
    """How to fuzz one helper, and what its contract lets through besides argument errors.

    ``passes_through``: errors let through as they are (the caller's own, or a contract's
    ``AssertionError``); ``allowed``: error types the contract raises besides
    :data:`ALLOWED` (``IndexError`` from a dataset's ``__getitem__``), whose messages
    must name the argument too.
    """

    arguments: Arguments
    passes_through: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # names an error may use for its varargs, ``t0``...
    allowed: tuple[str, ...] = ()


RESULT, ERROR = "result type", "exception or warning"
"""A class registered as RESULT is a dataclass or a NamedTuple a helper returns; a class
with an :class:`Entry` is called (its constructor fuzzed) like a function, and its
methods that take arguments are registered as ``module.Class.method``, the instance
given as their first argument (a slot with no hostile values: ``SELF``)."""

# -- the registry: every public callable --------------------------------------------------

ANY_TENSOR = A(T(*TENSOR_NAMES), GARBAGE)
TENSOR_ONLY = A(
    T("floats", "ints", "transposed", "strided", "overlapping", "scalar", "empty", "bool",
      "complex", "half", "big_storage", "grad_leaf", "expanded_huge", "wide_overlap",
      "meta_small"),
    [*T("meta_huge", "meta_huge_2d", "nested", "sparse", "sparse_csr", "numpy"), *GARBAGE],
)  # fmt: skip
INT = A([0, 1, -1, 2, 5], INTS)
PATH = A(P("checkpoint", "tensors_pt", "missing", "relative"), [*P(*PATH_NAMES), *BAD_PATHS])
AX = A([None, *O("axes")], ["ax", 3, *O("figure", "object")])
TITLE = A([None, "title"], [3, b"x", ["t"]])
DEVICE = A(["cpu", "meta", "cuda", *O("device_cpu", "device_meta")], BAD_DEVICES)
SHAPE = A(GOOD_SHAPES, BAD_SHAPES)
BOOL = A([True, False], [1, 0, None, "no"])
SEED = A([0, 7, -1, 2**64 - 1], [*INTS, 2**64, -(2**63) - 1])
GATHER = [
    A(T("floats", "ints", "vector", "bool", "transposed", "expanded_huge_2d"), BAD_TENSORS),
    A([0, 1, -1], [2, -3, *INTS]),
    A(T("index", "index1", "index_int32", "expanded_huge_2d"),
      [*T("index_negative", "index_huge_values", "floats", "meta_index"), *BAD_TENSORS]),
]  # fmt: skip
MODULE = A(M(*MODULE_NAMES), GARBAGE)
QKV = A(
    T("image", "floats", "half", "meta_small", "transposed", "wide_overlap"),
    [*T("ints", "bool", "complex", "vector", "scalar", "meta_huge_2d"), *BAD_TENSORS, *GARBAGE],
)
PATH_OR_DIR = A(P("build_dir", "directory", "missing"), [*P(*PATH_NAMES), *BAD_PATHS])
AVERAGES = A([*O("averages"), []], [[1, 2], *GARBAGE])
LENGTH = A([0, 3], [-1, 2**63, *INTS])  # a dataset's length (len() takes < 2**63)
INDEX = A([0, 2], [3, -1, -4, 2**70, *O("numpy_int"), *T("scalar_int"), *INTS])
LOGITS = A(
    T("vector", "logits", "floats", "half", "masked_logits", "empty"),
    [*T("nan_inf", "ints", "bool", "complex", "scalar", "no_candidates", "expanded_huge",
        "meta_huge"), *BAD_TENSORS, *GARBAGE],
)  # fmt: skip
FOLDER = A(P("directory", "str_dir"), [*P("missing", "fifo", "text", "dev_null"), *BAD_PATHS])
BATCH = A([8, 16], [0, -1, 3, 2**20 + 1, *INTS])  # a global batch (world size 2)
VECTOR = T("vector")[0]
HALF = torch.float16
IGNORE_HOSTILE: list[Any] = [
    VECTOR, [1], [None], "ab", *O("generator", "endless_tensors"), [T("nested")[0]],
    [T("sparse")[0]], [T("meta_small")[0]], *GARBAGE,
]  # fmt: skip
PAIRS_VALID: list[Any] = [
    [(VECTOR, 0), (T("strided")[0], 1)], [(T("floats")[0], 1)], ((VECTOR, 0.5),),
    [[VECTOR, T("scalar_int")[0]]],
]  # fmt: skip
PAIRS_HOSTILE: list[Any] = [
    [], [(VECTOR, 0), (T("floats")[0], 1)], [(T("scalar")[0], 0)], [(T("nested")[0], 0)],
    [(T("sparse")[0], 0)], [(T("meta_small")[0], 0)], [(T("expanded_huge")[0], 0)],
    [(VECTOR, "a"), (VECTOR, 1)], [(VECTOR, 0), (T("index1")[0], 1)],
    [(VECTOR, 0), (T("complex")[0], 1)], [(VECTOR,)], [VECTOR], [(VECTOR, 0, 1)], {"a": 1},
    [(3, 0)], *O("generator"), *GARBAGE,
]  # fmt: skip
SPLIT_HOSTILE: list[Any] = [
    [], [[]], [[[0]], [[0], [1]]], [[["a"]]], [[[1.5]]], [[[-1]]], [[[True]]], [[[2**70]]],
    [[3]], [[[VECTOR]]], *O("huge_split"), *GARBAGE,
]  # fmt: skip
ROWS_HOSTILE: list[Any] = [
    {}, {"a": T("nested")[0]}, {"a": "abc"}, {"a": T("meta_small")[0]}, {1: [1.0]},
    {"a": [[1.0]]}, {"a": T("complex")[0]}, {"a": T("expanded_huge")[0]},
    {"a": [1.0], "b": [1.0, 2.0]}, {"a": T("sparse")[0]}, {"a": [2**70]},
    {"a": T("nan_inf")[0]}, {"a": O("object")[0]}, {"a": [1.0] * 300}, *GARBAGE,
]  # fmt: skip
MARKS_HOSTILE: list[Any] = [
    {"b": [True] * 3}, {"a": [1, 0]}, {"a": "yes"}, {"a": T("meta_small")[0]},
    {"a": [2.5, 0.0, 1.0]}, [1], 3,
]  # fmt: skip


def SELF(name: str) -> A:
    """The instance a method is called on (not fuzzed: any other is another class's)."""
    return A(O(name), [])


NO_CUDA_ONLY = [] if torch.cuda.is_available() else ["__global__ void k() {}"]
"""Values refused only on a machine without CUDA."""

REGISTRY: dict[str, Entry | str] = {
    # tensors
    "tensors.describe": Entry(
        calls(varargs=TENSOR_ONLY, varkw=TENSOR_ONLY), names=("t0", "t1", "t2", "t3")
    ),
    "tensors.TensorInfo": RESULT,
    "tensors.TensorTable": RESULT,
    # layout
    "layout.strided_offsets": Entry(
        calls([SHAPE, A(GOOD_STRIDES, BAD_STRIDES)], {"storage_offset": A([0, 5], [-1, *INTS])})
    ),
    "layout.required_storage": Entry(
        calls([SHAPE, A(GOOD_STRIDES, BAD_STRIDES)], {"storage_offset": A([0, 5], [-1, *INTS])})
    ),
    "layout.element_offsets": Entry(calls([TENSOR_ONLY])),
    "layout.storage_map": Entry(calls([TENSOR_ONLY])),
    "layout.shares_memory": Entry(calls([TENSOR_ONLY, TENSOR_ONLY])),
    "layout.plot_storage": Entry(
        calls([TENSOR_ONLY], {"color_dim": A([None, 0, -1], [5, *INTS]), "ax": AX, "title": TITLE})
    ),
    "layout.plot_view": Entry(calls([TENSOR_ONLY], {"title": TITLE})),
    "layout.StorageMap": RESULT,
    # broadcasting
    "broadcasting.explain_broadcast": Entry(
        calls(
            varargs=A([*GOOD_SHAPES, *T("floats", "meta_huge")], BAD_SHAPES),
            varkw=A([*GOOD_SHAPES, *T("floats", "scalar")], BAD_SHAPES),
        ),
        names=("arg0", "arg1", "arg2", "arg3"),
    ),
    "broadcasting.plot_broadcast": Entry(
        calls(
            [],
            {"ax": AX, "title": TITLE},
            varargs=A([*GOOD_SHAPES, *T("floats", "meta_huge")], BAD_SHAPES),
            varkw=A([*GOOD_SHAPES, *T("floats", "scalar")], BAD_SHAPES),
        ),
        names=("arg0", "arg1", "arg2", "arg3"),
    ),
    "broadcasting.BroadcastError": ERROR,
    "broadcasting.BroadcastRow": RESULT,
    "broadcasting.BroadcastTable": RESULT,
    # indexing
    "indexing.explain_gather": Entry(calls(GATHER)),
    "indexing.plot_gather": Entry(calls(GATHER, {"ax": AX})),
    "indexing.conv2d_as_matmul": Entry(
        calls(
            [
                A(T("image"), [*T("floats", "meta_huge", "ints"), *GARBAGE[:3]]),
                A(T("kernel"), [*T("image", "ints", "meta_small"), *GARBAGE[:3]]),
            ],
            {
                "bias": A([None, *T("bias3")], [*T("zeros", "ints", "meta_small"), 3]),
                "stride": A([1, 2, (1, 2)], [(1, 0), (1, 2, 3), 2**62, *INTS]),
                "padding": A([0, 1, (2, 0), "same", "valid"], [2**62, (0, -1), "SAME", *INTS]),
                "dilation": A([1, 2, (1, 3)], [(0, 1), *INTS]),
            },
        )
    ),
    "indexing.GatherExplanation": RESULT,
    "indexing.GatherStep": RESULT,
    # autograd
    "autograd.autograd_graph": Entry(
        calls(
            [A(T("grad_result", "grad_leaf"), [*T("floats", "meta_small"), *GARBAGE])],
            {"names": A([None, *O("names")], [{"x": 1}, [1], {1: 2}, "x"])},
        )
    ),
    "autograd.plot_autograd_graph": Entry(
        calls(
            [A([*T("grad_result", "grad_leaf"), *O("graph")], [*T("floats"), *GARBAGE])],
            {"names": A([None, *O("names")], [[1], "x"]), "ax": AX, "title": TITLE},
        )
    ),
    "autograd.AutogradGraph": RESULT,
    "autograd.GraphEdge": RESULT,
    "autograd.GraphNode": RESULT,
    # modules
    "modules.inventory": Entry(calls([MODULE], {"attributes": BOOL})),
    "modules.ModuleTable": RESULT,
    "modules.ModuleTensorInfo": RESULT,
    # submodules
    "submodules.layer_shapes": Entry(
        calls(
            [MODULE],
            {"dtype": A([torch.float32, torch.float64], [torch.int64, "float32", None, 3])},
            varargs=A([*GOOD_SHAPES, *T("floats")], BAD_SHAPES),
        ),
        names=("inputs", "arg0", "arg1", "arg2", "arg3"),
    ),
    "submodules.unregistered": Entry(calls([MODULE])),
    "submodules.HiddenItem": RESULT,
    "submodules.HiddenTable": RESULT,
    "submodules.LayerShape": RESULT,
    "submodules.ShapeTable": RESULT,
    "submodules.LayerShapeError": ERROR,
    # numerics: the hooks go on in the block and come off after it, whatever it raises
    "numerics.stop_at_nonfinite": Entry(
        calls([MODULE], {"check_inputs": BOOL}, body=["nothing", "autograd", "caller_error"]),
        passes_through=(CALLER_ERROR,),
    ),
    "numerics.NonFiniteWatch": Entry(calls([MODULE], {"check_inputs": BOOL})),
    "numerics.ActivationRow": RESULT,
    "numerics.ActivationTable": RESULT,
    "numerics.NonFiniteError": ERROR,
    # attention: the written-out formula refuses more scores, keys and values than SCORE_LIMIT; the cache
    # preallocates at most 2**28 elements and refuses positions beyond max_len
    "attention.attention": Entry(
        calls(
            [QKV, QKV, QKV],
            {
                "attn_mask": A(
                    [None, *T("bool", "image")], [*T("ints", "floats"), *BAD_TENSORS, 3]
                ),
                "is_causal": BOOL,
                "scale": A([None, 0.5, 2], NUMBERS),
                "enable_gqa": BOOL,
            },
        )
    ),
    "attention.KVCache": Entry(
        calls(
            [],
            {
                "batch": A([1, 2], [0, 2**40, *INTS]),
                "heads": A([1, 2], [0, 2**40, *INTS]),
                "max_len": A([1, 8], [0, 2**40, *INTS]),
                "head_dim": A([1, 5], [0, 2**40, *INTS]),
                "dtype": A([torch.float32, torch.float64], [torch.int64, "float32", None, 3]),
                "device": DEVICE,
            },
        )
    ),
    "attention.KVCache.append": Entry(calls([SELF("kv_cache"), QKV, QKV])),
    # processes: both start processes, so each call gets one hostile argument
    "processes.thread_contention": Entry(
        calls(
            [A([[1]], [[], [0], [1] * 9, "1", 1, [True], [2**70], None, [1.5]])],
            {
                "processes": A([1], [0, *INTS, 17]),
                "size": A([8], [0, *INTS, 4096]),
                "repeats": A([1], [0, *INTS, 10**5]),
                "timeout": A([60.0], SECONDS[:-1]),
            },
            always_one=True,
        )
    ),
    "processes.receive_shared": Entry(
        calls(
            [A([1], [0, *INTS, 10**5])],
            {
                "free_files": A([64], [0, 15, *INTS, 2**21]),
                "copy": A([False], [1, None, "no"]),
                "strategy": A(["file_descriptor"], ["file", None, 3, "FILE_SYSTEM"]),
                "timeout": A([60.0], SECONDS[:-1]),
            },
            always_one=True,
        )
    ),
    "processes.ContentionRow": RESULT,
    # checkpoint and archive (their fixes are another developer's: see the report)
    "checkpoint.save_checkpoint": Entry(
        calls(
            [
                A(
                    P("missing", "relative", "checkpoint", "tensors_pt"),
                    [*P(*PATH_NAMES), *BAD_PATHS],
                )
            ],
            {
                "model": A(M("linear"), [*M("meta_huge"), *GARBAGE[:4]]),
                "optimizer": A([None, *O("sgd")], [*O("adam_other"), 3]),
                "scheduler": A([None, *O("scheduler")], ["x", 3]),
                "extra": A(
                    [None, {"step": 3}, {"t": T("floats")[0]}], [{1: 2}, {"f": O("lambda")[0]}, [1]]
                ),
                "rng": BOOL,
            },
        )
    ),
    "checkpoint.load_checkpoint": Entry(
        calls(
            [A(P("checkpoint"), [*P(*PATH_NAMES), *BAD_PATHS])],
            {
                "model": A(M("linear"), [*M("other_shape", "meta_huge"), *GARBAGE[:4]]),
                "optimizer": A([None, *O("sgd")], [*O("adam_other"), 3]),
                "scheduler": A([None, *O("scheduler")], ["x", 3]),
                "rng": BOOL,
                "map_location": DEVICE,
            },
        )
    ),
    "checkpoint.get_rng_state": Entry(calls()),
    "checkpoint.set_rng_state": Entry(
        calls([A(O("rng_state"), [*O("rng_damaged", "rng_partial"), *GARBAGE])])
    ),
    "checkpoint.CheckpointError": ERROR,
    "checkpoint.CheckpointMismatchError": ERROR,
    "checkpoint.CorruptCheckpointError": ERROR,
    "checkpoint.UnsafeCheckpointError": ERROR,
    "checkpoint.UnsupportedCheckpointError": ERROR,
    "checkpoint.UnverifiedCheckpointWarning": ERROR,  # a warning class, raised by warn()
    "archive.archive_records": Entry(calls([PATH])),
    "archive.plot_archive": Entry(calls([PATH], {"ax": AX})),
    "archive.Record": RESULT,
    # profiling
    "profiling.count_parameters": Entry(calls([MODULE])),
    "profiling.memory_report": Entry(calls([DEVICE])),
    "profiling.peak_memory": Entry(
        calls([A(FUNCTIONS, CALLABLES_BAD)], {"device": DEVICE}), passes_through=(CALLER_ERROR,)
    ),
    "profiling.time_call": Entry(
        calls(
            [A(FUNCTIONS, CALLABLES_BAD)],
            {
                "repeats": A([1, 3, 100_000], [0, 100_001, *INTS]),
                "warmup": A([0, 2], [-1, *INTS]),
                "device": DEVICE,
            },
        ),
        passes_through=(CALLER_ERROR,),
    ),
    "profiling.self_cpu_times": Entry(calls([AVERAGES], {"top": A([None, 1, 3], [0, -1, *INTS])})),
    "profiling.plot_self_cpu_time": Entry(
        calls([AVERAGES], {"top": A([1, 3], [0, *INTS]), "ax": AX})
    ),
    "profiling.allocated_bytes": Entry(
        calls([A(O("memory_profile"), [*O("time_profile", "averages"), *GARBAGE])])
    ),
    "profiling.MemoryPeak": RESULT,
    "profiling.MemoryReport": RESULT,
    "profiling.ParameterCount": RESULT,
    "profiling.Timing": RESULT,
    # extensions: a build takes tens of seconds, so every call has one argument refused
    "extensions.build_extension": Entry(
        calls(
            [
                A(
                    ["memo_fuzz"],
                    ["random", "os", "torch", "pytest", "no-dash", "", "1abc", 3, None, b"x"],
                ),
                A(["int f() { return 1; }"], ["", "   ", 5, [1], b"x", None, ["a", 3]]),
            ],
            {
                "functions": A([None], [[1], 3, "", b"x", ["f", None]]),
                # CUDA code is refused only where CUDA is not available (on a GPU it builds)
                "cuda_sources": A([None], [*NO_CUDA_ONLY, 5, "", [b"x"]]),
                "build_root": A(P("directory"), [3, "a\0b", b"x", *P("fifo", "text", "dev_null")]),
                "extra_cflags": A([None], [3, [1], b"-O2"]),
                "no_implicit_headers": A([True], [1, "yes", None]),
                "wait_timeout": A([600.0], SECONDS[:-1]),
                "verbose": A([False], [1, "no", None]),
            },
            always_one=True,
        )
    ),
    "extensions.clear_stale_lock": Entry(calls([PATH_OR_DIR])),
    "extensions.default_build_root": Entry(calls([], {"start": PATH_OR_DIR})),
    "extensions.is_stale_lock": Entry(calls([PATH_OR_DIR])),
    "extensions.killed_build": Entry(calls([PATH_OR_DIR])),
    "extensions.release_folder_name": Entry(calls()),
    "extensions.StaleLockWarning": ERROR,
    # devices
    "devices.pick_device": Entry(calls([A([None, *DEVICE.valid], DEVICE.hostile)])),
    # distributed: starting ranks or torchrun takes seconds, so every call has one
    # argument refused (or, for torchrun, a 1e-9 s timeout: launched, then killed)
    "distributed.free_port": Entry(calls()),
    "distributed.rank_info": Entry(calls()),
    "distributed.all_reduce_sum": Entry(calls()),
    "distributed.ddp_step": Entry(
        calls([SEED, A([2, 8], [0, -1, 3, *INTS])], {"lr": A([0.1], NUMBERS)})
    ),
    "distributed.make_batch": Entry(calls([SEED, A([2, 2**20], [0, 2**20 + 1, 2**40, *INTS])])),
    "distributed.make_model": Entry(calls([SEED])),
    "distributed.reference_step": Entry(
        calls([SEED, A([2, 8], [0, *INTS])], {"lr": A([0.1, 0], NUMBERS)})
    ),
    "distributed.run_torchrun": Entry(
        calls(
            [],
            {"nproc": A([1], [0, -1, *INTS, 65]), "timeout": A([60.0], SECONDS)},
            always_one=True,
        ),
        passes_through=("subprocess.TimeoutExpired",),
    ),
    "distributed.run_workers": Entry(
        calls(
            [A(O("worker_rank_info"), [*O("lambda", "object"), "rank_info", 3, None])],
            {"world_size": A([1], [0, *INTS, 65, 10**6]), "timeout": A([60.0], SECONDS[:-1])},
            always_one=True,
        )
    ),
    # losses
    "losses.cross_entropy_by_hand": Entry(
        calls(
            [
                A(
                    T("logits", "vector", "probabilities"),
                    [*T("ints", "scalar", "meta_huge", "complex"), *GARBAGE[:3]],
                ),
                A(
                    T("targets", "probabilities", "index1"),
                    [*T("targets_out_of_range", "floats", "bool", "index_int32", "meta_small"), 3],
                ),
            ],
            {
                "weight": A([None, *T("weights3")], [*T("ints", "vector", "meta_small"), [1.0]]),
                "ignore_index": A([-100, 2, 7, -1], INTS),
                "label_smoothing": A([0.0, 0.1, 1.0], [1.5, *NUMBERS]),
                "reduction": A(["mean", "sum", "none"], ["avg", None, 3]),
            },
        )
    ),
    "losses.check_frequencies": Entry(
        calls(
            [
                A(
                    T("weights3", "vector"),
                    [
                        *T(
                            "negative",
                            "nan_inf",
                            "zeros",
                            "ints",
                            "empty",
                            "meta_small",
                            "complex",
                            "floats",
                            "expanded_huge",
                        ),
                        *GARBAGE[:3],
                    ],
                )
            ],
            {
                "num_samples": A([10, 1000, 10**7], [0, -5, 10**7 + 1, *INTS]),
                "seed": SEED,
                "sigmas": A([6.0, 1], NUMBERS),
            },
        )
    ),
    "losses.plot_distributions": Entry(
        calls(
            [
                A(
                    [{"a": T("vector")[0]}, {"a": T("vector")[0], "b": T("weights3")[0]}],
                    [
                        {"a": T("floats")[0]},
                        {},
                        {"n": T("nan_inf")[0]},
                        {"c": T("complex")[0]},
                        {"m": T("meta_small")[0]},
                        {1: T("vector")[0]},
                        {"a": [0.5]},
                        *GARBAGE[:4],
                    ],
                )
            ],
            {"ax": AX, "title": A(["", "title"], [None, 3, ["t"]])},
        )
    ),
    "losses.FrequencyCheck": RESULT,
    "losses.bernstein_tolerance": Entry(
        calls(
            [
                A(
                    T("probs64"),
                    [
                        *T("expanded_probs64", "floats", "negative", "nan_inf", "ints"),
                        *BAD_TENSORS,
                        *GARBAGE[:4],
                    ],
                ),
                A([1, 100, 10**7], [0, -1, *INTS]),
                A([6.0, 1, 0.5, 40.0], [0, -1.0, *NUMBERS]),
            ]
        )
    ),
    # checks
    "checks.raises": Entry(
        calls(
            [A(O("ValueError", "lookup_errors"), [*O("object"), "ValueError", 3, None, ()])],
            {
                "match": A(["bad", "missing", ""], ["(unclosed", 3, None]),
                "show": A([True, False], [1, None]),
            },
            body=["nothing", "value_error", "key_error", "caller_error"],
        ),
        # raises' contract: AssertionError when the block's error does not match, and
        # the block's own errors of other types pass through unchanged
        passes_through=("builtins.AssertionError", "builtins.KeyError", CALLER_ERROR),
    ),
    "checks.Raised": RESULT,
    # autograd mechanics
    "autograd_mechanics.record_saved_tensors": Entry(
        calls(
            [],
            {"ignore": A([(), *O("parameters"), [VECTOR], (VECTOR, VECTOR)], IGNORE_HOSTILE)},
            body=["autograd", "autograd_meta", "nothing", "caller_error"],
        ),
        passes_through=(CALLER_ERROR,),
    ),
    "autograd_mechanics.SavedTensor": RESULT,
    "autograd_mechanics.SavedTensors": RESULT,
    # gpu memory: arithmetic only, for any request from 1 byte to 2**62
    "gpu_memory.allocator_block": Entry(
        calls([A([1, 513, 2**20 + 1, 11 * 2**20, 2**62], [0, -1, *INTS])])
    ),
    "gpu_memory.AllocatorBlock": RESULT,
    # training loop
    "training_loop.param_groups": Entry(calls([MODULE, A([0.1, 0.0, 1, 0], [*NUMBERS, -0.5, -1])])),
    "training_loop.group_table": Entry(calls([A(O("sgd", "adam_other"), GARBAGE), MODULE])),
    "training_loop.warmup_cosine": Entry(
        calls(
            [A(O("sgd", "adam_other"), GARBAGE)],
            {
                "warmup_steps": A([2, 0, 1], [*INTS, -1]),
                "total_steps": A([10, 3, 2**40], [*INTS, 0, -1, 2]),
                "min_factor": A([0.0, 0.5, 1], [*NUMBERS, 1.5, -0.1]),
            },
        )
    ),
    "training_loop.watch_saved_tensors": Entry(
        calls(
            [],
            {"ignore": A([(), *O("parameters"), [VECTOR], (VECTOR, VECTOR)], IGNORE_HOSTILE)},
            body=["autograd", "autograd_meta", "nothing", "caller_error"],
        ),
        passes_through=(CALLER_ERROR,),
    ),
    "training_loop.GroupRow": RESULT,
    "training_loop.GroupTable": RESULT,
    "training_loop.SavedAlive": RESULT,
    "training_loop.WarmupCosine": RESULT,
    # data loading: datasets are made, then their length and first and last items read
    "data_loading.TracingDataset": Entry(calls([LENGTH], {"tag": A([0, 7, -1], INTS)})),
    "data_loading.TracingDataset.__getitem__": Entry(
        calls([SELF("tracing_dataset"), INDEX]), allowed=("builtins.IndexError",)
    ),
    "data_loading.CountingStream": Entry(calls([LENGTH], {"shard": BOOL})),
    "data_loading.VariableLengths": Entry(
        calls([LENGTH], {"max_length": A([1, 3], [0, -1, 2**40, 2**62, *INTS])})
    ),
    "data_loading.VariableLengths.__getitem__": Entry(
        calls([SELF("variable_lengths"), INDEX]), allowed=("builtins.IndexError",)
    ),
    "data_loading.TransformedRange": Entry(
        calls([LENGTH], {"transform": A([None, *O("fn_args")], [*O("fn_none"), 3, "f"])})
    ),
    "data_loading.TransformedRange.__getitem__": Entry(
        calls([SELF("transformed_range"), INDEX]), allowed=("builtins.IndexError",)
    ),
    # keyword-only `seconds` has no default: every call waits at most the seconds drawn
    "data_loading.StallingDataset": Entry(
        calls(
            [A([1, 3], [0, -1, 2**63, *INTS])],
            {"stall_at": A([0, 2], [-1, 3, 2**63, *INTS]), "seconds": A([0.01, 0.2], SECONDS)},
        )
    ),
    "data_loading.StallingDataset.__getitem__": Entry(
        calls([SELF("stalling_dataset"), INDEX]), allowed=("builtins.IndexError",)
    ),
    "data_loading.StallingDataset.release": Entry(calls([SELF("stalling_dataset")])),
    "data_loading.private_memory": Entry(calls()),
    "data_loading.HeldRecords": Entry(
        calls(
            [A([1, 10], [0, -1, 2**63, *INTS])],
            {
                "held": A(["list", "tensor"], ["array", "", 3, None]),
                "blocks": A([1, 4], [0, -1, 11, 2**63, *INTS]),
            },
        )
    ),
    "data_loading.HeldRecords.__getitem__": Entry(
        calls([SELF("held_records"), INDEX]), allowed=("builtins.IndexError",)
    ),
    "data_loading.PaddedBatch": RESULT,
    "data_loading.pad_collate": Entry(
        calls(
            [A(PAIRS_VALID, PAIRS_HOSTILE)],
            {"padding_value": A([0.0, -1.0, 0, 2], [NAN, INF, 1e308, 10**400, "x", True, VECTOR])},
        )
    ),
    "data_loading.distributed_split": Entry(
        calls(
            [A([1, 5, 12], [0, -1, 2**40, *INTS])],
            {
                "num_replicas": A([1, 3], [0, 2**40, *INTS]),
                "epochs": A([1, 2], [0, 2**40, *INTS]),
                "shuffle": BOOL,
                "seed": A([0, 7, 2**63], [-1, 2**64 - 1, 2**64, *INTS]),
                "drop_last": BOOL,
                "set_epoch": BOOL,
            },
        )
    ),
    "data_loading.plot_distributed_split": Entry(
        calls(
            [A([*O("split"), [[[0, 1], [2]]], [[[]]]], SPLIT_HOSTILE)],
            {"ax": AX, "title": A(["", "title"], [None, 3, ["t"]])},
        )
    ),
    # layout (a later helper)
    "layout.plot_values": Entry(
        calls(
            [A([{"a": VECTOR}, {"a": [1.0, 2.0, 3.0], "b": VECTOR}], ROWS_HOSTILE)],
            {
                "marked": A([None, {"a": [True, False, True]}, {}], MARKS_HOSTILE),
                "ax": AX,
                "title": TITLE,
            },
        )
    ),
    # losses (later helpers)
    "losses.keep_top_k": Entry(calls([LOGITS, A([1, 2, 3], [0, 5, -1, *INTS])])),
    "losses.keep_top_p": Entry(
        calls([LOGITS, A([0.5, 0.9, 1, 1.0], [0, -0.1, 1.5, "0.5", 10**400, *NUMBERS])])
    ),
    # parallel: workers for run_workers; outside a process group they must say so
    "parallel.ddp_broadcast": Entry(calls()),
    "parallel.save_on_rank0": Entry(calls([FOLDER], {"map_location": DEVICE})),
    "parallel.accumulate_no_sync": Entry(
        calls([SEED, BATCH], {"micro_batches": A([2, 4], [1, 0, *INTS])})
    ),
    "parallel.unused_parameter": Entry(calls()),
    "parallel.sync_batchnorm_on_cpu": Entry(calls()),
    "parallel.fsdp2_step": Entry(calls([SEED, BATCH], {"lr": A([0.1, 0], NUMBERS)})),
    "parallel.practice": Entry(calls([FOLDER], {"seed": SEED, "batch_size": BATCH})),
    "parallel.TwoHeads": Entry(calls()),
    "parallel.TwoHeads.forward": Entry(
        calls(
            [
                SELF("two_heads"),
                A(T("pairs2"), [*T("floats", "ints", "scalar", "complex"), *BAD_TENSORS, *GARBAGE]),
            ]
        )
    ),
    # randomness
    "randomness.NoisyRange": Entry(calls([LENGTH], {"seed": A([0, 7, 2**64], [-1, *INTS])})),
    "randomness.NoisyRange.__getitem__": Entry(
        calls([SELF("noisy_range"), INDEX]), allowed=("builtins.IndexError",)
    ),
    "randomness.NoisyRange.reseed": Entry(
        calls([SELF("noisy_range"), A([0, 5, 2**64], [-1, *INTS])])
    ),
    "randomness.Draw": RESULT,
    "randomness.deterministic_algorithms": Entry(
        calls([BOOL], {"warn_only": BOOL}, body=["nothing", "autograd", "caller_error"]),
        passes_through=(CALLER_ERROR,),
    ),
    "randomness.plot_draws": Entry(
        calls(
            [A(O("draws"), [[], [1], *O("endless_draws", "generator"), *GARBAGE])],
            {
                "value": A(["own_value", "torch_value"], ["index", "x", 3, None, ["own_value"]]),
                "ax": AX,
                "title": TITLE,
            },
        )
    ),
    "randomness.reseed_worker": Entry(calls([A([0, 1], [-1, *INTS])])),
    "randomness.seed_everything": Entry(calls([A([0, 3, 2**32 - 1], [-1, 2**32, *INTS])])),
    # mixed precision
    "mixed_precision.dtype_ranges": Entry(
        calls(
            [
                A(
                    [FLOAT_DTYPES, [HALF], (torch.float64, torch.bfloat16)],
                    [
                        [],
                        HALF,
                        "float16",
                        ["float16"],
                        [torch.int8],
                        [HALF, HALF],
                        [torch.float8_e5m2],
                        [HALF] * 10**5,
                        [None],
                        *O("generator"),
                        *GARBAGE,
                    ],
                )
            ]
        )
    ),
    "mixed_precision.plot_dtype_ranges": Entry(
        calls(
            [A([None, *O("dtype_ranges")], [*O("dtype_ranges_empty"), [HALF], *GARBAGE])],
            {
                "marks": A(
                    [None, {}, {"1e-8": 1e-8}, {"max": 1e308, "one": 1, "huge int": 2**1000}],
                    [
                        {"zero": 0.0},
                        {"nan": NAN},
                        {"inf": INF},
                        {"negative": -1.0},
                        {"int": 10**400},
                        {"long": 10**5000},
                        {"s": "1e-8"},
                        {"b": True},
                        {"t": VECTOR},
                        {1: 1.0},
                        [("a", 1.0)],
                        [1],
                        "ab",
                        {str(i): 1.0 for i in range(10**4)},
                        *O("generator"),
                        *GARBAGE,
                    ],
                ),
                "ax": AX,
            },
        )
    ),
    "mixed_precision.autocast_dtypes": Entry(
        calls(
            [
                A(
                    [
                        {"sum": torch.sum},
                        {"mm": O("op_mm")[0], "exp": torch.exp},
                        {"identity": O("fn_args")[0]},
                    ],
                    [
                        {},
                        [torch.sum],
                        {1: torch.sum},
                        {"a": 3},
                        {"a": O("fn_none")[0]},
                        {"a": O("op_tuple")[0]},
                        {"a": O("op_float")[0]},
                        {"a": O("op_raises")[0]},
                        "sum",
                        *GARBAGE,
                    ],
                ),
                A(
                    T(
                        "floats",
                        "vector",
                        "half",
                        "transposed",
                        "grad_leaf",
                        "scalar",
                        "empty",
                        "strided",
                        "overlapping",
                        "big_storage",
                    ),
                    [
                        *T(
                            "ints", "bool", "complex", "meta_small", "expanded_huge", "wide_overlap"
                        ),
                        *BAD_TENSORS,
                        *GARBAGE,
                    ],
                ),
            ],
            {
                "device_type": A(
                    ["cpu"], ["cuda", "mps", "", "CPU", "cpu:0", *O("device_cpu"), 3, None]
                ),
                "dtype": A(
                    [torch.bfloat16, torch.float16],
                    [torch.float32, torch.float64, torch.int8, "bfloat16", None, 3],
                ),
            },
        ),
        passes_through=(CALLER_ERROR,),
    ),
    "mixed_precision.AutocastRow": RESULT,
    "mixed_precision.AutocastTable": RESULT,
    "mixed_precision.DtypeRange": RESULT,
    "mixed_precision.DtypeRanges": RESULT,
    # compiling: the recorder is a dataclass (a backend for torch.compile), made by the
    # caller, not by a helper; its graphs come from torch.compile, too slow to fuzz here
    "compiling.GraphRecorder": RESULT,
    "compiling.RecordedGraph": RESULT,
    "compiling.TorchLogs": RESULT,
    "compiling.record_torch_logs": Entry(
        calls(body=["nothing", "torch_log", "autograd", "caller_error"]),
        passes_through=(CALLER_ERROR,),
    ),
    "compiling.break_even_calls": Entry(
        calls(
            [],
            {
                "compile_seconds": A([2.0, 1e-9, 3e7], SECONDS[:-1]),
                "eager_seconds": A([0.5, 1e-9, 5e-324], SECONDS[:-1]),
                "compiled_seconds": A([0.25, 1.0, 5e-324], SECONDS[:-1]),
            },
        )
    ),
    "compiling.best_times": Entry(
        calls(  # a first function always given, so that each repeats is tried with one
            [A(FUNCTIONS, CALLABLES_BAD)],
            {"repeats": A([1, 3, 20, 100_000], [0, -1, 100_001, *INTS])},
            varargs=A(FUNCTIONS, CALLABLES_BAD),
        ),
        passes_through=(CALLER_ERROR,),
    ),
}


def _is_result_type(value: Any) -> bool:
    """A dataclass or a NamedTuple: what a helper returns."""
    namedtuple = isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")
    return is_dataclass(value) or namedtuple


def _methods(cls: type) -> dict[str, Any]:
    """The methods a class defines that a caller calls with arguments: its public ones
    and ``__getitem__`` (results and exceptions have none to fuzz)."""
    if _is_result_type(cls) or issubclass(cls, BaseException):
        return {}
    return {
        name: member
        for name, member in vars(cls).items()
        if inspect.isfunction(member) and (not name.startswith("_") or name == "__getitem__")
    }


def public_callables() -> dict[str, Any]:
    """Every callable in a public module's ``__all__``, as ``module.name``, and the
    methods of its classes (:func:`_methods`) as ``module.Class.method``."""
    found = {}
    for info in pkgutil.iter_modules(pytorch_memo.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"pytorch_memo.{info.name}")
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value):
                found[f"{info.name}.{name}"] = value
            if isinstance(value, type):
                for method, member in _methods(value).items():
                    found[f"{info.name}.{name}.{method}"] = member
    return found


def required_keywords(helper: str) -> frozenset[str]:
    """The keyword-only parameters of ``helper`` without a default: never left out."""
    parameters = inspect.signature(public_callables()[helper]).parameters.values()
    return frozenset(
        p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    )


HELPERS = sorted(k for k, v in REGISTRY.items() if isinstance(v, Entry))


def test_every_public_callable_is_registered() -> None:
    found = public_callables()
    missing = sorted(set(found) - set(REGISTRY))
    assert not missing, f"public callables with no fuzz strategy: {missing}"
    stale = sorted(set(REGISTRY) - set(found))
    assert not stale, f"registered but not public (any more): {stale}"
    for name, entry in REGISTRY.items():
        value = found[name]
        if entry == RESULT:
            assert _is_result_type(value), f"{name} is registered as a result type"
        elif entry == ERROR:
            assert isinstance(value, type), name
            assert issubclass(value, Exception), name
        else:
            assert inspect.isfunction(value) or (
                inspect.isclass(value) and not _is_result_type(value)
            ), f"{name} is registered as a helper (a function, or a class to construct)"


# -- the worker ---------------------------------------------------------------------------


@dataclass
class Worker:
    """The fuzz worker process; restarted after a hang or a crash."""

    log: Path
    process: subprocess.Popen[bytes] | None = None
    limit: int = 0
    restarts: list[str] = field(default_factory=list)

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
        self.process = subprocess.Popen(
            # imported as tests.fuzz_worker (not __main__), so the pickled Specs are its own
            [
                sys.executable,
                "-c",
                "from tests.fuzz_worker import main; main()",
                str(self.log),
                str(self.log.parent),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        ready = self._receive(120.0)
        assert ready is not None, f"the worker did not start: {self.tail()}"
        assert ready.get("ready"), f"the worker did not start: {self.tail()}"
        self.limit = ready["limit"]

    def _receive(self, seconds: float) -> Any:
        assert self.process is not None
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], seconds)
        if not ready:
            return None
        try:
            return receive(self.process.stdout)
        except EOFError:
            return {"outcome": "crash", "returncode": self.process.wait(), "log": self.tail()}

    def call(self, helper: str, call: Call) -> dict[str, Any]:
        if self.process is None or self.process.poll() is not None:
            self.start()
        assert self.process is not None
        assert self.process.stdin is not None
        stdin = self.process.stdin
        start = time.monotonic()
        send(stdin, (helper, call.args, call.kwargs, call.body))
        reply: dict[str, Any] | None = self._receive(CALL_SECONDS)
        if reply is None:
            reply = {"outcome": "hang", "seconds": CALL_SECONDS, "log": self.tail()}
        if reply["outcome"] in ("hang", "crash"):
            self.restarts.append(helper)
            self.stop()
        reply["elapsed"] = time.monotonic() - start
        return reply

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-1200:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None:
            return
        kill_tree(self.process.pid)
        self.process.communicate()
        self.process = None


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    with tempfile.TemporaryDirectory() as folder:
        running = Worker(Path(folder) / "worker.log")
        running.start()
        try:
            yield running
        finally:
            running.stop()


# -- the check ----------------------------------------------------------------------------


def _short(value: object) -> str:
    return _REPR.repr(value)


def _named(message: str, names: set[str]) -> bool:
    """Whether ``message`` names one of ``names`` (short names only as the subject)."""
    for name in names:
        if not name:
            continue
        if len(name) <= 2:
            pattern = rf"'{re.escape(name)}'|(?<![\w.]){re.escape(name)}(\[| must| of | has |=| is)"
        else:
            pattern = rf"(?<![\w]){re.escape(name)}(?![\w])"
        if re.search(pattern, message):
            return True
    return False


def check(helper: str, entry: Entry, call: Call, reply: dict[str, Any]) -> None:
    shown = f"{helper}(*{_short(call.args)}, **{_short(call.kwargs)}) body={call.body!r}"
    outcome = reply["outcome"]
    assert outcome != "hang", f"{shown} did not answer within {CALL_SECONDS} s\n{reply['log']}"
    assert outcome != "crash", f"{shown} crashed the worker ({reply['returncode']})\n{reply['log']}"
    assert not reply["leaked"], f"{shown} left torch's global state changed: {reply['leaked']}"
    if outcome == "result":
        return
    kind, message = reply["type"], reply["message"]
    detail = f"{shown} raised {kind}: {message}\n{reply['traceback']}"
    assert "can't allocate memory" not in message, f"unbounded allocation: {detail}"
    assert "Internal error" not in message, f"torch's internal error leaked: {detail}"
    if kind in entry.passes_through:
        return
    if call.body in BODY_ERRORS:  # the block's own error, passed through unchanged
        raised = BODY_ERRORS[call.body]
        if (kind, message) == (error_type(raised), str(raised)):
            return
    allowed = (*ALLOWED, *entry.allowed)
    assert any(a in reply["mro"] for a in allowed), f"unexpected error type: {detail}"
    function = public_callables()[helper]
    names = set(inspect.signature(function).parameters) | set(call.kwargs) | set(entry.names)
    names |= {helper.rsplit(".", 1)[1]}
    for path in reply["paths"]:
        names |= {path, Path(path).name}
    assert _named(message, names), f"the message does not name the argument: {detail}"


@pytest.mark.parametrize("helper", HELPERS)
def test_each_value_alone(helper: str, worker: Worker) -> None:
    """Every value of every argument, once, with the other arguments valid."""
    entry = REGISTRY[helper]
    assert isinstance(entry, Entry)
    failures = []
    for call in entry.arguments.sweep(required_keywords(helper)):
        try:
            check(helper, entry, call, worker.call(helper, call))
        except AssertionError as failure:
            failures.append(str(failure).split("\n", 1)[0])
    assert not failures, f"{len(failures)} calls failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("helper", HELPERS)
def test_hostile_calls(helper: str, worker: Worker) -> None:
    entry = REGISTRY[helper]
    assert isinstance(entry, Entry)

    @settings(
        max_examples=EXAMPLES,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a hang shrinks too slowly
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        report_multiple_bugs=False,
        database=None,
    )
    @given(call=drawn(entry.arguments, required_keywords(helper)))
    def run(call: Call) -> None:
        reply = worker.call(helper, call)
        if os.environ.get("MEMO_FUZZ_TIMES"):
            print(f"{reply['elapsed']:.3f}s {helper} {_short(call)}")
        check(helper, entry, call, reply)

    run()

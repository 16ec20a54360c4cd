"""pytorch_memo.submodules: layer_shapes and unregistered, checked against plain torch."""

from __future__ import annotations

import itertools
import pickle
import types
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pytorch_memo import submodules
from pytorch_memo.submodules import (
    HiddenTable,
    LayerShapeError,
    ShapeTable,
    layer_shapes,
    unregistered,
)

# -- layer_shapes ------------------------------------------------------------------------


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape),)
    if isinstance(value, dict):
        return tuple(s for v in value.values() for s in _shapes(v))
    if isinstance(value, tuple | list):
        return tuple(s for v in value for s in _shapes(v))
    return ()


def real_calls(model: nn.Module, *inputs: torch.Tensor) -> list[tuple[Any, ...]]:
    """Every registered module's (name, input shapes, output shapes) of a real forward
    pass on the CPU, in call order: what layer_shapes must find on meta."""
    names = {id(m): n for n, m in model.named_modules()}
    calls: list[list[Any]] = []
    running: list[int] = []  # a call's row stays None when the call raised

    def before(module: nn.Module, args: Any, kwargs: Any) -> None:
        calls.append([names[id(module)], (*_shapes(args), *_shapes(kwargs)), None])
        running.append(len(calls) - 1)

    def after(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        calls[running[-1]][2] = _shapes(output)

    def close(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        running.pop()  # always_call: after a call that raised too

    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
        handles.append(module.register_forward_hook(close, with_kwargs=True, always_call=True))
    try:
        model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return [tuple(c) for c in calls]


def check_against_a_real_run(model: nn.Module, *inputs: torch.Tensor) -> ShapeTable:
    """layer_shapes on shapes agrees with a real forward pass, and leaves the model as it was."""
    before = {n: (t, t.clone()) for n, t in model.state_dict(keep_vars=True).items()}
    table = layer_shapes(model, *[tuple(x.shape) if x.is_floating_point() else x for x in inputs])
    state = model.state_dict(keep_vars=True)
    assert state.keys() == before.keys()
    for name, (tensor, values) in before.items():
        assert state[name] is tensor
        assert tensor.device == values.device
        assert torch.equal(tensor, values), name  # running statistics not updated
    assert [(r.name, r.inputs, r.outputs) for r in table] == real_calls(model, *inputs)
    for row in table:
        module = model.get_submodule(row.name)
        assert row.type == type(module).__name__
        assert row.parameters == sum(p.numel() for p in module.parameters())
    return table


class TwoInputs(nn.Module):
    """Keyword arguments, a tuple output and a submodule called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(3, 3)
        self.merge = nn.Bilinear(3, 3, 2)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.shared(a), self.shared(b)
        return self.merge(x, y), y.mean(-1)


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(self.embed(tokens))
        return logits


def test_a_cnn_matches_a_real_run() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 3 * 3, 5),
    )
    table = check_against_a_real_run(model, torch.randn(2, 3, 8, 8))
    assert table[""].outputs == ((2, 5),)
    assert table["5"].inputs == ((2, 72),)
    assert model[1].num_batches_tracked == 1  # the real run counted; layer_shapes did not


def test_a_module_called_twice_has_two_rows() -> None:
    model = TwoInputs()
    table = check_against_a_real_run(model, torch.randn(4, 3), torch.randn(4, 3))
    assert [r.name for r in table] == ["", "shared", "shared", "merge"]
    assert table[""].outputs == ((4, 2), (4,))
    assert table["merge"].inputs == ((4, 3), (4, 3))


def test_tied_weights_and_integer_inputs() -> None:
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    table = check_against_a_real_run(TiedLM(), tokens)
    assert table["head"].outputs == ((2, 3, 10),)
    assert table[""].parameters == 40  # tied: counted once
    assert layer_shapes(TiedLM(), (2, 3), dtype=torch.long)["head"].outputs == ((2, 3, 10),)


def test_keyword_arguments_are_recorded() -> None:
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = TwoInputs()

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            both: tuple[torch.Tensor, torch.Tensor] = self.inner(x, b=2 * x)
            return both

    table = check_against_a_real_run(Outer(), torch.randn(5, 3))
    assert table["inner"].inputs == ((5, 3), (5, 3))  # the keyword one too


def test_a_model_already_on_meta_and_a_transformer() -> None:
    with torch.device("meta"):
        on_meta = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
    assert layer_shapes(on_meta, (3, 6))[""].outputs == ((3, 4),)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    check_against_a_real_run(layer, torch.randn(2, 5, 8))


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(0, 4),
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=5),
)
def test_any_mlp_matches_a_real_run(batch: int, widths: list[int]) -> None:
    layers: list[nn.Module] = []
    for size_in, size_out in itertools.pairwise(widths):
        layers += [nn.Linear(size_in, size_out), nn.Tanh()]
    check_against_a_real_run(nn.Sequential(*layers), torch.randn(batch, widths[0]))


def test_a_refusing_layer_is_named_and_the_model_left_alone() -> None:
    linear = nn.Linear(100, 4)
    model = nn.Sequential(nn.Flatten(), nn.Sequential(linear), nn.ReLU())
    weight = linear.weight
    values = weight.detach().clone()
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied"):
        model(torch.zeros(2, 3, 8, 8))  # what the CPU says, for the same layer
    with pytest.raises(LayerShapeError) as caught:
        layer_shapes(model, (2, 3, 8, 8))
    error = caught.value
    assert str(error).startswith("layer '1.0' (Linear) raised on input shapes (2, 192): ")
    assert "RuntimeError: " in str(error)
    assert isinstance(error.__cause__, RuntimeError)
    assert error.layer == "1.0"
    assert error.inputs == ((2, 192),)
    assert [(r.name, r.outputs) for r in error.table] == [
        ("", None),
        ("0", ((2, 192),)),
        ("1", None),
        ("1.0", None),
    ]
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is LayerShapeError
    assert str(again) == str(error)
    assert (again.layer, again.inputs, again.table) == (error.layer, error.inputs, error.table)
    assert linear.weight is weight
    assert torch.equal(weight, values)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_an_error_outside_the_layers_names_the_model() -> None:
    class Forgets(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat(x)  # type: ignore[arg-type]  # a tensor, not a sequence

    with pytest.raises(LayerShapeError, match=r"^the model \(Forgets\) raised on input shapes"):
        layer_shapes(Forgets(), (2,))

    class ReadsValues(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x.sum().item()

    with pytest.raises(LayerShapeError, match=r"Tensor.item\(\) cannot be called on meta"):
        layer_shapes(ReadsValues(), (2,))


def test_hooks_are_removed_after_a_run() -> None:
    model = TwoInputs()
    layer_shapes(model, (1, 3), (1, 3))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: layer_shapes(3, (1,)),  # type: ignore[arg-type]
            TypeError,
            "model must be a torch.nn.Module, got int: 3",
        ),
        (
            lambda: layer_shapes(nn.Linear(2, 2), "2"),  # type: ignore[arg-type]
            TypeError,
            r"inputs\[0\] must be a shape \(a sequence of ints\) or a tensor, got str: '2'",
        ),
        (
            lambda: layer_shapes(nn.Linear(2, 2), (1, 2), (1, -2)),
            ValueError,
            r"inputs\[1\]\[1\] must be >= 0, got -2",
        ),
        (
            lambda: layer_shapes(nn.Linear(2, 2), (1, 2.0)),  # type: ignore[arg-type]
            TypeError,
            r"inputs\[0\]\[1\] must be an int, got float: 2.0",
        ),
        (
            lambda: layer_shapes(nn.Linear(2, 2), (1, 2), dtype="float32"),  # type: ignore[arg-type]
            TypeError,
            "dtype must be a torch.dtype, got str: 'float32'",
        ),
        (
            lambda: layer_shapes(nn.LazyLinear(2), (1, 2)),
            ValueError,
            "model has parameters or buffers that are not materialised yet: 'weight', 'bias'",
        ),
    ],
)
def test_bad_arguments_are_named(call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


# -- unregistered ------------------------------------------------------------------------


class Holder(nn.Module):
    """A module holding the given attributes, assigned as a model's ``__init__`` would."""

    def __init__(self, **attributes: Any) -> None:
        super().__init__()
        for name, value in attributes.items():
            setattr(self, name, value)


def test_a_plain_list_and_dict_are_found_and_counted_as_the_registered_twin_counts() -> None:
    class Blocks(nn.Module):
        def __init__(self, listed: Any, keyed: Any) -> None:
            super().__init__()
            self.blocks = listed([nn.Linear(4, 4), nn.Linear(4, 2)])
            self.heads = keyed({"a": nn.Linear(2, 1)})

    hidden = Blocks(list, dict)
    table = unregistered(hidden)
    assert [(r.name, r.kind, r.type) for r in table] == [
        ("blocks[0]", "module", "Linear"),
        ("blocks[1]", "module", "Linear"),
        ("heads['a']", "module", "Linear"),
    ]
    twin = Blocks(nn.ModuleList, nn.ModuleDict)
    seen = sum(p.numel() for p in hidden.parameters())
    assert sum(r.parameters for r in table) == sum(p.numel() for p in twin.parameters()) - seen
    assert len(unregistered(twin)) == 0
    for row in table:  # none of them is registered
        assert row.name not in dict(hidden.named_modules())


def test_nested_containers_sets_and_parameters() -> None:
    hidden_parameter = nn.Parameter(torch.ones(3))
    inner = nn.Linear(2, 2)
    model = Holder(
        extra={"pairs": [(inner, hidden_parameter)], "set": {nn.ReLU()}},
        child=Holder(layer=nn.Linear(1, 1), more=[nn.Identity()]),  # a submodule's list
    )
    table = unregistered(model)
    assert [(r.name, r.kind, r.type, r.parameters) for r in table] == [
        ("extra['pairs'][0][0]", "module", "Linear", 6),
        ("extra['pairs'][0][1]", "parameter", "Parameter", 3),
        ("extra['set']{0}", "module", "ReLU", 0),
        ("child.more[0]", "module", "Identity", 0),
    ]
    known = {id(m) for m in model.modules()} | {id(p) for p in model.parameters()}
    assert id(inner) not in known
    assert id(hidden_parameter) not in known


def test_references_to_registered_layers_are_not_listed() -> None:
    class Refs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)
            self.order = [self.a, self.b, self.a.weight]
            self.wrapper = [nn.Sequential(self.a)]  # unregistered, its parameters are not

    table = unregistered(Refs())
    assert [(r.name, r.kind, r.parameters) for r in table] == [("wrapper[0]", "module", 0)]


def test_a_hidden_module_found_twice_is_listed_once_and_cycles_end() -> None:
    layer = nn.Linear(2, 2)
    loop: list[Any] = [layer]
    loop.append(loop)  # a list that holds itself
    model = Holder(first=loop, again=(layer,))
    assert [r.name for r in unregistered(model)] == ["first[0]"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["list", "tuple", "dict"]), st.booleans()), max_size=5))
def test_found_exactly_the_hidden_ones(slots: list[tuple[str, bool]]) -> None:
    attributes: dict[str, Any] = {}
    expected = []
    for index, (container, registered) in enumerate(slots):
        layer = nn.Linear(1, 2)
        if registered:
            attributes[f"layer{index}"] = layer
        else:
            expected.append(layer)
        held: Any = {"list": [layer], "tuple": (layer,), "dict": {index: layer}}[container]
        attributes[f"slot{index}"] = held
    table = unregistered(Holder(**attributes))
    assert len(table) == len(expected)
    assert sum(r.parameters for r in table) == 4 * len(expected)


def test_unregistered_arguments() -> None:
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module, got list: \[\]"):
        unregistered([])  # type: ignore[arg-type]
    lazy = nn.Module()
    lazy.layer = nn.LazyLinear(2)
    with pytest.raises(ValueError, match=r"not materialised yet: 'layer\.weight', 'layer\.bias'"):
        unregistered(lazy)


def test_a_hidden_lazy_layer_is_refused_with_where_it_is() -> None:
    model = Holder(blocks=[nn.Linear(2, 2), nn.LazyLinear(3)])
    with pytest.raises(ValueError, match=r"model holds, at blocks\[1\], parameters not materi"):
        unregistered(model)
    model = Holder(extra=(nn.UninitializedParameter(),))
    with pytest.raises(ValueError, match=r"at extra\[0\], parameters not materialised"):
        unregistered(model)


def test_an_empty_table_says_so() -> None:
    table = unregistered(nn.Linear(2, 2))
    assert isinstance(table, HiddenTable)
    assert len(table) == 0
    assert str(table).endswith(
        "nothing hidden in the lists, tuples, deques, dict values, sets and frozensets of "
        "the modules' attributes"
    )
    namespace = Holder(extra=types.SimpleNamespace(head=nn.Linear(2, 2)))
    assert len(unregistered(namespace)) == 0  # not searched: the note names what is


# -- layer_shapes: a layer's error caught by its parent, dtypes, the inputs ---------------


class Fallback(nn.Module):
    """Tries a layer built for 8 features, falls back to one built for 4."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(8, 2)
        self.narrow = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            out: torch.Tensor = self.wide(x)
        except RuntimeError:
            out = self.narrow(x)
        return out


def test_a_layer_error_its_parent_catches_leaves_the_other_rows_right() -> None:
    model = nn.Sequential(Fallback(), nn.ReLU())
    assert model(torch.ones(3, 4)).shape == (3, 2)  # the CPU runs it
    table = check_against_a_real_run(model, torch.ones(3, 4))
    assert [(r.name, r.inputs, r.outputs) for r in table] == [
        ("", ((3, 4),), ((3, 2),)),
        ("0", ((3, 4),), ((3, 2),)),
        ("0.wide", ((3, 4),), None),  # it raised
        ("0.narrow", ((3, 4),), ((3, 2),)),
        ("1", ((3, 2),), ((3, 2),)),
    ]


def test_an_error_raised_by_the_parent_after_catching_names_the_parent() -> None:
    class GivesUp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wide = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            try:
                out: torch.Tensor = self.wide(x)
            except RuntimeError:
                raise ValueError("no layer fits") from None
            return out

    model = nn.Sequential(nn.Identity(), GivesUp())
    with pytest.raises(ValueError, match="no layer fits"):
        model(torch.ones(3, 4))
    with pytest.raises(LayerShapeError, match=r"^layer '1' \(GivesUp\) raised .*no layer fits"):
        layer_shapes(model, (3, 4))

    class Reraises(nn.Module):  # the layer's own error passes through: the layer is named
        def __init__(self) -> None:
            super().__init__()
            self.wide = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            try:
                out: torch.Tensor = self.wide(x)
            except RuntimeError:
                self.failures = getattr(self, "failures", 0) + 1  # noted, then passed on
                raise
            return out

    with pytest.raises(LayerShapeError, match=r"^layer 'wide' \(Linear\) raised"):
        layer_shapes(Reraises(), (3, 4))


FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


class Functional(nn.Module):
    """One functional call on the input and a parameter of the given dtype."""

    def __init__(self, kind: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.kind = kind
        shape = {"linear": (4, 3), "matmul": (3, 4), "conv2d": (2, 3, 1, 1)}.get(kind, (3,))
        self.weight = nn.Parameter(torch.ones(shape, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if self.kind == "linear":
            return nn.functional.linear(x, w)
        if self.kind == "matmul":
            return x @ w
        if self.kind == "conv2d":
            return nn.functional.conv2d(x, w)
        if self.kind == "layer_norm":
            return nn.functional.layer_norm(x, (3,), w)
        if self.kind == "group_norm":
            return nn.functional.group_norm(x, 1, w)
        return nn.functional.batch_norm(x, w.detach(), w.detach(), w, training=False)


@pytest.mark.parametrize("autocast", [None, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "kind", ["linear", "matmul", "conv2d", "layer_norm", "group_norm", "batch"]
)
def test_dtypes_the_cpu_refuses_are_refused_and_only_those(
    kind: str, autocast: torch.dtype | None
) -> None:
    shape = (2, 3, 4, 4) if kind == "conv2d" else (2, 3)
    for inner, outer in itertools.product([*FLOATS, torch.int64], FLOATS):
        model = Functional(kind, outer)
        x = torch.ones(shape, dtype=inner)
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=bool(autocast)):
            try:
                model(x)
            except (RuntimeError, NotImplementedError):
                cpu_runs = False
            else:
                cpu_runs = True
            if cpu_runs:
                assert layer_shapes(model, x)[""].outputs is not None, (inner, outer)
                continue
            with pytest.raises(LayerShapeError, match=r"dtype") as caught:
                layer_shapes(model, x)
        message = str(caught.value)
        assert "expected" in message
        assert "the CPU refuses this mix of dtypes" in message
        assert str(outer) in message, message


def test_a_float64_model_given_float32_is_refused_naming_both_dtypes() -> None:
    model = nn.Sequential(nn.Linear(4, 2).double())
    with pytest.raises(RuntimeError, match="same dtype"):
        model(torch.ones(2, 4))  # the CPU
    with pytest.raises(LayerShapeError, match=r"^layer '0' \(Linear\) raised on input shapes"):
        layer_shapes(model, (2, 4))
    with pytest.raises(LayerShapeError, match=r"torch.int64"):
        layer_shapes(nn.Linear(3, 2), (2, 3), dtype=torch.long)
    assert layer_shapes(model, (2, 4), dtype=torch.float64)[""].outputs == ((2, 2),)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # casts float32, not float64
        with pytest.raises(RuntimeError, match="same dtype"):
            model(torch.ones(2, 4))
        with pytest.raises(LayerShapeError, match=r"under CPU autocast to torch.bfloat16"):
            layer_shapes(model, (2, 4))
        single = nn.Linear(4, 2)
        assert single(torch.ones(2, 4, dtype=torch.float16)).dtype == torch.bfloat16
        assert layer_shapes(single, (2, 4), dtype=torch.float16)[""].outputs == ((2, 2),)


def test_numpy_ints_in_a_shape_are_sizes_as_torch_takes_them() -> None:
    np = pytest.importorskip("numpy")
    shape = (np.int64(2), np.int32(3))
    assert torch.empty(shape).shape == (2, 3)
    assert layer_shapes(nn.Linear(3, 2), shape)[""].inputs == ((2, 3),)
    with pytest.raises(TypeError, match=r"inputs\[0\]\[0\] must be an int, got bool"):
        layer_shapes(nn.Linear(3, 2), (np.bool_(True), 3))


def test_too_few_or_too_many_inputs_are_the_caller_s_mistake() -> None:
    with pytest.raises(TypeError, match=r"^inputs must match Linear\.forward\(input"):
        layer_shapes(nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"got 2 inputs: too many positional arguments"):
        layer_shapes(nn.Linear(2, 2), (1, 2), (1, 2))
    assert layer_shapes(TwoInputs(), (1, 3), (1, 3))[""].outputs == ((1, 2), (1,))


# -- unregistered: inside hidden modules, other containers --------------------------------


def test_the_plain_list_of_a_hidden_module_is_searched_and_counted() -> None:
    blocks, own = [nn.Linear(2, 2), nn.Linear(2, 2)], nn.Linear(3, 1)
    model = Holder(held=[Holder(own=own, blocks=blocks)])  # own: registered in the hidden one
    table = unregistered(model)
    assert [(r.name, r.kind, r.type, r.parameters) for r in table] == [
        ("held[0]", "module", "Holder", 4),
        ("held[0].blocks[0]", "module", "Linear", 6),
        ("held[0].blocks[1]", "module", "Linear", 6),
    ]
    twin = Holder(held=nn.ModuleList([Holder(own=own, blocks=nn.ModuleList(blocks))]))
    total = sum(p.numel() for p in twin.parameters())
    assert sum(r.parameters for r in table) == total - sum(p.numel() for p in model.parameters())


def test_a_deque_is_searched_and_deep_nesting_ends() -> None:
    from collections import deque

    assert [r.name for r in unregistered(Holder(queue=deque([nn.Linear(2, 2)])))] == ["queue[0]"]
    deep: Any = nn.Linear(2, 2)
    for _ in range(5000):
        deep = [deep]
    (row,) = unregistered(Holder(deep=deep))
    assert row.name.startswith("deep[0][0]")
    assert row.parameters == 6


def _operands(name: str, first: torch.dtype, second: torch.dtype, device: str) -> Any:
    """A call of ``name`` whose operands have the dtypes ``first`` and ``second``."""

    def t(*shape: int, dtype: torch.dtype = first) -> torch.Tensor:
        return torch.ones(shape, dtype=dtype, device=device)

    F = nn.functional
    calls = {
        "linear": lambda: F.linear(t(2, 3), t(4, 3, dtype=second)),
        "mm": lambda: torch.mm(t(2, 3), t(3, 4, dtype=second)),
        "matmul": lambda: torch.matmul(t(2, 3), t(3, 4, dtype=second)),
        "linalg_matmul": lambda: torch.linalg.matmul(t(2, 3), t(3, 4, dtype=second)),
        "__matmul__": lambda: t(2, 3) @ t(3, 4, dtype=second),
        "__rmatmul__": lambda: t(3, 4, dtype=second).__rmatmul__(t(2, 3)),
        "addmm": lambda: torch.addmm(t(2, 4), t(2, 3), t(3, 4, dtype=second)),
        "mv": lambda: torch.mv(t(2, 3), t(3, dtype=second)),
        "addmv": lambda: torch.addmv(t(2), t(2, 3), t(3, dtype=second)),
        "addbmm": lambda: torch.addbmm(t(2, 4), t(5, 2, 3), t(5, 3, 4, dtype=second)),
        "baddbmm": lambda: torch.baddbmm(t(5, 2, 4), t(5, 2, 3), t(5, 3, 4, dtype=second)),
        "conv1d": lambda: F.conv1d(t(1, 2, 5), t(3, 2, 3, dtype=second)),
        "conv2d": lambda: F.conv2d(t(1, 2, 5, 5), t(3, 2, 3, 3, dtype=second)),
        "conv3d": lambda: F.conv3d(t(1, 2, 5, 5, 5), t(3, 2, 3, 3, 3, dtype=second)),
        "conv_transpose1d": lambda: F.conv_transpose1d(t(1, 2, 5), t(2, 3, 3, dtype=second)),
        "conv_transpose2d": lambda: F.conv_transpose2d(t(1, 2, 5, 5), t(2, 3, 3, 3, dtype=second)),
        "conv_transpose3d": lambda: F.conv_transpose3d(
            t(1, 2, 5, 5, 5), t(2, 3, 3, 3, 3, dtype=second)
        ),
    }
    assert set(calls) == set(submodules._ONE_DTYPE)  # every name the helper checks
    return calls[name]()


@pytest.mark.parametrize("name", sorted(submodules._ONE_DTYPE))
def test_every_one_dtype_function_is_refused_mixed_as_the_cpu_refuses_it(name: str) -> None:
    class Calls(nn.Module):
        def __init__(self, second: torch.dtype) -> None:
            super().__init__()
            self.second = second

        def forward(self, x: torch.Tensor) -> Any:
            return _operands(name, x.dtype, self.second, x.device.type)

    with pytest.raises(RuntimeError, match=r"dtype|scalar type"):
        _operands(name, torch.float32, torch.float64, "cpu")
    refused = r"argument \d has dtype torch.float(32|64), expected torch.float(64|32)"
    with pytest.raises(LayerShapeError, match=refused):
        layer_shapes(Calls(torch.float64), (1,))
    _operands(name, torch.float64, torch.float64, "cpu")
    assert layer_shapes(Calls(torch.float64), (1,), dtype=torch.float64)[""].outputs


def test_a_dtype_refused_for_inputs_made_from_shapes_names_the_dtype_argument() -> None:
    """An ``nn.Embedding`` takes integer indices: given a shape, ``layer_shapes`` makes a
    float32 input by default, and its refusal names the argument to change, ``dtype``."""
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    for dtype in (torch.float32, torch.float64):
        with pytest.raises(LayerShapeError, match=r"^layer '0' \(Embedding\) raised") as caught:
            layer_shapes(model, (2, 3), dtype=dtype)
        assert str(caught.value).endswith(
            f"(the inputs given as shapes were made with dtype={dtype})"
        )
    assert layer_shapes(model, (2, 3), dtype=torch.long)[""].outputs == ((2, 3, 2),)
    with pytest.raises(LayerShapeError) as given:  # a tensor, not a shape: no hint
        layer_shapes(model, torch.zeros(2, 3))
    assert "dtype=" not in str(given.value)
    with pytest.raises(LayerShapeError) as shapes:  # not about the dtype: no hint
        layer_shapes(nn.Linear(8, 2), (2, 3))
    assert "dtype=" not in str(shapes.value)


@pytest.mark.parametrize(
    "dtype",
    [torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool, torch.float16, torch.float64],
)
def test_an_embeddings_indices_are_refused_as_the_cpu_refuses_them(dtype: torch.dtype) -> None:
    """torch 2.8 to 2.12 let an embedding's non-integer indices through on ``meta``;
    ``layer_shapes`` refuses exactly the dtypes the CPU refuses, with the CPU's words,
    through ``nn.Embedding`` and through ``torch.embedding`` called directly."""

    class Direct(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(10, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.embedding(self.weight, x)

    indices = torch.zeros(2, 3, dtype=dtype)
    for model in (nn.Embedding(10, 4), Direct()):
        try:
            model(indices)
            refused = None
        except RuntimeError as error:
            refused = str(error).splitlines()[0]
        if refused is None:
            assert layer_shapes(model, indices)[""].outputs == ((2, 3, 4),)
        else:
            with pytest.raises(LayerShapeError) as caught:
                layer_shapes(model, indices)
            # the CPU's words, up to the type it names (the CPU says torch.ShortTensor,
            # the meta device of 2.13 and later torch.int16, as layer_shapes does)
            assert refused.split(" but got ")[0] in str(caught.value)
            assert str(caught.value).endswith(f"but got {dtype} instead")


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_a_nested_buffer_is_refused_by_name(layout: torch.layout) -> None:
    """torch makes no meta tensor like a nested one (an internal assert); layer_shapes
    names the buffer instead, and inventory (no single shape to list) too."""
    from pytorch_memo.modules import inventory

    model = nn.Linear(4, 2)
    ragged = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)], layout=layout)
    model.register_buffer("ragged", ragged)
    assert model(torch.zeros(2, 4)).shape == (2, 2)  # the model itself runs
    with pytest.raises(ValueError, match=r"model's buffer 'ragged' is a nested tensor"):
        layer_shapes(model, (2, 4))
    with pytest.raises(ValueError, match=r"module's buffer 'ragged' is a nested tensor"):
        inventory(model)


def test_plain_items_of_a_container_get_no_path_made() -> None:
    """A module's vocabulary of a million entries cost ``unregistered`` a path string per
    entry (seconds, hundreds of MB) to find nothing: only what may hide a module or a
    parameter (modules, parameters, containers) is looked at further."""
    from pytorch_memo.submodules import _contents

    layer, weight, inner = nn.Linear(1, 1), nn.Parameter(torch.zeros(1)), [1]
    items = [1, "a", layer, 2.0, weight, inner, torch.zeros(1)]
    assert list(_contents("held", items)) == [
        ("held[2]", layer), ("held[4]", weight), ("held[5]", inner)
    ]  # fmt: skip
    assert list(_contents("vocab", {"a": 1, "b": layer})) == [("vocab['b']", layer)]
    assert list(_contents("s", {1, 2})) == []
    model = nn.Linear(2, 2)
    model.vocab = {str(i): i for i in range(100_000)}  # type: ignore[assignment]
    model.ids = list(range(100_000))  # type: ignore[assignment]
    model.held = [nn.Linear(2, 2)]  # type: ignore[assignment]
    assert [row.name for row in unregistered(model)] == ["held[0]"]


def test_dtypes_mixed_inside_multi_head_attention_are_refused_as_the_cpu_refuses_them() -> None:
    """``nn.MultiheadAttention`` calls ``F.multi_head_attention_forward``, a Python
    function that runs its own matrix products: a float64 attention layer (so a
    Transformer layer) given float32 input is refused, as the CPU refuses it, and run in
    one dtype it gives the CPU's shapes."""
    q = torch.ones(3, 2, 8)
    attention = nn.MultiheadAttention(8, 2).double()
    encoder = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16).double()
    for model, args in ((attention, (q, q, q)), (encoder, (q,))):
        with pytest.raises(RuntimeError, match="same dtype"):
            model(*args)  # the CPU
        with pytest.raises(LayerShapeError, match="the CPU refuses this mix of dtypes"):
            layer_shapes(model, *args)
        wide = tuple(a.double() for a in args)
        table = layer_shapes(model, *wide)
        assert [(r.name, r.inputs, r.outputs) for r in table] == real_calls(model, *wide)
    refused = r"^layer 'self_attn' \(MultiheadAttention\) raised .* argument 'in_proj_weight'"
    with pytest.raises(LayerShapeError, match=refused):
        layer_shapes(encoder, q)


class _Masked(nn.Module):
    """An ``nn.MultiheadAttention`` given the same tensor as query, key and value."""

    def __init__(self, attention: nn.MultiheadAttention, mask: torch.Tensor | None) -> None:
        super().__init__()
        self.attention = attention
        self.mask = mask  # a bool mask, not a buffer: moved to the input's device

    def forward(self, x: torch.Tensor) -> Any:
        padding = None if self.mask is None else self.mask.to(x.device)
        return self.attention(x, x, x, key_padding_mask=padding)


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_multi_head_attention_dtypes_are_refused_exactly_as_the_cpu_refuses_them(
    autocast: torch.dtype | None,
) -> None:
    # Under CPU autocast, the torch.cat that appends bias_k refuses float16 beside
    # bfloat16 ("at::autocast::prioritize"): not a matrix product, and not checked; and
    # the meta device, which autocast does not cast, refuses a key padding mask made in
    # the input's dtype beside the float32 projections that CPU autocast makes bfloat16.
    bias_kv = autocast is None
    mask = torch.tensor([[False, False, True]] * 2) if autocast is None else None
    for inner, outer in itertools.product(FLOATS, FLOATS):
        model = nn.MultiheadAttention(8, 2, add_bias_kv=bias_kv).to(outer)
        x = torch.ones(3, 2, 8, dtype=inner)
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=bool(autocast)):
            try:
                model(x, x, x, key_padding_mask=mask)
            except RuntimeError:
                cpu_runs = False
            else:
                cpu_runs = True
            if cpu_runs:
                assert layer_shapes(_Masked(model, mask), x)[""].outputs is not None, (inner, outer)
                continue
            with pytest.raises(LayerShapeError, match="the CPU refuses this mix of dtypes"):
                layer_shapes(_Masked(model, mask), x)

"""pytorch_memo.submodules: layer_shapes and unregistered, checked against plain torch."""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

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
    running: list[int] = []

    def before(module: nn.Module, args: Any, kwargs: Any) -> None:
        calls.append([names[id(module)], (*_shapes(args), *_shapes(kwargs)), None])
        running.append(len(calls) - 1)

    def after(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        calls[running.pop()][2] = _shapes(output)

    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
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
    with pytest.raises(LayerShapeError, match=r"^the model \(Linear\) raised on input shapes -"):
        layer_shapes(nn.Linear(2, 2))  # forward() missing its input

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
    assert str(table).endswith("nothing hidden: every module and parameter found is registered")

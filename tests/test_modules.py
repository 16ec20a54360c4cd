"""pytorch_memo.modules.inventory, checked against torch's own lists."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pytorch_memo.modules import ModuleTable, inventory
from pytorch_memo.profiling import count_parameters


class WithHidden(nn.Module):
    """A persistent buffer, a non-persistent one, a None buffer and a plain attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(2))
        self.register_buffer("saved", torch.zeros(2))
        self.register_buffer("constant", torch.tensor([2.0]), persistent=False)
        self.register_buffer("nothing", None)
        self.plain = torch.arange(3)


class Tied(nn.Module):
    """A language-model-like head whose output weight is the embedding's."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def check_against_torch(module: nn.Module) -> ModuleTable:
    """Every field of ``inventory(module)`` agrees with torch's own lists."""
    table = inventory(module)
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    saved = module.state_dict(keep_vars=True)
    assert table.names(kind="parameter") == tuple(params)
    assert table.names(kind="buffer") == tuple(buffers)
    assert tuple(r.name for r in table if r.in_state_dict) == tuple(saved)
    for row in table:
        if row.kind == "attribute":
            assert row.name not in saved
            assert not row.persistent
            assert not row.trainable
            continue
        tensor = params[row.name] if row.kind == "parameter" else buffers[row.name]
        assert row.shape == tuple(tensor.shape)
        assert row.dtype is tensor.dtype
        assert row.device == tensor.device
        assert row.trainable is (row.kind == "parameter" and tensor.requires_grad)
        assert row.in_state_dict is (row.name in saved)
        assert row.persistent is row.in_state_dict  # no state_dict hooks here
        if row.in_state_dict:
            assert saved[row.name] is tensor
        same = {n for n, t in {**params, **buffers}.items() if t is tensor and n != row.name}
        assert set(row.same_as) == same
    # parameters() keeps the first name of each tensor; so does dropping later same_as names
    first: list[str] = []
    for row in table:
        if row.kind == "parameter" and not set(row.same_as) & set(first):
            first.append(row.name)
    assert first == [n for n, _ in module.named_parameters()]
    return table


def test_linear() -> None:
    table = check_against_torch(nn.Linear(3, 2))
    assert table.names() == ("weight", "bias")
    assert table["weight"].shape == (2, 3)
    assert table["weight"].trainable


def test_linear_without_bias_skips_the_none() -> None:
    assert check_against_torch(nn.Linear(3, 2, bias=False)).names() == ("weight",)


def test_batchnorm2d() -> None:
    table = check_against_torch(nn.BatchNorm2d(4))
    assert table.names(kind="buffer") == ("running_mean", "running_var", "num_batches_tracked")
    assert table["num_batches_tracked"].dtype is torch.int64
    assert not table["running_mean"].trainable


def test_batchnorm_without_running_stats() -> None:
    table = check_against_torch(nn.BatchNorm1d(4, track_running_stats=False))
    assert table.names(kind="buffer") == ()


def test_resnet18() -> None:
    model = torchvision.models.resnet18(weights=None)
    table = check_against_torch(model)
    assert len(table.names(kind="parameter")) == 62
    assert len(table.names(kind="buffer")) == 60  # 20 BatchNorms x 3
    assert sum(torch.Size(r.shape).numel() for r in table if r.kind == "parameter") == 11689512


def test_non_persistent_buffer_and_attribute() -> None:
    table = check_against_torch(WithHidden())
    assert table.names() == ("scale", "saved", "constant", "plain")
    assert table["constant"].kind == "buffer"
    assert not table["constant"].persistent
    assert not table["constant"].in_state_dict
    assert table["saved"].persistent
    assert table["saved"].in_state_dict
    assert table["plain"].kind == "attribute"
    assert table["plain"].dtype is torch.int64
    assert inventory(WithHidden(), attributes=False).names() == ("scale", "saved", "constant")


def test_tied_parameters() -> None:
    table = check_against_torch(Tied())
    assert table["head.weight"].same_as == ("embed.weight",)
    assert table["embed.weight"].same_as == ("head.weight",)
    assert table["head.weight"].in_state_dict  # state_dict saves both names


def test_shared_submodule_and_nesting() -> None:
    block = WithHidden()
    model = nn.Sequential(nn.Sequential(block, nn.ReLU()), block, nn.Linear(2, 2))
    table = check_against_torch(model)
    assert table["0.0.scale"].same_as == ("1.scale",)
    assert table["0.0.plain"].same_as == ("1.plain",)
    assert "2.weight" in table.names()


def test_moves_with_to() -> None:
    module = WithHidden().to(torch.float64)
    table = inventory(module)
    assert table["saved"].dtype is table["constant"].dtype is torch.float64
    assert table["plain"].dtype is torch.int64  # .to() never sees plain attributes


def test_frozen_parameter_is_not_trainable() -> None:
    layer = nn.Linear(2, 2)
    layer.bias.requires_grad_(False)
    table = check_against_torch(layer)
    assert table["weight"].trainable
    assert not table["bias"].trainable


def test_text_and_html() -> None:
    table = inventory(WithHidden())
    lines = str(table).splitlines()
    assert lines[0].split()[:3] == ["name", "kind", "persistent"]
    assert lines[3].split() == [
        "constant",
        "buffer",
        "False",
        "(1,)",
        "float32",
        "cpu",
        "False",
        "False",
        "-",
    ]
    assert repr(table) == str(table)
    html = table._repr_html_()
    assert html.count("<tr>") == 5
    assert "<td>attribute</td>" in html


def test_unknown_name() -> None:
    with pytest.raises(KeyError, match=r"name must be one of \['weight', 'bias'\], got 'w'"):
        inventory(nn.Linear(1, 1))["w"]


@pytest.mark.parametrize(
    ("kind", "error", "match"),
    [
        (
            "buffers",
            ValueError,
            "kind must be None or one of 'parameter', 'buffer', 'attribute', got 'buffers'",
        ),
        ("Parameter", ValueError, "kind must be None or one of .*, got 'Parameter'"),
        ("", ValueError, "kind must be None or one of .*, got ''"),
        (1, TypeError, "kind must be None or one of .*, got int: 1"),
    ],
)
def test_an_unknown_kind_is_refused(kind: object, error: type[Exception], match: str) -> None:
    # before: names(kind="buffers") returned () for a module with three buffers
    table = inventory(nn.BatchNorm1d(2))
    with pytest.raises(error, match=match):
        table.names(kind=kind)  # type: ignore[arg-type]
    assert table.names(kind="buffer") == ("running_mean", "running_var", "num_batches_tracked")
    assert table.names(kind="attribute") == ()  # a known kind with no rows
    assert (
        table.names(kind=None) == table.names() == ("weight", "bias", *table.names(kind="buffer"))
    )


@pytest.mark.parametrize(
    ("module", "attributes", "match"),
    [
        (torch.zeros(1), True, "module must be a torch.nn.Module, got Tensor"),
        ("linear", True, "module must be a torch.nn.Module, got str: 'linear'"),
        (nn.Linear(1, 1), 1, "attributes must be a bool, got int: 1"),
    ],
)
def test_bad_input(module: object, attributes: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        inventory(module, attributes=attributes)  # type: ignore[arg-type]


BLOCKS: list[Callable[[], nn.Module]] = [
    lambda: nn.Linear(2, 2),
    lambda: nn.Linear(2, 2, bias=False),
    lambda: nn.BatchNorm1d(2),
    lambda: nn.LayerNorm(2),
    lambda: nn.ReLU(),
    WithHidden,
    Tied,
]


@st.composite
def modules(draw: st.DrawFn) -> nn.Module:
    """A random nesting of blocks, some of them used twice."""
    made: list[nn.Module] = []

    def block() -> nn.Module:
        if len(made) > 0 and draw(st.booleans()) and draw(st.booleans()):
            return draw(st.sampled_from(made))  # reuse: shared parameters
        module = draw(st.sampled_from(BLOCKS))()
        made.append(module)
        return module

    def tree(depth: int) -> nn.Module:
        if depth == 0 or draw(st.booleans()):
            return block()
        return nn.Sequential(*(tree(depth - 1) for _ in range(draw(st.integers(1, 3)))))

    return tree(3)


@settings(deadline=None, max_examples=40)
@given(modules(), st.booleans())
def test_random_modules_match_torch(module: nn.Module, frozen: bool) -> None:
    if frozen:
        for p in list(module.parameters())[::2]:
            p.requires_grad_(False)
    check_against_torch(module)


# -- issue 24, D12: a lazy module's parameters are not materialised ---------------------


def _lazy_model() -> nn.Module:
    return nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyBatchNorm1d())


@pytest.mark.parametrize(
    ("call", "name"),
    [(inventory, "module"), (count_parameters, "model")],
)
def test_a_lazy_module_is_refused_with_what_to_do(
    call: Callable[[nn.Module], object], name: str
) -> None:
    # before: torch's "Can't access the shape of an uninitialized parameter or buffer"
    # (inventory) and "Attempted to use an uninitialized parameter in <method 'numel'
    # of 'torch._C.TensorBase' objects>" (count_parameters)
    model = _lazy_model()
    expected = (
        rf"{name} has parameters or buffers that are not materialised yet: '0.weight', "
        r"'0.bias', '2.weight', '2.bias' and 2 more \(a lazy module such as nn.LazyLinear "
        rf"gives them a shape at its first forward call\); call {name} once on an example "
        "input first"
    )
    with pytest.raises(ValueError, match=expected):
        call(model)
    model(torch.zeros(2, 5))  # the advice: one forward call materialises them
    assert count_parameters(model).total == 5 * 3 + 3 + 3 + 3
    assert inventory(model).names(kind="buffer") == (
        "2.running_mean",
        "2.running_var",
        "2.num_batches_tracked",
    )

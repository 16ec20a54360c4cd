"""pytorch_memo.training_loop: param_groups, group_table, warmup_cosine and
watch_saved_tensors, checked against plain torch."""

from __future__ import annotations

import math
import pickle
import warnings
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.utils import parametrize

from pytorch_memo.training_loop import (
    NORM_LAYERS,
    GroupTable,
    WarmupCosine,
    group_table,
    param_groups,
    warmup_cosine,
    watch_saved_tensors,
)


def _ids(params: list[Any]) -> list[int]:
    return [id(p) for p in params]


# -- param_groups ------------------------------------------------------------------------


class Mixed(nn.Module):
    """Weights, biases, norms of every kind, a 2-D norm weight, a learned scale, a bias
    of three dimensions, a frozen layer and a tied weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.conv = nn.Conv1d(4, 4, 3)
        self.batch = nn.BatchNorm1d(4)
        self.instance = nn.InstanceNorm1d(4, affine=True)
        self.layer = nn.LayerNorm((2, 2))
        self.group = nn.GroupNorm(2, 4)
        self.rms = nn.RMSNorm(4)
        self.attention = nn.MultiheadAttention(4, 2, add_bias_kv=True)
        self.lstm = nn.LSTM(4, 4)
        self.scale = nn.Parameter(torch.ones(4))
        self.frozen = nn.Linear(4, 4).requires_grad_(False)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied


def plain_split(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The rule param_groups documents, written out in plain torch."""
    norms = (
        nn.BatchNorm1d,
        nn.InstanceNorm1d,
        nn.LayerNorm,
        nn.GroupNorm,
        nn.RMSNorm,
    )
    owner: dict[int, tuple[str, nn.Module]] = {}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            owner.setdefault(id(p), (name, module))
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        name, module = owner[id(p)]
        bias = name.startswith("bias") or name.endswith("bias")
        if p.ndim < 2 or bias or isinstance(module, norms):
            no_decay.append(p)
        else:
            decay.append(p)
    return decay, no_decay


def test_param_groups_split_as_documented() -> None:
    model = Mixed()
    decay, no_decay = param_groups(model, 0.05)
    expected_decay, expected_no_decay = plain_split(model)
    assert _ids(decay["params"]) == _ids(expected_decay)
    assert _ids(no_decay["params"]) == _ids(expected_no_decay)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.05, 0.0)
    names = {id(p): n for n, p in model.named_parameters()}
    assert [names[id(p)] for p in decay["params"]] == [
        "embed.weight",  # tied with head.weight: once
        "conv.weight",
        "attention.in_proj_weight",
        "attention.out_proj.weight",
        "lstm.weight_ih_l0",
        "lstm.weight_hh_l0",
    ]
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert {"layer.weight", "attention.bias_k", "attention.bias_v", "scale"} <= no_decay_names
    assert not any(name.startswith("frozen") for name in no_decay_names)
    assert model.layer.weight.ndim == 2


def test_parametrized_parameters_are_classified_as_what_they_stand_for() -> None:
    class Doubled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * x

    norm, linear = nn.LayerNorm((2, 4)), nn.Linear(4, 3)
    parametrize.register_parametrization(norm, "weight", Doubled())  # 2-D, a norm's
    parametrize.register_parametrization(linear, "bias", Doubled())  # 1-D, a bias
    weighted = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
    model = nn.Sequential(norm, linear, weighted)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert [names[id(p)] for p in no_decay["params"]] == [
        "0.bias",
        "0.parametrizations.weight.original",  # the LayerNorm's weight: no decay
        "1.parametrizations.bias.original",
        "2.bias",
    ]
    assert [names[id(p)] for p in decay["params"]] == [
        "1.weight",
        "2.parametrizations.weight.original0",  # weight_norm's magnitude, (3, 1)
        "2.parametrizations.weight.original1",
    ]


def test_param_groups_feed_adamw_as_two_groups_by_hand() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1))
    twin = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1))
    twin.load_state_dict(model.state_dict())
    ours = torch.optim.AdamW(param_groups(model, 0.1), lr=0.01)
    matrices = [p for p in twin.parameters() if p.ndim >= 2]
    vectors = [p for p in twin.parameters() if p.ndim < 2]
    theirs = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
        lr=0.01,
    )
    x = torch.randn(8, 3)
    for _ in range(3):
        for net, optimizer in ((model, ours), (twin, theirs)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)


def test_every_norm_layer_of_torch_nn_is_listed() -> None:
    found = {
        cls
        for name in dir(nn)
        if "Norm" in name
        and isinstance(cls := getattr(nn, name), type)
        and issubclass(cls, nn.Module)
    }
    assert {nn.BatchNorm1d, nn.LayerNorm, nn.RMSNorm, nn.SyncBatchNorm} <= found
    missing = {cls.__name__ for cls in found if not issubclass(cls, NORM_LAYERS)}
    assert missing == set(), missing


@pytest.mark.parametrize(
    ("norm", "shape"),
    [(nn.LazyBatchNorm1d(), (2, 4)), (nn.LazyInstanceNorm1d(affine=True), (2, 4, 5))],
)
def test_lazy_norms_are_refused_until_materialised_then_without_decay(
    norm: nn.Module, shape: tuple[int, ...]
) -> None:
    model = nn.Sequential(norm)
    with pytest.raises(ValueError, match="model has parameters or buffers that are not"):
        param_groups(model, 0.1)
    model.eval()(torch.randn(shape))
    _, no_decay = param_groups(model, 0.1)
    assert _ids(no_decay["params"]) == [id(norm.weight), id(norm.bias)]


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    frozen=st.lists(st.booleans(), min_size=4, max_size=4),
    decay=st.floats(0, 1, allow_nan=False),
)
def test_param_groups_hold_every_trainable_parameter_once(
    sizes: list[int], frozen: list[bool], decay: float
) -> None:
    layers: list[nn.Module] = []
    for i, size in enumerate(sizes):
        layers += [nn.Linear(size, size), nn.LayerNorm(size)]
        if frozen[i]:
            layers[-2].requires_grad_(False)
    model = nn.Sequential(*layers)
    groups = param_groups(model, decay)
    held = [p for group in groups for p in group["params"]]
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert sorted(_ids(held)) == sorted(_ids(trainable))
    assert len(set(_ids(held))) == len(held)
    torch.optim.AdamW(groups)  # no parameter in two groups


@pytest.mark.parametrize(
    ("model", "decay", "error", "message"),
    [
        ("model", 0.1, TypeError, "model must be a torch.nn.Module, got str"),
        (nn.Linear(2, 2), -0.1, ValueError, "weight_decay must be >= 0.0, got -0.1"),
        (nn.Linear(2, 2), math.nan, ValueError, "weight_decay must be a finite number"),
        (nn.Linear(2, 2), "0.1", TypeError, "weight_decay must be a number, got str"),
        (nn.Linear(2, 2), True, TypeError, "weight_decay must be a number, got bool"),
        (
            nn.Linear(2, 2).requires_grad_(False),
            0.1,
            ValueError,
            "model must have a trainable parameter .* 2 parameters, all frozen",
        ),
        (nn.ReLU(), 0.1, ValueError, "got a model without parameters"),
    ],
)
def test_param_groups_name_what_they_refuse(
    model: Any, decay: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        param_groups(model, decay)


# -- group_table ------------------------------------------------------------------------


def test_group_table_rows_match_the_optimizer() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3), nn.Linear(3, 1))
    model[0].requires_grad_(False)
    stray = nn.Parameter(torch.ones(5))
    groups: list[dict[str, Any]] = [
        {"params": [model[1].weight, model[1].bias], "lr": 0.5, "weight_decay": 0.0},
        {"params": [model[2].weight, stray]},
    ]
    optimizer = torch.optim.AdamW(
        groups,
        lr=0.1,
    )
    table = group_table(optimizer, model)
    assert isinstance(table, GroupTable)
    rows = {row.name: row for row in table}
    assert list(rows) == [n for n, _ in model.named_parameters()] + ["(not in model) group 1 #1"]
    assert (rows["0.weight"].group, rows["0.weight"].trainable) == (None, False)
    assert (rows["1.weight"].group, rows["1.weight"].lr, rows["1.weight"].weight_decay) == (
        0,
        0.5,
        0.0,
    )
    assert (rows["2.weight"].group, rows["2.weight"].lr, rows["2.weight"].weight_decay) == (
        1,
        0.1,
        0.01,
    )
    assert rows["(not in model) group 1 #1"].shape == (5,)
    assert [row.name for row in table.stranded] == ["2.bias"]
    assert table["2.bias"].stranded
    assert "1 trainable parameter(s) in no group" in str(table)
    assert "<b>2.bias</b>" in table._repr_html_()


def test_group_table_reads_options_some_optimizers_lack_and_tensor_rates() -> None:
    layer = nn.Linear(2, 2)
    table = group_table(torch.optim.Rprop(layer.parameters(), lr=0.1), layer)
    assert all(row.weight_decay is None for row in table)
    adam = torch.optim.Adam(layer.parameters(), lr=torch.tensor(0.25))
    assert {row.lr for row in group_table(adam, layer)} == {0.25}


def test_group_table_shows_a_tied_weight_once() -> None:
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    table = group_table(torch.optim.SGD(model.parameters(), lr=0.1), model)
    assert [row.name for row in table] == ["0.weight"]


@pytest.mark.parametrize(
    ("optimizer", "model", "error", "message"),
    [
        (None, nn.Linear(2, 2), TypeError, "optimizer must be a torch.optim.Optimizer"),
        ("sgd", nn.Linear(2, 2), TypeError, "optimizer must be a torch.optim.Optimizer, got str"),
        ("ok", 3, TypeError, "model must be a torch.nn.Module, got int"),
        ("ok", nn.LazyLinear(2), ValueError, "model has parameters or buffers that are not"),
    ],
)
def test_group_table_names_what_it_refuses(
    optimizer: Any, model: Any, error: type[Exception], message: str
) -> None:
    if optimizer == "ok":
        optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(error, match=message):
        group_table(optimizer, model)


# -- warmup_cosine ----------------------------------------------------------------------


def _rates(scheduler: Any, optimizer: torch.optim.Optimizer, steps: int) -> list[list[float]]:
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.8's SequentialLR warns at the milestone
        for _ in range(steps):
            found.append([float(g["lr"]) for g in optimizer.param_groups])
            optimizer.step()
            scheduler.step()
    return found


def _optimizer(lrs: tuple[float, ...] = (0.1,)) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        [{"params": [nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs], lr=lrs[0]
    )


@settings(max_examples=30, deadline=None)
@given(
    warmup=st.integers(2, 8),
    decay_steps=st.integers(1, 12),
    floor=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_warmup_cosine_is_torchs_sequential_lr_up_to_the_end(
    warmup: int, decay_steps: int, floor: float
) -> None:
    total = warmup + decay_steps
    lrs = (0.1, 0.02) if floor == 0 else (0.1,)  # eta_min is one value for all groups
    ours = _optimizer(lrs)
    theirs = _optimizer(lrs)
    mine = warmup_cosine(ours, warmup_steps=warmup, total_steps=total, min_factor=floor)
    sched = torch.optim.lr_scheduler
    builtin = sched.SequentialLR(
        theirs,
        [
            sched.LinearLR(theirs, start_factor=1 / warmup, total_iters=warmup - 1),
            sched.CosineAnnealingLR(theirs, T_max=total - warmup, eta_min=floor * lrs[0]),
        ],
        milestones=[warmup],
    )
    expected = _rates(builtin, theirs, total + 1)
    found = _rates(mine, ours, total + 4)
    torch.testing.assert_close(found[: total + 1], expected)
    for step_rates in found[total:]:  # after the end: the floor, never climbing again
        torch.testing.assert_close(step_rates, [lr * floor for lr in lrs])


@pytest.mark.parametrize("warmup", [0, 1])
def test_warmup_cosine_without_or_with_one_warmup_step(warmup: int) -> None:
    optimizer = _optimizer()
    found = _rates(warmup_cosine(optimizer, warmup_steps=warmup, total_steps=4), optimizer, 6)
    expected = [0.1 * (0.5 * (1 + math.cos(math.pi * min(s / 4, 1)))) for s in range(6)]
    if warmup == 1:
        expected = [0.1] + [
            0.1 * (0.5 * (1 + math.cos(math.pi * min((s - 1) / 3, 1)))) for s in range(1, 6)
        ]
    torch.testing.assert_close([r[0] for r in found], expected)


def test_warmup_cosine_checkpoint_restores_the_schedule() -> None:
    optimizer = _optimizer()
    scheduler = warmup_cosine(optimizer, warmup_steps=3, total_steps=9, min_factor=0.2)
    _rates(scheduler, optimizer, 5)
    state = pickle.loads(pickle.dumps(scheduler.state_dict()))
    other = _optimizer()
    restored = warmup_cosine(other, warmup_steps=1, total_steps=2)
    restored.load_state_dict(state)
    other.param_groups[0]["lr"] = optimizer.param_groups[0]["lr"]
    assert restored.lr_lambdas[0] == WarmupCosine(3, 9, 0.2)
    assert _rates(restored, other, 6) == _rates(scheduler, optimizer, 6)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"optimizer": "sgd"}, TypeError, "optimizer must be a torch.optim.Optimizer, got str"),
        ({"warmup_steps": -1}, ValueError, "warmup_steps must be >= 0, got -1"),
        ({"warmup_steps": 1.5}, TypeError, "warmup_steps must be an int, got float"),
        ({"warmup_steps": True}, TypeError, "warmup_steps must be an int, got bool"),
        (
            {"warmup_steps": 5, "total_steps": 5},
            ValueError,
            r"total_steps must be greater than warmup_steps \(5\), got 5",
        ),
        ({"total_steps": None}, TypeError, "total_steps must be an int, got NoneType"),
        ({"min_factor": 1.5}, ValueError, "min_factor must be <= 1.0, got 1.5"),
        ({"min_factor": -0.1}, ValueError, "min_factor must be >= 0.0, got -0.1"),
        ({"min_factor": math.inf}, ValueError, "min_factor must be a finite number"),
    ],
)
def test_warmup_cosine_names_what_it_refuses(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments: dict[str, Any] = {
        "optimizer": _optimizer(),
        "warmup_steps": 2,
        "total_steps": 10,
        **kwargs,
    }
    optimizer = arguments.pop("optimizer")
    with pytest.raises(error, match=message):
        warmup_cosine(optimizer, **arguments)


# -- watch_saved_tensors ----------------------------------------------------------------


def test_watch_counts_what_graphs_hold_and_lets_go_with_them() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1))
    x = torch.randn(4, 3)
    with watch_saved_tensors(ignore=[*model.parameters(), x]) as watched:
        kept = [model(x).sum() for _ in range(3)]
    per_graph = 4 * 16 * 4  # the ReLU's output: saved by ReLU and the second Linear
    assert (watched.alive, watched.nbytes) == (2 * 3, 3 * per_graph)
    kept[0].backward()  # frees that graph's saved tensors
    assert watched.nbytes == 2 * per_graph
    del kept
    assert (watched.alive, watched.nbytes) == (0, 0)
    assert watched.saved >= 2 * 3
    assert "alive=0" in repr(watched)


def test_watch_sees_what_record_saved_tensors_sees_and_keeps_gradients() -> None:
    from pytorch_memo.autograd_mechanics import record_saved_tensors

    a = torch.randn(5, requires_grad=True)
    with record_saved_tensors() as recorded:
        (a.exp() * a).sum().backward()
    assert a.grad is not None
    expected = a.grad.clone()
    a.grad = None
    with watch_saved_tensors() as watched:
        (a.exp() * a).sum().backward()
    assert watched.saved == recorded.count
    torch.testing.assert_close(a.grad, expected)
    assert watched.alive == 0


@pytest.mark.parametrize("helper", ["watch_saved_tensors", "record_saved_tensors"])
def test_watch_keeps_torchs_in_place_check(helper: str) -> None:
    # before: with watch_saved_tensors, backward gave x.grad [-0.61, 0, 0.50]; torch raises
    from pytorch_memo import autograd_mechanics, training_loop

    block = getattr(training_loop, helper, None) or getattr(autograd_mechanics, helper)
    inplace = "one of the variables needed for gradient computation has been modified by an inplace operation"
    x = torch.tensor([0.5, 0.0, -1.0], requires_grad=True)
    s = x.sigmoid()
    s.mul_(2)
    with pytest.raises(RuntimeError, match=inplace):
        s.sum().backward()
    with block():
        s = x.sigmoid()
        s.mul_(2)
    with pytest.raises(RuntimeError, match=inplace) as raised:
        s.sum().backward()
    assert x.grad is None
    assert f"saved tensor 0 of the {helper} block (shape (3,), torch.float32 on cpu)" in str(
        raised.value
    )
    assert "is at version 1; expected version 0 instead" in str(raised.value)


def test_watch_gives_the_gradients_of_plain_torch() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(inplace=True), nn.Linear(8, 2), nn.Tanh())
    x = torch.randn(5, 3)
    grads = []
    for watching in (False, True):
        model.zero_grad()
        if watching:
            with watch_saved_tensors(ignore=model.parameters()) as watched:
                model(x).pow(2).sum().backward()
            assert watched.saved > 0
            assert watched.alive == 0
        else:
            model(x).pow(2).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) == 4
    for plain, watched_grad in zip(*grads, strict=True):
        assert torch.equal(plain, watched_grad)


def test_watch_under_no_grad_sees_nothing() -> None:
    w = torch.ones(3, requires_grad=True)
    with watch_saved_tensors() as watched, torch.no_grad():
        (w * w).sum()
    assert (watched.saved, watched.alive, watched.nbytes) == (0, 0, 0)


@pytest.mark.parametrize(
    ("ignore", "error", "message"),
    [
        (3, TypeError, "ignore must be an iterable of tensors"),
        (torch.ones(2), TypeError, "ignore must be an iterable of tensors"),
        ([torch.ones(1), "x"], TypeError, r"ignore\[1\] must be a torch.Tensor, got str"),
    ],
)
def test_watch_names_what_it_refuses(ignore: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message), watch_saved_tensors(ignore=ignore):
        pass


def test_watch_refuses_an_endless_ignore() -> None:
    import itertools

    endless = itertools.repeat(torch.ones(1))
    with (
        pytest.raises(ValueError, match="ignore must hold at most"),
        watch_saved_tensors(ignore=endless),
    ):
        pass

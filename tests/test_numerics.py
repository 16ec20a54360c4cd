"""pytorch_memo.numerics: stop_at_nonfinite, checked against plain torch."""

from __future__ import annotations

import inspect
import math
import pickle
import warnings
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pytorch_memo import numerics
from pytorch_memo.numerics import (
    ActivationRow,
    ActivationTable,
    NonFiniteError,
    NonFiniteWatch,
    stop_at_nonfinite,
)

# -- models -----------------------------------------------------------------------------


class Exp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.exp()


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.log()


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class LogBetween(nn.Module):
    """Makes NaN in its own forward, between two registered layers."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Identity(), nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.second(torch.log(self.first(x)))
        return out


class Outputs(nn.Module):
    """Returns a tuple, a dict or a list, with an int tensor beside the floats."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> Any:
        count = torch.tensor(3)
        if self.kind == "tuple":
            return count, (x, x.exp())
        if self.kind == "dict":
            return {"count": count, "logits": x.exp()}
        return [count, x.exp()]


class Masked(nn.Module):
    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
        return x + mask


class Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("its own error")


def hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def reference_rows(model: nn.Module, *args: Any) -> list[tuple[str, float | None]]:
    """Every module call of a plain run, in call order, with its output's largest |x|."""
    names = {id(m): n for n, m in model.named_modules()}
    rows: list[list[Any]] = []
    running: list[int] = []

    def before(module: nn.Module, inputs: Any) -> None:
        rows.append([names[id(module)], None])
        running.append(len(rows) - 1)

    def after(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        rows[running.pop()][1] = output.detach().abs().max().item()

    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(before))
        handles.append(module.register_forward_hook(after))
    try:
        model(*args)
    finally:
        for handle in handles:
            handle.remove()
    return [(name, largest) for name, largest in rows]


def stopped(model: nn.Module, *args: Any, **kwargs: Any) -> NonFiniteError:
    with pytest.raises(NonFiniteError) as caught, stop_at_nonfinite(model):
        model(*args, **kwargs)
    assert hooks(model) == 0
    return caught.value


# -- a pass with finite values ----------------------------------------------------------


def test_a_finite_pass_lists_every_call_and_changes_nothing() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Sequential(nn.Linear(4, 2)))
    x = torch.randn(5, 3, requires_grad=True)
    expected = model(x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    with stop_at_nonfinite(model) as watch:
        out = model(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert torch.equal(out, expected)
    assert torch.equal(grad, expected_grad)
    assert hooks(model) == 0
    table = watch.table
    assert [(r.name, r.largest) for r in table] == reference_rows(model, x)
    assert [r.type for r in table] == ["Sequential", "Linear", "Tanh", "Sequential", "Linear"]
    assert all(r.nan == r.inf == 0 for r in table)
    assert table["2.0"].outputs == ((5, 2),)


def test_each_outermost_call_starts_a_new_table() -> None:
    model = nn.Sequential(nn.Identity())
    with stop_at_nonfinite(model) as watch:
        model(torch.ones(2))
        model(torch.full((3,), 2.0))
    assert [(r.name, r.outputs, r.largest) for r in watch.table] == [
        ("", ((3,),), 2.0),
        ("0", ((3,),), 2.0),
    ]


def test_a_module_called_twice_has_two_rows() -> None:
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    with stop_at_nonfinite(model) as watch:
        model(torch.ones(1, 2))
    assert [r.name for r in watch.table] == ["", "0", "1", "0"]
    assert watch.table["0"] is watch.table.rows[1]


# -- where the values come from ---------------------------------------------------------


@pytest.mark.parametrize(
    ("factor", "nan", "inf"), [(math.inf, 0, 2), (math.nan, 2, 0), (-math.inf, 0, 2)]
)
def test_the_layer_that_returns_them_is_named_with_its_counts(
    factor: float, nan: int, inf: int
) -> None:
    model = nn.Sequential(nn.ReLU(), Scale(factor), nn.ReLU())
    error = stopped(model, torch.ones(2))
    assert (error.layer, error.where, error.nan, error.inf) == ("1", "output", nan, inf)
    assert "layer '1' (Scale) returned non-finite values from finite inputs" in str(error)
    assert [r.name for r in error.table] == ["", "0", "1"]
    assert error.table[""].outputs is None
    assert error.table["1"].nan == nan
    assert "(stopped)" in str(error.table)


def test_a_container_whose_own_code_makes_them_is_named() -> None:
    error = stopped(nn.Sequential(LogBetween()), -torch.ones(3))
    assert error.layer == "0"
    assert error.where == "args[0]"
    assert error.nan == 3
    assert str(error).startswith("layer '0' (LogBetween) made non-finite values in its own")
    assert "it called layer '0.second' (Identity)" in str(error)


def test_a_container_that_returns_them_after_finite_layers_says_so() -> None:
    class ExpAfter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.inner(x).exp()
            return out

    error = stopped(ExpAfter(), torch.tensor([1000.0]))
    assert error.layer == ""
    assert error.inf == 1
    assert "every submodule it called returned finite values" in str(error)


def test_an_input_that_holds_them_already_comes_from_outside() -> None:
    error = stopped(nn.Sequential(nn.ReLU()), torch.tensor([1.0, math.nan, math.inf]))
    assert (error.layer, error.where, error.nan, error.inf) == (None, "args[0]", 1, 1)
    assert "outside the watched modules" in str(error)
    assert len(error.table) == 0


def test_keyword_inputs_and_nested_outputs_are_named() -> None:
    mask = torch.tensor([0.0, -math.inf])
    error = stopped(Masked(), torch.ones(2), mask=mask)
    assert error.where == "kwargs['mask']"
    assert error.inf == 1
    for kind, where in (
        ("tuple", "output[1][1]"),
        ("dict", "output['logits']"),
        ("list", "output[1]"),
    ):
        error = stopped(Outputs(kind), torch.tensor([1.0, 1000.0]))
        assert (error.where, error.inf) == (where, 1), kind


def test_complex_and_reduced_precision_outputs_are_counted() -> None:
    error = stopped(Exp(), torch.tensor([12.0], dtype=torch.float16))  # e^12 > 65504
    assert error.inf == 1
    assert "torch.float16" in str(error)
    error = stopped(Exp(), torch.tensor([100.0], dtype=torch.bfloat16))
    assert error.inf == 1
    error = stopped(Log(), torch.tensor([0j, 1 + 0j]))
    assert error.nan + error.inf == 1
    assert error.where == "output"


def test_tensors_that_cannot_hold_them_or_have_no_values_are_not_checked() -> None:
    model = nn.Sequential(nn.Identity())
    seen = []
    with stop_at_nonfinite(model) as watch:
        for x in (torch.tensor([1, 2]), torch.empty(2, device="meta"), torch.zeros(0, 3)):
            model(x)
            seen.append((watch.table["0"].outputs, watch.table["0"].largest))
    assert seen == [((), None), ((), None), (((0, 3),), None)]


def test_without_input_checks_a_float_mask_of_minus_inf_passes() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=4, nhead=2, batch_first=True)
    mask = nn.Transformer.generate_square_subsequent_mask(3)  # -inf above the diagonal
    x = torch.randn(2, 3, 4)
    error = stopped(layer, x, src_mask=mask)
    assert (error.layer, error.where, error.inf) == (None, "kwargs['src_mask']", 3)
    with stop_at_nonfinite(layer, check_inputs=False) as watch:
        layer(x, src_mask=mask)
    assert watch.table[""].outputs == ((2, 3, 4),)
    assert hooks(layer) == 0


def test_without_input_checks_the_first_output_is_named() -> None:
    model = nn.Sequential(nn.ReLU(), nn.Identity())
    with pytest.raises(NonFiniteError) as caught, stop_at_nonfinite(model, check_inputs=False):
        model(torch.tensor([math.inf]))
    assert caught.value.layer == "0"
    assert str(caught.value).startswith("layer '0' (ReLU) returned non-finite values: output")


# -- hypothesis: against a layer-by-layer run -------------------------------------------

LAYERS = st.sampled_from(["identity", "relu", "exp", "log", "scale_inf", "scale_zero"])
VALUES = st.lists(
    st.sampled_from([0.0, 1.0, -1.0, 50.0, 100.0, -100.0, 1e38, math.nan, math.inf]),
    min_size=1,
    max_size=4,
)


def _layer(kind: str) -> nn.Module:
    return {
        "identity": nn.Identity(),
        "relu": nn.ReLU(),
        "exp": Exp(),
        "log": Log(),
        "scale_inf": Scale(math.inf),
        "scale_zero": Scale(0.0),
    }[kind]


@settings(max_examples=60, deadline=None)
@given(st.lists(LAYERS, min_size=1, max_size=5), VALUES)
def test_the_error_names_what_a_layer_by_layer_run_finds(
    kinds: list[str], values: list[float]
) -> None:
    layers = [_layer(kind) for kind in kinds]
    x = torch.tensor(values)
    expected: str | None = "outside" if not torch.isfinite(x).all() else None
    h = x
    for index, layer in enumerate(layers):
        if expected is not None:
            break
        h = layer(h)
        if not torch.isfinite(h).all():
            expected = str(index)
    model = nn.Sequential(*layers)
    if expected is None:
        with stop_at_nonfinite(model) as watch:
            assert torch.equal(model(x), h)
        assert len(watch.table) == len(layers) + 1
        return
    error = stopped(model, x)
    bad = x if expected == "outside" else h
    assert error.layer == (None if expected == "outside" else expected)
    assert error.nan == int(torch.isnan(bad).sum())
    assert error.inf == int(torch.isinf(bad).sum())


# -- the table, the error and the watch -------------------------------------------------


def test_calls_past_max_rows_are_counted_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numerics, "MAX_ROWS", 3)
    model = nn.Sequential(*[nn.Identity() for _ in range(5)])
    with stop_at_nonfinite(model) as watch:
        model(torch.ones(1))
    assert len(watch.table) == 3
    assert watch.table.unlisted == 3
    assert str(watch.table).endswith("and 3 more calls, not listed (at most 3 are)")


def test_the_error_pickles_with_its_attributes() -> None:
    error = stopped(nn.Sequential(Scale(math.inf)), torch.ones(2))
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is NonFiniteError
    assert str(again) == str(error)
    assert (again.layer, again.where, again.nan, again.inf) == ("0", "output", 0, 2)
    assert again.table == error.table
    assert isinstance(error, FloatingPointError)


def test_a_forward_that_raises_passes_its_error_and_leaves_the_watch_usable() -> None:
    model = nn.Sequential(nn.Identity(), Fails())
    with stop_at_nonfinite(model) as watch:
        with pytest.raises(ValueError, match="its own error"):
            model(torch.ones(1))
        assert [r.outputs for r in watch.table] == [None, ((1,),), None]
        model[1] = nn.Identity()
        model(torch.ones(1))
        assert [r.name for r in watch.table] == ["", "0"]  # the new layer has no hooks
    assert hooks(model) == 0


def test_a_submodule_added_after_the_watch_began_is_named_as_unseen() -> None:
    model = nn.Sequential(nn.Identity(), nn.Identity())
    with stop_at_nonfinite(model):
        model[1] = Scale(math.inf)
        with pytest.raises(NonFiniteError) as caught:
            model(torch.ones(1))
    assert caught.value.layer == ""
    assert "or a submodule added after the watch began, which it does not see: '1'" in str(
        caught.value
    )
    assert hooks(model) == 0


def test_its_own_hooks_go_and_others_stay() -> None:
    model = nn.Sequential(nn.ReLU())
    mine = model[0].register_forward_hook(lambda m, args, out: None)
    with pytest.raises(NonFiniteError), stop_at_nonfinite(model):
        model(torch.tensor([math.nan]))
    assert hooks(model) == 1
    mine.remove()


def test_a_watch_is_entered_once_at_a_time() -> None:
    watch = stop_at_nonfinite(nn.ReLU())
    assert isinstance(watch, NonFiniteWatch)
    with watch, pytest.raises(RuntimeError, match="this watch is active already"), watch:
        pass
    with watch:  # again, after it ended
        pass


@pytest.mark.parametrize("model", [None, "model", torch.ones(2), nn.ReLU])
def test_a_model_that_is_not_a_module_is_refused_by_name(model: Any) -> None:
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module, got "):
        stop_at_nonfinite(model)


@pytest.mark.parametrize("value", [1, None, "no"])
def test_check_inputs_must_be_a_bool(value: Any) -> None:
    with pytest.raises(TypeError, match=r"check_inputs must be a bool, got "):
        stop_at_nonfinite(nn.ReLU(), check_inputs=value)


def test_a_row_shows_dashes_for_what_it_does_not_have() -> None:
    assert ActivationRow("", "Net", None, None, 0, 0).cells() == (
        "(model)", "Net", "(stopped)", "-", "-", "-",
    )  # fmt: skip
    assert ActivationRow("a", "Int", (), None, 0, 0).cells() == ("a", "Int", "-", "-", "0", "0")
    table = ActivationTable((ActivationRow("a", "T", ((2,),), 1234.5678, 1, 2),))
    assert str(table).splitlines()[1].split() == ["a", "T", "(2,)", "1235", "1", "2"]


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_outputs_are_counted(dtype: torch.dtype) -> None:
    """The CPU has no ``abs`` or ``amax`` for float8: its values are read in float32."""

    class ToFloat8(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = 1.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * self.scale).to(dtype)

    cast = ToFloat8()
    model = nn.Sequential(nn.Identity(), cast)
    with stop_at_nonfinite(model) as watch:
        model(torch.tensor([1.0, -3.0, 0.5]))
    assert watch.table["1"].largest == 3.0  # the float8 output, read in float32
    cast.scale = math.nan  # the layer's own values are NaN now (both formats have NaN)
    with pytest.raises(NonFiniteError, match=r"layer '1' \(ToFloat8\)"), stop_at_nonfinite(model):
        model(torch.tensor([1.0, -3.0]))


# -- a model run as model.forward(x): its own hooks do not run ----------------------------


def test_a_model_run_by_its_forward_warns_keeps_its_rows_and_says_so() -> None:
    """``model.forward(x)`` runs none of the model's own hooks, only its layers': the
    watch warns once, keeps the rows of every layer, and does not blame the input alone."""
    model = LogBetween()
    with warnings.catch_warnings(record=True) as caught, stop_at_nonfinite(model) as watch:
        warnings.simplefilter("always")
        model.forward(torch.ones(2))
        model.forward(torch.ones(2))
    assert len(caught) == 1  # once per block
    assert caught[0].category is UserWarning
    said = str(caught[0].message)
    assert "the watched model (LogBetween) runs as `model.forward(x)`" in said
    assert "call the model, `model(x)`" in said
    assert [r.name for r in watch.table] == ["first", "second", "first", "second"]
    with (
        pytest.warns(UserWarning, match="runs as `model.forward"),
        pytest.raises(NonFiniteError) as stopped_at,
        stop_at_nonfinite(model),
    ):
        model.forward(-torch.ones(2))
    error = stopped_at.value
    assert (error.layer, error.where, error.nan) == (None, "args[0]", 2)
    assert "the watched model (LogBetween) runs as `model.forward(x)`" in str(error)
    assert "its own code may have made them" in str(error)
    with stop_at_nonfinite(model) as watch:  # called: no warning, its rows start again
        model(torch.ones(2))
        model(torch.ones(2))
    assert [r.name for r in watch.table] == ["", "first", "second"]
    assert stopped(model, -torch.ones(2)).layer == ""
    container = nn.ModuleDict({"log": Log(), "id": nn.Identity()})  # no forward of its own
    with warnings.catch_warnings(), stop_at_nonfinite(container) as watch:
        warnings.simplefilter("error")  # its layers called one by one: no warning
        container["log"](torch.ones(2))
        container["id"](torch.ones(2))
    assert [r.name for r in watch.table] == ["log", "id"]
    with pytest.raises(NonFiniteError) as stopped_at, stop_at_nonfinite(container):
        container["id"](torch.tensor([math.nan]))
    assert "model.forward" not in str(stopped_at.value)


def test_a_decorated_forward_run_directly_is_still_seen() -> None:
    """``@torch.no_grad()`` (any ``functools.wraps`` decorator) wraps ``forward``: the
    frame that runs its body has the undecorated code."""

    class Decorated(LogBetween):
        @torch.no_grad()
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x)

    model = Decorated()
    with (
        pytest.warns(UserWarning, match="runs as `model.forward"),
        pytest.raises(NonFiniteError) as stopped_at,
        stop_at_nonfinite(model),
    ):
        model.forward(-torch.ones(2))
    assert "its own code may have made them" in str(stopped_at.value)


def test_the_forward_warning_points_at_the_line_that_called_model_forward() -> None:
    """The warning is about the caller's ``model.forward(x)``: its file and line are
    that call's, not a line inside torch's module machinery (also through a torch
    decorator such as ``@torch.no_grad()``)."""

    class Decorated(LogBetween):
        @torch.no_grad()
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x)

    for model in (LogBetween(), Decorated()):
        with warnings.catch_warnings(record=True) as caught, stop_at_nonfinite(model):
            warnings.simplefilter("always")
            line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
            model.forward(torch.ones(2))
        assert len(caught) == 1, type(model).__name__
        assert (caught[0].filename, caught[0].lineno) == (__file__, line), type(model)


def test_a_model_run_by_its_forward_keeps_the_latest_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run as ``model.forward(x)`` in a loop, the rows are those of every call since the
    model was last called: past MAX_ROWS, the earliest are dropped, so that the table
    of an error holds the failing pass."""
    monkeypatch.setattr(numerics, "MAX_ROWS", 3)
    model = LogBetween()
    with warnings.catch_warnings(), stop_at_nonfinite(model) as watch:
        warnings.simplefilter("ignore")
        for _ in range(3):
            model.forward(torch.ones(2))
    assert [r.name for r in watch.table] == ["second", "first", "second"]
    assert watch.table.dropped == 3
    assert watch.table.unlisted == 0
    assert str(watch.table).endswith("the 3 earliest calls are not listed (at most 3 are)")

    def steps() -> None:
        warnings.simplefilter("ignore")  # the warning of model.forward(x)
        for step in (1.0, 2.0, 3.0, -4.0):  # log(-4) is NaN, between the two layers
            model.forward(torch.full((2,), step))

    with (
        warnings.catch_warnings(),
        pytest.raises(NonFiniteError) as stopped_at,
        stop_at_nonfinite(model),
    ):
        steps()
    table = stopped_at.value.table
    assert [r.name for r in table] == ["first", "second", "first"]
    assert table.rows[-1].largest == 4.0  # the failing pass's first layer
    assert table.dropped == 4

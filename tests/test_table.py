"""Every rendering of the result tables, compared exactly with tests/golden/.

The result types (``describe``, ``inventory``, ``explain_gather``,
``explain_broadcast``, ``layer_shapes``, ``unregistered``, ``group_table``,
``stop_at_nonfinite``'s table) print as text and render as HTML in Jupyter; the
chapters store both. Each case below has ``<case>.txt`` (``str``, which is also ``repr``) and
``<case>.html`` (``_repr_html_``) in tests/golden/. A changed rendering shows as a diff;
``pytest tests/test_table.py --update-golden`` rewrites the files from the current code
and lists the files it rewrote at the end of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pytorch_memo._table import html_table, named_arguments, shape_text, text_table
from pytorch_memo.broadcasting import explain_broadcast
from pytorch_memo.indexing import explain_gather
from pytorch_memo.modules import inventory
from pytorch_memo.numerics import ActivationRow, ActivationTable, NonFiniteError, stop_at_nonfinite
from pytorch_memo.submodules import LayerShapeError, layer_shapes, unregistered
from pytorch_memo.tensors import describe
from pytorch_memo.training_loop import group_table, param_groups
from tests.conftest import UPDATE_GOLDEN, golden_rewritten
from tests.test_modules import Tied, WithHidden
from tests.test_submodules import Holder

GOLDEN = Path(__file__).parent / "golden"


def _describe_views() -> Any:
    x = torch.arange(12.0).reshape(3, 4)
    return describe(x=x, xt=x.t(), row=x[1], copy=x.clone(), every_other=x[:, ::2])


def _describe_kinds() -> Any:
    return describe(
        torch.zeros(2, 3, requires_grad=True),
        torch.tensor(7),
        torch.ones(0, 4, dtype=torch.bool),
        torch.zeros(2, dtype=torch.complex64).expand(3, 2),
        meta=torch.empty(2, 2, device="meta"),
    )


def _shapes_raised() -> Any:
    try:
        layer_shapes(nn.Sequential(nn.Flatten(), nn.Linear(100, 2)), (4, 3, 8, 8))
    except LayerShapeError as error:
        return error.table
    raise AssertionError("layer_shapes did not raise")


def _constant_linear(inputs: int, outputs: int, value: float) -> nn.Linear:
    """A layer whose outputs are exact in float32 (no rounding that differs between CPUs)."""
    layer = nn.Linear(inputs, outputs)
    nn.init.constant_(layer.weight, value)
    nn.init.zeros_(layer.bias)
    return layer


def _activations_raised() -> Any:
    model = nn.Sequential(_constant_linear(2, 3, 64.0), nn.ReLU(), _constant_linear(3, 2, 2.0**120))
    try:
        with stop_at_nonfinite(model):
            model(torch.tensor([[1.0, 2.0]]))
    except NonFiniteError as error:
        return error.table
    raise AssertionError("stop_at_nonfinite did not raise")


def _activations_nested() -> Any:
    model = nn.ModuleDict({"<b>&": nn.LSTM(2, 3)})
    lstm = model["<b>&"]
    for parameter in lstm.parameters():
        nn.init.zeros_(parameter)
    with stop_at_nonfinite(model) as watch:
        lstm(torch.ones(4, 1, 2))
    return watch.table


def _unregistered_nested() -> Any:
    return unregistered(
        Holder(
            blocks=[nn.Linear(2, 2), (nn.ReLU(), nn.Parameter(torch.ones(3)))],
            heads={"<b>&": nn.Linear(2, 1)},
        )
    )


def _groups_param_groups() -> Any:
    model = nn.Sequential(nn.Linear(4, 8), nn.Unflatten(1, (2, 4)), nn.LayerNorm((2, 4)))
    return group_table(torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3), model)


def _groups_not_in_model() -> Any:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    model[0].requires_grad_(False)
    other = nn.Linear(3, 2)
    groups: list[dict[str, Any]] = [
        {"params": model[1].parameters(), "lr": 0.5},
        {"params": other.parameters()},
    ]
    optimizer = torch.optim.SGD(groups, lr=0.1)
    return group_table(optimizer, model)


def _groups_docstring() -> Any:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    return group_table(torch.optim.SGD(model[1].parameters(), lr=0.1), model)


def _gather_3d() -> Any:
    x = torch.arange(24).reshape(2, 3, 4)
    index = torch.tensor([[[2, 0, 1, 2]], [[1, 1, 0, 0]]])
    return explain_gather(x, 1, index)


CASES: dict[str, Callable[[], Any]] = {
    # describe (tensors.TensorTable)
    "describe-docstring": lambda: describe(x=torch.zeros(2, 3), xt=torch.zeros(2, 3).t()),
    "describe-views": _describe_views,
    "describe-kinds": _describe_kinds,
    "describe-escaped": lambda: describe(**{"<b>&": torch.zeros(1)}),
    # inventory (modules.ModuleTable)
    "inventory-batchnorm": lambda: inventory(nn.BatchNorm1d(3)),
    "inventory-hidden": lambda: inventory(WithHidden()),
    "inventory-hidden-no-attributes": lambda: inventory(WithHidden(), attributes=False),
    "inventory-tied": lambda: inventory(Tied()),
    "inventory-empty": lambda: inventory(nn.ReLU()),
    "inventory-sequential": lambda: inventory(
        nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3).double(), nn.Linear(3, 1, bias=False))
    ),
    # layer_shapes (submodules.ShapeTable)
    "shapes-docstring": lambda: layer_shapes(
        nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 6 * 6, 2)), (4, 3, 8, 8)
    ),
    "shapes-raised": _shapes_raised,
    "shapes-tuple-output": lambda: layer_shapes(nn.LSTM(3, 4), (5, 2, 3)),
    # unregistered (submodules.HiddenTable)
    "unregistered-nested": _unregistered_nested,
    "unregistered-empty": lambda: unregistered(nn.Linear(2, 2)),
    # group_table (training_loop.GroupTable)
    "groups-docstring": _groups_docstring,
    "groups-param-groups": _groups_param_groups,
    "groups-not-in-model": _groups_not_in_model,
    # stop_at_nonfinite (numerics.ActivationTable)
    "activations-raised": _activations_raised,
    "activations-nested": _activations_nested,
    "activations-unlisted": lambda: ActivationTable(
        (ActivationRow("", "Net", ((2, 3),), 0.125, 0, 0),), unlisted=12_000
    ),
    # explain_gather (indexing.GatherExplanation)
    "gather-docstring": lambda: explain_gather(
        torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[1], [0]])
    ),
    "gather-3d": _gather_3d,
    "gather-floats-int32": lambda: explain_gather(
        torch.tensor([0.5, -1.25, 3.0]), 0, torch.tensor([2, 2, 0], dtype=torch.int32)
    ),
    "gather-bool-negative-dim": lambda: explain_gather(
        torch.tensor([[True, False], [False, True]]), -1, torch.tensor([[1, 1], [0, 0]])
    ),
    "gather-more-than-48": lambda: explain_gather(
        torch.arange(10).reshape(2, 5), 1, torch.randint(0, 5, (2, 30), generator=_seeded())
    ),
    "gather-empty": lambda: explain_gather(
        torch.zeros(2, 3), 0, torch.zeros(0, 3, dtype=torch.int64)
    ),
    # explain_broadcast (broadcasting.BroadcastTable)
    "broadcast-docstring": lambda: explain_broadcast(x=(5, 3, 4, 1), y=(3, 1, 1)),
    "broadcast-scalar": lambda: explain_broadcast(torch.tensor(2.0), (2, 3)),
    "broadcast-three": lambda: explain_broadcast((4, 1), (1, 3), (2, 1, 1)),
    "broadcast-empty": lambda: explain_broadcast(a=(0, 1), b=(3,)),
    "broadcast-tensors-and-shapes": lambda: explain_broadcast(
        image=torch.zeros(3, 1, 5), mean=torch.zeros(3, 1, 1), scale=torch.Size([5])
    ),
    "broadcast-escaped": lambda: explain_broadcast(**{"<x>": (2,), "y&z": (1,)}),
}


def _seeded() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _check(path: Path, rendered: str, config: pytest.Config) -> None:
    if config.getoption(UPDATE_GOLDEN):
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != rendered:
            path.parent.mkdir(exist_ok=True)
            path.write_text(rendered, encoding="utf-8", newline="\n")
            golden_rewritten(config).append(str(path.relative_to(GOLDEN.parent.parent)))
        return
    assert path.exists(), f"{path} is missing: run pytest {Path(__file__).name} {UPDATE_GOLDEN}"
    expected = path.read_text(encoding="utf-8")
    assert rendered == expected, f"{path.name} differs (rerun with {UPDATE_GOLDEN} if intended)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_matches_its_golden_file(case: str, request: pytest.FixtureRequest) -> None:
    table = CASES[case]()
    text = str(table)
    assert repr(table) == text
    _check(GOLDEN / f"{case}.txt", text + "\n", request.config)
    _check(GOLDEN / f"{case}.html", table._repr_html_() + "\n", request.config)


def test_every_golden_file_has_its_case() -> None:
    files = {p.name for p in GOLDEN.iterdir() if p.is_file()}  # pages/: test_errors.py
    expected = {f"{case}{suffix}" for case in CASES for suffix in (".txt", ".html")}
    assert files == expected


# -- the building blocks ----------------------------------------------------------------


def test_shape_text_writes_tuples_as_python_does() -> None:
    for shape in [(), (4,), (2, 3), (0, 1, 5)]:
        assert shape_text(shape) == str(shape)


def test_text_table_pads_columns_and_strips_trailing_spaces() -> None:
    assert text_table([("a", "bb"), ("ccc", "")]) == "a    bb\nccc"
    assert text_table([("n", "x"), ("a", "10"), ("b", "1")], align_right=True) == (
        "n   x\na  10\nb   1"
    )


def test_html_table_escapes_every_cell() -> None:
    html = html_table(["<h>"], [["a&b"]], css_class="c")
    assert html == (
        '<table class="c"><thead><tr><th>&lt;h&gt;</th></tr></thead>'
        "<tbody><tr><td>a&amp;b</td></tr></tbody></table>"
    )
    assert "<td><code>x</code></td>" in html_table(["h"], [["x"]], css_class="c", code=True)


def test_named_arguments_refuses_a_clash() -> None:
    assert named_arguments([1, 2], {"k": 3}, prefix="t") == [("t0", 1), ("t1", 2), ("k", 3)]
    with pytest.raises(ValueError, match=r"keyword 't1' clashes with the name of positional"):
        named_arguments([1, 2], {"t1": 3}, prefix="t")

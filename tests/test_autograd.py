"""pytorch_memo.autograd: the graph walker checked against torch's own graph."""

from __future__ import annotations

import matplotlib as mpl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pytorch_memo.autograd import AutogradGraph, autograd_graph, plot_autograd_graph

mpl.use("Agg")


def _edges(graph: AutogradGraph) -> list[tuple[str, str]]:
    return [(graph.nodes[e.source].name, graph.nodes[e.target].name) for e in graph.edges]


def test_a_chain_of_unary_ops() -> None:
    x = torch.ones(3, requires_grad=True)
    graph = autograd_graph((x * 2).exp().sum(), names={"x": x})
    assert graph.names == ("SumBackward0", "ExpBackward0", "MulBackward0", "AccumulateGrad")
    assert _edges(graph) == [
        ("SumBackward0", "ExpBackward0"),
        ("ExpBackward0", "MulBackward0"),
        ("MulBackward0", "AccumulateGrad"),
    ]
    assert graph.leaves[0] is x
    assert graph.nodes[-1].label == "x"
    assert graph.root.name == "SumBackward0"


def test_two_leaves_and_a_constant() -> None:
    x = torch.ones(2, requires_grad=True)
    w = torch.ones(2, requires_grad=True)
    c = torch.ones(2)  # does not require grad: no node, no edge
    graph = autograd_graph(x * w + c)
    assert graph.names == ("AddBackward0", "MulBackward0", "AccumulateGrad", "AccumulateGrad")
    assert [(e.source, e.target, e.input_nr) for e in graph.edges] == [
        (0, 1, 0),
        (1, 2, 0),
        (1, 3, 1),
    ]
    assert graph.leaves[0] is x
    assert graph.leaves[1] is w
    assert [n.label for n in graph] == [None, None, None, None]


def test_a_tensor_used_twice_is_one_node_with_two_edges() -> None:
    x = torch.ones(2, requires_grad=True)
    y = x.sin()
    graph = autograd_graph(y * y)
    assert graph.names == ("MulBackward0", "SinBackward0", "AccumulateGrad")
    assert [(e.source, e.target) for e in graph.edges] == [(0, 1), (0, 1), (1, 2)]
    assert [n.name for n in graph.children(0)] == ["SinBackward0", "SinBackward0"]


def test_a_linear_layer() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(2, 3)
    out = layer(torch.ones(1, 2))
    graph = autograd_graph(out, names=dict(layer.named_parameters()))
    assert graph.names == ("AddmmBackward0", "AccumulateGrad", "TBackward0", "AccumulateGrad")
    assert [n.label for n in graph if n.is_leaf] == ["bias", "weight"]
    assert graph.nodes[3].variable is layer.weight
    # next_functions holds None for the input, which does not require grad
    assert out.grad_fn is not None
    assert out.grad_fn.next_functions[1][0] is None
    assert [e.input_nr for e in graph.edges if e.source == 0] == [0, 2]


def test_a_leaf_is_its_own_accumulate_grad() -> None:
    x = torch.zeros(2, 2, requires_grad=True)
    graph = autograd_graph(x, names={"x": x})
    assert graph.names == ("AccumulateGrad",)
    assert graph.edges == ()
    assert str(graph) == "0: AccumulateGrad [x (2, 2)]"


def test_output_nr_of_a_multi_output_op() -> None:
    x = torch.arange(4.0, requires_grad=True)
    a, b = x.split(2)
    graph = autograd_graph(b.sum())
    assert graph.names == ("SumBackward0", "SplitBackward0", "AccumulateGrad")
    assert graph.edges[0].output_nr == 1  # b is output 1 of split
    assert autograd_graph(a.sum()).edges[0].output_nr == 0


def test_text_lists_children() -> None:
    x = torch.ones(2, requires_grad=True)
    w = torch.ones(2, requires_grad=True)
    text = str(autograd_graph(x * w, names={"w": w}))
    assert text.splitlines() == [
        "0: MulBackward0 -> 1:AccumulateGrad, 2:AccumulateGrad",
        "1: AccumulateGrad [leaf (2,)]",
        "2: AccumulateGrad [w (2,)]",
    ]
    assert repr(autograd_graph(x * w)) == str(autograd_graph(x * w))


UNARY = {
    "exp": (torch.exp, "ExpBackward0"),
    "sin": (torch.sin, "SinBackward0"),
    "double": (lambda t: t * 2, "MulBackward0"),
    "clone": (torch.clone, "CloneBackward0"),
    "neg": (torch.neg, "NegBackward0"),
    "float64": (lambda t: t.to(torch.float64), "ToCopyBackward0"),
    "flip": (lambda t: t.flip(0), "FlipBackward0"),
}


@settings(deadline=None, max_examples=60)
@given(st.lists(st.sampled_from([*UNARY, "add_leaf", "detach_and_leaf"]), min_size=1, max_size=8))
def test_random_chains_match_torch(ops: list[str]) -> None:
    """Walk a random chain; its main line, its leaves and its size follow from the ops."""
    first = torch.ones(3, requires_grad=True)
    leaves = [first]
    y = first
    chain: list[str] = []  # expected node names along input 0, in forward order
    side = 0  # ToCopyBackward0 nodes off the main line (a float32 leaf added to float64)
    for op in ops:
        if op == "add_leaf":
            leaf = torch.ones(3, requires_grad=True)
            leaves.append(leaf)
            side += y.dtype != leaf.dtype
            y = y + leaf.to(y.dtype)
            chain.append("AddBackward0")
        elif op == "detach_and_leaf":
            y = y.detach().requires_grad_()  # cuts the graph: a new leaf
            leaves, chain, side = [y], [], 0
        elif op == "float64" and y.dtype == torch.float64:
            y = y.to(torch.float64)  # already float64: returns y itself, no node
        else:
            fn, name = UNARY[op]
            y = fn(y)
            chain.append(name)
    graph = autograd_graph(y)
    # the main line: follow input 0 from the root to the first leaf
    line = [graph.root]
    while not line[-1].is_leaf:
        line.append(graph.children(line[-1].index)[0])
    assert [n.name for n in line] == [*reversed(chain), "AccumulateGrad"]
    assert line[-1].variable is leaves[0]
    assert len(graph) == len(chain) + len(leaves) + side
    # the leaves the graph finds are exactly those backward() fills
    y.sum().backward()
    assert len(graph.leaves) == len(leaves)
    assert {id(t) for t in graph.leaves} == {id(t) for t in leaves if t.grad is not None}
    # every node but the root is reached by an edge, and edges stay inside the graph
    assert all(0 <= e.source < len(graph) and 0 <= e.target < len(graph) for e in graph.edges)
    assert {e.target for e in graph.edges} == set(range(1, len(graph)))


def test_plot_draws_one_box_per_node() -> None:
    x = torch.ones(2, requires_grad=True)
    w = torch.ones(2, requires_grad=True)
    graph = autograd_graph((x * w).sum(), names={"x": x, "w": w})
    ax = plot_autograd_graph(graph, title="t")
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == [
        "AccumulateGrad\nw (2,)",
        "AccumulateGrad\nx (2,)",
        "MulBackward0",
        "SumBackward0",
    ]
    assert len(ax.patches) == len(graph) + len(graph.edges)
    assert ax.get_title(loc="left") == "t"
    # root on top, leaves below it
    ys = {t.get_text(): t.get_position()[1] for t in ax.texts}
    assert ys["SumBackward0"] > ys["MulBackward0"] > ys["AccumulateGrad\nx (2,)"]


def test_plot_a_tensor_directly() -> None:
    x = torch.ones(2, requires_grad=True)
    ax = plot_autograd_graph(x.exp(), names={"x": x})
    assert sorted(t.get_text() for t in ax.texts) == ["AccumulateGrad\nx (2,)", "ExpBackward0"]


@pytest.mark.parametrize(
    ("tensor", "names", "error", "match"),
    [
        ([1.0], None, TypeError, "tensor must be a torch.Tensor, got list"),
        (torch.ones(2), None, ValueError, "tensor must require grad.*requires_grad=False"),
        (torch.ones(2, requires_grad=True), [1], TypeError, "names must be a mapping"),
        (torch.ones(2, requires_grad=True), {"x": 1}, TypeError, r"got an item str: int \('x'\)"),
        (torch.ones(2, requires_grad=True), {1: torch.ones(1)}, TypeError, "got an item int"),
    ],
)
def test_bad_input(tensor: object, names: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        autograd_graph(tensor, names=names)  # type: ignore[arg-type]


def test_detached_and_no_grad_tensors_have_no_graph() -> None:
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="tensor must require grad"):
        autograd_graph((x * 2).detach())
    with torch.no_grad(), pytest.raises(ValueError, match="tensor must require grad"):
        autograd_graph(x * 2)


def test_plot_bad_input() -> None:
    with pytest.raises(
        TypeError, match=r"graph must be an AutogradGraph or a torch\.Tensor, got str"
    ):
        plot_autograd_graph("x")  # type: ignore[arg-type]


def test_too_large_a_graph() -> None:
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(600):
        y = y + x * 1.0
    with pytest.raises(ValueError, match="more than 500 nodes"):
        autograd_graph(y)


def test_plot_checks_ax_and_title() -> None:
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes .*, got str: 'ax'"):
        plot_autograd_graph(x.sum(), ax="ax")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"title must be a str or None, got list"):
        plot_autograd_graph(x.sum(), title=["t"])  # type: ignore[arg-type]

"""Which operations lead to a tensor: a walk over autograd's backward graph.

:func:`autograd_graph` lists
the nodes that ``backward()`` would visit, starting at ``tensor.grad_fn`` and following
``next_functions``; :func:`plot_autograd_graph` draws them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.graph import get_gradient_edge

from pytorch_memo._checks import check_axes, check_mapping, check_tensor, check_type

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["AutogradGraph", "GraphEdge", "GraphNode", "autograd_graph", "plot_autograd_graph"]

MAX_NODES = 500
MAX_INCHES = 40.0  # a new figure's largest side: a wide graph gets narrow boxes instead


@dataclass(frozen=True, eq=False)
class GraphNode:
    """One node of the backward graph.

    Attributes:
        index: position in ``AutogradGraph.nodes`` (the root is 0).
        name: the node's class name, e.g. ``"MulBackward0"`` or ``"AccumulateGrad"``.
        variable: for an ``AccumulateGrad`` node, the leaf tensor whose ``.grad`` it
            fills; ``None`` for every other node.
        label: the name given to ``variable`` through ``autograd_graph(names=...)``,
            or ``None``.
    """

    index: int
    name: str
    variable: torch.Tensor | None = None
    label: str | None = None

    @property
    def is_leaf(self) -> bool:
        """Whether the node accumulates into a leaf tensor (``AccumulateGrad``)."""
        return self.variable is not None


@dataclass(frozen=True)
class GraphEdge:
    """Gradient flows from node ``source`` to node ``target`` (indices into ``nodes``).

    ``input_nr`` is the position of the edge in ``source``'s ``next_functions`` (which
    forward input it belongs to); ``output_nr`` is the one ``next_functions`` records
    (which output of ``target``'s forward operation the input was).
    """

    source: int
    target: int
    input_nr: int
    output_nr: int


@dataclass(frozen=True)
class AutogradGraph:
    """The backward graph of a tensor: nodes (root first, breadth-first) and edges."""

    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]

    @property
    def root(self) -> GraphNode:
        """The node ``backward()`` starts from (``tensor.grad_fn``, or a leaf's own)."""
        return self.nodes[0]

    @property
    def names(self) -> tuple[str, ...]:
        """The nodes' names, in ``nodes`` order."""
        return tuple(node.name for node in self.nodes)

    @property
    def leaves(self) -> tuple[torch.Tensor, ...]:
        """The leaf tensors the graph accumulates gradients into, in ``nodes`` order."""
        return tuple(node.variable for node in self.nodes if node.variable is not None)

    def children(self, index: int) -> tuple[GraphNode, ...]:
        """The nodes that node ``index`` passes gradients to, in ``next_functions`` order."""
        return tuple(self.nodes[e.target] for e in self.edges if e.source == index)

    def __iter__(self) -> Iterator[GraphNode]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        lines = []
        for node in self.nodes:
            targets = ", ".join(f"{c.index}:{c.name}" for c in self.children(node.index))
            text = f"{node.index}: {_node_text(node)}"
            lines.append(text + (f" -> {targets}" if targets else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def _node_text(node: GraphNode) -> str:
    if node.variable is None:
        return node.name
    return f"{node.name} [{node.label or 'leaf'} {_shape(node.variable)}]"


def _shape(tensor: torch.Tensor) -> str:
    values = tuple(tensor.shape)
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


def _node_name(fn: Any) -> str:
    return type(fn).__name__


def autograd_graph(
    tensor: torch.Tensor, *, names: Mapping[str, torch.Tensor] | None = None
) -> AutogradGraph:
    """Walk the backward graph that ends in ``tensor``.

    Starts at ``tensor.grad_fn`` (for a leaf that requires grad, at its
    ``AccumulateGrad`` node) and follows each node's ``next_functions`` breadth-first.
    Inputs that do not require grad appear in ``next_functions`` as ``None`` and are
    left out. A node reached twice (a tensor used twice) appears once, with two edges.

    Args:
        tensor: a tensor that requires grad.
        names: optional labels for leaf tensors, e.g. ``dict(model.named_parameters())``;
            a leaf is matched by identity (``is``).

    Returns:
        An :class:`AutogradGraph`; it prints as one line per node.

    Raises:
        TypeError: ``tensor`` is not a tensor, or ``names`` is not a mapping of str to
            tensors.
        ValueError: ``tensor`` does not require grad (it has no graph), or the graph has
            more than 500 nodes.

    Example:
        >>> import torch
        >>> x = torch.ones(3, requires_grad=True)
        >>> print(autograd_graph((x * 2).exp().sum(), names={"x": x}))
        0: SumBackward0 -> 1:ExpBackward0
        1: ExpBackward0 -> 2:MulBackward0
        2: MulBackward0 -> 3:AccumulateGrad
        3: AccumulateGrad [x (3,)]
    """
    return _walk_graph("tensor", tensor, names)


def _walk_graph(
    name: str, tensor: torch.Tensor, names: Mapping[str, torch.Tensor] | None
) -> AutogradGraph:
    """:func:`autograd_graph`, its errors naming the argument ``name``."""
    check_tensor(name, tensor)
    labels = _check_names(names)
    if not tensor.requires_grad:
        msg = (
            f"{name} must require grad to have an autograd graph, got a tensor with "
            "requires_grad=False (detached, created under no_grad, or never tracked)"
        )
        raise ValueError(msg)
    root = get_gradient_edge(tensor).node
    index: dict[int, int] = {id(root): 0}
    keep: list[Any] = [root]  # holds every node so no id() is reused during the walk
    edges: list[GraphEdge] = []
    queue = [root]
    while queue:
        fn = queue.pop(0)
        for input_nr, (child, output_nr) in enumerate(fn.next_functions):
            if child is None:
                continue
            if id(child) not in index:
                if len(keep) >= MAX_NODES:
                    msg = f"{name}'s graph has more than {MAX_NODES} nodes; too many to walk"
                    raise ValueError(msg)
                index[id(child)] = len(keep)
                keep.append(child)
                queue.append(child)
            edges.append(GraphEdge(index[id(fn)], index[id(child)], input_nr, int(output_nr)))
    nodes = []
    for i, fn in enumerate(keep):
        variable = getattr(fn, "variable", None) if _node_name(fn) == "AccumulateGrad" else None
        label = None
        if isinstance(variable, torch.Tensor):
            label = next((k for k, v in labels.items() if v is variable), None)
        else:
            variable = None
        nodes.append(GraphNode(i, _node_name(fn), variable, label))
    return AutogradGraph(tuple(nodes), tuple(edges))


def _check_names(names: object) -> dict[str, torch.Tensor]:
    if names is None:
        return {}
    return check_mapping("names", names, str, torch.Tensor, "a mapping of str to tensors")


def _as_graph(graph: object, names: Mapping[str, torch.Tensor] | None) -> AutogradGraph:
    if isinstance(graph, torch.Tensor):
        return _walk_graph("graph", graph, names)
    if not isinstance(graph, AutogradGraph):
        msg = f"graph must be an AutogradGraph or a torch.Tensor, got {type(graph).__name__}"
        raise TypeError(msg)
    return graph


def _depths(graph: AutogradGraph) -> list[int]:
    """Longest distance from the root, so every edge points to a deeper row."""
    depth = [0] * len(graph.nodes)
    changed = True
    while changed:  # the graph is a DAG: this settles within len(nodes) rounds
        changed = False
        for edge in graph.edges:
            if depth[edge.target] < depth[edge.source] + 1:
                depth[edge.target] = depth[edge.source] + 1
                changed = True
    return depth


def plot_autograd_graph(
    graph: AutogradGraph | torch.Tensor,
    *,
    names: Mapping[str, torch.Tensor] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a backward graph top-down: the root at the top, leaves at the bottom.

    Arrows point the way gradients flow during ``backward()``. ``AccumulateGrad``
    nodes are drawn in another colour and labelled with their leaf's name and shape.

    Args:
        graph: an :class:`AutogradGraph`, or a tensor to walk with
            :func:`autograd_graph`.
        names: labels for leaf tensors, used when ``graph`` is a tensor.
        ax: the matplotlib axes to draw on; a new figure by default.
        title: the axes' title.

    Returns:
        The axes drawn on; each node's box holds one text with the node's name.

    Raises:
        TypeError: ``graph`` is neither a graph nor a tensor, ``ax`` is not matplotlib
            axes, or ``title`` is not a str.
        ValueError: see :func:`autograd_graph`.

    Example:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> ax = plot_autograd_graph(x.sin().sum(), names={"x": x})
        >>> sorted(t.get_text() for t in ax.texts)
        ['AccumulateGrad\\nx (2,)', 'SinBackward0', 'SumBackward0']
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    check_axes("ax", ax)
    check_type("title", title, (str, type(None)), "a str or None")
    graph = _as_graph(graph, names)
    depth = _depths(graph)
    rows: dict[int, list[int]] = {}
    for node in graph.nodes:
        rows.setdefault(depth[node.index], []).append(node.index)
    width = max(len(r) for r in rows.values())
    position: dict[int, tuple[float, float]] = {}
    for level, members in rows.items():
        for k, i in enumerate(members):
            position[i] = ((k + 0.5) * width / len(members), -1.2 * level)
    if ax is None:
        size = (min(max(3.0, 2.4 * width), MAX_INCHES), min(0.3 + 0.9 * len(rows), MAX_INCHES))
        _, ax = plt.subplots(figsize=size)
    box_w, box_h = 1.9, 0.55
    for edge in graph.edges:
        (x0, y0), (x1, y1) = position[edge.source], position[edge.target]
        ax.add_patch(
            FancyArrowPatch(
                (x0 * 2.2, y0 - box_h / 2),
                (x1 * 2.2, y1 + box_h / 2),
                arrowstyle="-|>",
                mutation_scale=10,
                color="0.35",
                shrinkA=0,
                shrinkB=0,
            )
        )
    for node in graph.nodes:
        x, y = position[node.index]
        colour = "#cfe8cf" if node.is_leaf else "#dde6f5"
        ax.add_patch(
            FancyBboxPatch(
                (x * 2.2 - box_w / 2, y - box_h / 2),
                box_w,
                box_h,
                boxstyle="round,pad=0.02",
                facecolor=colour,
                edgecolor="0.4",
            )
        )
        text = node.name
        if node.variable is not None:
            text += f"\n{node.label or 'leaf'} {_shape(node.variable)}"
        ax.text(x * 2.2, y, text, ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.2, width * 2.2 + 0.2)
    ax.set_ylim(-1.2 * (len(rows) - 1) - 0.5, 0.5)
    ax.set_axis_off()
    if title is not None:
        ax.set_title(title, fontsize=9, loc="left")
    return ax

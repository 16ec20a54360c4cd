"""The pieces around a training step: parameter groups, a schedule, what a loop keeps alive.

- :func:`param_groups` splits a model's trainable parameters into one group that gets
  weight decay and one that does not (biases, normalisation layers' parameters, other
  vectors and scalars), ready for ``torch.optim.AdamW``.
- :func:`group_table` lists every parameter of a model with the optimizer group that
  holds it, its learning rate and weight decay, and flags trainable parameters the
  optimizer does not hold (they get gradients and never move).
- :func:`warmup_cosine` is a ``LambdaLR``: a linear warmup, then a cosine decay that
  stays at its floor after the last step.
- :func:`watch_saved_tensors` follows the tensors autograd saves while a block runs and
  says how many, and how many bytes, graphs still hold afterwards: what a graph kept
  by ``total_loss += loss`` holds on to.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pytorch_memo._checks import check_int, check_number, check_type
from pytorch_memo._table import Cell, NamedRows, ResultTable, shape_text
from pytorch_memo.autograd_mechanics import _ignored_keys, _pack, _Packed, _storage, _unpack
from pytorch_memo.modules import _check_materialised

__all__ = [
    "NORM_LAYERS",
    "GroupRow",
    "GroupTable",
    "SavedAlive",
    "WarmupCosine",
    "group_table",
    "param_groups",
    "warmup_cosine",
    "watch_saved_tensors",
]

NORM_LAYERS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    nn.LazyInstanceNorm1d,
    nn.LazyInstanceNorm2d,
    nn.LazyInstanceNorm3d,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
    nn.LocalResponseNorm,
)
"""The normalisation layers of ``torch.nn`` (their subclasses too): :func:`param_groups`
gives none of their parameters weight decay.

:meta hide-value:
"""


def _owners(model: nn.Module) -> dict[int, tuple[str, nn.Module]]:
    """Each parameter's first name and the module it belongs to: the module that holds it
    directly, except for the parameters behind a parametrization
    (``torch.nn.utils.parametrize``: ``weight_norm``, ``spectral_norm``, your own), which
    a ``ParametrizationList`` holds: those belong to the parametrized module, under the
    name they stand for (``0.weight`` for ``0.parametrizations.weight.original``)."""
    from torch.nn.utils import parametrize

    owners: dict[int, tuple[str, nn.Module]] = {}
    for prefix, module in model.named_modules():  # a module comes before its children
        path = f"{prefix}." if prefix else ""
        if parametrize.is_parametrized(module):
            for attribute, plist in module.parametrizations.items():
                for p in plist.parameters(recurse=False):
                    owners.setdefault(id(p), (path + attribute, module))
        for name, p in module.named_parameters(recurse=False):
            owners.setdefault(id(p), (path + name, module))
    return owners


def _decays(name: str, p: torch.Tensor, module: nn.Module) -> bool:
    short = name.rsplit(".", 1)[-1]
    is_bias = short.startswith("bias") or short.endswith("bias")
    return p.ndim >= 2 and not is_bias and not isinstance(module, NORM_LAYERS)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Split ``model``'s trainable parameters into a group with weight decay and one without.

    No weight decay for: every parameter of a normalisation layer (:data:`NORM_LAYERS`:
    batch, instance, layer, group and RMS norm, their weights and biases whatever their
    shape), every parameter whose own name starts or ends with ``bias`` (``bias``,
    ``in_proj_bias``, ``bias_k``, ``bias_ih_l0``), and every parameter of fewer than two
    dimensions (a learned scale or offset). Every other parameter (the weight matrices
    of linear, convolution, embedding and recurrent layers) gets ``weight_decay``.

    A parameter behind a parametrization (``weight_norm``, ``spectral_norm``,
    ``torch.nn.utils.parametrize``) is classified as the parameter it stands for, by the
    module it parametrizes: a parametrized ``LayerNorm`` weight gets no decay.

    Frozen parameters (``requires_grad=False``) are left out. To unfreeze some later,
    call this before freezing them (frozen parameters in an optimizer stay still, and
    ``AdamW`` keeps no state for them), so the groups, and a scheduler built on them,
    hold them from the start: a ``LambdaLR`` built before ``optimizer.add_param_group``
    raises at its next ``step()`` on torch 2.10 and later (2.8 and 2.9 leave the new
    group unscheduled), and the added group takes the optimizer's default weight decay,
    norms and biases included. A parameter shared by two
    modules (tied weights) appears once, classified by the first module that holds it
    in ``model.named_modules()`` order. The groups keep ``model.parameters()`` order.

    Args:
        model: the model; every parameter must have a shape (run a model with lazy
            layers once first).
        weight_decay: the decay of the first group, a finite number >= 0.

    Returns:
        Two parameter groups for a ``torch.optim`` optimizer:
        ``[{"params": [...], "weight_decay": weight_decay},
        {"params": [...], "weight_decay": 0.0}]``; either list may be empty (an optimizer
        accepts an empty group). Other options (``lr``) come from the optimizer's
        defaults; add keys to a group to change them.

    Raises:
        TypeError: ``model`` is not a module, or ``weight_decay`` is not a number.
        ValueError: ``weight_decay`` is negative, NaN or infinite; ``model`` has no
            trainable parameter, or holds lazy parameters not materialised yet.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 1))
        >>> decay, no_decay = param_groups(model, 0.1)
        >>> [tuple(p.shape) for p in decay["params"]], decay["weight_decay"]
        ([(8, 4), (1, 8)], 0.1)
        >>> [tuple(p.shape) for p in no_decay["params"]], no_decay["weight_decay"]
        ([(8,), (8,), (8,), (1,)], 0.0)
        >>> optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    """
    check_type("model", model, nn.Module, "a torch.nn.Module")
    decay_value = check_number("weight_decay", weight_decay, minimum=0.0)
    _check_materialised("model", model)
    owners = _owners(model)
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        name, module = owners[id(p)]
        (decay if _decays(name, p, module) else no_decay).append(p)
    if not decay and not no_decay:
        count = sum(1 for _ in model.parameters())
        found = f"{count} parameters, all frozen" if count else "a model without parameters"
        msg = f"model must have a trainable parameter (requires_grad=True), got {found}"
        raise ValueError(msg)
    return [
        {"params": decay, "weight_decay": decay_value},
        {"params": no_decay, "weight_decay": 0.0},
    ]


# -------------------------------------------------------------------------- group_table


@dataclass(frozen=True)
class GroupRow:
    """One parameter in :func:`group_table`: a row of :class:`GroupTable`.

    Attributes:
        name: its name in the model (``0.weight``); a parameter the optimizer holds
            that the model does not is ``(not in model) group G #I`` (its place there).
        shape: its shape.
        trainable: its ``requires_grad``.
        group: the index of the optimizer's parameter group that holds it, ``None``
            when no group does.
        lr: that group's learning rate (``None`` without a group).
        weight_decay: that group's weight decay; ``None`` without a group, or for an
            optimizer without the option (``LBFGS``, ``Rprop``).
    """

    name: str
    shape: tuple[int, ...]
    trainable: bool
    group: int | None
    lr: float | None
    weight_decay: float | None

    @property
    def stranded(self) -> bool:
        """True for a trainable parameter that no group holds (it gets gradients and
        never moves)."""
        return self.trainable and self.group is None

    def cells(self) -> tuple[str | Cell, ...]:
        """The row as display cells; a stranded parameter's name and group in bold."""
        group = "-" if self.group is None else str(self.group)
        return (
            Cell(self.name, bold=True) if self.stranded else self.name,
            shape_text(self.shape),
            str(self.trainable),
            Cell(group, bold=True) if self.stranded else group,
            _number(self.lr),
            _number(self.weight_decay),
        )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


@dataclass(frozen=True, repr=False)
class GroupTable(NamedRows[GroupRow], ResultTable):
    """Rows of :class:`GroupRow`, model order, then what only the optimizer holds."""

    rows: tuple[GroupRow, ...]
    _css_class = "memo-describe"

    @property
    def stranded(self) -> tuple[GroupRow, ...]:
        """The trainable parameters no group holds."""
        return tuple(row for row in self.rows if row.stranded)

    def _headers(self) -> tuple[str, ...]:
        return ("parameter", "shape", "trainable", "group", "lr", "weight_decay")

    def _cells(self) -> list[tuple[str | Cell, ...]]:
        return [row.cells() for row in self.rows]

    def _note(self) -> tuple[str, str]:
        stranded = self.stranded
        if not stranded:
            return "", ""
        names = ", ".join(row.name for row in stranded)
        text = (
            f"{len(stranded)} trainable parameter(s) in no group: they get gradients and "
            f"never move ({names})"
        )
        return text, f"<p><b>{_escape(text)}</b></p>"


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def _group_value(group: dict[str, Any], key: str) -> float | None:
    value = group.get(key)
    if value is None:
        return None
    if isinstance(value, torch.Tensor):  # lr may be a tensor (capturable, compiled)
        return float(value.detach().cpu().reshape(-1)[0]) if value.numel() else None
    return float(value) if isinstance(value, int | float) else None


def group_table(optimizer: torch.optim.Optimizer, model: nn.Module) -> GroupTable:
    """List ``model``'s parameters with the optimizer group that holds each.

    Each parameter of ``model`` (once, under its first name, as
    ``model.named_parameters()`` gives it) gets a row: its shape, whether it requires
    grad, the index of the group of ``optimizer`` that holds it, and that group's ``lr``
    and ``weight_decay``. A trainable parameter that no group holds is shown in bold
    and named in a note below the table: the optimizer was built before it was
    unfrozen, or from another module. Parameters the optimizer holds that the model
    does not come last.

    Args:
        optimizer: a ``torch.optim.Optimizer``.
        model: the model it trains.

    Returns:
        A :class:`GroupTable`; it prints as a text table (an HTML table in Jupyter).

    Raises:
        TypeError: ``optimizer`` is not a ``torch.optim.Optimizer`` or ``model`` is not
            a module.
        ValueError: ``model`` holds lazy parameters not materialised yet.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        >>> optimizer = torch.optim.SGD(model[1].parameters(), lr=0.1)
        >>> print(group_table(optimizer, model))
        parameter  shape   trainable  group  lr   weight_decay
        0.weight   (3, 2)  True       -      -    -
        0.bias     (3,)    True       -      -    -
        1.weight   (1, 3)  True       0      0.1  0
        1.bias     (1,)    True       0      0.1  0
        2 trainable parameter(s) in no group: they get gradients and never move (0.weight, 0.bias)
    """
    check_type("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer")
    check_type("model", model, nn.Module, "a torch.nn.Module")
    _check_materialised("model", model)
    where: dict[int, int] = {}
    for index, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            where.setdefault(id(p), index)
    rows: list[GroupRow] = []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        seen.add(id(p))
        held = where.get(id(p))
        group = optimizer.param_groups[held] if held is not None else {}
        rows.append(
            GroupRow(
                name,
                tuple(p.shape),
                p.requires_grad,
                held,
                _group_value(group, "lr"),
                _group_value(group, "weight_decay"),
            )
        )
    for index, group in enumerate(optimizer.param_groups):
        for position, p in enumerate(group["params"]):
            if id(p) in seen:
                continue
            seen.add(id(p))
            rows.append(
                GroupRow(
                    f"(not in model) group {index} #{position}",
                    tuple(p.shape),
                    p.requires_grad,
                    index,
                    _group_value(group, "lr"),
                    _group_value(group, "weight_decay"),
                )
            )
    return GroupTable(tuple(rows))


# ------------------------------------------------------------------------ warmup_cosine


@dataclass(frozen=True)
class WarmupCosine:
    """The factor :func:`warmup_cosine` multiplies the learning rate by at each step.

    A callable object rather than a function, so that ``LambdaLR.state_dict()`` saves
    it (it saves callable objects' attributes, not functions) and a checkpoint restores
    the schedule.

    Attributes:
        warmup_steps: how many steps climb to the full rate.
        total_steps: the step at which the decay reaches ``min_factor``.
        min_factor: the floor, as a fraction of the full rate.
    """

    warmup_steps: int
    total_steps: int
    min_factor: float = 0.0

    def __post_init__(self) -> None:
        """Check the settings (a frozen dataclass: normalised through ``object.__setattr__``).

        Raises:
            TypeError: a step count is not an int, or ``min_factor`` is not a number.
            ValueError: ``warmup_steps`` is negative, ``total_steps`` is not greater than
                it, or ``min_factor`` is outside [0, 1].
        """
        warmup = check_int("warmup_steps", self.warmup_steps, minimum=0)
        total = check_int("total_steps", self.total_steps)
        if total <= warmup:
            msg = f"total_steps must be greater than warmup_steps ({warmup}), got {total}"
            raise ValueError(msg)
        floor = check_number("min_factor", self.min_factor, minimum=0.0, maximum=1.0)
        object.__setattr__(self, "warmup_steps", warmup)
        object.__setattr__(self, "total_steps", total)
        object.__setattr__(self, "min_factor", floor)

    def __call__(self, step: int) -> float:
        """The factor at ``step`` (0 for the first optimizer step)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = min((step - self.warmup_steps) / (self.total_steps - self.warmup_steps), 1.0)
        return self.min_factor + (1 - self.min_factor) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    min_factor: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A learning-rate schedule: a linear warmup, then a cosine decay to a floor.

    Each group's rate is its initial ``lr`` times a factor: ``(step + 1) / warmup_steps``
    for the first ``warmup_steps`` steps (so the first step already moves, and step
    ``warmup_steps - 1`` runs at the full rate), then half a cosine from 1 at step
    ``warmup_steps`` down to ``min_factor`` at step ``total_steps``, where it stays: the
    rate never climbs again, as ``CosineAnnealingLR`` does after ``T_max``. Up to
    ``total_steps``, with ``warmup_steps >= 2``, it gives the rates of ``SequentialLR``
    over ``LinearLR(start_factor=1 / warmup_steps, total_iters=warmup_steps - 1)`` and
    ``CosineAnnealingLR(T_max=total_steps - warmup_steps, eta_min=min_factor * lr)``
    (within float rounding; with ``min_factor > 0`` for one group, since ``eta_min``
    is one value for all groups). Call ``scheduler.step()`` once after each
    ``optimizer.step()``.

    Args:
        optimizer: the optimizer whose groups' ``lr`` it sets (their current ``lr`` is
            the full rate).
        warmup_steps: steps of warmup, an int >= 0 (0: the cosine starts at once).
        total_steps: the step where the decay ends, an int > ``warmup_steps``.
        min_factor: the floor as a fraction of the full rate, in [0, 1].

    Returns:
        A ``torch.optim.lr_scheduler.LambdaLR`` whose factor is a :class:`WarmupCosine`;
        its ``state_dict()`` holds the schedule's settings.

    Raises:
        TypeError: ``optimizer`` is not a ``torch.optim.Optimizer``, a step count is not
            an int, or ``min_factor`` is not a number.
        ValueError: ``warmup_steps`` is negative, ``total_steps`` is not greater than
            it, or ``min_factor`` is outside [0, 1].

    Example:
        >>> p = torch.nn.Parameter(torch.zeros(1))
        >>> optimizer = torch.optim.SGD([p], lr=1.0)
        >>> scheduler = warmup_cosine(optimizer, warmup_steps=2, total_steps=4)
        >>> rates = []
        >>> for _ in range(6):
        ...     rates.append(round(optimizer.param_groups[0]["lr"], 3))
        ...     optimizer.step()
        ...     scheduler.step()
        >>> rates
        [0.5, 1.0, 1.0, 0.5, 0.0, 0.0]
    """
    check_type("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer")
    factor = WarmupCosine(warmup_steps, total_steps, min_factor)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ------------------------------------------------------------------ watch_saved_tensors


@dataclass
class SavedAlive:
    """The tensors autograd saved in a :func:`watch_saved_tensors` block, watched weakly.

    It holds a weak reference to what each graph keeps, never the tensor, so watching
    keeps nothing alive. Read :attr:`alive` and :attr:`nbytes` when you want to know:
    they count what graphs still hold at that moment.

    Attributes:
        saved: how many tensors autograd saved in the block (the ignored ones too).
    """

    saved: int = 0
    _refs: list[weakref.ref[torch.Tensor]] = field(default_factory=list, repr=False)
    _ignored: set[tuple[str, int]] = field(default_factory=set, repr=False)

    def _alive(self) -> list[torch.Tensor]:
        found = []
        for ref in self._refs:
            tensor = ref()
            if tensor is not None and _storage(tensor)[0] not in self._ignored:
                found.append(tensor)
        return found

    @property
    def alive(self) -> int:
        """How many of the saved tensors a graph still holds, not counting ``ignore``."""
        return len(self._alive())

    @property
    def nbytes(self) -> int:
        """The bytes of the distinct storages of the saved tensors a graph still holds
        (a view counts its whole storage, each storage once), not counting ``ignore``."""
        storages: dict[tuple[str, int], int] = {}
        for tensor in self._alive():
            key, size = _storage(tensor)
            if key is not None and size is not None:
                storages[key] = size
        return sum(storages.values())

    def __repr__(self) -> str:
        return f"SavedAlive(saved={self.saved}, alive={self.alive}, nbytes={self.nbytes})"


@contextmanager
def watch_saved_tensors(*, ignore: Iterable[torch.Tensor] = ()) -> Iterator[SavedAlive]:
    """Follow every tensor autograd saves for backward while the block runs.

    A pack hook (``torch.autograd.graph.saved_tensors_hooks``) hands autograd a
    detached alias of each tensor it saves (the same memory, as torch's documentation
    of the hooks advises: returning the tensor itself would make a reference cycle
    between an output and its own graph) and keeps a weak reference to that alias.
    The alias lives exactly as long as the graph that saved it. After the block, the
    record says how many saved tensors, and how many bytes of storage, graphs still
    hold: a graph that nothing references any more, or whose ``backward()`` ran, has
    let go of them; a graph kept by a variable (``total_loss += loss``) has not. What
    you hold yourself (the last batch in a loop variable) does not count unless a
    graph holds it too. Inside a non-reentrant checkpoint region the checkpoint's own
    hooks take over and this one sees nothing.

    Autograd skips its check that a saved tensor was not modified in place (its
    version counter) for tensors that go through such hooks; the unpack hook makes the
    check itself, so a saved tensor changed in place after autograd saved it raises
    torch's own error (one of the variables needed for gradient computation has been
    modified by an inplace operation) when backward reads it, as it would without
    the helper, instead of giving a wrong gradient.

    What the hooks do not see is not followed: tensors a custom
    ``torch.autograd.Function`` keeps as attributes of ``ctx`` (``ctx.x = x``) rather
    than through ``ctx.save_for_backward``, and everything saved while an inner
    ``saved_tensors_hooks`` pair is active in the block (torch applies only the
    innermost pair, as in a checkpoint region). The in-place check of what such an
    inner pair saves is then up to that pair.

    Args:
        ignore: tensors whose storages not to count, typically ``model.parameters()``
            (a layer saves its weight, which lives on anyway).

    Yields:
        A :class:`SavedAlive`; read ``alive`` and ``nbytes`` after the block.

    Raises:
        TypeError: ``ignore`` is not an iterable of tensors.
        ValueError: ``ignore`` holds more than ``MAX_IGNORED`` tensors (an endless
            iterator, say).
        RuntimeError: from backward (in the block or after it) or a read of
            ``grad_fn._saved_*``, when a tensor saved in the block was modified in
            place after autograd saved it.

    Example:
        >>> w = torch.ones(1000, requires_grad=True)
        >>> with watch_saved_tensors(ignore=[w]) as watched:
        ...     kept = (w * w).exp().sum()  # saves w twice, and exp's result
        >>> watched.saved, watched.alive, watched.nbytes  # exp's result: 4,000 bytes
        (3, 1, 4000)
        >>> kept.backward()  # frees what the graph saved
        >>> watched.alive, watched.nbytes
        (0, 0)
    """
    record = SavedAlive(_ignored=_ignored_keys(ignore, reader="watch_saved_tensors"))

    def pack(tensor: torch.Tensor) -> _Packed:
        packed = _pack(tensor, record.saved)  # its alias dies with the graph
        record.saved += 1
        record._refs.append(weakref.ref(packed.tensor))
        return packed

    def unpack(packed: _Packed) -> torch.Tensor:
        return _unpack(packed, reader="watch_saved_tensors")

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield record

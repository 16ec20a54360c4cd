"""Cross entropy written out, and sampling checked against its probabilities.

:func:`cross_entropy_by_hand` spells out the
formula that ``torch.nn.functional.cross_entropy`` computes (class weights,
``ignore_index``, ``label_smoothing``, every input shape) so the chapter can compare the
two; :func:`check_frequencies` draws from ``torch.multinomial`` and says how far the
observed frequencies may stray from the probabilities (a bound that holds for every
probability, rare classes included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from pytorch_memo._checks import (
    INT64_MAX,
    check_axes,
    check_choice,
    check_count,
    check_int,
    check_mapping,
    check_number,
    check_tensor,
    check_type,
    check_values,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MAX_CLASSES",
    "MAX_LOGITS",
    "MAX_SAMPLES",
    "SEED_RANGE",
    "FrequencyCheck",
    "bernstein_tolerance",
    "check_frequencies",
    "cross_entropy_by_hand",
    "keep_top_k",
    "keep_top_p",
    "plot_distributions",
]

Reduction = Literal["mean", "sum", "none"]
MAX_SAMPLES = 10**7
"""The most draws :func:`check_frequencies` makes (80 MB of int64 draws)."""
MAX_CLASSES = 2**24
"""The most classes :func:`check_frequencies` draws from (``torch.multinomial``'s limit)."""
SEED_RANGE = (-(2**63), 2**64 - 1)
"""The seeds ``torch.Generator.manual_seed`` accepts."""
MAX_PLOTTED_CLASSES = 64
MAX_LOGITS = 2**28
"""The most logits :func:`keep_top_k` and :func:`keep_top_p` filter (1 GiB of float32;
their work tensors take several times that)."""
MAX_PLOTTED_ROWS = 12


_REAL_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The dtypes ``softmax`` and ``topk`` compute in (float8 types are storage formats)."""


def _check_float_dtype(name: str, tensor: torch.Tensor) -> None:
    """Refuse a floating-point dtype that softmax and topk do not compute in (float8)."""
    if tensor.dtype not in _REAL_FLOATS:
        msg = (
            f"{name} must be torch.float16, torch.bfloat16, torch.float32 or "
            f"torch.float64 (softmax and topk do not compute in {tensor.dtype}), got "
            f"{tensor.dtype}; convert it first, e.g. {name}.float()"
        )
        raise ValueError(msg)


def _values(tensor: torch.Tensor) -> str:
    shown = tensor.flatten()[:6].tolist()
    return str(shown)[:-1] + (", ...]" if tensor.numel() > 6 else "]")


def _check_args(
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    ignore_index: int,
    label_smoothing: float,
    reduction: str,
) -> bool:
    """Validate; return whether ``target`` holds class probabilities."""
    check_tensor("input", input)
    check_tensor("target", target)
    if input.dim() == 0 or not input.is_floating_point():
        msg = f"input must be floating point logits of shape (C), (N, C) or (N, C, d1, ...), got {input.dtype} of shape {tuple(input.shape)}"
        raise ValueError(msg)
    _check_float_dtype("input", input)
    check_int("ignore_index", ignore_index, minimum=-INT64_MAX, maximum=INT64_MAX)
    check_number("label_smoothing", label_smoothing)
    if not 0.0 <= label_smoothing <= 1.0:
        msg = f"label_smoothing must be in [0, 1], got {label_smoothing}"
        raise ValueError(msg)
    check_choice("reduction", reduction, ("mean", "sum", "none"))
    classes = input.shape[0] if input.dim() == 1 else input.shape[1]
    probabilities = target.is_floating_point()
    if probabilities and target.shape != input.shape:
        msg = f"target of probabilities must have input's shape {tuple(input.shape)}, got {tuple(target.shape)}"
        raise ValueError(msg)
    if probabilities and ignore_index != -100:
        msg = f"ignore_index applies to class indices only; with a target of probabilities it must stay -100, got {ignore_index}"
        raise ValueError(msg)
    if not probabilities:
        if target.dtype not in (torch.int64, torch.uint8):
            msg = f"target must hold class indices as torch.int64 or torch.uint8 (or probabilities as floats), got {target.dtype}"
            raise TypeError(msg)
        expected = () if input.dim() == 1 else (input.shape[0], *input.shape[2:])
        if tuple(target.shape) != expected:
            msg = f"target of class indices must have shape {expected} for input of shape {tuple(input.shape)}, got {tuple(target.shape)}"
            raise ValueError(msg)
    for name, tensor in (("input", input), ("target", target)):
        if tensor.device != input.device:
            msg = f"{name} must be on input's device {input.device}, got {tensor.device}"
            raise ValueError(msg)
    if weight is not None:
        _check_weight(weight, input, classes, probabilities)
    if not probabilities and target.numel() and target.device.type != "meta":
        _check_classes(target, classes, ignore_index)
    return probabilities


def _check_weight(
    weight: torch.Tensor, input: torch.Tensor, classes: int, probabilities: bool
) -> None:
    """Class weights as ``F.cross_entropy`` takes them: with class indices of input's
    dtype exactly (torch raises "expected scalar type Float but found Double"), with
    probabilities of any real dtype (promoted with input and target)."""
    check_tensor("weight", weight)
    if weight.shape != (classes,):
        msg = f"weight must have shape ({classes},), one per class, got {tuple(weight.shape)}"
        raise ValueError(msg)
    if weight.device != input.device:
        msg = f"weight must be on input's device {input.device}, got {weight.device}"
        raise ValueError(msg)
    if not probabilities and weight.dtype != input.dtype:
        msg = (
            f"weight must be floating point of input's dtype {input.dtype} with class "
            f"indices (F.cross_entropy refuses another), got {weight.dtype}; convert it, "
            f"e.g. weight.to(input.dtype)"
        )
        raise ValueError(msg)
    if weight.is_complex():
        msg = f"weight must be real class weights, got {weight.dtype}"
        raise ValueError(msg)


def _check_classes(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """Every class index (but ``ignore_index``) in ``[0, classes)``, as torch requires."""
    counted = target.long()
    counted = counted[counted != ignore_index]
    if counted.numel() == 0:
        return
    low, high = int(counted.min()), int(counted.max())
    if low < 0 or high >= classes:
        bad = low if low < 0 else high
        msg = (
            f"target values must be class indices in [0, {classes}) (input's {classes} "
            f"classes) or ignore_index={ignore_index}, got {bad}"
        )
        raise ValueError(msg)


def cross_entropy_by_hand(
    input: torch.Tensor,
    target: torch.Tensor,
    *,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """``F.cross_entropy`` computed from its formula, step by step.

    With ``log_p = log_softmax(input)`` over the class dimension (dim 0 for an
    unbatched ``(C)`` input, else dim 1), ``C`` classes and ``w`` the class weights (all 1
    by default):

    - **class indices** ``y``: each position's loss is ``-w[y] * log_p[y]``, 0 where
      ``y == ignore_index``. ``"mean"`` divides the sum by the **sum of the weights of
      the targets that count**, not by their number. With ``label_smoothing=e`` the loss
      is ``(1 - e) * that + e / C * smooth``, where ``smooth`` is
      ``-sum_c w[c] * log_p[c]`` reduced the same way.
    - **class probabilities** ``q`` (a float target shaped like ``input``): each
      position's loss is ``-sum_c w[c] * q'[c] * log_p[c]`` with
      ``q' = (1 - e) * q + e / C``; ``"mean"`` divides by the number of positions.

    Masked logits (``-inf``, as :func:`keep_top_k` leaves them) give ``log_p = -inf``
    and the same results as torch: they cost nothing unless they are the target or
    smoothing puts weight on them (the loss is then ``inf``); where the formula
    multiplies their ``-inf`` by 0 (a class weight of 0, a probability of 0), the loss
    is NaN, in torch too. Ignored positions are set to 0, never multiplied by 0.
    On ``meta`` tensors it returns a meta tensor of the result's shape, as torch does.

    Dtypes are torch's too: with class indices ``weight`` must have ``input``'s dtype
    (torch raises "expected scalar type Float but found Double" for a float64 weight
    with float32 logits; this function a ``ValueError``) and the loss has that dtype.
    With probabilities ``log_p``, ``q`` (smoothed in the target's dtype) and ``w`` are
    multiplied with torch's type promotion: the loss has the dtype
    ``torch.result_type`` gives for ``input``, ``target`` and ``weight`` (float64 for
    float32 logits and float64 probabilities or weights; float32 for float16 logits
    and bfloat16 probabilities).

    Args:
        input: logits of shape ``(C)``, ``(N, C)`` or ``(N, C, d1, ..., dk)``.
        target: class indices of shape ``()``, ``(N)`` or ``(N, d1, ..., dk)``, or
            class probabilities shaped like ``input``.
        weight: one weight per class, shape ``(C,)``, on ``input``'s device: of
            ``input``'s dtype with class indices, of any real dtype with probabilities.
        ignore_index: a class index whose positions count for nothing (class indices
            only: torch refuses any other value than -100 with probabilities).
        label_smoothing: ``e`` in ``[0, 1]``.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        A scalar loss, or one value per position for ``"none"``: in ``input``'s dtype
        with class indices, in the promoted dtype of ``input``, ``target`` and
        ``weight`` with probabilities.

    Raises:
        TypeError: ``input``, ``target`` or ``weight`` is not a tensor, class indices
            are not ``int64`` or ``uint8``, or an option has the wrong type.
        ValueError: ``input`` is not float16, bfloat16, float32 or float64 logits, a
            shape, dtype or device does not match (``weight`` of another dtype than
            ``input`` with class indices, or complex), an option is out of range, or
            a class index is outside ``[0, C)`` (and not ``ignore_index``).

    Example:
        >>> import torch, torch.nn.functional as F
        >>> x, y = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0])
        >>> w = torch.tensor([0.5, 1.0, 2.0])
        >>> by_hand = cross_entropy_by_hand(x, y, weight=w, label_smoothing=0.1)
        >>> torch.allclose(by_hand, F.cross_entropy(x, y, weight=w, label_smoothing=0.1))
        True
        >>> masked = keep_top_k(x, 2)  # [[2., 0., -inf]]
        >>> cross_entropy_by_hand(masked, y), F.cross_entropy(masked, y)
        (tensor(0.1269), tensor(0.1269))
    """
    probabilities = _check_args(input, target, weight, ignore_index, label_smoothing, reduction)
    if not probabilities:
        target = target.long()  # uint8 indices would index as a mask
    unbatched = input.dim() == 1
    if unbatched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    classes = input.shape[1]
    log_p = torch.log_softmax(input, dim=1).movedim(1, -1)  # (N, d..., C)
    # Class indices: weight has input's dtype (checked). Probabilities: torch promotes
    # log_p, target and weight together, so no cast here (a float64 target or weight
    # with float32 logits gives a float64 loss, as in torch).
    w = torch.ones(classes, dtype=log_p.dtype, device=log_p.device) if weight is None else weight
    e = label_smoothing

    def reduce(per: torch.Tensor, divisor: torch.Tensor | int) -> torch.Tensor:
        if reduction == "none":
            return per.squeeze(0) if unbatched else per
        return per.sum() if reduction == "sum" else per.sum() / divisor

    if probabilities:
        q = target.movedim(1, -1)  # smoothed in its own dtype, as torch does
        if e > 0:
            q = q * (1 - e) + e / classes
        per = -(log_p * q * w).sum(-1)  # (N, d...)
        return reduce(per, per.numel())
    # Class indices. Ignored positions are set to 0 with torch.where, not multiplied by
    # 0: a masked logit (-inf) gives log_p = -inf, and 0 * -inf is NaN.
    keep = target != ignore_index
    safe = torch.where(keep, target, 0)
    w_y = torch.where(keep, w[safe], 0)  # weight of each position's target
    log_p_y = log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    nll = torch.where(keep, -w_y * log_p_y, 0)
    loss = reduce(nll, w_y.sum())
    if e == 0:
        return loss  # as torch: no smoothing term, so a masked class costs nothing
    smooth = torch.where(keep, -(log_p * w).sum(-1), 0)
    return (1 - e) * loss + e / classes * reduce(smooth, w_y.sum())


@dataclass(frozen=True)
class FrequencyCheck:
    """What :func:`check_frequencies` found: per class, expected vs observed."""

    expected: torch.Tensor
    """The probabilities, i.e. the weights divided by their sum."""
    observed: torch.Tensor
    """The fraction of draws that gave each class."""
    tolerance: torch.Tensor
    """How far each frequency may stray, the ``t`` at which Bernstein's bound on
    ``P(|X/n - p| >= t)`` equals ``2 * Phi(-sigmas)`` (see :func:`check_frequencies`)."""

    @property
    def ok(self) -> bool:
        """Every class within its tolerance."""
        return bool(((self.observed - self.expected).abs() <= self.tolerance).all())


def check_frequencies(
    weights: torch.Tensor, *, num_samples: int, seed: int, sigmas: float = 6.0
) -> FrequencyCheck:
    """Draw ``num_samples`` classes with ``torch.multinomial`` and compare frequencies.

    The count ``X`` of class ``c`` in ``n`` independent draws is binomial with mean
    ``n p``. Bernstein's inequality bounds its frequency's deviation for every ``p``,
    however rarely the class is expected (where the normal approximation behind a
    "``k`` standard deviations" rule fails: a class of ``p = 1e-6`` drawn once in 4000
    draws is 16 standard deviations away):

        ``P(|X/n - p| >= t) <= 2 exp(-n t**2 / (2 p (1 - p) + 2 t / 3))``

    The tolerance of each class is the ``t`` at which this bound equals
    ``2 * Phi(-sigmas)``, the probability that a normal variable strays beyond
    ``sigmas`` standard deviations (about 2e-9 for 6): with ``L = -log Phi(-sigmas)``
    (20.7 for 6),

        ``t = L / (3 n) + sqrt((L / (3 n))**2 + 2 L p (1 - p) / n)``

    So a correct sampler fails the check of a class with probability below
    ``2 * Phi(-sigmas)``, for every ``p`` and ``n``. The price of that guarantee: where
    ``n p (1 - p)`` is large ``t`` is about ``sqrt(2 L)`` standard deviations (6.4 for
    ``sigmas=6``, not 6); for a rare class it is about ``2 L / (3 n)``, so a check
    needs many expected draws per class to be tight. The seed fixes the draw anyway.

    Args:
        weights: non-negative weights of shape ``(C,)`` (need not sum to 1).
        num_samples: how many draws, with replacement; at least 1, at most
            :data:`MAX_SAMPLES`.
        seed: seeds the generator of the draw (an int in :data:`SEED_RANGE`).
        sigmas: sets the failure probability per class, ``2 * Phi(-sigmas)``; positive
            and finite.

    Returns:
        A :class:`FrequencyCheck`.

    Raises:
        TypeError: ``weights`` is not a floating-point tensor, ``num_samples``/``seed``
            not an int, or ``sigmas`` not a number.
        ValueError: ``weights`` is not 1-D, holds a negative, infinite or NaN weight or
            no positive one, is a meta tensor, or an option is out of range.

    Example:
        >>> import torch
        >>> check = check_frequencies(torch.tensor([1.0, 3.0]), num_samples=10_000, seed=0)
        >>> check.expected.tolist(), check.ok
        ([0.25, 0.75], True)
    """
    check_tensor("weights", weights)
    if weights.dim() != 1:
        msg = f"weights must be 1-D (one weight per class), got shape {tuple(weights.shape)}"
        raise ValueError(msg)
    check_values("weights", weights)
    check_int("num_samples", num_samples, minimum=1, maximum=MAX_SAMPLES)
    check_int("seed", seed, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1])
    check_number("sigmas", sigmas)
    if not sigmas > 0:
        msg = f"sigmas must be positive, got {sigmas}"
        raise ValueError(msg)
    if weights.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        msg = f"weights must be a real floating-point tensor (torch.multinomial's input), got {weights.dtype}"
        raise TypeError(msg)
    check_count(
        "weights", weights.numel(), limit=MAX_CLASSES, what="classes",
        work="torch.multinomial draws from at most 2**24 categories",
    )  # fmt: skip
    weights = weights.detach().cpu()
    if weights.numel() == 0 or not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        msg = f"weights must be finite and >= 0, at least one of them > 0, got {_values(weights)}"
        raise ValueError(msg)
    if not bool((weights > 0).any()):
        msg = f"weights must have at least one weight > 0, got {_values(weights)}"
        raise ValueError(msg)
    gen = torch.Generator().manual_seed(seed)
    draws = torch.multinomial(weights, num_samples, replacement=True, generator=gen)
    p = weights.double() / weights.double().sum()
    observed = torch.bincount(draws, minlength=weights.numel()).double() / num_samples
    tolerance = bernstein_tolerance(p, num_samples, sigmas)
    return FrequencyCheck(expected=p, observed=observed, tolerance=tolerance)


def bernstein_tolerance(p: torch.Tensor, n: int, sigmas: float) -> torch.Tensor:
    """The ``t`` at which Bernstein's bound on ``P(|X/n - p| >= t)`` equals
    ``2 * Phi(-sigmas)``, for ``X`` binomial of ``n`` draws and probabilities ``p``.

    Solves ``2 exp(-n t**2 / (2 p (1 - p) + 2 t / 3)) = 2 Phi(-sigmas)`` for ``t >= 0``
    (see :func:`check_frequencies`). ``log Phi(-sigmas)`` comes from
    ``torch.special.log_ndtr``, exact also where ``Phi(-sigmas)`` underflows.

    Args:
        p: the probabilities, a float64 tensor.
        n: the number of draws, an int from 1 to ``2**63 - 1``.
        sigmas: the failure probability is ``2 * Phi(-sigmas)``; positive and finite.

    Returns:
        ``t`` per probability, float64.

    Raises:
        TypeError: ``p`` is not a tensor, ``n`` not an int, ``sigmas`` not a number.
        ValueError: ``p`` is not float64 in ``[0, 1]`` or has more than
            :data:`MAX_CLASSES` elements, ``n`` is out of range, or ``sigmas`` <= 0.

    Example:
        >>> t = bernstein_tolerance(torch.tensor([0.5], dtype=torch.float64), 10_000, 6.0)
        >>> round(t.item() / 0.005, 2)  # in standard deviations sqrt(p (1 - p) / n)
        6.58
    """
    check_tensor("p", p)
    check_values("p", p)
    check_count(
        "p", p.numel(), limit=MAX_CLASSES, what="probabilities",
        work="check_frequencies draws from at most 2**24 categories",
    )  # fmt: skip
    if p.dtype != torch.float64 or not bool(((p >= 0) & (p <= 1)).all()):
        msg = f"p must be float64 probabilities in [0, 1], got {p.dtype} {_values(p)}"
        raise ValueError(msg)
    draws = float(check_int("n", n, minimum=1, maximum=INT64_MAX))
    check_number("sigmas", sigmas)
    if not sigmas > 0:
        msg = f"sigmas must be positive, got {sigmas}"
        raise ValueError(msg)
    log_term = -torch.special.log_ndtr(torch.tensor(-float(sigmas), dtype=torch.float64))
    linear = log_term / (3 * draws)
    tolerance: torch.Tensor = linear + torch.sqrt(linear**2 + 2 * log_term * p * (1 - p) / draws)
    return tolerance


def plot_distributions(
    rows: dict[str, torch.Tensor], *, ax: Axes | None = None, title: str = ""
) -> Axes:
    """Grouped bars: one group per class, one bar per named distribution.

    Args:
        rows: label -> 1-D probabilities, all of the same length (at most 12
            distributions of at most 64 classes).
        ax: where to draw; a new figure when None.
        title: the axes' title.

    Returns:
        The axes drawn on.

    Raises:
        TypeError: ``rows`` is not a mapping of str to tensors, ``ax`` not matplotlib
            axes, or ``title`` not a str.
        ValueError: ``rows`` is empty or too large, a distribution is not finite and
            real, or the distributions differ in length.

    Example:
        >>> import torch
        >>> ax = plot_distributions({"a": torch.tensor([0.5, 0.5])})
        >>> len(ax.patches)
        2
    """
    import matplotlib.pyplot as plt

    rows = check_mapping("rows", rows, str, torch.Tensor, "a mapping of str labels to tensors")
    check_axes("ax", ax)
    check_type("title", title, str, "a str")
    if not rows:
        msg = "rows must hold at least one distribution, got an empty dict"
        raise ValueError(msg)
    check_count(
        "rows", len(rows), limit=MAX_PLOTTED_ROWS, what="distributions",
        work="plot_distributions draws a bar per distribution and class",
    )  # fmt: skip
    for label, p in rows.items():
        check_tensor(f"rows[{label!r}]", p)
        check_values(f"rows[{label!r}]", p)
        if p.is_complex() or p.dtype == torch.bool or not bool(torch.isfinite(p.detach()).all()):
            msg = f"rows[{label!r}] must hold finite real probabilities, got {p.dtype} {_values(p)}"
            raise ValueError(msg)
    sizes = {label: tuple(p.shape) for label, p in rows.items()}
    if len({*sizes.values()}) != 1 or len(next(iter(sizes.values()))) != 1:
        msg = f"rows must all be 1-D of one length, got shapes {sizes}"
        raise ValueError(msg)
    check_count(
        "each distribution", next(iter(sizes.values()))[0], limit=MAX_PLOTTED_CLASSES,
        what="classes", work="plot_distributions draws a bar per class",
    )  # fmt: skip
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.5), layout="constrained")
    width = 0.8 / len(rows)
    for i, (label, p) in enumerate(rows.items()):
        xs = [c + (i - (len(rows) - 1) / 2) * width for c in range(p.numel())]
        ax.bar(xs, p.detach().cpu().double().tolist(), width=width, label=label)
    ax.set_xticks(range(next(iter(rows.values())).numel()))
    ax.set_xlabel("class")
    ax.set_ylabel("probability")
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    ax.set_ylim(0, max(1e-9, math.ceil(max(float(p.max()) for p in rows.values()) * 10) / 10))
    return ax


def _check_logits(logits: torch.Tensor) -> None:
    """Logits to filter: floating point, with values, bounded, no NaN or +inf (-inf is a
    candidate filtered out before, so keep_top_k and keep_top_p can be chained), and a
    finite logit in every row."""
    check_tensor("logits", logits)
    if logits.dim() == 0 or logits.shape[-1] == 0 or not logits.is_floating_point():
        msg = (
            "logits must be a floating-point tensor with candidates in its last dimension, "
            f"got {logits.dtype} of shape {tuple(logits.shape)}"
        )
        raise ValueError(msg)
    _check_float_dtype("logits", logits)
    check_values("logits", logits)
    check_count(
        "logits", logits.numel(), limit=MAX_LOGITS, what="elements",
        work="filtering makes several tensors of that size",
    )  # fmt: skip
    bad = logits.detach().isnan() | (logits.detach() == float("inf"))
    if bool(bad.any()):
        where = tuple(bad.nonzero()[0].tolist())
        msg = (
            "logits must not hold NaN or +inf (their softmax is NaN: no candidate can be "
            f"ranked), got {logits[where].item()} at index {where}"
        )
        raise ValueError(msg)
    has_candidate = logits.detach().isfinite().any(dim=-1)
    if not bool(has_candidate.all()):
        where = tuple((~has_candidate).nonzero()[0].tolist())
        row = f"logits[{', '.join(map(str, where))}]" if where else "its one row (1-D logits)"
        msg = (
            "logits must hold a finite logit in every row (a row of only -inf has no "
            f"candidate left to draw: its softmax is NaN), got only -inf in {row}"
        )
        raise ValueError(msg)


def _nucleus_dtype(device: torch.device) -> torch.dtype:
    """The dtype :func:`keep_top_p` computes probabilities in: float64, but float32 on
    MPS, which has no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


def keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k filtering: keep the ``k`` largest logits of the last dimension, others -inf.

    ``torch.topk`` picks exactly ``k`` logits in every row, choosing among the ones that
    tie at the border; every other logit becomes ``-inf``, so ``softmax`` of the result
    puts probability 0 on it and sampling never draws it. A ``-inf`` among the ``k``
    largest (a candidate filtered out before, e.g. by :func:`keep_top_p`) stays
    ``-inf``: a row with fewer than ``k`` finite logits keeps all of them, so fewer
    than ``k`` candidates can then be drawn. Each row must hold a finite logit.

    Args:
        logits: floating-point logits, candidates in the last dimension.
        k: how many to keep, from 1 to ``logits.shape[-1]``.

    Returns:
        A new tensor like ``logits`` with ``-inf`` outside the ``k`` largest logits of
        each row: ``min(k, f)`` finite logits in a row that has ``f`` of them.

    Raises:
        TypeError: ``logits`` is not a tensor, or ``k`` not an int.
        ValueError: ``logits`` is not float16, bfloat16, float32 or float64 (float8
            types are refused) with a non-empty last dimension, is a meta tensor,
            has more than :data:`MAX_LOGITS` elements, holds NaN or +inf (-inf is
            fine: a candidate filtered out before) or a row of only -inf (the error
            gives the first such row's index), or ``k`` is outside
            ``[1, logits.shape[-1]]``.

    Example:
        >>> import torch
        >>> keep_top_k(torch.tensor([1.0, 3.0, 2.0, 0.0]), 2)
        tensor([-inf, 3., 2., -inf])
        >>> keep_top_k(torch.tensor([2.0, float("-inf"), 0.5, 1.0]), 4)  # 3 finite
        tensor([2.0000,   -inf, 0.5000, 1.0000])
    """
    _check_logits(logits)
    check_int("k", k, minimum=1)
    if k > logits.shape[-1]:
        msg = f"k must be at most the number of candidates ({logits.shape[-1]}), got {k}"
        raise ValueError(msg)
    kept = torch.zeros_like(logits, dtype=torch.bool)
    kept.scatter_(-1, logits.topk(k, dim=-1).indices, True)
    return logits.masked_fill(~kept, float("-inf"))


def keep_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Top-p (nucleus) filtering: keep the smallest set of most likely candidates whose
    probabilities sum to at least ``p``; the others become -inf.

    Candidates are taken in order of decreasing probability (``softmax`` over the last
    dimension) until their sum reaches ``p``: a candidate is kept when the probability
    of the candidates before it is still below ``p``. The most likely candidate is
    always kept, and ``p=1`` keeps every finite candidate (a ``-inf`` stays ``-inf``).

    The probabilities and their running sum are computed in float64 whatever the dtype
    of ``logits`` (in float32 on MPS, which has no float64), so a float16, bfloat16 or
    float32 row keeps exactly the set its values give in float64: a set whose
    probability mass reaches ``p`` up to float64 rounding. In the logits' own dtype the
    sums round too early: 1000 equal bfloat16 logits and ``p=0.9`` kept 897, not 900,
    and even float32 leaves out the candidate that reaches ``p`` when ``p`` lies just
    above a running sum, within float32 rounding (about ``1e-7``): a set short of
    ``p`` by that candidate's probability.

    Args:
        logits: floating-point logits, candidates in the last dimension.
        p: the probability mass to cover, in ``(0, 1]``.

    Returns:
        A new tensor like ``logits`` (same dtype) with ``-inf`` outside the kept
        candidates.

    Raises:
        TypeError: ``logits`` is not a tensor, or ``p`` not a number.
        ValueError: ``logits`` is not float16, bfloat16, float32 or float64 (float8
            types are refused) with a non-empty last dimension, is a meta tensor,
            has more than :data:`MAX_LOGITS` elements, holds NaN or +inf (-inf is
            fine: a candidate filtered out before) or a row of only -inf (the error
            gives the first such row's index), or ``p`` is outside ``(0, 1]``.

    Example:
        >>> import torch
        >>> probs = torch.tensor([0.5, 0.1, 0.3, 0.1])
        >>> keep_top_p(probs.log(), 0.75).exp()  # 0.5 is short of 0.75, 0.5 + 0.3 is not
        tensor([0.5000, 0.0000, 0.3000, 0.0000])
    """
    _check_logits(logits)
    if isinstance(p, bool) or not isinstance(p, int | float):
        msg = f"p must be a number in (0, 1], got {type(p).__name__}: {p!r}"
        raise TypeError(msg)
    if not 0 < p <= 1:  # also refuses NaN
        msg = f"p must be in (0, 1], got {p}"
        raise ValueError(msg)
    if p == 1:
        return logits.clone()
    probs = torch.softmax(logits, dim=-1, dtype=_nucleus_dtype(logits.device))
    probs, order = probs.sort(dim=-1, descending=True, stable=True)
    total = probs.cumsum(-1)
    before = torch.cat([torch.zeros_like(total[..., :1]), total[..., :-1]], dim=-1)
    kept = torch.zeros_like(logits, dtype=torch.bool)
    kept.scatter_(-1, order, before < p)
    return logits.masked_fill(~kept, float("-inf"))

"""Attention written out: the formula ``scaled_dot_product_attention`` computes, and a KV cache."""

from __future__ import annotations

import math
import sys
from typing import Any

import torch

from pytorch_memo._checks import (
    check_count,
    check_device,
    check_int,
    check_number,
    check_tensor,
    check_type,
)

__all__ = ["KVCache", "attention"]

SCORE_LIMIT = 2**27
"""The most elements :func:`attention` may count before it computes: per batch and head,
the L x S scores, the S x (E + Ev) keys and values (with ``enable_gqa``, repeated for every
query head) and the L x Ev result. Its peak holds the scores twice (the scores, written
in place while scaled and masked, and their softmax), so it is about twice the scores'
share of that count."""


def _floating(name: str, value: Any) -> torch.Tensor:
    tensor = check_tensor(name, value)
    if not tensor.is_floating_point():
        msg = f"{name} must hold floating-point values, got dtype {tensor.dtype}"
        raise TypeError(msg)
    if tensor.dim() < 2:
        msg = f"{name} must have at least 2 dimensions (..., length, features), got shape {tuple(tensor.shape)}"
        raise ValueError(msg)
    return tensor


def _same(name: str, tensor: torch.Tensor, query: torch.Tensor) -> None:
    if tensor.dtype != query.dtype or tensor.device != query.device:
        msg = (
            f"{name} must have query's dtype and device ({query.dtype} on {query.device}), "
            f"got {tensor.dtype} on {tensor.device}"
        )
        raise ValueError(msg)


def _group_size(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> int:
    """How many query heads share each key head with ``enable_gqa=True`` (nothing allocated)."""
    if query.dim() < 3:
        msg = f"query must have a heads dimension (..., heads, length, features) with enable_gqa=True, got shape {tuple(query.shape)}"
        raise ValueError(msg)
    heads = query.size(-3)
    if key.dim() < 3 or value.dim() < 3 or value.size(-3) != key.size(-3):
        msg = (
            "key and value must have the same number of heads (dimension -3) with "
            f"enable_gqa=True, got shapes {tuple(key.shape)} and {tuple(value.shape)}"
        )
        raise ValueError(msg)
    groups = key.size(-3)
    if groups == 0 or heads % groups:
        msg = (
            f"key's heads ({groups}) must divide query's heads ({heads}) with "
            "enable_gqa=True: each group of query heads shares one key head"
        )
        raise ValueError(msg)
    return heads // groups


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Attention as the formula: ``softmax(query @ key.mT * scale + bias) @ value``.

    The reference that ``torch.nn.functional.scaled_dot_product_attention`` documents
    (without dropout), materializing the L x S scores. A boolean ``attn_mask`` keeps the
    scores where it is True (True means "take part"); a floating one is added to them.
    ``is_causal`` lets query ``i`` see keys ``0..i`` (a lower triangle from the top-left
    corner, also when there are more keys than queries). A row whose every score is
    masked is NaN here (softmax of nothing but ``-inf``); SDPA on CPU returns zeros
    there instead, from its math backend too.

    Args:
        query: ``(..., L, E)``, floating point.
        key: ``(..., S, E)``, query's dtype and device.
        value: ``(..., S, Ev)``, query's dtype and device.
        attn_mask: bool, or query's dtype; broadcastable to ``(..., L, S)``.
        is_causal: mask the scores above the diagonal; not with ``attn_mask``.
        scale: multiplies the scores; ``1 / sqrt(E)`` when None.
        enable_gqa: let key and value have fewer heads (dimension -3) than query,
            a divisor of its count: each key head serves that many query heads in turn.

    Returns:
        ``(..., L, Ev)``, query's dtype.

    Raises:
        TypeError: an argument has the wrong type, a tensor is not floating point
            (the mask: neither bool nor query's dtype), or ``attn_mask`` is a
            ``CausalBias`` (``causal_lower_right``: pass the dense mask).
        ValueError: the shapes, dtypes or devices do not fit together, both
            ``attn_mask`` and ``is_causal`` are given, query has no features, or the
            scores, the (repeated) keys and values and the result would
            exceed ``SCORE_LIMIT`` elements; nothing is allocated before these checks.

    Example:
        >>> import torch.nn.functional as F
        >>> q, k, v = torch.randn(3, 2, 4, 8).unbind(0)
        >>> torch.allclose(attention(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-6)
        True
    """
    query = _floating("query", query)
    key, value = _floating("key", key), _floating("value", value)
    _same("key", key, query)
    _same("value", value, query)
    check_type("is_causal", is_causal, bool, "a bool")
    check_type("enable_gqa", enable_gqa, bool, "a bool")
    if is_causal and attn_mask is not None:
        msg = "attn_mask must be None with is_causal=True (SDPA refuses both in torch 2.14 and 2.15, its math backend in 2.8 to 2.15)"
        raise ValueError(msg)
    if query.size(-1) == 0:
        msg = (
            f"query must have at least one feature (last dimension), got shape {tuple(query.shape)}"
        )
        raise ValueError(msg)
    factor = 1 / math.sqrt(query.size(-1)) if scale is None else check_number("scale", scale)
    if query.size(-1) != key.size(-1) or key.size(-2) != value.size(-2):
        msg = (
            "query and key must share the features (last dimension) and key and value "
            f"the length (dimension -2), got shapes {tuple(query.shape)}, "
            f"{tuple(key.shape)} and {tuple(value.shape)}"
        )
        raise ValueError(msg)
    repeats = _group_size(query, key, value) if enable_gqa else 1
    key_batch, value_batch = list(key.shape[:-2]), list(value.shape[:-2])
    if enable_gqa:  # the shapes after repeating each key and value head
        key_batch[-1] *= repeats
        value_batch[-1] *= repeats
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], tuple(key_batch), tuple(value_batch))  # type: ignore[no-untyped-call]
    except RuntimeError:
        msg = (
            "query, key and value must have broadcastable batch dimensions, got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}"
        )
        raise ValueError(msg) from None
    length, source = query.size(-2), key.size(-2)
    if is_causal or attn_mask is None:
        mask = None
    else:  # checked against the scores' shape, before they exist
        scored = torch.broadcast_shapes(query.shape[:-2], tuple(key_batch))  # type: ignore[no-untyped-call]
        mask = _mask(attn_mask, query, (*scored, length, source))
    check_count(
        "the scores, keys, values and result (L x S + S x (E + Ev) + L x Ev, per batch and head)",
        math.prod(batch)
        * (source * (length + key.size(-1) + value.size(-1)) + length * value.size(-1)),
        limit=SCORE_LIMIT,
        what="elements",
        work="the written-out form holds every score, and enable_gqa repeats the keys and values",
    )
    if enable_gqa:
        key = key.repeat_interleave(repeats, -3)
        value = value.repeat_interleave(repeats, -3)
    scores = (query @ key.transpose(-2, -1)).mul_(factor)  # in place: one L x S tensor
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
        scores.masked_fill_(~keep, -math.inf)
    elif mask is not None and mask.dtype == torch.bool:
        scores.masked_fill_(~mask, -math.inf)
    elif mask is not None:
        scores.add_(mask)
    return scores.softmax(dim=-1) @ value


def _mask(attn_mask: Any, query: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``attn_mask``, checked: bool or query's dtype, on query's device, broadcastable to
    the scores' ``shape``."""
    bias = sys.modules.get("torch.nn.attention.bias")  # a CausalBias needs it imported
    if bias is not None and isinstance(attn_mask, bias.CausalBias):
        msg = (
            "attn_mask must be a dense bool or floating mask, got a CausalBias "
            "(causal_lower_right or causal_upper_left), which only SDPA reads: for "
            "causal_lower_right(L, S) pass torch.ones(L, S, dtype=torch.bool).tril(S - L)"
        )
        raise TypeError(msg)
    mask = check_tensor("attn_mask", attn_mask)
    if mask.dtype not in (torch.bool, query.dtype):
        msg = f"attn_mask must be bool or query's dtype {query.dtype}, got {mask.dtype}"
        raise TypeError(msg)
    if mask.device != query.device:
        msg = f"attn_mask must be on query's device {query.device}, got {mask.device}"
        raise ValueError(msg)
    try:
        fits = torch.broadcast_shapes(mask.shape, shape) == shape  # type: ignore[no-untyped-call]
    except RuntimeError:
        fits = False
    if not fits:
        msg = f"attn_mask must broadcast to the scores' shape {shape}, got {tuple(mask.shape)}"
        raise ValueError(msg)
    return mask


class KVCache:
    """Keys and values of the tokens seen so far, for decoding one step at a time.

    Preallocates ``(batch, heads, max_len, head_dim)`` for keys and for values;
    :meth:`append` writes the new positions in place and returns views of everything
    written so far, so a step attends to all earlier tokens without recomputing their
    keys and values.

    Args:
        batch: sequences decoded side by side (>= 1).
        heads: key/value heads (>= 1).
        max_len: the most positions it holds (>= 1).
        head_dim: features per head (>= 1).
        dtype: a floating-point dtype.
        device: where the buffers live.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: a size is below 1, or the buffers would exceed 2**28 elements.
        RuntimeError: ``device`` cannot be used here (no CUDA, no such index).

    Example:
        >>> cache = KVCache(batch=1, heads=2, max_len=8, head_dim=4)
        >>> keys, values = cache.append(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
        >>> keys.shape, len(cache)
        (torch.Size([1, 2, 3, 4]), 3)
    """

    def __init__(
        self,
        *,
        batch: int,
        heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        sizes = [
            check_int(name, value, minimum=1)
            for name, value in (
                ("batch", batch),
                ("heads", heads),
                ("max_len", max_len),
                ("head_dim", head_dim),
            )
        ]
        check_type("dtype", dtype, torch.dtype, "a torch.dtype")
        if not dtype.is_floating_point:
            msg = f"dtype must be a floating-point dtype, got {dtype}"
            raise TypeError(msg)
        where = check_device("device", device)
        check_count(
            "the cache (2 x batch x heads x max_len x head_dim)",
            2 * math.prod(sizes),
            limit=2**28,
            what="elements",
            work="keys and values are preallocated",
        )
        try:
            self.keys = torch.zeros(sizes, dtype=dtype, device=where)
            self.values = torch.zeros(sizes, dtype=dtype, device=where)
        except RuntimeError as error:  # no such device here (no CUDA, a missing index)
            first = (
                str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            )
            msg = f"device {where} cannot hold the cache: {first}"
            raise RuntimeError(msg) from error
        self._length = 0

    def __len__(self) -> int:
        """The positions written so far."""
        return self._length

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``key`` and ``value`` (``(batch, heads, new, head_dim)``) after the earlier ones.

        Args:
            key: the new positions' keys, the cache's shape but for dimension 2.
            value: the new positions' values, ``key``'s shape.

        Returns:
            ``(keys, values)``: views of all positions written so far, ``(batch,
            heads, len(self), head_dim)``; the next :meth:`append` writes after them.

        Raises:
            TypeError: ``key`` or ``value`` is not a tensor.
            ValueError: a shape, dtype or device differs from the cache's, or the
                cache would hold more than ``max_len`` positions (nothing is written).
        """
        batch, heads, max_len, head_dim = self.keys.shape
        for name, tensor in (("key", key), ("value", value)):
            check_tensor(name, tensor)
            if (
                tensor.dim() != 4
                or tensor.shape[:2] != (batch, heads)
                or tensor.size(3) != head_dim
            ):
                msg = (
                    f"{name} must have shape ({batch}, {heads}, new, {head_dim}), "
                    f"got {tuple(tensor.shape)}"
                )
                raise ValueError(msg)
            if tensor.dtype != self.keys.dtype or tensor.device != self.keys.device:
                msg = (
                    f"{name} must be {self.keys.dtype} on {self.keys.device}, "
                    f"got {tensor.dtype} on {tensor.device}"
                )
                raise ValueError(msg)
        if key.size(2) != value.size(2):
            msg = f"key and value must add as many positions, got {key.size(2)} and {value.size(2)}"
            raise ValueError(msg)
        end = self._length + key.size(2)
        if end > max_len:
            msg = (
                f"key adds {key.size(2)} position(s) to the {self._length} held: "
                f"more than max_len={max_len}"
            )
            raise ValueError(msg)
        self.keys[:, :, self._length : end] = key
        self.values[:, :, self._length : end] = value
        self._length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

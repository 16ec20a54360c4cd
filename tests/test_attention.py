"""pytorch_memo.attention, checked against plain torch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_memo.attention import KVCache, attention


def _qkv(
    seed: int, batch: int, heads: int, groups: int, length: int, source: int, dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, dim, generator=g, dtype=torch.float64)
    k = torch.randn(batch, groups, source, dim, generator=g, dtype=torch.float64)
    v = torch.randn(batch, groups, source, dim + 1, generator=g, dtype=torch.float64)
    return q, k, v, g


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 2),
    groups=st.integers(1, 2),
    per_group=st.integers(1, 3),
    length=st.integers(1, 5),
    source=st.integers(1, 6),
    dim=st.integers(1, 8),
    mask_kind=st.sampled_from(["none", "bool", "float", "causal"]),
    scale=st.one_of(st.none(), st.floats(0.1, 2.0)),
)
def test_attention_is_sdpa(
    seed: int,
    batch: int,
    groups: int,
    per_group: int,
    length: int,
    source: int,
    dim: int,
    mask_kind: str,
    scale: float | None,
) -> None:
    heads = groups * per_group
    q, k, v, g = _qkv(seed, batch, heads, groups, length, source, dim)
    options: dict[str, Any] = {"scale": scale}
    if mask_kind == "bool":
        mask = torch.rand(length, source, generator=g) > 0.5
        mask[:, 0] = True  # no row fully masked: the fused kernels return zeros there
        options["attn_mask"] = mask
    elif mask_kind == "float":
        options["attn_mask"] = torch.randn(
            batch, 1, length, source, generator=g, dtype=torch.float64
        )
    elif mask_kind == "causal":
        options["is_causal"] = True
    expected = F.scaled_dot_product_attention(
        q, k.repeat_interleave(per_group, 1), v.repeat_interleave(per_group, 1), **options
    )
    written = attention(q, k, v, enable_gqa=True, **options)
    torch.testing.assert_close(written, expected)
    if per_group == 1:
        torch.testing.assert_close(attention(q, k, v, **options), expected)


def test_a_boolean_mask_keeps_where_true_and_equals_its_additive_form() -> None:
    q, k, v, _ = _qkv(0, 1, 2, 2, 3, 4, 5)
    keep = torch.tensor([[True, False, True, False]] * 3)
    bias = torch.zeros(3, 4, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    torch.testing.assert_close(
        attention(q, k, v, attn_mask=keep), attention(q, k, v, attn_mask=bias)
    )
    torch.testing.assert_close(
        attention(q, k, v, attn_mask=keep), attention(q, k[:, :, ::2], v[:, :, ::2])
    )


def test_a_fully_masked_row_is_nan_in_the_formula() -> None:
    q, k, v, _ = _qkv(1, 1, 1, 1, 2, 3, 4)
    keep = torch.tensor([[True, True, True], [False, False, False]])
    out = attention(q, k, v, attn_mask=keep)
    assert out[..., 1, :].isnan().all()
    assert not out[..., 0, :].isnan().any()


def test_decoding_with_the_cache_is_causal_attention_over_the_prefix() -> None:
    q, k, v, _ = _qkv(2, 2, 4, 4, 6, 6, 8)
    v = v[..., :8]
    cache = KVCache(batch=2, heads=4, max_len=6, head_dim=8, dtype=torch.float64)
    keys, values = cache.append(k[:, :, :2], v[:, :, :2])  # a prompt of two tokens
    steps = [attention(q[:, :, :2], keys, values, is_causal=True)]
    for t in range(2, 6):
        keys, values = cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
        assert len(cache) == t + 1
        assert keys.shape == (2, 4, t + 1, 8)
        assert keys.data_ptr() == cache.keys.data_ptr()  # a view, not a copy
        steps.append(F.scaled_dot_product_attention(q[:, :, t : t + 1], keys, values))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(torch.cat(steps, dim=2), full)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda q: attention(q, q, q.int()), TypeError, "value must hold floating-point"),
        (lambda q: attention(q, q, q.float()), ValueError, "value must have query's dtype"),
        (lambda q: attention(q[0, 0, 0], q, q), ValueError, "query must have at least 2"),
        (lambda q: attention(q, q[..., :1], q), ValueError, "share the features"),
        (
            lambda q: attention(q, q, q, is_causal=1),  # type: ignore[arg-type]
            TypeError,
            "is_causal must be a bool",
        ),
        (
            lambda q: attention(
                q, q, q, is_causal=True, attn_mask=torch.ones(3, 3, dtype=torch.bool)
            ),
            ValueError,
            "attn_mask must be None with is_causal=True",
        ),
        (
            lambda q: attention(q, q, q, attn_mask=torch.ones(3, 3)),
            TypeError,
            "attn_mask must be bool",
        ),
        (
            lambda q: attention(q, q, q, attn_mask=torch.ones(3, 4, dtype=torch.bool)),
            ValueError,
            r"attn_mask must broadcast to the scores' shape \(1, 2, 3, 3\), got \(3, 4\)",
        ),
        (
            lambda q: attention(q, q[:, :1].repeat(1, 3, 1, 1), q, enable_gqa=True),
            ValueError,
            "value must have",
        ),
        (
            lambda q: attention(
                q, q[:, :1].repeat(1, 3, 1, 1), q[:, :1].repeat(1, 3, 1, 1), enable_gqa=True
            ),
            ValueError,
            r"key's heads \(3\) must divide query's heads \(2\)",
        ),
        (
            lambda q: attention(q, q, q, scale=float("nan")),
            ValueError,
            "scale must be a finite number",
        ),
    ],
)
def test_bad_arguments_are_named(call, error: type[Exception], message: str) -> None:  # type: ignore[no-untyped-def]
    q = torch.zeros(1, 2, 3, 2, dtype=torch.float64)
    with pytest.raises(error, match=message):
        call(q)


def test_too_many_scores_are_refused_before_any_is_computed() -> None:
    q = torch.empty(1, 1, 2**14, 1, device="meta")
    with pytest.raises(
        ValueError,
        match=r"the scores, keys, values and result .* has 268484608 elements; at most 134217728",
    ):
        attention(q, q, q)  # 2**28 scores, 2 x 2**14 keys and values, 2**14 results


def test_keys_repeated_for_gqa_count_before_they_are_allocated() -> None:
    # Few scores (64 heads x 1 query x 2**15 keys), but enable_gqa would repeat the one
    # key head and value head 64 times: 2 x 64 x 2**15 x 4096 elements.
    q = torch.empty(1, 64, 1, 4096, device="meta")
    k = torch.empty(1, 1, 2**15, 4096, device="meta")
    with pytest.raises(ValueError, match=r"has 17182228480 elements; at most 134217728"):
        attention(q, k, k, enable_gqa=True)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch": 0}, ValueError, "batch must be >= 1, got 0"),
        ({"head_dim": 2.0}, TypeError, "head_dim must be an int"),
        ({"dtype": torch.int64}, TypeError, "dtype must be a floating-point dtype"),
        ({"max_len": 2**40}, ValueError, "the cache .* has"),
        ({"device": "cpu:1"}, ValueError, "device"),
    ],
)
def test_bad_cache_sizes_are_named(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    sizes: dict[str, object] = {"batch": 1, "heads": 2, "max_len": 4, "head_dim": 3, **options}
    with pytest.raises(error, match=message):
        KVCache(**sizes)  # type: ignore[arg-type]


def test_a_full_cache_refuses_more_and_writes_nothing() -> None:
    cache = KVCache(batch=1, heads=2, max_len=4, head_dim=3)
    cache.append(torch.ones(1, 2, 3, 3), torch.ones(1, 2, 3, 3))
    with pytest.raises(
        ValueError, match=r"key adds 2 position\(s\) to the 3 held: more than max_len=4"
    ):
        cache.append(torch.full((1, 2, 2, 3), 2.0), torch.full((1, 2, 2, 3), 2.0))
    assert len(cache) == 3
    assert cache.keys[:, :, 3].eq(0).all()
    with pytest.raises(
        ValueError, match=r"key must have shape \(1, 2, new, 3\), got \(1, 3, 1, 3\)"
    ):
        cache.append(torch.ones(1, 3, 1, 3), torch.ones(1, 3, 1, 3))
    with pytest.raises(
        ValueError, match=r"value must be torch\.float32 on cpu, got torch\.float64"
    ):
        cache.append(torch.ones(1, 2, 1, 3), torch.ones(1, 2, 1, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="key and value must add as many positions, got 1 and 0"):
        cache.append(torch.ones(1, 2, 1, 3), torch.ones(1, 2, 0, 3))


def test_a_wide_result_counts_before_it_is_allocated() -> None:
    # 2**20 queries against one key: few scores, but a 2**20 x 4096 result.
    q, k = torch.empty(1, 2**20, 1, device="meta"), torch.empty(1, 1, 1, device="meta")
    with pytest.raises(ValueError, match=r"has 4296019969 elements; at most 134217728"):
        attention(q, k, torch.empty(1, 1, 4096, device="meta"))


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
def test_gradients_are_sdpas(mask_kind: str) -> None:
    """The scores are scaled and masked in place; autograd still gives SDPA's gradients
    (the float mask's too)."""
    g = torch.Generator().manual_seed(11)
    q, k, v = torch.randn(3, 2, 2, 4, 3, generator=g, dtype=torch.float64).unbind(0)
    options: dict[str, Any] = {}
    if mask_kind == "bool":
        keep = torch.rand(4, 4, generator=g) > 0.4
        keep[:, 0] = True
        options["attn_mask"] = keep
    elif mask_kind == "float":
        options["attn_mask"] = torch.randn(4, 4, generator=g, dtype=torch.float64)
    elif mask_kind == "causal":
        options["is_causal"] = True
    grads = []
    for fn in (attention, F.scaled_dot_product_attention):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        mask = options.get("attn_mask")
        given = dict(options)
        if mask is not None and mask.is_floating_point():
            given["attn_mask"] = mask.clone().requires_grad_()
            inputs.append(given["attn_mask"])
        out = fn(*inputs[:3], **given)
        out.pow(2).sum().backward()
        grads.append([t.grad for t in inputs])
    for ours, theirs in zip(*grads, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_a_causal_bias_is_refused_by_name() -> None:
    """``causal_lower_right(L, S)`` is a tensor subclass whose own storage holds nothing
    meaningful: only SDPA reads it. Added to the scores it would give a wrong result."""
    from torch.nn.attention.bias import causal_lower_right

    q = torch.zeros(1, 2, 3, 2)
    with pytest.raises(TypeError, match=r"attn_mask must be a dense .* got a CausalBias"):
        attention(q, q, q, attn_mask=causal_lower_right(3, 3))
    dense = torch.ones(3, 5, dtype=torch.bool).tril(5 - 3)  # the message's recipe
    k = torch.randn(1, 2, 5, 2)
    torch.testing.assert_close(
        attention(q, k, k, attn_mask=dense),
        F.scaled_dot_product_attention(q, k, k, attn_mask=causal_lower_right(3, 5)),
    )


def test_a_query_without_features_is_refused_by_name() -> None:
    q = torch.zeros(1, 2, 3, 0)
    with pytest.raises(ValueError, match=r"query must have at least one feature .*\(1, 2, 3, 0\)"):
        attention(q, q, q)


@pytest.mark.parametrize(
    "mask",
    [torch.ones(512, 7, dtype=torch.bool), [[True]], torch.ones(512, 512, dtype=torch.int8)],
)
def test_a_bad_mask_is_refused_before_the_scores_exist(mask: Any) -> None:
    from pytorch_memo.profiling import peak_memory

    q = torch.zeros(1, 4, 512, 1)  # 4 x 512 x 512 float32 scores: 4 MiB

    def call() -> None:
        with pytest.raises((TypeError, ValueError), match="attn_mask"):
            attention(q, q, q, attn_mask=mask)

    assert peak_memory(call).peak < 2**20


def test_the_peak_holds_the_scores_twice() -> None:
    """SCORE_LIMIT's docstring: the scores (scaled and masked in place) and their softmax."""
    from pytorch_memo.profiling import peak_memory

    q = torch.zeros(1, 4, 512, 1)
    scores = 4 * 512 * 512 * 4
    for options in ({}, {"attn_mask": torch.ones(512, 512)}):
        peak = peak_memory(lambda o=options: attention(q, q, q, **o)).peak  # type: ignore[misc]
        assert 2 * scores <= peak < 2.1 * scores, (options, peak)


def test_the_docstring_names_the_error_a_causal_bias_gets() -> None:
    """The ``Raises:`` section lists a ``CausalBias`` mask under the error it gets."""
    from torch.nn.attention.bias import causal_lower_right

    q = torch.zeros(1, 2, 3, 2)
    with pytest.raises(TypeError) as caught:
        attention(q, q, q, attn_mask=causal_lower_right(3, 3))
    raises = (attention.__doc__ or "").split("Raises:")[1].split("Example:")[0]
    by_type: dict[str, str] = {}  # each error type and the lines that describe it
    current = ""
    for line in raises.splitlines():
        head = line.strip().split(":")[0]
        if head.endswith("Error") and " " not in head:
            current = head
        if current:
            by_type[current] = by_type.get(current, "") + line
    assert "CausalBias" in by_type[caught.type.__name__], by_type
    assert [name for name, text in by_type.items() if "CausalBias" in text] == [
        caught.type.__name__
    ]

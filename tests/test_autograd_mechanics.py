"""pytorch_memo.autograd_mechanics, checked against plain torch."""

from __future__ import annotations

import gc
import itertools
import re
import warnings
import weakref
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.checkpoint import checkpoint

from pytorch_memo.autograd_mechanics import SavedTensors, record_saved_tensors


def _reference_nbytes(run: object, ignore: tuple[torch.Tensor, ...] = ()) -> tuple[int, int]:
    """Count and distinct saved storage bytes with a plain pack hook that keeps the
    tensors alive (so no address can be reused while counting)."""
    kept: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()  # type: ignore[operator]
    skip = {t.untyped_storage().data_ptr() for t in ignore}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}
    return len(kept), sum(n for ptr, n in storages.items() if ptr not in skip)


def test_one_saved_output_is_its_storage() -> None:
    x = torch.ones(5, requires_grad=True)
    with record_saved_tensors() as saved:
        y = x.exp()  # exp saves its result
    assert saved.count == 1
    assert saved.nbytes == y.untyped_storage().nbytes() == 20
    assert saved.records[0].shape == (5,)
    assert saved.records[0].dtype == torch.float32


def test_a_storage_saved_twice_counts_once() -> None:
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with record_saved_tensors() as saved:
        x * x
    assert saved.count == 2
    assert saved.nbytes == 24
    assert [r.counted for r in saved.records] == [True, False]


def test_a_saved_view_keeps_its_whole_storage() -> None:
    base = torch.randn(100, requires_grad=True)
    with record_saved_tensors() as saved:
        base[:10].sin()  # sin saves its input: a view of 10 of 100 elements
    assert saved.records[0].shape == (10,)
    assert saved.nbytes == 400 == base.untyped_storage().nbytes()


def test_ignore_leaves_out_the_parameters() -> None:
    layer = nn.Linear(4, 3)
    x = torch.randn(2, 4, requires_grad=True)
    with record_saved_tensors() as everything:
        layer(x)
    with record_saved_tensors(ignore=layer.parameters()) as activations:
        layer(x)
    assert everything.count == activations.count == 2  # the input and the weight
    assert everything.nbytes == x.nbytes + layer.weight.nbytes
    assert activations.nbytes == x.nbytes


def test_unpacked_counts_what_backward_reads() -> None:
    x = torch.randn(3, requires_grad=True)
    with record_saved_tensors() as saved:
        loss = (x.sin() * x.exp()).sum()
        assert saved.unpacked == 0
        loss.backward()
    assert saved.count == 4
    assert saved.unpacked == 4
    torch.testing.assert_close(x.grad, x.cos() * x.exp() + x.sin() * x.exp())


def test_nothing_is_recorded_outside_the_block() -> None:
    x = torch.ones(2, requires_grad=True)
    with record_saved_tensors() as saved:
        pass
    x.exp()
    assert saved.count == 0
    assert saved.nbytes == 0


def test_a_storage_freed_and_allocated_again_counts_again() -> None:
    x = torch.ones(256, requires_grad=True)
    with record_saved_tensors() as saved:
        for _ in range(3):
            y = x.exp()  # saved, then freed by backward: its address may come back
            y.sum().backward()
            del y
    assert saved.count == 3
    assert saved.nbytes == 3 * 1024


def test_the_record_keeps_no_saved_tensor_alive() -> None:
    x = torch.ones(8, requires_grad=True)
    with record_saved_tensors() as saved:
        hidden = x * 2
        out = hidden.sin()  # saves hidden
    # The graph keeps hidden's memory (a detached alias of it): its storage, whose
    # Python object lives exactly as long as the memory does.
    seen = weakref.ref(hidden.untyped_storage())
    del hidden
    assert seen() is not None  # the graph keeps it for backward
    out.sum().backward()
    assert seen() is None  # freed by backward, although the record still exists
    assert saved.records[0].shape == (8,)


def test_a_saved_output_dies_with_its_graph_without_gc() -> None:
    # ReLU saves its output. Handed back to autograd as it is, the output would hold
    # its own grad_fn (a cycle only gc breaks): the graph would outlive its last name.
    x = torch.ones(8, requires_grad=True)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        with record_saved_tensors() as saved:
            out = torch.relu(x * 2)
        gone = weakref.ref(out)
        del out
        assert gone() is None
    finally:
        if gc_was:
            gc.enable()
    assert saved.count == 1


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 6),
    widths=st.lists(st.integers(1, 8), min_size=2, max_size=5),
    input_grad=st.booleans(),
    ignore_parameters=st.booleans(),
)
def test_nbytes_is_plain_torchs_count_for_mlps(
    batch: int, widths: list[int], input_grad: bool, ignore_parameters: bool
) -> None:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Linear(width_in, width_out), nn.Tanh()]
    model = nn.Sequential(*layers)
    x = torch.randn(batch, widths[0], requires_grad=input_grad)
    ignore = tuple(model.parameters()) if ignore_parameters else ()
    with record_saved_tensors(ignore=ignore) as saved:
        out = model(x)
    count, nbytes = _reference_nbytes(lambda: model(x), ignore)
    assert (saved.count, saved.nbytes) == (count, nbytes)
    assert out.requires_grad


def test_checkpointing_saves_only_the_region_inputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
    x = torch.randn(4, 8)
    with record_saved_tensors(ignore=model.parameters()) as plain:
        model(x)
    with record_saved_tensors(ignore=model.parameters()) as checkpointed:
        checkpoint(model, x, use_reentrant=False)
    # plain: x, the first layer's output (GELU's input) and GELU's output
    assert plain.nbytes == x.nbytes + 2 * 4 * 32 * 4
    assert checkpointed.nbytes == x.nbytes  # only the input is kept


def test_meta_and_sparse_tensors_have_no_bytes_to_count() -> None:
    x = torch.ones(3, device="meta", requires_grad=True)
    with record_saved_tensors() as meta:
        x.exp()
    assert meta.count == 1
    assert meta.records[0].nbytes is None
    with pytest.raises(ValueError, match=r"saved tensor 0 \(shape \(3,\), torch.float32 on meta\)"):
        meta.nbytes  # noqa: B018
    assert "nbytes=unknown" in repr(meta)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse invariant checks: not the subject
        sparse = torch.eye(2).to_sparse()
    weight = torch.ones(2, 2, requires_grad=True)
    with record_saved_tensors() as saved:
        torch.mm(sparse, weight)  # saves the sparse operand for weight's gradient
    with pytest.raises(ValueError, match="not sparse, not meta"):
        saved.nbytes  # noqa: B018


def test_numbers_saved_as_tensors_are_not_seen() -> None:
    x = torch.ones(3, requires_grad=True)
    with record_saved_tensors() as saved:
        y = x * 2
    assert y.grad_fn is not None
    # saved, as a 0-dim tensor (_saved_* attributes are made per node class, unknown to stubs)
    assert y.grad_fn._saved_other.item() == 2  # type: ignore[attr-defined]
    assert saved.count == 0  # but not through the hooks


def test_repr_says_count_and_bytes() -> None:
    assert repr(SavedTensors()) == "SavedTensors(count=0, nbytes=0, unpacked=0)"


@pytest.mark.parametrize(
    ("ignore", "message"),
    [
        (torch.ones(2), "ignore must be an iterable of tensors .* got Tensor"),
        (3, "ignore must be an iterable of tensors .* got int: 3"),
        ([torch.ones(1), "w"], r"ignore\[1\] must be a torch.Tensor, got str: 'w'"),
    ],
)
def test_bad_ignore_is_named(ignore: object, message: str) -> None:
    with pytest.raises(TypeError, match=message), record_saved_tensors(ignore=ignore):  # type: ignore[arg-type]
        pass


def test_an_endless_ignore_is_refused() -> None:
    # before: record_saved_tensors(ignore=itertools.repeat(t)) never returned
    with (
        pytest.raises(ValueError, match=r"ignore must hold at most 262144 items"),
        record_saved_tensors(ignore=itertools.repeat(torch.ones(1))),
    ):
        pass
    with record_saved_tensors(ignore=itertools.repeat(torch.ones(1), 2**18)) as saved:
        pass
    assert saved.count == 0


# -- the in-place (version-counter) check, which torch skips for hooked saved tensors --

TORCH_INPLACE = (
    "one of the variables needed for gradient computation has been modified by an inplace operation"
)


def _sigmoid_then_scaled(x: torch.Tensor) -> torch.Tensor:
    s = x.sigmoid()  # saves its output
    s.mul_(2)
    return s


def _exp_then_assigned(x: torch.Tensor) -> torch.Tensor:
    e = x.exp()  # saves its output
    e[0] = 0.0  # an indexed assignment changes it in place
    return e


def _product_then_input_changed(x: torch.Tensor) -> torch.Tensor:
    h = x * 1.5
    out = h * h  # saves h (twice)
    h.add_(1)
    return out


def _leaf_changed_under_no_grad(x: torch.Tensor) -> torch.Tensor:
    out = x * x  # saves the leaf x
    with torch.no_grad():
        x.mul_(3)
    return out


def _view_of_saved_changed(x: torch.Tensor) -> torch.Tensor:
    t = x.tanh()  # saves its output
    t[1:].zero_()  # through a view: same version counter
    return t


IN_PLACE_BUGS = [
    _sigmoid_then_scaled,
    _exp_then_assigned,
    _product_then_input_changed,
    _leaf_changed_under_no_grad,
    _view_of_saved_changed,
]


@pytest.mark.parametrize("forward", IN_PLACE_BUGS, ids=lambda f: f.__name__.strip("_"))
def test_a_saved_tensor_changed_in_place_raises_as_without_the_helper(forward: object) -> None:
    # before: with the helper, backward gave a silently wrong gradient (for
    # _sigmoid_then_scaled, x.grad [-0.61, 0, 0.50] on torch 2.15); without it, torch raises
    x = torch.tensor([0.5, 0.0, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=TORCH_INPLACE):
        forward(x).sum().backward()  # type: ignore[operator]
    assert x.grad is None

    x = torch.tensor([0.5, 0.0, -1.0], requires_grad=True)
    with record_saved_tensors() as saved:
        out = forward(x)  # type: ignore[operator]
    with pytest.raises(RuntimeError, match=TORCH_INPLACE) as raised:
        out.sum().backward()
    assert x.grad is None
    message = str(raised.value)
    assert "(shape (3,), torch.float32 on cpu)" in message
    assert re.search(r"is at version [1-9]\d*; expected version \d+ instead", message)
    assert "record_saved_tensors" in message
    assert saved.unpacked == 0  # the refused read is not counted


def test_a_saved_tensor_reads_back_before_the_change_and_raises_after() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with record_saved_tensors() as saved:
        y = x.exp()
        assert y.grad_fn is not None
        before = y.grad_fn._saved_result.clone()  # type: ignore[attr-defined]
        y.add_(1)  # the in-place op replaces y.grad_fn; keep the node that saved y
        with pytest.raises(RuntimeError, match=r"is at version 1; expected version 0"):
            y.sum().backward()
    assert saved.unpacked == 1  # the read before the change
    torch.testing.assert_close(before, torch.tensor([1.0, 2.0]).exp())


def _legitimate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Forward passes with in-place operations that autograd accepts."""
    h = x @ w
    h.relu_()  # saves its output after the change
    g = h.clone()
    g[:, 0] = 0.0  # changes g before anything saves it
    g.exp_()  # saves its output after the change
    z = torch.tanh(g) * h
    z.add_(1)  # z is saved by nothing
    return (z.sigmoid() * x.sum(dim=1, keepdim=True)).sum()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 5), cols=st.integers(1, 5))
def test_gradients_are_exactly_those_without_the_helper(seed: int, rows: int, cols: int) -> None:
    torch.manual_seed(seed)
    x0, w0 = torch.randn(rows, cols), torch.randn(cols, cols)
    grads = []
    for helper in (None, record_saved_tensors):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        if helper is None:
            loss = _legitimate(x, w)
            loss.backward(retain_graph=True)
            loss.backward()  # a second pass over the retained graph
        else:
            with helper() as saved:
                loss = _legitimate(x, w)
            loss.backward(retain_graph=True)
            loss.backward()
            assert saved.unpacked > 0
        assert x.grad is not None
        assert w.grad is not None
        grads.append((loss.detach(), x.grad, w.grad))
    for plain, recorded in zip(grads[0], grads[1], strict=True):
        assert torch.equal(plain, recorded)


def test_double_backward_through_saved_tensors_is_unchanged() -> None:
    x = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    (plain,) = torch.autograd.grad(x.sin().pow(3).sum(), x, create_graph=True)
    (plain_second,) = torch.autograd.grad(plain.sum(), x)
    with record_saved_tensors() as saved:
        (first,) = torch.autograd.grad(x.sin().pow(3).sum(), x, create_graph=True)
        (second,) = torch.autograd.grad(first.sum(), x)
    assert torch.equal(first, plain)
    assert torch.equal(second, plain_second)
    assert saved.unpacked > 0


def test_a_tensor_without_a_version_counter_is_not_checked() -> None:
    from pytorch_memo.autograd_mechanics import _pack, _unpack, _version

    with torch.inference_mode():
        frozen = torch.ones(3)
    with pytest.raises(RuntimeError, match="do not track version counter"):
        frozen._version  # noqa: B018
    assert _version(frozen) is None
    packed = _pack(frozen, 0)
    assert packed.version is None
    with torch.inference_mode():
        frozen.add_(1)  # inference tensors may change in inference mode
    assert torch.equal(_unpack(packed, reader="record_saved_tensors"), torch.full((3,), 2.0))


def test_inference_tensors_in_the_block_behave_as_without_it() -> None:
    with torch.inference_mode():
        frozen = torch.ones(3)
    w = torch.ones(3, requires_grad=True)
    # torch refuses to save an inference tensor before any hook sees it
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        w * frozen
    with (
        record_saved_tensors() as saved,
        pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"),
    ):
        w * frozen
    assert saved.count == 0
    with record_saved_tensors() as saved, torch.inference_mode():
        out = (frozen * 2).exp()  # nothing is saved in inference mode
    assert saved.count == 0
    assert out.is_inference()


def test_what_autograd_unpacks_is_the_saved_memory() -> None:
    x = torch.arange(4.0, requires_grad=True)
    with record_saved_tensors() as saved:
        y = x.exp()
    assert y.grad_fn is not None
    unpacked = y.grad_fn._saved_result  # type: ignore[attr-defined]
    assert unpacked.data_ptr() == y.data_ptr()  # the alias the pack hook kept
    assert unpacked._version == y._version == 0
    assert saved.unpacked == 1


class _KeepsOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.kept = x  # not through save_for_backward: no hook sees it
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def test_what_the_docstring_says_it_cannot_see() -> None:
    from pytorch_memo import autograd_mechanics

    doc = " ".join((autograd_mechanics.record_saved_tensors.__doc__ or "").split())
    x = torch.ones(1024, requires_grad=True)
    with record_saved_tensors() as on_ctx:
        _KeepsOnCtx.apply(x)
    assert on_ctx.count == 0
    assert "keeps as attributes of ``ctx``" in doc

    inner: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        inner.append(tensor)
        return tensor

    with record_saved_tensors() as outer, torch.autograd.graph.saved_tensors_hooks(keep, keep):
        x.exp()
    assert (outer.count, len(inner)) == (0, 1)  # the innermost pair only
    assert "innermost pair" in doc

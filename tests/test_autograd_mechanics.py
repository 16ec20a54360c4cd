"""pytorch_memo.autograd_mechanics, checked against plain torch."""

from __future__ import annotations

import gc
import itertools
import warnings
import weakref

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

"""pytorch_memo.data_loading, checked against plain torch, in real worker processes."""

from __future__ import annotations

import math
import multiprocessing
import operator
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sized
from functools import partial

import matplotlib.pyplot as plt
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Subset, random_split

from pytorch_memo.data_loading import (
    MAX_RECORDS,
    CountingStream,
    HeldRecords,
    PaddedBatch,
    StallingDataset,
    TracingDataset,
    TransformedRange,
    VariableLengths,
    distributed_split,
    pad_collate,
    plot_distributed_split,
    private_memory,
)

# ------------------------------------------------------------------------- TracingDataset


def test_tracing_dataset_in_the_main_process() -> None:
    data = TracingDataset(3, tag=5)
    assert len(data) == 3
    assert data[1] == {"index": 1, "tag": 5, "worker": -1, "pid": os.getpid()}
    data.tag = 6
    assert data[0]["tag"] == 6
    assert data.loaded == [1, 0]
    # iter(): the old __getitem__ protocol (mypy only knows it through iter's overload)
    assert [item["index"] for item in iter(data)] == [0, 1, 2]  # iteration stops at IndexError


def test_tracing_dataset_in_two_workers_loads_copies() -> None:
    data = TracingDataset(6)
    batches = list(DataLoader(data, batch_size=2, num_workers=2))
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(6))
    pids = {pid for b in batches for pid in b["pid"].tolist()}
    assert len(pids) == 2
    assert os.getpid() not in pids
    assert [b["worker"].tolist() for b in batches] == [[0, 0], [1, 1], [0, 0]]
    assert data.loaded == []  # the workers appended to their own copies
    assert all(b["index"].is_shared() for b in batches)


def test_persistent_workers_keep_their_copy_of_the_dataset() -> None:
    for persistent, second_tag in ((True, 0), (False, 1)):
        data = TracingDataset(4)
        loader = DataLoader(data, batch_size=2, num_workers=2, persistent_workers=persistent)
        first = list(loader)
        data.tag = 1
        second = list(loader)
        assert {t for b in second for t in b["tag"].tolist()} == {second_tag}
        same_pids = [b["pid"].tolist() for b in first] == [b["pid"].tolist() for b in second]
        assert same_pids is persistent


@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        (3, IndexError, r"index must be in range\(0, 3\), got 3"),
        (-1, IndexError, r"index must be in range\(0, 3\), got -1"),
        (True, TypeError, "index must be an int, got bool"),
        ("0", TypeError, "index must be an int, got str"),
    ],
)
def test_tracing_dataset_bad_index(index: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        TracingDataset(3)[index]  # type: ignore[index]


def test_tracing_dataset_bad_arguments() -> None:
    with pytest.raises(ValueError, match="length must be >= 0, got -1"):
        TracingDataset(-1)
    with pytest.raises(TypeError, match="tag must be an int, got str"):
        TracingDataset(2, tag="a")  # type: ignore[arg-type]


@pytest.mark.parametrize("make", [TracingDataset, VariableLengths])
@pytest.mark.parametrize("length", [2**63, 2**70])
def test_a_length_len_cannot_return_is_refused(make: Callable[[int], Sized], length: int) -> None:
    # before: accepted, then len() raised "OverflowError: cannot fit 'int' into an
    # index-sized integer" (in a DataLoader, with no word of the dataset's length)
    name = "length" if make is TracingDataset else "count"
    with pytest.raises(ValueError, match=rf"{name} must be <= {2**63 - 1}, got {length}"):
        make(length)
    assert len(make(2**63 - 1)) == 2**63 - 1


# ------------------------------------------------------------------------- CountingStream


def test_counting_stream_without_workers_yields_everything() -> None:
    for shard in (False, True):
        assert list(DataLoader(CountingStream(5, shard=shard), batch_size=None)) == [
            0,
            1,
            2,
            3,
            4,
        ]


def test_counting_stream_in_two_workers() -> None:
    doubled = list(DataLoader(CountingStream(5), batch_size=None, num_workers=2))
    assert Counter(doubled) == Counter(dict.fromkeys(range(5), 2))
    sharded = list(DataLoader(CountingStream(5, shard=True), batch_size=None, num_workers=2))
    assert sorted(sharded) == list(range(5))


def test_counting_stream_bad_arguments() -> None:
    with pytest.raises(ValueError, match="stop must be >= 0, got -2"):
        CountingStream(-2)
    with pytest.raises(TypeError, match="shard must be a bool, got int"):
        CountingStream(2, shard=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------ VariableLengths, padding


def test_variable_lengths_items() -> None:
    data = VariableLengths(5, max_length=2)
    assert len(data) == 5
    for i in range(5):
        sequence, label = data[i]
        assert torch.equal(sequence, torch.full((1 + i % 2,), float(i)))
        assert label == i % 2
    with pytest.raises(IndexError, match=r"range\(0, 5\)"):
        data[5]
    with pytest.raises(ValueError, match="max_length must be >= 1, got 0"):
        VariableLengths(3, max_length=0)


def test_variable_lengths_refuses_items_without_bound() -> None:
    # before: VariableLengths(2**62, max_length=2**62)[2**62 - 1] tried to allocate 2**64 bytes
    with pytest.raises(ValueError, match=rf"max_length must be <= {2**24}, got {2**62}"):
        VariableLengths(2**62, max_length=2**62)
    data = VariableLengths(2**62, max_length=2**24)
    assert data[2**24 - 1][0].shape == (2**24,)


def _padded_by_hand(sequences: list[torch.Tensor], value: float) -> torch.Tensor:
    longest = max(len(s) for s in sequences)
    out = torch.full((len(sequences), longest, *sequences[0].shape[1:]), value)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = s
    return out


@given(
    lengths=st.lists(st.integers(0, 4), min_size=1, max_size=5),
    trailing=st.lists(st.integers(1, 3), max_size=2),
    value=st.sampled_from([0.0, -1.0, 2.5]),
    seed=st.integers(0, 2**16),
)
def test_pad_collate_pads_like_plain_torch(
    lengths: list[int], trailing: list[int], value: float, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    sequences = [torch.randn(n, *trailing, generator=gen) for n in lengths]
    labels = list(range(len(lengths)))
    out = pad_collate(list(zip(sequences, labels, strict=True)), padding_value=value)
    assert isinstance(out, PaddedBatch)
    assert torch.equal(out.sequences, _padded_by_hand(sequences, value))
    assert out.lengths.tolist() == lengths
    assert out.lengths.dtype == torch.int64
    assert torch.equal(out.labels, torch.tensor(labels))


def test_pad_collate_tensor_labels_are_stacked() -> None:
    out = pad_collate([(torch.ones(1), torch.tensor(0.5)), (torch.ones(2), torch.tensor(1.5))])
    assert torch.equal(out.labels, torch.tensor([0.5, 1.5]))


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        ([], ValueError, "at least one"),
        ([(torch.ones(2),)], ValueError, r"batch\[0\] must be a \(sequence, label\) pair"),
        ([(torch.tensor(1.0), 0)], TypeError, r"batch\[0\]\[0\] must be a tensor .* 0-dim"),
        ([(torch.ones(1), 0), ([1.0], 1)], TypeError, r"batch\[1\]\[0\] .* got list"),
        (
            [(torch.ones(1, 2), 0), (torch.ones(1, 3), 1)],
            ValueError,
            r"batch\[1\]\[0\] has trailing shape \(3,\), but batch\[0\]\[0\] has \(2,\)",
        ),
    ],
)
def test_pad_collate_bad_batches(batch: list[object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        pad_collate(batch)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        # before: "object of type 'int' has no len()" and the like, naming no argument
        (3, TypeError, "batch must be a sequence of .sequence, label. pairs, got int: 3"),
        ((i for i in range(2)), TypeError, "batch must be a sequence .* got generator"),
        ("ab", TypeError, "batch must be a sequence .* got str"),
        ([(torch.eye(2).to_sparse(), 0)], ValueError, r"batch\[0\]\[0\] must be a strided"),
        # before: padded into 4 TiB (an expanded sequence of 2**40 elements)
        ([(torch.zeros(1).expand(2**40), 0)], ValueError,
         rf"batch has {2**40} elements once padded; at most {2**28} allowed"),
        # before: silently converted to the first sequence's dtype (1.5 -> 1, 2j -> 0)
        ([(torch.tensor([1, 2]), 0), (torch.tensor([1.5]), 1)], ValueError,
         r"batch\[1\]\[0\] is torch.float32 on cpu, but batch\[0\]\[0\] is torch.int64 on cpu"),
        ([(torch.ones(2), 0), (torch.ones(1, dtype=torch.complex64), 1)], ValueError,
         r"batch\[1\]\[0\] is torch.complex64 on cpu, but batch\[0\]\[0\] is torch.float32"),
        ([(torch.ones(2), 0), (torch.ones(1, device="meta"), 1)], ValueError,
         r"batch\[1\]\[0\] is torch.float32 on meta, but batch\[0\]\[0\] is torch.float32 on cpu"),
    ],
)  # fmt: skip
def test_pad_collate_names_what_it_cannot_pad(
    batch: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        pad_collate(batch)  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_pad_collate_names_a_nested_sequence() -> None:
    # made in the test, not at collection: torch warns once per process about nested
    # tensors, and test_broadcasting checks that warning
    nested = torch.nested.nested_tensor([torch.ones(1), torch.ones(2)])
    # before: torch's "Internal error: NestedTensorImpl doesn't support sizes"
    with pytest.raises(ValueError, match=r"batch\[0\]\[0\] must be a strided \(dense\)"):
        pad_collate([(nested, 0)])


@pytest.mark.parametrize(
    ("sequence", "value", "error", "match"),
    [
        # before: torch's "value cannot be converted to type float without overflow"
        (torch.ones(2), 1e308, ValueError, r"padding_value must fit torch.float32, the sequences' dtype, got 1e\+308"),
        (torch.ones(2), 10**400, ValueError, r"padding_value must fit torch.float32"),
        # before: silently truncated to 0, or to the int64 range
        (torch.tensor([1, 2]), 0.5, ValueError, "padding_value must fit torch.int64, the sequences' dtype, got 0.5"),
        (torch.tensor([1, 2]), float("nan"), ValueError, r"padding_value must fit torch.int64"),
        (torch.tensor([1, 2]), 2**63, ValueError, r"padding_value must fit torch.int64"),
        (torch.tensor([True]), 2, ValueError, "padding_value must fit torch.bool, the sequences' dtype, got 2"),
        (torch.ones(2), "0", TypeError, "padding_value must be a number, got str"),
        (torch.ones(2), True, TypeError, "padding_value must be a number, got bool"),
        # a bool is taken for bool sequences only
        (torch.tensor([1, 2]), False, TypeError,
         r"padding_value must be a number, got bool: False \(a bool only for bool sequences; these are torch.int64\)"),
        # before: silently rounded to another number (1e-50 to 0.0, like the real zeros)
        (torch.ones(2), 1e-50, ValueError,
         r"padding_value must fit torch.float32, the sequences' dtype, got 1e-50: it would become 0.0$"),
        (torch.ones(2, dtype=torch.float16), 0.1, ValueError,
         r"padding_value must fit torch.float16, .* got 0.1: it would become 0.0999755859375$"),
        (torch.ones(2), 0.1, ValueError, r"torch.float32, .* got 0.1: it would become 0.10000000149011612$"),
        (torch.ones(2), 2**24 + 1, ValueError, r"torch.float32, .* got 16777217: it would become 16777216.0$"),
        (torch.ones(2, dtype=torch.float64), 2**53 + 1, ValueError, r"it would become 9007199254740992.0$"),
        (torch.ones(2, dtype=torch.complex64), 0.1, ValueError,
         r"torch.complex64, .* got 0.1: it would become \(0.10000000149011612\+0j\)$"),
        (torch.ones(2, dtype=torch.float8_e4m3fn), float("inf"), ValueError,  # no infinity
         r"torch.float8_e4m3fn, .* got inf: it would become 448.0$"),
    ],
)  # fmt: skip
def test_pad_collate_refuses_a_padding_value_the_dtype_cannot_hold(
    sequence: torch.Tensor, value: object, error: type[Exception], match: str
) -> None:
    batch = [(sequence, 0), (sequence[:1], 1)]
    with pytest.raises(error, match=match):
        pad_collate(batch, padding_value=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sequence", "value"),
    [(torch.ones(2), float("-inf")), (torch.ones(2), float("nan")), (torch.tensor([1, 2]), -1),
     (torch.tensor([1, 2]), 7.0), (torch.tensor([True, True]), 0),
     # before: "padding_value must be a number, got bool: True", though 1 was taken
     (torch.tensor([False, False]), True), (torch.tensor([True, True]), False),
     # values the floating dtype holds exactly
     (torch.ones(2), float("inf")), (torch.ones(2), -1.0), (torch.ones(2), 2**24),
     (torch.ones(2, dtype=torch.float16), 0.5), (torch.ones(2, dtype=torch.float64), 0.1),
     (torch.ones(2, dtype=torch.complex64), float("nan")), (torch.ones(2), -0.0),
     # before: pad_sequence took them as a C double, and 2**62 + 1 became 2**62 silently
     # and 2**63 - 1 failed with torch's "value cannot be converted to type int64_t"
     (torch.tensor([1, 2]), 2**62 + 1), (torch.tensor([1, 2]), 2**63 - 1),
     (torch.tensor([1, 2]), -(2**63)), (torch.tensor([1, 2], dtype=torch.uint64), 2**64 - 1)],
)  # fmt: skip
def test_pad_collate_pads_with_any_value_the_dtype_holds(
    sequence: torch.Tensor, value: float
) -> None:
    out = pad_collate([(sequence, 0), (sequence[:1], 1)], padding_value=value)
    assert out.sequences.dtype == sequence.dtype
    assert out.sequences[1, 1:].numel() == 1  # one padded element, compared exactly:
    padded = out.sequences[1, 1].item()
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(complex(padded).real)
    else:
        assert padded == value  # exact, for ints beyond 2**53 too
    torch.testing.assert_close(out.sequences[:, :1], torch.stack([sequence[:1]] * 2))


def test_pad_collate_in_workers_matches_the_main_process() -> None:
    collate = partial(pad_collate, padding_value=-1.0)
    data = VariableLengths(7)
    here = list(DataLoader(data, batch_size=3, collate_fn=collate))
    there = list(DataLoader(data, batch_size=3, collate_fn=collate, num_workers=2))
    assert len(here) == len(there) == 3
    for a, b in zip(here, there, strict=True):
        assert isinstance(b, PaddedBatch)
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


def test_module_objects_reach_a_spawned_worker() -> None:
    """Under ``spawn`` a worker imports what it runs: the module's objects can be found.

    One worker only: a spawned worker imports torch, which takes seconds.
    """
    padded = list(
        DataLoader(
            VariableLengths(3),
            batch_size=3,
            collate_fn=partial(pad_collate, padding_value=-1.0),
            num_workers=1,
            multiprocessing_context="spawn",
        )
    )
    assert padded[0].sequences.tolist() == [[0, -1, -1], [1, 1, -1], [2, 2, 2]]


# ---------------------------------------------------------------------- distributed_split


def _split_by_hand(
    length: int,
    replicas: int,
    epochs: int,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    set_epoch: bool,
) -> list[list[list[int]]]:
    """The documented rule: one permutation from ``seed + epoch``, padded or cut, dealt out."""
    result = []
    for epoch in range(epochs):
        offset = epoch if set_epoch else 0
        gen = torch.Generator().manual_seed(seed + offset)
        order = torch.randperm(length, generator=gen).tolist() if shuffle else list(range(length))
        if drop_last:
            order = order[: length // replicas * replicas]
        else:
            total = -(-length // replicas) * replicas
            while len(order) < total:
                order += order[: total - len(order)]
        result.append([order[rank::replicas] for rank in range(replicas)])
    return result


@given(
    length=st.integers(1, 30),
    replicas=st.integers(1, 5),
    epochs=st.integers(1, 3),
    shuffle=st.booleans(),
    seed=st.integers(0, 1000),
    drop_last=st.booleans(),
    set_epoch=st.booleans(),
)
def test_distributed_split_matches_the_rule(
    length: int,
    replicas: int,
    epochs: int,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    set_epoch: bool,
) -> None:
    split = distributed_split(
        length,
        num_replicas=replicas,
        epochs=epochs,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        set_epoch=set_epoch,
    )
    assert split == _split_by_hand(length, replicas, epochs, shuffle, seed, drop_last, set_epoch)
    for epoch in split:
        assert len({len(shard) for shard in epoch}) == 1  # every rank as many
        handed_out = [i for shard in epoch for i in shard]
        if drop_last:
            assert len(set(handed_out)) == len(handed_out)  # nothing twice
        else:
            assert set(handed_out) == set(range(length))  # nothing left out
        if length % replicas == 0:
            assert sorted(handed_out) == list(range(length))  # a partition


def test_distributed_split_repeats_without_set_epoch() -> None:
    stale = distributed_split(10, num_replicas=2, epochs=3, set_epoch=False)
    fresh = distributed_split(10, num_replicas=2, epochs=3)
    assert stale[0] == stale[1] == stale[2] == fresh[0]
    assert fresh[1] != fresh[0]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0}, ValueError, "length must be >= 1, got 0"),
        ({"num_replicas": 0}, ValueError, "num_replicas must be >= 1, got 0"),
        ({"epochs": 1.0}, TypeError, "epochs must be an int, got float"),
        ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
        ({"shuffle": 1}, TypeError, "shuffle must be a bool, got int"),
        ({"set_epoch": None}, TypeError, "set_epoch must be a bool, got NoneType"),
        # before: a hang (2**40 samplers or epochs) or a 8 TiB allocation (length)
        ({"length": 2**40}, ValueError, r"epochs x num_replicas x max\(length, num_replicas\) must be at most 4194304"),
        ({"num_replicas": 2**40}, ValueError, r"epochs x num_replicas x max\(length, num_replicas\)"),
        ({"epochs": 2**40}, ValueError, r"epochs x num_replicas x max\(length, num_replicas\)"),
        ({"length": 1, "num_replicas": 2**11, "epochs": 2}, ValueError, r"got 2 x 2048 x 2048"),
        # before: torch's "Overflow when unpacking long long", from the sampler's generator
        ({"seed": 2**64}, ValueError, rf"seed must be <= {2**64 - 1} .*seed \+ epoch.*got {2**64}"),
        ({"seed": 2**64 - 1, "epochs": 2}, ValueError, rf"seed must be <= {2**64 - 2} "),
    ],
)  # fmt: skip
def test_distributed_split_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    args: dict[str, object] = {"length": 4, "num_replicas": 2, "epochs": 1, **kwargs}
    with pytest.raises(error, match=match):
        distributed_split(**args)  # type: ignore[arg-type]


def test_plot_distributed_split_hatches_the_padding() -> None:
    split = distributed_split(10, num_replicas=3, epochs=2)  # 12 handed out: 2 repeats
    ax = plot_distributed_split(split, title="t")
    assert len(ax.patches) == 24
    assert sum(1 for p in ax.patches if p.get_hatch()) == 4
    assert sorted(int(t.get_text()) for t in ax.texts[:12]) == sorted(
        i for shard in split[0] for i in shard
    )
    assert ax.get_title() == "t"
    plt.close("all")


@pytest.mark.parametrize(
    ("split", "match"), [([], "empty split"), ([[[0], [1]], [[0]]], "same number of ranks")]
)
def test_plot_distributed_split_bad_input(split: list[list[list[int]]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plot_distributed_split(split)


def test_distributed_split_takes_the_largest_seed_that_fits() -> None:
    split = distributed_split(4, num_replicas=2, epochs=2, seed=2**64 - 2)
    assert sorted(i for shard in split[1] for i in shard) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("split", "kwargs", "error", "match"),
    [
        # before: "'int' object is not subscriptable" and the like, naming no argument
        (3, {}, TypeError, "split must be a list of epochs, each a list of ranks' indices, got int"),
        ([[3]], {}, TypeError, r"split\[0\]\[0\] must be a sequence of ints, got int"),
        ([[["a"]]], {}, TypeError, r"split\[0\]\[0\]\[0\] must be an int, got str"),
        ([[[True]]], {}, TypeError, r"split\[0\]\[0\]\[0\] must be an int, got bool"),
        ([[[-1]]], {}, ValueError, r"split\[0\]\[0\]\[0\] must be >= 0, got -1"),
        ([[[1.5]]], {}, TypeError, r"split\[0\]\[0\]\[0\] must be an int, got float"),
        ([3, 4], {}, TypeError, r"split\[0\] must be a list of ranks' indices, got int"),
        (torch.ones(2, 2, 2), {}, TypeError, "split must be a list of epochs"),
        # before: drew a million cells (a hang)
        ([[list(range(10**6))]], {}, ValueError, r"split has 1000000 cells; at most 512 allowed"),
        # before: AttributeError: 'str' object has no attribute 'add_patch'
        ([[[0]]], {"ax": "ax"}, TypeError, "ax must be a matplotlib Axes"),
        ([[[0]]], {"title": 3}, TypeError, "title must be a str, got int"),
    ],
)  # fmt: skip
def test_plot_distributed_split_names_a_bad_argument(
    split: object, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        plot_distributed_split(split, **kwargs)  # type: ignore[arg-type]
    plt.close("all")


# ----------------------------------------------------------------------- TransformedRange


def test_transformed_range_is_a_range_until_a_transform_is_set() -> None:
    data = TransformedRange(5)
    assert len(data) == 5
    assert [data[i] for i in range(5)] == list(range(5))
    data.transform = operator.neg
    assert [data[i] for i in range(5)] == [-i for i in range(5)]
    assert [TransformedRange(3, transform=str)[i] for i in range(3)] == ["0", "1", "2"]


def test_transformed_range_subsets_share_it_as_with_any_dataset() -> None:
    full = TransformedRange(8)
    train, val = random_split(full, [0.5, 0.5], generator=torch.Generator().manual_seed(0))
    order = torch.randperm(8, generator=torch.Generator().manual_seed(0)).tolist()
    assert train.indices == order[:4]  # random_split deals out one permutation
    assert val.indices == order[4:]
    train.dataset.transform = operator.neg  # type: ignore[attr-defined]
    assert [val[k] for k in range(len(val))] == [-i for i in val.indices]
    own = Subset(TransformedRange(8), val.indices)
    assert [own[k] for k in range(len(own))] == val.indices


def test_transformed_range_bad_arguments() -> None:
    with pytest.raises(ValueError, match="length must be >= 0, got -1"):
        TransformedRange(-1)
    with pytest.raises(TypeError, match="transform must be callable, got int: 3"):
        TransformedRange(2, transform=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transform must be callable with 1 positional argument"):
        TransformedRange(2, transform=lambda: 0)  # type: ignore[arg-type,misc]
    with pytest.raises(IndexError, match=r"range\(0, 2\), got 2"):
        TransformedRange(2)[2]


def test_transformed_range_checks_a_transform_when_it_is_set() -> None:
    data = TransformedRange(2, transform=operator.neg)
    with pytest.raises(TypeError, match="transform must be callable, got int: 5"):
        data.transform = 5  # type: ignore[assignment]
    with pytest.raises(TypeError, match="transform must be callable with 1 positional argument"):
        data.transform = lambda: 0  # type: ignore[assignment]
    assert data.transform is operator.neg  # unchanged by the refusals
    assert data[1] == -1
    data.transform = None
    assert data[1] == 1


# ------------------------------------------------------------------------ StallingDataset


def test_stalling_dataset_waits_for_release_in_a_thread() -> None:
    data = StallingDataset(3, stall_at=1, seconds=30)
    assert len(data) == 3
    assert data[0] == 0
    assert data[2] == 2
    threading.Timer(0.2, data.release).start()
    started = time.monotonic()
    assert data[1] == 1
    assert time.monotonic() - started >= 0.2


def test_stalling_dataset_is_released_by_a_spawned_process() -> None:
    """Its event can be handed to a spawned process (one made by fork could not be)."""
    data = StallingDataset(2, seconds=30)
    spawned = multiprocessing.get_context("spawn").Process(target=data._released.set)
    spawned.start()
    spawned.join(30)
    assert spawned.exitcode == 0
    started = time.monotonic()
    assert data[0] == 0
    assert time.monotonic() - started < 5  # released: no wait


def test_stalling_dataset_never_waits_longer_than_its_seconds() -> None:
    data = StallingDataset(2, seconds=0.05)
    with pytest.raises(
        TimeoutError, match=r"item 0 \(stall_at\) was not released within seconds=0\.05"
    ):
        data[0]


def test_stalling_dataset_is_released_in_a_forked_worker() -> None:
    data = StallingDataset(3, seconds=30)
    threading.Timer(0.3, data.release).start()  # the worker is waiting by then, or soon
    loader = DataLoader(data, num_workers=1, multiprocessing_context="fork")
    assert [b.tolist() for b in loader] == [[0], [1], [2]]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0, "seconds": 1}, ValueError, "length must be >= 1, got 0"),
        ({"length": 3, "stall_at": 3, "seconds": 1}, ValueError, "stall_at must be <= 2, got 3"),
        ({"length": 3, "stall_at": -1, "seconds": 1}, ValueError, "stall_at must be >= 0, got -1"),
        ({"length": 3, "seconds": 0}, ValueError, "seconds must be > 0 seconds, got 0"),
        ({"length": 3, "seconds": float("inf")}, ValueError, "seconds must be a finite number"),
        ({"length": 3, "seconds": True}, TypeError, "seconds must be a number of seconds, got bool"),
    ],
)  # fmt: skip
def test_stalling_dataset_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        StallingDataset(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------- private_memory, HeldRecords

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/smaps_rollup"
)


@linux_only
def test_private_memory_grows_by_what_this_process_writes() -> None:
    before = private_memory()
    written = bytearray(32 * 2**20)  # zeroed: every page written
    grown = private_memory() - before
    assert 24 * 2**20 <= grown <= 64 * 2**20, grown
    del written


def test_private_memory_names_what_it_needs_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(RuntimeError, match=r"/proc/self/smaps_rollup, which needs Linux 4.14"):
        private_memory()


@linux_only
@pytest.mark.parametrize("held", ["list", "tensor"])
def test_held_records_read_every_blocks_th_record(held: str) -> None:
    data = HeldRecords(1000, held=held, blocks=8)
    assert len(data) == 8
    plain = torch.arange(2**40, 2**40 + 1000)
    for i in range(8):
        item = data[i]
        assert item["total"] == int(plain[i::8].sum())
        assert item["worker"] == -1
        assert isinstance(item["growth"], int)
    assert isinstance(data.records, list if held == "list" else torch.Tensor)


@linux_only
def test_held_records_in_two_forked_workers() -> None:
    data = HeldRecords(10_000, held="list", blocks=4)
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="fork")
    items = list(loader)
    plain = torch.arange(2**40, 2**40 + 10_000)
    assert [i["total"] for i in items] == [int(plain[k::4].sum()) for k in range(4)]
    assert [i["worker"] for i in items] == [0, 1, 0, 1]


@linux_only
def test_held_records_workers_measure_from_their_own_first_load() -> None:
    """A forked worker does not inherit the main process's starting point."""
    data = HeldRecords(10_000, held="tensor", blocks=4)
    assert data[0]["worker"] == -1  # loaded here first: this process's starting point
    assert private_memory() > 64 * 2**20  # far above a fresh worker's growth
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="fork")
    growth = [i["growth"] for i in loader]
    assert all(abs(g) < 16 * 2**20 for g in growth), growth


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"count": 0, "held": "list"}, ValueError, "count must be >= 1, got 0"),
        ({"count": MAX_RECORDS + 1, "held": "list"}, ValueError, f"count must be <= {MAX_RECORDS}"),
        ({"count": 4, "held": "array"}, ValueError, "held must be 'list' or 'tensor', got 'array'"),
        ({"count": 4, "held": 1}, TypeError, "held must be 'list' or 'tensor', got int"),
        ({"count": 4, "held": "list", "blocks": 5}, ValueError, "blocks must be <= 4, got 5"),
        ({"count": 4, "held": "list", "blocks": 0}, ValueError, "blocks must be >= 1, got 0"),
    ],
)  # fmt: skip
def test_held_records_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        HeldRecords(**kwargs)  # type: ignore[arg-type]

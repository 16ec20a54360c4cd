"""pytorch_memo.randomness against plain torch, random and NumPy, with real DataLoader workers."""

from __future__ import annotations

import matplotlib as mpl

mpl.use("Agg")

import itertools
import pickle
import random
import traceback
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.patches import Rectangle
from torch.utils.data import DataLoader, Dataset

from pytorch_memo.randomness import (
    Draw,
    NoisyRange,
    deterministic_algorithms,
    plot_draws,
    reseed_worker,
    seed_everything,
)


@pytest.fixture(autouse=True)
def _global_state_is_restored() -> Iterator[None]:
    """Every test leaves torch's deterministic mode and generator as it found them."""
    mode = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    state = torch.get_rng_state()
    yield
    assert (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    ) == mode
    torch.use_deterministic_algorithms(mode[0], warn_only=mode[1])
    torch.set_rng_state(state)


def _loader(**options: object) -> DataLoader[Draw]:
    return DataLoader(NoisyRange(6, seed=1), batch_size=None, num_workers=2, **options)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ NoisyRange


@given(st.integers(0, 8), st.integers(0, 2**64 - 1))
def test_noisy_range_draws_what_plain_generators_draw(length: int, seed: int) -> None:
    data = NoisyRange(length, seed=seed)
    own = np.random.default_rng(seed)
    assert len(data) == length
    for index in range(length):
        torch.manual_seed(index)
        random.seed(index)
        np.random.seed(index)  # noqa: NPY002
        draw = data[index]
        torch.manual_seed(index)
        random.seed(index)
        np.random.seed(index)  # noqa: NPY002
        assert draw == Draw(
            index=index,
            worker=None,
            seed=None,
            torch_value=torch.rand(()).item(),
            random_value=random.random(),
            numpy_value=float(np.random.random()),  # noqa: NPY002
            own_value=float(own.random()),
        )


@given(st.integers(0, 2**64 - 1))
def test_reseed_starts_the_generator_of_that_seed(seed: int) -> None:
    data = NoisyRange(3, seed=0)
    data[0]
    data.reseed(seed)
    expected = np.random.default_rng(seed)
    assert [data[i].own_value for i in range(3)] == [expected.random() for _ in range(3)]


def test_numpy_integers_are_indices() -> None:
    assert NoisyRange(3, seed=0)[np.int64(2)].index == 2


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: NoisyRange("3", seed=0), TypeError, "length must be an int, got str"),  # type: ignore[arg-type]
        (lambda: NoisyRange(-1, seed=0), ValueError, "length must be >= 0, got -1"),
        (lambda: NoisyRange(3, seed=-2), ValueError, "seed must be >= 0, got -2"),
        (lambda: NoisyRange(3, seed=1.5), TypeError, "seed must be an int, got float"),  # type: ignore[arg-type]
        (lambda: NoisyRange(3, seed=0)[3], IndexError, r"index must be in \[0, 3\), got 3"),
        (lambda: NoisyRange(3, seed=0)[-1], IndexError, r"index must be in \[0, 3\), got -1"),
        (lambda: NoisyRange(3, seed=0)["a"], TypeError, "index must be an int, got str"),  # type: ignore[index]
        (lambda: NoisyRange(3, seed=0).reseed(-1), ValueError, "seed must be >= 0, got -1"),
        # before: accepted, then len() raised "cannot fit 'int' into an index-sized integer"
        (lambda: NoisyRange(2**63, seed=0), ValueError, f"length must be <= {2**63 - 1}, got {2**63}"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()  # type: ignore[operator]


# ---------------------------------------------------------------- real DataLoader workers


def _base_seed(seed: int) -> int:
    """The base seed a DataLoader with ``generator=torch.Generator().manual_seed(seed)``
    and no shuffling gives its workers: the generator's first int64 draw."""
    generator = torch.Generator().manual_seed(seed)
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def test_workers_copy_the_datasets_generator_and_reseed_the_global_ones() -> None:
    draws = list(_loader(generator=torch.Generator().manual_seed(5)))
    assert [d.worker for d in draws] == [0, 1, 0, 1, 0, 1]
    base = _base_seed(5)
    assert [d.seed for d in draws[:2]] == [base, base + 1]
    for first in draws[:2]:
        assert first.seed is not None
        assert (
            first.torch_value
            == torch.rand((), generator=torch.Generator().manual_seed(first.seed)).item()
        )
        assert first.random_value == random.Random(first.seed).random()
    own = [d.own_value for d in draws]
    assert own[0::2] == own[1::2]  # the duplicated draws
    copied = np.random.default_rng(1)
    assert own[0::2] == [copied.random() for _ in range(3)]  # the copy of __init__'s
    assert len({d.numpy_value for d in draws}) == 6  # np.random is reseeded per worker


def test_reseed_worker_gives_each_worker_the_generator_of_its_seed() -> None:
    loader = _loader(worker_init_fn=reseed_worker, generator=torch.Generator().manual_seed(5))
    first_epoch, second_epoch = list(loader), list(loader)
    base = _base_seed(5)
    for worker in (0, 1):
        expected = np.random.default_rng(base + worker)
        mine = [d.own_value for d in first_epoch if d.worker == worker]
        assert mine == [expected.random() for _ in range(3)]
    assert len({d.own_value for d in first_epoch + second_epoch}) == 12


def test_the_same_generator_seed_replays_a_shuffled_run() -> None:
    def run() -> list[Draw]:
        return list(
            _loader(
                shuffle=True,
                worker_init_fn=reseed_worker,
                generator=torch.Generator().manual_seed(9),
            )
        )

    state = torch.get_rng_state()
    assert run() == run()
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is untouched


def test_a_pickled_dataset_carries_its_generators_state() -> None:
    """What spawn and forkserver send each worker: a pickled copy, in the same state."""
    data = NoisyRange(4, seed=1)
    data[0]  # the state has moved on from the seed
    copies = [pickle.loads(pickle.dumps(data)) for _ in range(2)]
    assert copies[0][1].own_value == copies[1][1].own_value == data[1].own_value


def test_spawned_workers_import_the_pieces() -> None:
    """Under spawn, the dataset and worker_init_fn travel pickled: they must be importable
    (one loader only: each spawned worker imports torch, seconds each)."""
    draws = list(
        _loader(
            multiprocessing_context="spawn",
            worker_init_fn=reseed_worker,
            generator=torch.Generator().manual_seed(5),
        )
    )
    base = _base_seed(5)
    assert [d.seed for d in draws[:2]] == [base, base + 1]
    for first in draws[:2]:
        assert first.own_value == np.random.default_rng(first.seed).random()
    assert len({d.own_value for d in draws}) == 6


def test_reseed_worker_refuses_the_main_process() -> None:
    with pytest.raises(RuntimeError, match="called in the main process"):
        reseed_worker(0)


class _Plain(Dataset[int]):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        return index


def _wrong_id(worker_id: int) -> None:
    reseed_worker(worker_id + 1)


@pytest.mark.parametrize(
    ("dataset", "init", "error", "message"),
    [
        (_Plain(), reseed_worker, TypeError, r"must have a reseed\(seed\) method, got _Plain"),
        (
            NoisyRange(2, seed=0),
            _wrong_id,
            ValueError,
            "worker_id must be this worker's id 0, got 1",
        ),
    ],
)
def test_reseed_worker_names_what_is_wrong(
    dataset: Dataset[object], init: Callable[[int], None], error: type[Exception], message: str
) -> None:
    loader = DataLoader(dataset, batch_size=None, num_workers=1, worker_init_fn=init)
    with pytest.raises(error, match=message) as raised:  # re-raised by the DataLoader
        list(loader)
    # The error's traceback holds the loader's iterator (and the error itself, a cycle):
    # left to the garbage collector, the iterator's queues may be finalized before it,
    # so its worker is never told to stop and shutting down waits 5 s for it. Released
    # here, the iterator stops its worker at once.
    traceback.clear_frames(raised.tb)


# ------------------------------------------------------------------------ seed_everything


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=20)
def test_seed_everything_is_the_three_seeds(seed: int) -> None:
    seed_everything(seed)
    ours = (random.random(), float(np.random.random()), torch.rand(()).item())  # noqa: NPY002
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002
    torch.manual_seed(seed)
    assert ours == (random.random(), float(np.random.random()), torch.rand(()).item())  # noqa: NPY002
    assert torch.initial_seed() == seed


@pytest.mark.parametrize(
    ("seed", "error", "message"),
    [
        (2**32, ValueError, r"seed must be < 2\*\*32 .*got 4294967296"),
        (-1, ValueError, "seed must be >= 0, got -1"),
        ("1", TypeError, "seed must be an int, got str"),
        (True, TypeError, "seed must be an int, got bool"),
    ],
)
def test_seed_everything_names_a_bad_seed(
    seed: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        seed_everything(seed)  # type: ignore[arg-type]


# ---------------------------------------------------------------- deterministic_algorithms

_SETTINGS = [(False, False), (True, False), (True, True)]


def _current() -> tuple[bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


@pytest.mark.parametrize("before", _SETTINGS)
@pytest.mark.parametrize("inside", [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("fails", [False, True])
def test_deterministic_algorithms_sets_then_restores(
    before: tuple[bool, bool], inside: tuple[bool, bool], fails: bool
) -> None:
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    try:
        with (
            pytest.raises(ZeroDivisionError) if fails else nullcontext(),
            deterministic_algorithms(inside[0], warn_only=inside[1]),
        ):
            assert _current() == inside
            assert torch.get_deterministic_debug_mode() == (
                0 if not inside[0] else 1 if inside[1] else 2
            )
            if fails:
                1 / 0  # noqa: B018
        assert _current() == before
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.fixture
def inductor_config() -> Iterator[Any]:
    """``torch._inductor.config`` on torch >= 2.10, whose ``use_deterministic_algorithms``
    sets its ``deterministic`` option; put back afterwards, with the mode."""
    if torch.__version__ < "2.10":
        pytest.skip("use_deterministic_algorithms sets Inductor's option from torch 2.10")
    from torch._inductor import config

    before = config.deterministic
    yield config
    torch.use_deterministic_algorithms(False)
    config.deterministic = before


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize("fails", [False, True])
def test_deterministic_algorithms_restores_inductors_option_set_by_hand(
    inductor_config: Any, inside: bool, fails: bool
) -> None:
    inductor_config.deterministic = True  # deterministic mode itself stays off
    with (
        pytest.raises(ZeroDivisionError) if fails else nullcontext(),
        deterministic_algorithms(inside),
    ):
        assert inductor_config.deterministic is inside  # what torch's own switch sets
        if fails:
            1 / 0  # noqa: B018
    assert _current() == (False, False)
    assert inductor_config.deterministic is True


@pytest.mark.parametrize("inside", [False, True])
def test_deterministic_algorithms_leaves_inductors_option_off_after_debug_mode(
    inductor_config: Any, inside: bool
) -> None:
    inductor_config.deterministic = False
    torch.set_deterministic_debug_mode("error")  # the mode on, Inductor's option left off
    assert inductor_config.deterministic is False
    with deterministic_algorithms(inside):
        pass
    assert _current() == (True, False)
    assert inductor_config.deterministic is False


def test_deterministic_algorithms_refuses_what_torch_refuses() -> None:
    with deterministic_algorithms(), pytest.raises(RuntimeError, match="put_ does not have"):
        torch.zeros(3).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": 1}, "mode must be a bool, got int"),
        ({"warn_only": "yes"}, "warn_only must be a bool, got str"),
    ],
)
def test_deterministic_algorithms_names_a_bad_option(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message), deterministic_algorithms(**options):  # type: ignore[arg-type]
        pass
    assert _current() == (False, False)


# ------------------------------------------------------------------------------ plot_draws


def test_plot_draws_draws_a_bar_per_item_coloured_by_worker() -> None:
    draws = list(_loader())
    ax = plot_draws(draws, value="numpy_value", title="t")
    assert len(ax.patches) == 6
    heights = sorted(p.get_height() for p in ax.patches if isinstance(p, Rectangle))
    assert heights == sorted(d.numpy_value for d in draws)
    colours = {p.get_facecolor() for p in ax.patches}
    assert len(colours) == 2
    legend = ax.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["worker 0", "worker 1"]
    assert ax.get_title() == "t"
    plt.close("all")


def test_plot_draws_labels_the_main_process() -> None:
    ax = plot_draws([NoisyRange(2, seed=0)[i] for i in range(2)])
    legend = ax.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["main process"]
    plt.close("all")


@pytest.mark.parametrize(
    ("draws", "value", "error", "message"),
    [
        ([], "own_value", ValueError, "draws must hold at least one Draw, got none"),
        ([0.5], "own_value", TypeError, r"draws\[0\] must be a Draw, got float"),
        (None, "index", ValueError, "value must be one of torch_value, .*got 'index'"),
    ],
)
def test_plot_draws_names_bad_input(
    draws: list[object] | None, value: str, error: type[Exception], message: str
) -> None:
    records = [NoisyRange(1, seed=0)[0]] if draws is None else draws
    with pytest.raises(error, match=message):
        plot_draws(records, value=value)  # type: ignore[arg-type]
    plt.close("all")


def _draw() -> Draw:
    return NoisyRange(1, seed=0)[0]


@pytest.mark.parametrize(
    ("draws", "kwargs", "error", "message"),
    [
        # before: "'int' object is not iterable", naming no argument
        (3, {}, TypeError, "draws must be an iterable of Draws, got int: 3"),
        # before: torch's "Internal error: NestedTensorImpl doesn't support sizes"
        (torch.ones(2), {}, TypeError, "draws must be an iterable of Draws, got Tensor"),
        # before: a MemoryError after filling the memory
        (itertools.repeat(_draw()), {}, ValueError, "draws must hold at most 256 items"),
        # before: AttributeError: 'str' object has no attribute 'bar'
        ([_draw()], {"ax": "ax"}, TypeError, "ax must be a matplotlib Axes"),
        ([_draw()], {"title": 3}, TypeError, "title must be a str or None, got int: 3"),
    ],
)  # fmt: skip
def test_plot_draws_names_a_bad_argument(
    draws: object, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        plot_draws(draws, **kwargs)  # type: ignore[arg-type]
    plt.close("all")


def test_plot_draws_takes_the_most_it_allows() -> None:
    ax = plot_draws(itertools.repeat(_draw(), 256))
    assert len(ax.patches) == 256
    plt.close("all")

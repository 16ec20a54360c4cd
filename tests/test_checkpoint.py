"""pytorch_memo.checkpoint: atomic saves (a process killed mid-write), damaged and hostile
files, and exact resumption, checked against plain torch."""

from __future__ import annotations

import os
import random
import select
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from pytorch_memo.checkpoint import (
    FORMAT,
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    get_rng_state,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
)

ROOT = Path(__file__).resolve().parent.parent
FILES = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _net(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 2))


def _training(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    model = _net(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """One step whose data come from Python's, NumPy's and torch's generators."""
    rows = random.sample(range(32), 8)
    x = torch.linspace(-1, 1, 32 * 4).reshape(32, 4)[rows]
    x = x + torch.from_numpy(np.random.normal(size=(8, 4)).astype(np.float32))  # noqa: NPY002
    loss = model(x).pow(2).mean()  # Dropout draws from torch's generator
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002


def _same(a: Any, b: Any) -> bool:
    """Exact, recursive equality of (nested) state dicts."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# ------------------------------------------------------------------------- round trips


def test_round_trip_matches_plain_torch(tmp_path: Path) -> None:
    model, optimizer, scheduler = _training()
    _seed_all(1)
    for _ in range(3):
        _step(model, optimizer, scheduler)
    path = save_checkpoint(
        tmp_path / "ckpt.pt", model=model, optimizer=optimizer, scheduler=scheduler
    )
    plain = torch.load(path, weights_only=True)  # what torch itself reads back
    assert plain["format"] == FORMAT
    assert _same(plain["model"], model.state_dict())
    assert _same(plain["optimizer"], optimizer.state_dict())
    assert _same(plain["scheduler"], scheduler.state_dict())

    fresh = _training(seed=99)
    assert not _same(fresh[0].state_dict(), model.state_dict())
    load_checkpoint(path, model=fresh[0], optimizer=fresh[1], scheduler=fresh[2])
    assert _same(fresh[0].state_dict(), model.state_dict())
    assert _same(fresh[1].state_dict(), optimizer.state_dict())
    assert _same(fresh[2].state_dict(), scheduler.state_dict())


def _straight_and_resumed(path: Path, half: int, *, rng: bool) -> tuple[Any, Any]:
    """Train 2 * half steps straight through, and half steps then half more after a
    save and a load into fresh objects in a fresh random state (``rng`` restores it)."""
    _seed_all(0)
    straight = _training()
    for _ in range(2 * half):
        _step(*straight)

    _seed_all(0)
    first = _training()
    for _ in range(half):
        _step(*first)
    save_checkpoint(path, model=first[0], optimizer=first[1], scheduler=first[2])
    _seed_all(12345)  # a new process: other weights, other generator states
    resumed = _training(seed=7)
    load_checkpoint(path, model=resumed[0], optimizer=resumed[1], scheduler=resumed[2], rng=rng)
    for _ in range(half):
        _step(*resumed)
    return straight, resumed


def test_resumed_training_is_bit_for_bit_the_straight_run(tmp_path: Path) -> None:
    straight, resumed = _straight_and_resumed(tmp_path / "half.pt", 3, rng=True)
    assert _same(resumed[0].state_dict(), straight[0].state_dict())
    assert _same(resumed[1].state_dict(), straight[1].state_dict())
    assert resumed[2].get_last_lr() == straight[2].get_last_lr()


def test_resuming_without_rng_state_diverges(tmp_path: Path) -> None:
    # The control for the test above: the RNG entry is what makes it exact.
    straight, resumed = _straight_and_resumed(tmp_path / "c.pt", 2, rng=False)
    assert not _same(resumed[0].state_dict(), straight[0].state_dict())


@given(seed=st.integers(0, 2**32 - 1))
def test_rng_state_restores_all_three_generators(seed: int) -> None:
    _seed_all(seed)
    np.random.normal()  # noqa: NPY002 - leaves a cached Gaussian in NumPy's legacy state
    state = get_rng_state()
    draws = (torch.rand(3), random.random(), np.random.normal(size=3))  # noqa: NPY002
    set_rng_state(state)
    again = (torch.rand(3), random.random(), np.random.normal(size=3))  # noqa: NPY002
    assert torch.equal(draws[0], again[0])
    assert draws[1] == again[1]
    assert np.array_equal(draws[2], again[2])


@FILES
@given(
    extra=st.dictionaries(
        st.text(max_size=5),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner),
            max_leaves=8,
        ),
        max_size=4,
    ),
    width=st.integers(1, 6),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
)
def test_extra_and_model_round_trip(
    tmp_path: Path, extra: dict[str, Any], width: int, dtype: torch.dtype
) -> None:
    model = nn.Linear(width, 3).to(dtype)
    path = save_checkpoint(tmp_path / "x.pt", model=model, extra=extra, rng=False)
    other = nn.Linear(width, 3).to(dtype)
    assert load_checkpoint(path, model=other, rng=False) == extra
    assert _same(other.state_dict(), model.state_dict())


def test_load_keeps_the_model_on_its_device(tmp_path: Path) -> None:
    saved = nn.Linear(3, 2)
    save_checkpoint(tmp_path / "m.pt", model=saved, rng=False)
    with torch.device("meta"):
        target = nn.Linear(3, 2)
    with pytest.warns(UserWarning, match="no-op"):
        load_checkpoint(tmp_path / "m.pt", model=target, rng=False, map_location="cpu")
    assert target.weight.device.type == "meta"


# ------------------------------------------------------------------- atomic writing


def _digest(path: Path) -> bytes:
    return path.read_bytes()


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


CHILD = textwrap.dedent(
    """
    import sys, time, torch
    from torch import nn
    from pytorch_memo.checkpoint import save_checkpoint

    real_save = torch.save

    class Stalling:
        # Passes writes through; after `limit` bytes, says so and waits to be killed.
        def __init__(self, file, limit):
            self.file, self.limit, self.written = file, limit, 0
        def write(self, data):
            count = self.file.write(data)
            self.written += len(data)
            if self.written >= self.limit:
                self.file.flush()
                print("mid-write", flush=True)
                time.sleep(300)
            return count
        def flush(self):
            self.file.flush()

    torch.save = lambda obj, f, *a, **k: real_save(obj, Stalling(f, 200_000), *a, **k)
    torch.manual_seed(1)
    save_checkpoint(sys.argv[1], model=nn.Linear(256, 256), rng=False)
    print("finished", flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_process_killed_mid_save_leaves_the_old_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.manual_seed(0)
    old = nn.Linear(256, 256)
    save_checkpoint(path, model=old, rng=False)
    before = _digest(path)

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], 120)
        assert ready, "the child never reached the middle of its save"
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == "mid-write", f"child said {line!r}; stderr: {child.stderr.read()}"  # type: ignore[union-attr]
        partial = [tmp_path / name for name in _leftovers(tmp_path)]
        assert len(partial) == 1
        assert partial[0].stat().st_size >= 200_000  # the kill came mid-write
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()

    assert _digest(path) == before  # the target was never touched
    fresh = nn.Linear(256, 256)
    load_checkpoint(path, model=fresh, rng=False)
    assert torch.equal(fresh.weight, old.weight)
    # The killed writer's temporary file is left behind, and it is not a checkpoint.
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        load_checkpoint(partial[0], model=fresh, rng=False)


def test_an_exception_mid_save_keeps_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    before = _digest(path)
    real_save = torch.save

    def failing_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        real_save(obj, f, *args, **kwargs)
        f.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    assert _digest(path) == before
    assert _leftovers(tmp_path) == []


def test_a_failed_rename_keeps_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    before = _digest(path)

    def failing_replace(src: Any, dst: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(PermissionError):
        save_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    assert _digest(path) == before
    assert _leftovers(tmp_path) == []


def test_save_fsyncs_the_file_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    save_checkpoint(tmp_path / "c.pt", model=nn.Linear(2, 2), rng=False)
    assert kinds == (["file", "dir"] if os.name == "posix" else ["file"])


def test_save_refuses_extra_that_weights_only_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    with pytest.raises(UnsafeCheckpointError, match=r"pathlib\.PosixPath|pathlib\.\w*Path"):
        save_checkpoint(path, model=nn.Linear(2, 2), extra={"dir": Path("runs")}, rng=False)
    assert not path.exists()
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------ damaged and hostile files


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(tmp_path / "good.pt", model=nn.Linear(64, 64), extra={"step": 1})


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_truncated_file_gives_a_clear_error(saved: Path, keep: float) -> None:
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(Exception) as plain:  # noqa: PT011 - torch's error type varies
        torch.load(saved, weights_only=True)
    assert "good.pt" not in str(plain.value)  # torch's own error does not say which file
    with pytest.raises(CorruptCheckpointError, match=r"good\.pt' is truncated") as caught:
        load_checkpoint(saved, model=nn.Linear(64, 64))
    assert caught.value.path == saved


def test_flipped_bits_in_tensor_data_are_caught(saved: Path) -> None:
    # torch.load itself does not notice: it returns the wrong weights.
    data = bytearray(saved.read_bytes())
    original = torch.load(saved, weights_only=True)["model"]["weight"]
    index = data.index(original.numpy().tobytes()[:64])
    data[index + 10] ^= 0xFF
    saved.write_bytes(bytes(data))
    silently_wrong = torch.load(saved, weights_only=True)["model"]["weight"]
    assert not torch.equal(silently_wrong, original)
    with pytest.raises(CorruptCheckpointError, match=r"fails its CRC-32 check"):
        load_checkpoint(saved, model=nn.Linear(64, 64))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", r"is empty \(0 bytes\)"),
        (b"hello, not a checkpoint", "is not a torch checkpoint: it is not a zip archive"),
        (b"PK\x03\x04" + b"\x00" * 100, "is truncated or damaged"),
    ],
)
def test_not_a_checkpoint_gives_a_clear_error(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=match):
        load_checkpoint(path, model=nn.Linear(2, 2))


def _leave_marker(path: str) -> None:
    """What the hostile pickle below calls when it is unpickled: it creates a file."""
    Path(path).write_text("code ran at load time")


class _Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_leave_marker, (self.marker,))


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = tmp_path / "hostile.pt"
    payload = {"format": FORMAT, "model": nn.Linear(2, 2).state_dict(), "extra": {}}
    payload["extra"]["gift"] = _Hostile(marker)
    torch.save(payload, path)

    with pytest.raises(UnsafeCheckpointError, match="_leave_marker") as caught:
        load_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    assert "weights_only=True" in str(caught.value)
    assert not marker.exists()  # refused before anything ran

    # The control: the file really is hostile; an unsafe load runs the code.
    torch.load(path, weights_only=False)
    assert marker.read_text() == "code ran at load time"


def test_a_whole_pickled_module_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "whole.pt"
    torch.save({"format": FORMAT, "model": nn.Linear(2, 2), "extra": {}}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"torch\.nn\.modules\.linear\.Linear"):
        load_checkpoint(path, model=nn.Linear(2, 2), rng=False)


# ------------------------------------------------------------------------ mismatches


def test_keys_and_shapes_that_do_not_fit_are_named(saved: Path) -> None:
    other = nn.Sequential(nn.Linear(64, 64))  # keys 0.weight, 0.bias
    with pytest.raises(CheckpointMismatchError, match=r"missing keys 0\.weight, 0\.bias"):
        load_checkpoint(saved, model=other, rng=False)
    wrong = nn.Linear(64, 32)
    before = wrong.weight.detach().clone()
    with pytest.raises(
        CheckpointMismatchError, match=r"weight: \(64, 64\) in the file, \(32, 64\)"
    ):
        load_checkpoint(saved, model=wrong, rng=False)
    assert torch.equal(wrong.weight, before)  # nothing was changed


def test_missing_entries_are_named(saved: Path) -> None:
    model = nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(CheckpointMismatchError, match=r"lacks the entries \['optimizer'\]"):
        load_checkpoint(saved, model=model, optimizer=optimizer)


def test_an_optimizer_with_other_groups_is_refused_before_loading(tmp_path: Path) -> None:
    model = nn.Linear(3, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    path = save_checkpoint(tmp_path / "c.pt", model=model, optimizer=optimizer)
    other_model = nn.Linear(3, 3)
    other = torch.optim.SGD(
        [{"params": [other_model.weight]}, {"params": [other_model.bias]}], lr=0.1
    )
    before = other_model.weight.detach().clone()
    with pytest.raises(CheckpointMismatchError, match=r"\[2\] in the file, \[1, 1\]"):
        load_checkpoint(path, model=other_model, optimizer=other)
    assert torch.equal(other_model.weight, before)


def test_a_bare_state_dict_is_not_taken_for_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "sd.pt"
    torch.save(nn.Linear(2, 2).state_dict(), path)
    with pytest.raises(CheckpointMismatchError, match=r"not a pytorch_memo checkpoint.*'weight'"):
        load_checkpoint(path, model=nn.Linear(2, 2))


def test_errors_share_a_base_class(tmp_path: Path) -> None:
    path = tmp_path / "e.pt"
    path.write_bytes(b"x")
    with pytest.raises(CheckpointError):
        load_checkpoint(path, model=nn.Linear(2, 2))


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"model": "net"}, TypeError, r"model must be a torch\.nn\.Module, got str: 'net'"),
        ({"optimizer": 0.1}, TypeError, "optimizer must be a torch.optim.Optimizer or None"),
        ({"scheduler": {}}, TypeError, "scheduler must be an LRScheduler or None, got dict"),
        ({"rng": 1}, TypeError, "rng must be a bool, got int: 1"),
    ],
)
def test_bad_arguments_are_named(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    arguments: dict[str, Any] = {"model": nn.Linear(2, 2), **kwargs}
    with pytest.raises(error, match=match):
        save_checkpoint(tmp_path / "c.pt", **arguments)
    path = save_checkpoint(tmp_path / "ok.pt", model=nn.Linear(2, 2))
    with pytest.raises(error, match=match):
        load_checkpoint(path, **arguments)


def test_bad_paths_are_named(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike, got int: 3"):
        save_checkpoint(3, model=model)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike, got bytes"):
        load_checkpoint(b"c.pt", model=model)  # type: ignore[arg-type]
    with pytest.raises(IsADirectoryError, match="is a directory"):
        save_checkpoint(tmp_path, model=model)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        load_checkpoint(tmp_path, model=model)
    with pytest.raises(FileNotFoundError, match="its directory does not exist"):
        save_checkpoint(tmp_path / "no" / "c.pt", model=model)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "absent.pt", model=model)
    with pytest.raises(TypeError, match="extra must be a mapping"):
        save_checkpoint(tmp_path / "c.pt", model=model, extra=[1])  # type: ignore[arg-type]


def test_set_rng_state_checks_its_input() -> None:
    with pytest.raises(TypeError, match="state must be a mapping"):
        set_rng_state([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing numpy"):
        set_rng_state({"torch": torch.get_rng_state(), "python": random.getstate()})

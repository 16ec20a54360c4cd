"""pytorch_memo.checkpoint: atomic saves (a process killed mid-write), damaged and hostile
files, and exact resumption, checked against plain torch."""

from __future__ import annotations

import contextlib
import copy
import errno
import io
import os
import pickle
import random
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import textwrap
import warnings
import zipfile
from collections.abc import Iterator
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
    UnsupportedCheckpointError,
    UnverifiedCheckpointWarning,
    get_rng_state,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from tests.fileprocs import drop_file_capabilities, forked, permissions_enforced

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


def test_a_model_on_the_meta_device_is_refused_before_the_file_is_read(tmp_path: Path) -> None:
    # torch copies into a meta tensor as a no-op, with a warning per key: nothing loads.
    saved = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    path = save_checkpoint(tmp_path / "m.pt", model=saved, rng=False)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")  # read, it would be a CorruptCheckpointError
    with torch.device("meta"):
        target = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    for source in (path, junk):
        with pytest.raises(
            ValueError,
            match=r"^model must hold tensors to load into, but its 0\.weight, 0\.bias, "
            r"1\.weight, 1\.bias, 1\.running_mean and 2 more are on the meta device .*"
            r"materialise it first with model\.to_empty\(device=\.\.\.\)$",
        ):
            load_checkpoint(source, model=target, rng=False, map_location="cpu")
    assert target[0].weight.is_meta
    one_buffer = nn.BatchNorm1d(2)
    one_buffer.running_var = torch.empty(2, device="meta")
    with pytest.raises(ValueError, match=r"but its running_var is on the meta device"):
        load_checkpoint(tmp_path / "m.pt", model=one_buffer, rng=False)
    target.to_empty(device="cpu")  # what the message says: then it loads
    load_checkpoint(path, model=target, rng=False)
    assert _same(target.state_dict(), saved.state_dict())
    assert target[0].weight.device.type == "cpu"


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
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 120)
        assert ready, "the child never reached the middle of its save"
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
    # Python 3.13 names the class pathlib._local.PosixPath
    with pytest.raises(UnsafeCheckpointError, match=r"pathlib\.(?:_local\.)?\w*Path"):
        save_checkpoint(path, model=nn.Linear(2, 2), extra={"dir": Path("runs")}, rng=False)
    assert not path.exists()
    assert _leftovers(tmp_path) == []


_MODULE_LAMBDA = lambda: 0  # pickled by name: "<lambda>" finds no object


@pytest.mark.parametrize(
    ("make", "match"),
    [
        # before: a bare AttributeError; Python 3.13 says "Can't get local object"
        (lambda: lambda: 0, "Can't (?:pickle|get) local object"),
        (lambda: (i for i in range(2)), "cannot pickle 'generator' object"),  # a TypeError
        (lambda: _MODULE_LAMBDA, "attribute lookup <lambda> on tests.test_checkpoint failed"),
    ],
)
def test_save_refuses_extra_that_pickle_cannot_save(make: Any, match: str, tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    with pytest.raises(UnsafeCheckpointError, match=rf"c\.pt.*pickle cannot save .*{match}"):
        save_checkpoint(path, model=nn.Linear(2, 2), extra={"x": make()}, rng=False)
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
        (b"hello, not a checkpoint", "is not a torch checkpoint: it is neither a zip archive"),
        (b"PK\x03\x04" + b"\x00" * 100, "is truncated or damaged"),
        # an empty zip archive: before, "its pickle cannot be read (... operand 80)"
        (b"PK\x05\x06" + b"\x00" * 18, "is a zip archive, but not one torch.save writes"),
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
    extra: dict[str, object] = {}
    payload = {"format": FORMAT, "model": nn.Linear(2, 2).state_dict(), "extra": extra}
    extra["gift"] = _Hostile(marker)
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
    groups: list[dict[str, Any]] = [
        {"params": [other_model.weight]},
        {"params": [other_model.bias]},
    ]
    other = torch.optim.SGD(groups, lr=0.1)
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


# ------------------------------------------------------------- what save replaces (2)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and device nodes are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_save_refuses_a_fifo_or_a_device_and_leaves_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "ckpt.pt"
    if kind == "fifo":
        os.mkfifo(path)
        words = r"a FIFO \(named pipe\)"
    else:
        try:  # the character device 1:3 (/dev/null's); needs CAP_MKNOD
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            path.symlink_to("/dev/null")  # a link to one is refused as well
        words = "a character device"
    before = path.lstat()
    with pytest.raises(shutil.SpecialFileError, match=rf"'.*ckpt\.pt' is {words}, not a regular"):
        save_checkpoint(path, model=nn.Linear(2, 2))
    after = path.lstat()
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode,
        before.st_ino,
        before.st_rdev,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    # Loading one is refused without opening it (a FIFO would block), not called corrupt.
    with pytest.raises(shutil.SpecialFileError, match=rf"'.*ckpt\.pt' is {words}"):
        load_checkpoint(path, model=nn.Linear(2, 2))


def test_save_replaces_a_symlink_and_keeps_the_checkpoint_it_named(tmp_path: Path) -> None:
    torch.manual_seed(0)
    old, new = nn.Linear(2, 2), nn.Linear(2, 2)
    save_checkpoint(tmp_path / "epoch3.pt", model=old, extra={"epoch": 3})
    (tmp_path / "latest.pt").symlink_to("epoch3.pt")
    assert load_checkpoint(tmp_path / "latest.pt", model=nn.Linear(2, 2)) == {"epoch": 3}
    save_checkpoint(tmp_path / "latest.pt", model=new, extra={"epoch": 4})
    assert not (tmp_path / "latest.pt").is_symlink()
    assert load_checkpoint(tmp_path / "latest.pt", model=nn.Linear(2, 2)) == {"epoch": 4}
    assert load_checkpoint(tmp_path / "epoch3.pt", model=nn.Linear(2, 2)) == {"epoch": 3}


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444], ids=oct)
def test_save_keeps_the_permissions_of_the_checkpoint_it_replaces(
    tmp_path: Path, mode: int
) -> None:
    # As torch.save writing over it would: a private checkpoint is not made readable.
    path = tmp_path / "ckpt.pt"
    old = os.umask(0o022)
    try:
        save_checkpoint(path, model=nn.Linear(2, 2), extra={"epoch": 1})
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # a new file: the umask's
        path.chmod(mode)
        save_checkpoint(path, model=nn.Linear(2, 2), extra={"epoch": 2})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert load_checkpoint(path, model=nn.Linear(2, 2)) == {"epoch": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_long_names_and_nul_bytes(tmp_path: Path) -> None:
    long_name = "c" * 250 + ".pt"  # fits NAME_MAX; its temporary's name must too
    path = save_checkpoint(tmp_path / long_name, model=nn.Linear(2, 2))
    assert load_checkpoint(path, model=nn.Linear(2, 2)) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == [long_name]
    for call in (save_checkpoint, load_checkpoint):
        with pytest.raises(
            ValueError, match=r"path must not contain a NUL byte \(at index \d+\), got '.*c\\x00'"
        ):
            call(f"{tmp_path}/c\x00", model=nn.Linear(2, 2))


# ------------------------------------------------------- nothing changes unless all fits (3)


def _everything(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    model, optimizer, scheduler = _training(seed)
    _seed_all(seed)
    for _ in range(2):
        _step(model, optimizer, scheduler)
    return model, optimizer, scheduler


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> Any:
    return (
        {k: v.clone() for k, v in model.state_dict().items()},
        copy.deepcopy(optimizer.state_dict()),
        copy.deepcopy(scheduler.state_dict()),
        get_rng_state(),
        model.training,
    )


def _good_payload(tmp_path: Path) -> dict[str, Any]:
    saved = _everything(seed=5)
    path = save_checkpoint(
        tmp_path / "good.pt", model=saved[0], optimizer=saved[1], scheduler=saved[2]
    )
    payload: dict[str, Any] = torch.load(path, weights_only=True)
    return payload


def _numpy_keys_too_short(p: dict[str, Any]) -> None:
    p["rng"]["numpy"]["keys"] = p["rng"]["numpy"]["keys"][:10]


def _python_state_refused(p: dict[str, Any]) -> None:
    # Passes the shape check; random.setstate refuses it after torch's state was set.
    p["rng"]["python"] = (3, (1,) * 10, None)


def _numpy_state_refused(p: dict[str, Any]) -> None:
    # Set after torch's and Python's: both must be put back.
    p["rng"]["numpy"]["pos"] = 10**6


def _torch_state_wrong_size(p: dict[str, Any]) -> None:
    p["rng"]["torch"] = p["rng"]["torch"][:100]


def _no_optimizer_state(p: dict[str, Any]) -> None:
    del p["optimizer"]["state"]


def _optimizer_step_missing(p: dict[str, Any]) -> None:
    # AdamW's __setstate__ reads each state's "step" after installing the new state:
    # a failure after the optimizer has changed, which must be undone.
    for state in p["optimizer"]["state"].values():
        del state["step"]


def _sgd_groups(p: dict[str, Any]) -> None:
    group = p["optimizer"]["param_groups"][0]
    for key in ["betas", "eps", "amsgrad", "capturable", "decoupled_weight_decay"]:
        group.pop(key, None)
    group.update(momentum=0.9, dampening=0.0, nesterov=False)


def _cosine_scheduler(p: dict[str, Any]) -> None:
    scheduler = p["scheduler"]
    del scheduler["step_size"], scheduler["gamma"]
    scheduler.update(T_max=10, eta_min=0.0)


def _scheduler_for_two_groups(p: dict[str, Any]) -> None:
    p["scheduler"]["base_lrs"] = [0.01, 0.01]


def _scheduler_epoch_is_text(p: dict[str, Any]) -> None:
    p["scheduler"]["last_epoch"] = "three"


def _model_value_not_a_tensor(p: dict[str, Any]) -> None:
    p["model"]["0.weight"] = "weights"


def _model_complex(p: dict[str, Any]) -> None:
    p["model"]["0.bias"] = p["model"]["0.bias"].to(torch.complex64)


BROKEN = {
    "rng numpy keys too short": (
        _numpy_keys_too_short,
        r"state\['numpy'\]\['keys'\] must hold 624",
    ),
    "rng python refused": (_python_state_refused, r"state\['python'\] was refused"),
    "rng numpy refused": (_numpy_state_refused, r"state\['numpy'\]\['pos'\] must be an int"),
    "rng torch wrong size": (_torch_state_wrong_size, r"state\['torch'\] was refused"),
    "optimizer without state": (_no_optimizer_state, "optimizer entry whose state is None"),
    "optimizer step missing": (_optimizer_step_missing, r"optimizer entry was refused \(KeyError"),
    "optimizer of another kind": (_sgd_groups, r"another kind of object than the AdamW's"),
    "scheduler of another kind": (_cosine_scheduler, r"T_max.*which the StepLR lacks"),
    "scheduler for two groups": (_scheduler_for_two_groups, "base_lrs has 2 entries in the file"),
    "scheduler epoch is text": (_scheduler_epoch_is_text, "last_epoch is 'three' in the file"),
    "model value not a tensor": (_model_value_not_a_tensor, "0.weight: 'weights' in the file"),
    "model complex": (_model_complex, "0.bias: torch.complex64 in the file, torch.float32"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_checkpoint_that_does_not_fit_changes_nothing(tmp_path: Path, case: str) -> None:
    payload = _good_payload(tmp_path)
    damage, match = BROKEN[case]
    damage(payload)
    torch.save(payload, tmp_path / "bad.pt")

    target = _everything(seed=0)
    _seed_all(77)
    before = _snapshot(*target)
    with pytest.raises(CheckpointMismatchError, match=match) as caught:
        load_checkpoint(
            tmp_path / "bad.pt", model=target[0], optimizer=target[1], scheduler=target[2]
        )
    assert caught.value.path == tmp_path / "bad.pt"
    assert _same(_snapshot(*target), before)  # model, optimizer, scheduler, generators
    # ... and the objects still work: one more step matches an untouched copy's.
    twin = _everything(seed=0)
    _seed_all(3)
    _step(*target)
    _seed_all(3)
    _step(*twin)
    assert _same(target[0].state_dict(), twin[0].state_dict())


def test_a_model_that_fails_to_load_puts_the_rest_back(tmp_path: Path) -> None:
    # The model is loaded last; if it still raises (a module's own hook), the optimizer,
    # scheduler and generators, already set, are put back.
    saved = _everything(seed=5)
    path = save_checkpoint(
        tmp_path / "c.pt", model=saved[0], optimizer=saved[1], scheduler=saved[2]
    )
    target = _everything(seed=0)

    def refuse(module: nn.Module, incompatible: Any) -> None:
        raise RuntimeError("this module refuses loaded weights")

    target[0].register_load_state_dict_post_hook(refuse)
    _seed_all(77)
    _, optimizer_before, scheduler_before, rng_before, _ = _snapshot(*target)
    with pytest.raises(CheckpointMismatchError, match=r"model entry was refused.*refuses loaded"):
        load_checkpoint(path, model=target[0], optimizer=target[1], scheduler=target[2])
    _, optimizer_after, scheduler_after, rng_after, _ = _snapshot(*target)
    assert _same(optimizer_after, optimizer_before)
    assert _same(scheduler_after, scheduler_before)
    assert _same(rng_after, rng_before)


def test_set_rng_state_changes_all_generators_or_none() -> None:
    good = get_rng_state()
    _seed_all(1)
    before = get_rng_state()
    bad = copy.deepcopy(good)
    bad["numpy"]["keys"] = bad["numpy"]["keys"] + 2**32  # out of range for uint32
    with pytest.raises(ValueError, match=r"state\['numpy'\]\['keys'\] must hold 32-bit unsigned"):
        set_rng_state(bad)
    bad = copy.deepcopy(good)
    bad["python"] = (3, tuple(range(10)), None)  # random.setstate refuses it, after torch
    with pytest.raises(ValueError, match=r"state\['python'\] was refused: ValueError"):
        set_rng_state(bad)
    assert _same(get_rng_state(), before)
    for entry, value, error, match in [
        ("torch", "state", TypeError, r"state\['torch'\] must be a uint8 tensor"),
        ("torch", torch.zeros(5056), ValueError, r"1-D uint8 tensor .* torch\.float32"),
        ("python", "state", TypeError, r"state\['python'\] must be random\.getstate"),
        ("numpy", [], TypeError, r"state\['numpy'\] must be a mapping, got list"),
    ]:
        with pytest.raises(error, match=match):
            set_rng_state({**good, entry: value})
    assert _same(get_rng_state(), before)


# --------------------------------------------------- damaged files and wrong content (4)


def _central_entries(data: bytes) -> list[int]:
    found, at = [], data.find(b"PK\x01\x02")
    while at != -1:
        found.append(at)
        at = data.find(b"PK\x01\x02", at + 1)
    return found


def _local_entries(data: bytes) -> list[int]:
    found, at = [], data.find(b"PK\x03\x04")
    while at != -1:
        found.append(at)
        at = data.find(b"PK\x03\x04", at + 1)
    return found


def _name_byte_ff(data: bytearray) -> None:
    central = _central_entries(bytes(data))[0]
    data[central + 46 + 2] = 0xFF  # the record's name, flagged UTF-8 by torch's writer


def _method_99(data: bytearray) -> None:
    for central in _central_entries(bytes(data)):
        struct.pack_into("<H", data, central + 10, 99)
    for local in _local_entries(bytes(data)):
        struct.pack_into("<H", data, local + 8, 99)


def _method_deflate(data: bytearray) -> None:
    struct.pack_into("<H", data, _central_entries(bytes(data))[0] + 10, 8)
    struct.pack_into("<H", data, _local_entries(bytes(data))[0] + 8, 8)


def _encrypted(data: bytearray) -> None:
    central = _central_entries(bytes(data))[0]
    flags = struct.unpack_from("<H", data, central + 8)[0]
    struct.pack_into("<H", data, central + 8, flags | 0x1)


def _header_offset_past_the_end(data: bytearray) -> None:
    struct.pack_into("<I", data, _central_entries(bytes(data))[1] + 42, len(data) + 10_000)


def _local_magic_broken(data: bytearray) -> None:
    data[_local_entries(bytes(data))[2] + 2] ^= 0xFF


SURGERY = {
    "name byte 0xff": (_name_byte_ff, r"is truncated or damaged.*UnicodeDecodeError|codec can't"),
    "compression method 99": (_method_99, r"is compressed \(zip method 99\)"),
    "compression method deflate": (_method_deflate, r"is compressed \(zip method 8\)"),
    "encrypted flag": (_encrypted, r"record 'archive/data\.pkl' is marked encrypted"),
    "header offset past the end": (_header_offset_past_the_end, r"cannot be read"),
    "local header magic broken": (_local_magic_broken, r"cannot be read \(Bad magic number"),
}


@pytest.mark.parametrize("case", list(SURGERY))
def test_damaged_bytes_are_a_corrupt_checkpoint_naming_the_file(saved: Path, case: str) -> None:
    surgery, match = SURGERY[case]
    data = bytearray(saved.read_bytes())
    surgery(data)
    saved.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=match) as caught:
        load_checkpoint(saved, model=nn.Linear(64, 64))
    assert str(caught.value).startswith(f"checkpoint '{saved}' ")


def _rebuilt(source: Path, target: Path, pickle_bytes: bytes) -> Path:
    """``source`` with its data.pkl replaced: a valid zip, CRCs and all."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = pickle_bytes if info.filename.endswith("/data.pkl") else old.read(info)
            new.writestr(info.filename, data)
    return target


def test_a_pickle_weights_only_cannot_read_is_corrupt_not_unsafe(saved: Path) -> None:
    # Opcode 0xff exists in no pickle protocol: no global is involved, so nothing unsafe.
    path = _rebuilt(saved, saved.parent / "junk.pt", b"\x80\x02\xff.")
    with pytest.raises(CorruptCheckpointError, match=r"Unsupported operand 255"):
        load_checkpoint(path, model=nn.Linear(64, 64))


def _payload_with(**entries: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "format": FORMAT,
        "model": nn.Linear(2, 2).state_dict(),
        "rng": get_rng_state(),
        "extra": {},
    }
    payload.update(entries)
    return payload


WRONG_CONTENT = {
    "model is a list": (
        _payload_with(model=[1, 2]),
        "model entry that is a list, not a state_dict",
    ),
    "model is a tensor": (
        _payload_with(model=torch.ones(2)),
        "model entry that is a torch.float32",
    ),
    "model keys are ints": (_payload_with(model={0: torch.ones(2)}), "keys are not all names: 0"),
    "model value is a list": (
        _payload_with(model={"weight": [1.0], "bias": torch.zeros(2)}),
        "weight: a list in the file, a tensor in the model",
    ),
    "extra is a list": (_payload_with(extra=[1]), "extra entry that is a list, not a dict"),
    "format is a tensor": (_payload_with(format=torch.ones(3)), "not a pytorch_memo checkpoint"),
    "keys of mixed types": (
        {"format": FORMAT, 1: 2, "b": 3},
        r"lacks the entries \['model', 'extra', 'rng'\] \(it has \['format', 1, 'b'\]\)",
    ),
    "rng is a string": (_payload_with(rng="seed"), "state must be a mapping from get_rng_state"),
    "rng numpy is a list": (
        _payload_with(rng={**get_rng_state(), "numpy": [1]}),
        r"state\['numpy'\] must be a mapping",
    ),
    "rng python is a string": (
        _payload_with(rng={**get_rng_state(), "python": "x"}),
        r"state\['python'\] must be random\.getstate",
    ),
}


@pytest.mark.parametrize("case", list(WRONG_CONTENT))
def test_wrong_content_is_a_mismatch_naming_the_file(tmp_path: Path, case: str) -> None:
    payload, match = WRONG_CONTENT[case]
    path = tmp_path / "wrong.pt"
    torch.save(payload, path)
    model = nn.Linear(2, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointMismatchError, match=match) as caught:
        load_checkpoint(path, model=model)
    assert str(caught.value).startswith(f"checkpoint '{path}' ")
    assert _same(model.state_dict(), before)


def test_wrong_optimizer_and_scheduler_entries_are_mismatches(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    good = _payload_with(optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict())
    cases: list[tuple[dict[str, Any], str]] = [
        ({"optimizer": [1]}, "optimizer entry without param_groups"),
        ({"optimizer": {"state": {}, "param_groups": [{"params": "ab"}]}}, "list of parameter"),
        (
            {"optimizer": {"state": {7: {}}, "param_groups": [{"params": [0, 1], "lr": 0.1}]}},
            "state for parameter id 7, which no group lists",
        ),
        (
            {"optimizer": {"state": {0: [1]}, "param_groups": [{"params": [0, 1], "lr": 0.1}]}},
            "state for parameter 0 that is not a dict",
        ),
        (
            {"optimizer": {"state": {}, "param_groups": [{"params": [0, 0], "lr": 0.1}]}},
            "repeat a parameter id",
        ),
        (
            {
                "optimizer": {
                    **good["optimizer"],
                    "param_groups": [{**good["optimizer"]["param_groups"][0], "lr": "fast"}],
                }
            },
            r"param_groups\[0\]\['lr'\] is 'fast' in the file, 0\.1 here",
        ),
        ({"scheduler": "steps"}, "scheduler entry that is 'steps', not a state_dict"),
    ]
    for change, match in cases:
        path = tmp_path / "c.pt"
        torch.save({**good, **change}, path)
        with pytest.raises(CheckpointMismatchError, match=match):
            load_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, rng=False)


def test_a_lazy_model_is_materialised_from_the_checkpoint(tmp_path: Path) -> None:
    saved = nn.Linear(3, 2)
    path = save_checkpoint(tmp_path / "c.pt", model=saved, rng=False)
    lazy = nn.LazyLinear(2)
    load_checkpoint(path, model=lazy, rng=False)
    assert torch.equal(lazy.weight, saved.weight)


# --------------------------------------------------------------- map_location first (5)


@pytest.mark.parametrize(
    ("map_location", "error", "match"),
    [
        ("gpu", ValueError, r"map_location='gpu' is not a device string: expected e\.g\."),
        ("cpu:1", ValueError, r"map_location must be 'cpu' or 'cpu:0' for the CPU, got 'cpu:1'"),
        (
            torch.device("cpu", 1),
            ValueError,
            r"map_location must be 'cpu' or 'cpu:0' for the CPU, got device\(type='cpu', index=1\)",
        ),
        ("meta", ValueError, r"map_location 'meta': meta tensors hold no data"),
        (3, TypeError, r"map_location must be a str or a torch\.device, got int: 3"),
        ("xla", RuntimeError, r"map_location 'xla' names a xla device, which is not available"),
    ],
)
def test_a_bad_map_location_is_named_and_the_file_is_not_called_corrupt(
    saved: Path, map_location: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match) as caught:
        load_checkpoint(saved, model=nn.Linear(64, 64), map_location=map_location)
    assert not isinstance(caught.value, CheckpointError)


def test_map_location_cuda_loads_on_a_gpu_and_is_refused_without_one(saved: Path) -> None:
    model = nn.Linear(64, 64)
    expected = torch.load(saved, weights_only=True)["model"]
    if torch.cuda.is_available():
        assert load_checkpoint(saved, model=model, map_location="cuda") == {"step": 1}
        assert torch.equal(model.weight, expected["weight"])
        index = torch.cuda.device_count()
        with pytest.raises(RuntimeError, match=rf"names cuda device {index}, but this machine"):
            load_checkpoint(saved, model=model, map_location=f"cuda:{index}")
    else:
        with pytest.raises(RuntimeError, match=r"'cuda' names a cuda device, which is not avail"):
            load_checkpoint(saved, model=model, map_location="cuda")
    # "cpu:0" is the CPU, though torch.load itself refuses the spelling.
    assert load_checkpoint(saved, model=model, map_location="cpu:0") == {"step": 1}
    assert load_checkpoint(saved, model=model, map_location=torch.device("cpu")) == {"step": 1}
    assert torch.equal(model.weight, expected["weight"])


# ------------------------- issue 24: valid files are never refused, true messages (D2-D10)


@contextlib.contextmanager
def _crc32_off() -> Iterator[None]:
    """torch.save writes no CRC-32 meanwhile (a documented torch option)."""
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(before)


def test_a_checkpoint_written_without_crcs_loads_with_a_warning(tmp_path: Path) -> None:
    # D2: before, "record 'archive/data.pkl' fails its CRC-32 check" for the file
    # save_checkpoint itself wrote, which torch.load reads.
    torch.manual_seed(0)
    saved, fresh = nn.Linear(4, 3), nn.Linear(4, 3)
    with _crc32_off():
        path = save_checkpoint(tmp_path / "c.pt", model=saved, extra={"step": 2})
    with zipfile.ZipFile(path) as archive:
        assert {info.CRC for info in archive.infolist()} == {0}  # no checksums at all
    assert torch.equal(torch.load(path, weights_only=True)["model"]["weight"], saved.weight)
    with pytest.warns(UnverifiedCheckpointWarning, match=r"c\.pt' has no CRC-32 checksums"):
        assert load_checkpoint(path, model=fresh) == {"step": 2}
    assert torch.equal(fresh.weight, saved.weight)
    assert torch.equal(fresh.bias, saved.bias)


def test_a_zeroed_crc_in_a_checkpoint_with_crcs_is_still_caught(saved: Path) -> None:
    # The other side of D2: only an archive with no CRC at all loads unverified; one
    # record's CRC set to 0 in a file that has them fails the check.
    data = bytearray(saved.read_bytes())
    struct.pack_into("<I", data, _central_entries(bytes(data))[0] + 16, 0)
    saved.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=r"'archive/data\.pkl' fails its CRC-32"):
        load_checkpoint(saved, model=nn.Linear(64, 64))


def _central_directory_moved(data: bytearray, by: int) -> None:
    """Shift where the end records (zip64's and the classic one) say the index starts."""
    zip64 = bytes(data).rfind(b"PK\x06\x06")  # torch's writer adds a zip64 end record
    if zip64 != -1:
        struct.pack_into("<Q", data, zip64 + 48, struct.unpack_from("<Q", data, zip64 + 48)[0] + by)
    end = bytes(data).rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 16, struct.unpack_from("<I", data, end + 16)[0] + by)


def test_a_damaged_end_record_is_a_corrupt_checkpoint(saved: Path) -> None:
    # D7: before, an index offset past its real place made zipfile seek before the
    # file's start: OSError [Errno 22] Invalid argument, no CheckpointError.
    data = bytearray(saved.read_bytes())
    _central_directory_moved(data, 4096)
    saved.write_bytes(bytes(data))
    with pytest.raises(
        CorruptCheckpointError, match=r"good\.pt' is .*(before the start of|Corrupt zip64 end)"
    ):
        load_checkpoint(saved, model=nn.Linear(64, 64))


def test_every_bit_flip_in_the_end_of_the_file_loads_right_or_is_a_checkpoint_error(
    tmp_path: Path,
) -> None:
    # D7: all 960 flips of the last 120 bytes (the central directory's end and the end
    # record); before, 58 of them raised a bare OSError.
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    path = save_checkpoint(tmp_path / "c.pt", model=model, rng=False)
    good = path.read_bytes()
    outcomes: dict[str, int] = {}
    paths = set()
    for position in range(len(good) - 120, len(good)):
        for bit in range(8):
            data = bytearray(good)
            data[position] ^= 1 << bit
            path.write_bytes(bytes(data))
            fresh = nn.Linear(3, 2)
            try:
                load_checkpoint(path, model=fresh, rng=False)
            except CheckpointError as error:
                paths.add(error.path)
                outcomes[type(error).__name__] = outcomes.get(type(error).__name__, 0) + 1
            else:  # a flip in a field zipfile does not use: the same data
                assert torch.equal(fresh.weight, model.weight)
                assert torch.equal(fresh.bias, model.bias)
                outcomes["loaded"] = outcomes.get("loaded", 0) + 1
    assert sum(outcomes.values()) == 960
    assert paths == {path}
    assert outcomes.get("CorruptCheckpointError", 0) > 0


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_legacy_format_file_is_named_as_such(tmp_path: Path, protocol: int) -> None:
    # D8: before, "is not a torch checkpoint: it is not a zip archive", which is false.
    path = tmp_path / "old.pt"
    payload = _payload_with()
    torch.save(payload, path, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    if protocol == 2:  # torch reads it, with no checksum to check
        assert torch.load(path, weights_only=True)["format"] == FORMAT
    with pytest.raises(UnsupportedCheckpointError, match=r"old\.pt' is in torch's legacy format"):
        load_checkpoint(path, model=nn.Linear(2, 2))


def test_a_tar_archive_is_named_as_torchs_oldest_format(tmp_path: Path) -> None:
    # torch before 0.4 wrote a tar archive (torch.load still tries it first).
    path = tmp_path / "ancient.pt"
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("storages")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(UnsupportedCheckpointError, match=r"tar format \(torch before 0\.4\)"):
        load_checkpoint(path, model=nn.Linear(2, 2))


def test_a_file_that_is_no_torch_format_is_still_not_a_checkpoint(tmp_path: Path) -> None:
    # The other side of D8: a pickle that is not torch's legacy format.
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=2))
    with pytest.raises(CorruptCheckpointError, match=r"is not a torch checkpoint: it is neither"):
        load_checkpoint(path, model=nn.Linear(2, 2))


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_pickle_protocols_load_or_get_a_true_message(tmp_path: Path, protocol: int) -> None:
    # D9: before, protocols 0, 1, 4 and 5 were "corrupt: its pickle cannot be read",
    # and protocol 3, under warnings as errors, "could not be read: UserWarning".
    path = tmp_path / "p.pt"
    model = nn.Linear(2, 2)
    torch.save(_payload_with(model=model.state_dict()), path, pickle_protocol=protocol)
    warned: Any = contextlib.nullcontext()
    if protocol > 2:  # torch.load warns about a PROTO opcode but 2's, even for one it reads
        warned = pytest.warns(UserWarning, match=f"Detected pickle protocol {protocol}")
    readable = protocol in (2, 3)  # torch 2.15's weights-only unpickler lacks the others'
    if readable:
        with warned:
            assert torch.load(path, weights_only=True)["format"] == FORMAT
    else:
        with pytest.raises(pickle.UnpicklingError, match="Unsupported operand"), warned:
            torch.load(path, weights_only=True)
    fresh = nn.Linear(2, 2)
    if readable:
        assert load_checkpoint(path, model=fresh) == {}
        assert torch.equal(fresh.weight, model.weight)
    else:
        opcode = {0: r"DICT \(100\)", 1: r"INT \(73\)"}.get(protocol, r"FRAME \(149\)")
        with pytest.raises(
            UnsupportedCheckpointError,
            match=rf"p\.pt' uses pickle protocol {protocol} .*: its pickle is well-formed but "
            rf"holds the opcode {opcode}, which torch\.load\(weights_only=True\) cannot read",
        ) as caught:
            load_checkpoint(path, model=fresh)
        assert not isinstance(caught.value, CorruptCheckpointError)


def test_a_damaged_protocol_4_pickle_is_still_corrupt(saved: Path) -> None:
    # The other side of D9: protocol 4 declared, then an opcode no protocol has.
    path = _rebuilt(saved, saved.parent / "junk4.pt", b"\x80\x04\xff.")
    with pytest.raises(CorruptCheckpointError, match=r"Unsupported operand 255"):
        load_checkpoint(path, model=nn.Linear(64, 64))


def _with_buffer(dtype: torch.dtype) -> nn.Module:
    module = nn.Linear(2, 2)
    module.register_buffer("b", torch.zeros(3, dtype=dtype))
    return module


REFUSED_DTYPES = [  # (values in the file, the model's dtype, what the message says)
    (torch.tensor([float("nan"), 1.5, -2.0]), torch.int64, "floating-point values would"),
    (torch.tensor([0.0, 0.5, -2.0]), torch.bool, "floating-point values would be cast to bool"),
    (torch.tensor([0, 1, 2]), torch.bool, "integer values would be cast to bool"),
    (torch.tensor([1 + 1j, 2, 3]), torch.float32, "complex values would be cast to floating"),
    (torch.tensor([1, 2, 300]), torch.int8, "its values from 1 to 300 do not fit torch.int8"),
    (torch.tensor([-1, 2, 3]), torch.uint8, "its values from -1 to 3 do not fit torch.uint8"),
    (torch.tensor([1.0, 2.0, 1e5]), torch.float16, "its values from 1 to 100000 do not fit"),
    (
        torch.tensor([1, 2, 2**40]),
        torch.float16,
        "its values from 1 to 1099511627776 do not fit torch.float16, whose finite",
    ),
]


@pytest.mark.parametrize(("values", "dtype", "match"), REFUSED_DTYPES)
def test_a_dtype_that_would_change_values_is_refused_before_anything_changes(
    tmp_path: Path, values: torch.Tensor, dtype: torch.dtype, match: str
) -> None:
    # D10: before, load_state_dict's copy_ cast silently (NaN to -2**63, 0.5 to True).
    source = _with_buffer(values.dtype)
    source.b = values
    path = tmp_path / "c.pt"
    torch.save(_payload_with(model=source.state_dict()), path)
    model = _with_buffer(dtype)
    before = copy.deepcopy(model.state_dict())
    rng_before = torch.get_rng_state()
    torch.rand(3)  # the generator moves on: a restore from the file would show
    moved = torch.get_rng_state()
    assert not torch.equal(moved, rng_before)
    with pytest.raises(CheckpointMismatchError, match="dtype mismatches") as caught:
        load_checkpoint(path, model=model)
    assert f"b: {values.dtype} in the file, {dtype} in the model ({match}" in str(caught.value)
    assert _same(model.state_dict(), before)
    assert torch.equal(torch.get_rng_state(), moved)


ACCEPTED_DTYPES = [  # casts that keep the kind or widen it, values in range: rounding only
    (torch.tensor([1.0, 2.5, -3.0], dtype=torch.float16), torch.float32),
    (torch.tensor([1.0, 2.5, 1e-3]), torch.float16),
    (torch.tensor([1.0, 2.5, -3.0]), torch.bfloat16),
    (torch.tensor([1, 2, 100]), torch.int8),
    (torch.tensor([1, 2, 2**40]), torch.float32),
    (torch.tensor([True, False, True]), torch.float32),
    (torch.tensor([1.0, float("inf"), float("nan")]), torch.float16),
    (torch.tensor([1.0, 2.0, 3.0]), torch.complex64),
]


@pytest.mark.parametrize(("values", "dtype"), ACCEPTED_DTYPES)
def test_a_dtype_cast_that_keeps_the_values_kind_and_range_loads(
    tmp_path: Path, values: torch.Tensor, dtype: torch.dtype
) -> None:
    source = _with_buffer(values.dtype)
    source.b = values
    path = tmp_path / "c.pt"
    torch.save(_payload_with(model=source.state_dict()), path)
    model = _with_buffer(dtype)
    assert load_checkpoint(path, model=model) == {}
    assert model.b.dtype == dtype  # the model's own dtype, the values rounded as copy_ does
    torch.testing.assert_close(model.b, values.to(dtype), rtol=0, atol=0, equal_nan=True)


# ---------------------------------------------------------------- failed saves (10)


def _fill_until_full(path: Path, size: int) -> dict[str, Any]:
    """In a forked child: save a checkpoint under a file size limit of ``size`` bytes."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    torch.manual_seed(1)
    save_checkpoint(path, model=nn.Linear(256, 256), rng=False)  # about 260 kB
    return {}


@pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE and fork are POSIX")
@pytest.mark.parametrize("limit", [1_000, 100_000])  # in the pickle, in the tensor data
def test_a_file_size_limit_is_an_efbig_error_naming_the_path(tmp_path: Path, limit: int) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    before = path.read_bytes()
    kind, detail = forked(lambda: _fill_until_full(path, limit))
    assert kind == "raised", (kind, detail)
    name, message, number = detail
    assert (name, number) == ("OSError", errno.EFBIG), detail
    assert message.startswith(f"[Errno {errno.EFBIG}] could not write '{path}': File too large")
    assert "a file size limit was reached" in message
    assert f"'{path}' is unchanged" in message
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_full_disk_inside_torch_save_is_an_enospc_error_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No real full disk here (no tmpfs without root mounts); the write fails inside
    # torch's zip writer, as a full disk makes it (RLIMIT_FSIZE above is the real thing).
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model=nn.Linear(2, 2), rng=False)
    before = path.read_bytes()
    real_save = torch.save

    class Full:
        def __init__(self, file: Any) -> None:
            self.file, self.written = file, 0

        def write(self, data: Any) -> int:
            if self.written + len(data) > 5_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return int(self.file.write(data))

        def flush(self) -> None:
            self.file.flush()

    def full_save(obj: object, f: Any, *a: Any, **k: Any) -> None:
        # Full is a bare writer (write and flush: what torch's zip writer calls), no IO[bytes]
        real_save(obj, Full(f), *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(torch, "save", full_save)
    with pytest.raises(
        OSError,
        match=r"could not write '.*ckpt\.pt': No space left on device \(ENOSPC: the device is full\)",
    ) as caught:
        save_checkpoint(path, model=nn.Linear(64, 64), rng=False)
    assert caught.value.errno == errno.ENOSPC
    assert "enforce fail" not in str(caught.value)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_read_only_directory_is_a_permission_error_naming_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = save_checkpoint(folder / "ckpt.pt", model=nn.Linear(2, 2), rng=False)
    before = path.read_bytes()
    folder.chmod(0o555)
    try:
        if not permissions_enforced(folder):
            pytest.skip("file permissions are not enforced here even without CAP_DAC_OVERRIDE")

        def save() -> None:
            drop_file_capabilities()  # root is refused too
            save_checkpoint(path, model=nn.Linear(2, 2), rng=False)

        kind, (name, message, number) = forked(save)
        # Reading needs no write permission: load is refused nothing.
        assert load_checkpoint(path, model=nn.Linear(2, 2), rng=False) == {}
    finally:
        folder.chmod(0o755)
    assert (kind, name, number) == ("raised", "PermissionError", errno.EACCES)
    assert f"could not write '{path}': Permission denied (EACCES" in message
    assert path.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt.pt"]


# ------------------------------------------------------------------- more hostile input


def test_meta_tensors_are_refused_on_save_and_on_load(tmp_path: Path) -> None:
    with torch.device("meta"):
        shapes_only = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"model must hold data to save, but its weight, bias"):
        save_checkpoint(tmp_path / "c.pt", model=shapes_only)
    assert list(tmp_path.iterdir()) == []
    path = tmp_path / "meta.pt"
    torch.save(_payload_with(model=shapes_only.state_dict()), path)  # torch.save allows it
    model = nn.Linear(2, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointMismatchError, match="weight: a meta tensor"):
        load_checkpoint(path, model=model)
    assert _same(model.state_dict(), before)


def test_an_empty_path_is_an_error_naming_it() -> None:
    for call in (save_checkpoint, load_checkpoint):
        with pytest.raises(ValueError, match="path must name a file, got an empty path"):
            call("", model=nn.Linear(2, 2))


def _shared_state_checkpoint(path: Path) -> None:
    """An optimizer state of lists that all hold one list, 100 times, six levels deep:
    a few hundred bytes of pickle, 100**6 copies for torch's optimizer loader."""
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = optimizer.state_dict()
    nested: Any = [torch.zeros(1)]
    for _ in range(6):
        nested = [nested] * 100
    state["state"] = {0: {"momentum_buffer": nested}}
    torch.save(_payload_with(optimizer=state), path)


def test_an_optimizer_state_that_would_take_forever_to_copy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.pt"
    _shared_state_checkpoint(path)
    assert path.stat().st_size < 50_000  # with the generators' states

    def load() -> None:
        model = nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        load_checkpoint(path, model=model, optimizer=optimizer)

    kind, detail = forked(load, timeout=60)
    assert kind == "raised", (kind, detail)
    assert detail[0] == "CheckpointMismatchError"
    assert "state for parameter 0 that holds the same container twice" in detail[1]

    deep: Any = torch.zeros(1)
    for _ in range(20):
        deep = [deep]
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = optimizer.state_dict()
    state["state"] = {0: {"momentum_buffer": deep}}
    torch.save(_payload_with(optimizer=state), path)
    with pytest.raises(CheckpointMismatchError, match="nested more than 8 deep"):
        load_checkpoint(path, model=model, optimizer=optimizer)


OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "Adam": lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda p: torch.optim.Adagrad(p),
    "Adadelta": lambda p: torch.optim.Adadelta(p),
    "Adamax": lambda p: torch.optim.Adamax(p),
    "NAdam": lambda p: torch.optim.NAdam(p),
    "RAdam": lambda p: torch.optim.RAdam(p),
    "ASGD": lambda p: torch.optim.ASGD(p),
    "Rprop": lambda p: torch.optim.Rprop(p),
    "LBFGS": lambda p: torch.optim.LBFGS(p),
}
_lr = torch.optim.lr_scheduler
SCHEDULERS = {
    "StepLR": lambda o: _lr.StepLR(o, 2),
    "MultiStepLR": lambda o: _lr.MultiStepLR(o, [1, 3]),
    "LambdaLR": lambda o: _lr.LambdaLR(o, lambda e: 0.9**e),
    "ConstantLR": lambda o: _lr.ConstantLR(o),
    "LinearLR": lambda o: _lr.LinearLR(o),
    "SequentialLR": lambda o: _lr.SequentialLR(
        o, [_lr.ConstantLR(o), _lr.ExponentialLR(o, 0.9)], [2]
    ),
    "PolynomialLR": lambda o: _lr.PolynomialLR(o),
    "CosineAnnealingLR": lambda o: _lr.CosineAnnealingLR(o, 10),
    "ChainedScheduler": lambda o: _lr.ChainedScheduler(
        [_lr.ConstantLR(o), _lr.ExponentialLR(o, 0.9)]
    ),
    "ReduceLROnPlateau": lambda o: _lr.ReduceLROnPlateau(o),
    "CyclicLR": lambda o: _lr.CyclicLR(o, 0.01, 0.1, cycle_momentum=False),
    "CosineAnnealingWarmRestarts": lambda o: _lr.CosineAnnealingWarmRestarts(o, 3),
    "OneCycleLR": lambda o: _lr.OneCycleLR(o, 0.1, total_steps=20, cycle_momentum=False),
}


# Warnings torch 2.8.0 raises from its own code, on calls made as documented (seen in the
# version matrix; not on 2.11.0 and later): LBFGS turns its loss into a float with
# requires_grad set, and SequentialLR steps its schedulers with the deprecated epoch.
@pytest.mark.filterwarnings(
    "ignore:Converting a tensor with requires_grad=True to a scalar:UserWarning"
)
@pytest.mark.filterwarnings(
    "ignore:The epoch parameter in `scheduler.step\\(\\)` was not necessary:UserWarning"
)
@pytest.mark.parametrize(
    ("optimizer_name", "scheduler_name"),
    [(name, "StepLR") for name in OPTIMIZERS] + [("SGD", name) for name in SCHEDULERS],
)
def test_the_checks_accept_every_torch_optimizer_and_scheduler(
    tmp_path: Path, optimizer_name: str, scheduler_name: str
) -> None:
    # The fit checks must not refuse a real checkpoint: each kind round-trips exactly.
    def run(seed: int) -> tuple[nn.Module, Any, Any]:
        torch.manual_seed(seed)
        model = nn.Linear(3, 2)
        optimizer = OPTIMIZERS[optimizer_name](model.parameters())
        return model, optimizer, SCHEDULERS[scheduler_name](optimizer)

    model, optimizer, scheduler = run(0)
    for _ in range(3):

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss: torch.Tensor = model(torch.randn(4, 3)).pow(2).mean()
            loss.backward()
            return loss

        optimizer.step(closure)
        scheduler.step(1.0) if scheduler_name == "ReduceLROnPlateau" else scheduler.step()
    path = save_checkpoint(tmp_path / "c.pt", model=model, optimizer=optimizer, scheduler=scheduler)
    fresh = run(1)
    load_checkpoint(path, model=fresh[0], optimizer=fresh[1], scheduler=fresh[2])
    assert _same(fresh[0].state_dict(), model.state_dict())
    assert _same(fresh[1].state_dict(), optimizer.state_dict())
    assert _same(fresh[2].state_dict(), scheduler.state_dict())


# -- optimizer state that cannot fit its parameters, parameters in another order --------


def _optimizer_classes() -> dict[str, type[torch.optim.Optimizer]]:
    """Every optimizer torch.optim exports, in the torch at hand."""
    return {
        name: kind
        for name, kind in vars(torch.optim).items()
        if isinstance(kind, type)
        and issubclass(kind, torch.optim.Optimizer)
        and kind is not torch.optim.Optimizer
    }


# State kept per parameter for each optimizer, at the parameter's shape or (Adafactor)
# at one that follows from it: a swap of two parameters of other shapes is refused.
# LBFGS keeps its state for its first parameter only, over all of them flattened.
_NOT_PER_PARAMETER = {"LBFGS"}
# Options that make an optimizer keep all its kinds of state (amsgrad: max_exp_avg_sq...).
_OPTIONS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 0.1, "momentum": 0.9},
    "Adam": {"amsgrad": True},
    "AdamW": {"amsgrad": True},
    "RMSprop": {"momentum": 0.5, "centered": True},
}


def _optimizer_model(name: str) -> nn.Module:
    """Parameters of several shapes (1-D and 2-D) that this optimizer accepts."""
    if name == "SparseAdam":  # sparse gradients only
        return nn.ModuleList([nn.Embedding(5, 3, sparse=True), nn.Embedding(4, 2, sparse=True)])
    if name == "Muon":  # 2-D parameters only
        return nn.Sequential(nn.Linear(4, 8, bias=False), nn.Linear(8, 2, bias=False))
    return nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))


def _optimizer_loss(model: nn.Module) -> torch.Tensor:
    if isinstance(model, nn.ModuleList):
        return sum((m(torch.tensor([1, 3])).pow(2).sum() for m in model), torch.zeros(()))
    loss: torch.Tensor = model(torch.randn(6, 4)).pow(2).mean()
    return loss


def _step_once(model: nn.Module, optimizer: Any) -> None:
    def closure() -> torch.Tensor:  # LBFGS calls it several times
        optimizer.zero_grad()
        loss = _optimizer_loss(model)
        loss.backward()
        return loss

    optimizer.step(closure)


def _stepped(name: str, seed: int, *, reverse: bool = False) -> tuple[nn.Module, Any]:
    torch.manual_seed(seed)
    model = _optimizer_model(name)
    params = list(model.parameters())
    optimizer = _optimizer_classes()[name](
        params[::-1] if reverse else params, **_OPTIONS.get(name, {})
    )
    for _ in range(2):
        _step_once(model, optimizer)
    return model, optimizer


@pytest.mark.filterwarnings(
    "ignore:Converting a tensor with requires_grad=True to a scalar:UserWarning"
)  # LBFGS on torch 2.8.0, as above
@pytest.mark.parametrize("name", sorted(_optimizer_classes()))
def test_every_torch_optimizer_loads_and_a_swap_of_its_parameters_is_refused(
    tmp_path: Path, name: str
) -> None:
    # Never refuse a valid file: each optimizer's own checkpoint loads, without a warning,
    # and steps on as the original does. Its state swapped onto parameters of other
    # shapes is refused (torch would load it and fail at the next step, if at all).
    model, optimizer = _stepped(name, 0)
    assert optimizer.state_dict()["state"], "the optimizer keeps state to check"
    path = save_checkpoint(tmp_path / "c.pt", model=model, optimizer=optimizer)
    fresh, loaded = _stepped(name, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint(path, model=fresh, optimizer=loaded)
    assert _same(loaded.state_dict(), optimizer.state_dict())
    for each_model, each_optimizer in ((model, optimizer), (fresh, loaded)):
        torch.manual_seed(2)
        _step_once(each_model, each_optimizer)
    assert _same(fresh.state_dict(), model.state_dict())
    assert _same(loaded.state_dict(), optimizer.state_dict())

    swapped, swapped_optimizer = _stepped(name, 1, reverse=True)
    before = copy.deepcopy(swapped_optimizer.state_dict())
    if name in _NOT_PER_PARAMETER:
        load_checkpoint(path, model=swapped, optimizer=swapped_optimizer)
        return
    with pytest.raises(CheckpointMismatchError, match=r"does not fit the \w+: the state '\w+'"):
        load_checkpoint(path, model=swapped, optimizer=swapped_optimizer)
    assert _same(swapped_optimizer.state_dict(), before)  # nothing was changed


def test_optimizer_state_that_cannot_fit_its_parameters_is_refused_before_loading(
    tmp_path: Path,
) -> None:
    model, optimizer, scheduler = _training(0)
    _seed_all(0)
    _step(model, optimizer, scheduler)
    path = save_checkpoint(tmp_path / "c.pt", model=model, optimizer=optimizer)
    fresh = _net(1)
    params = list(fresh.parameters())  # 0.weight, 0.bias, 1.weight, 1.bias, 3.weight, 3.bias
    reordered = torch.optim.AdamW([params[1], params[0], *params[2:]], lr=0.01)
    twin = copy.deepcopy(fresh)  # torch itself takes it, and fails at the first step:
    twins = list(twin.parameters())
    plain = torch.optim.AdamW([twins[1], twins[0], *twins[2:]], lr=0.01)
    plain.load_state_dict(optimizer.state_dict())
    twin(torch.randn(4, 4)).sum().backward()
    with pytest.raises(RuntimeError, match=r"broadcast shape|must match the size"):
        plain.step()

    def snapshot() -> Any:
        model_state = {k: v.clone() for k, v in fresh.state_dict().items()}
        return model_state, copy.deepcopy(reordered.state_dict()), get_rng_state()

    before = snapshot()
    with pytest.raises(
        CheckpointMismatchError,
        match=r"does not fit the AdamW: the state 'exp_avg' of optimizer param_groups\[0\] "
        r"parameter 0 \('0\.bias' in the model\) has shape \(8, 4\) in the file, the "
        r"parameter's shape \(8,\) here$",
    ):
        load_checkpoint(path, model=fresh, optimizer=reordered)
    assert _same(snapshot(), before)  # nothing was changed

    other = nn.Linear(3, 8)  # an optimizer over another model's parameters
    elsewhere = torch.optim.AdamW([other.weight, *params[1:]], lr=0.01)
    with pytest.raises(
        CheckpointMismatchError,
        match=r"'exp_avg' of optimizer param_groups\[0\] parameter 0 has shape \(8, 4\) in "
        r"the file, the parameter's shape \(8, 3\) here$",
    ):
        load_checkpoint(path, model=fresh, optimizer=elsewhere)


def test_factored_optimizer_state_is_checked_at_the_shape_it_has(tmp_path: Path) -> None:
    # Adafactor keeps a row and a column factor for a matrix, a full variance for a vector.
    model = nn.Linear(4, 8)
    optimizer = torch.optim.Adafactor(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()["state"]
    assert {k: tuple(v.shape) for k, v in state[0].items()} == {
        "step": (),
        "row_var": (8, 1),
        "col_var": (1, 4),
    }
    path = save_checkpoint(tmp_path / "c.pt", model=model, optimizer=optimizer)
    wider = nn.Linear(6, 8)  # the same rows: row_var fits, col_var does not
    with pytest.raises(
        CheckpointMismatchError,
        match=r"the state 'col_var' of optimizer param_groups\[0\] parameter 0 has shape "
        r"\(1, 4\) in the file, where a parameter of shape \(8, 6\), as here, takes one of "
        r"shape \(1, 6\)$",
    ):
        load_checkpoint(
            path, model=nn.Linear(4, 8), optimizer=torch.optim.Adafactor(wider.parameters())
        )
    fresh = nn.Linear(4, 8)
    with pytest.raises(
        CheckpointMismatchError,
        match=r"the state 'row_var' of optimizer param_groups\[0\] parameter 0 \('bias' in the "
        r"model\) has shape \(8, 1\) in the file, where a parameter of shape \(8,\), as here, "
        r"takes none$",
    ):
        load_checkpoint(
            path, model=fresh, optimizer=torch.optim.Adafactor([fresh.bias, fresh.weight])
        )


class _Pair(nn.Module):
    """Layers ``a`` (3 to 3) and ``b`` (3 to ``b_out``), defined in the order given."""

    def __init__(self, first: str, second: str, b_out: int = 3) -> None:
        super().__init__()
        for name in (first, second):
            self.add_module(name, nn.Linear(3, 3 if name == "a" else b_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.get_submodule("a"), self.get_submodule("b")
        product: torch.Tensor = a(x).sum() * b(x).sum()
        return product


def _pair_checkpoint(path: Path, b_out: int = 3) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = _Pair("a", "b", b_out)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 3)).backward()
    optimizer.step()
    save_checkpoint(path, model=model, optimizer=optimizer)
    return model, optimizer


def test_parameters_in_another_order_than_in_the_file_are_warned_about(tmp_path: Path) -> None:
    # A refactor defines b before a: the model loads by name, but Adam's moments attach
    # by position, to the other layer. No shape tells them apart: the order does.
    path = tmp_path / "c.pt"
    model, optimizer = _pair_checkpoint(path)
    moved = _Pair("b", "a")
    moved_optimizer = torch.optim.Adam(moved.parameters())
    with pytest.warns(
        UserWarning,
        match=r"the model's parameters are in another order in the file than in the _Pair: "
        r"parameter 0 is 'a\.weight' in the file, 'b\.weight' here\. An optimizer's state is "
        r"matched to its parameters by position",
    ):
        load_checkpoint(path, model=moved, optimizer=moved_optimizer)
    moved_b = moved.get_parameter("b.weight")
    saved_a = model.get_parameter("a.weight")
    assert torch.equal(  # what the warning is about: a's moment is now b's
        moved_optimizer.state[moved_b]["exp_avg"], optimizer.state[saved_a]["exp_avg"]
    )
    with warnings.catch_warnings():  # no optimizer, or one without state: nothing to say
        warnings.simplefilter("error")
        load_checkpoint(path, model=moved)
        empty = save_checkpoint(
            tmp_path / "d.pt", model=model, optimizer=torch.optim.Adam(model.parameters())
        )
        load_checkpoint(empty, model=moved, optimizer=torch.optim.Adam(moved.parameters()))
        same = _Pair("a", "b")  # the order it was saved in
        load_checkpoint(path, model=same, optimizer=torch.optim.Adam(same.parameters()))


def test_a_shape_mismatch_says_when_the_parameters_moved(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    _pair_checkpoint(path, b_out=2)
    moved = _Pair("b", "a", b_out=2)
    with pytest.raises(
        CheckpointMismatchError,
        match=r"the state 'exp_avg' of optimizer param_groups\[0\] parameter 0 \('b\.weight' "
        r"in the model\) has shape \(3, 3\) in the file, the parameter's shape \(2, 3\) "
        r"here; the model's parameters are in another order in the file than in the _Pair: "
        r"parameter 0 is 'a\.weight' in the file, 'b\.weight' here, and optimizer state is "
        r"matched by position$",
    ):
        load_checkpoint(path, model=moved, optimizer=torch.optim.Adam(moved.parameters()))


# -- issue 24, D12: a refused entry is named where it is ----------------------------------


def _nested(layout: torch.layout) -> torch.Tensor:
    with warnings.catch_warnings():  # "The PyTorch API of nested tensors is in prototype"
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=layout)


def _weights_only_loads_nested() -> bool:
    """Whether this torch's ``torch.load(weights_only=True)`` loads a nested tensor (the
    matrix: 2.8.0 to 2.14.1 do, 2.15.0 refuses it)."""
    buffer = io.BytesIO()
    torch.save({"n": _nested(torch.jagged)}, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, weights_only=True)
    except pickle.UnpicklingError:
        return False
    return True


NESTED_LOADS = _weights_only_loads_nested()


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_a_refused_buffer_is_named_not_blamed_on_extra(
    layout: torch.layout, tmp_path: Path
) -> None:
    # before: "it would hold torch._utils._rebuild_nested_tensor, which
    # torch.load(weights_only=True) refuses; keep extra to plain data" (extra was empty)
    model = nn.Linear(2, 2)
    model.register_buffer("lengths", _nested(layout))
    path = tmp_path / "c.pt"
    if NESTED_LOADS:  # what this torch loads is saved
        save_checkpoint(path, model=model, extra={"step": 1}, rng=False)
        assert path.exists()
        return
    with pytest.raises(
        UnsafeCheckpointError,
        match=r"c\.pt' was not written: model\['lengths'\] would hold torch\.\S*nested.*"
        r"torch\.load\(weights_only=True\) refuses; a module's state must be plain "
        r"tensors and data \(a nested tensor is not: .*persistent=False",
    ) as caught:
        save_checkpoint(path, model=model, extra={"step": 1}, rng=False)
    assert "keep extra" not in str(caught.value)
    assert "extra[" not in str(caught.value)
    assert not path.exists()
    assert _leftovers(tmp_path) == []
    model.register_buffer("lengths", _nested(layout), persistent=False)  # the advice
    save_checkpoint(path, model=model, extra={"step": 1}, rng=False)


def test_a_refused_extra_entry_is_named(tmp_path: Path) -> None:
    extra = {"step": 1, "lengths": _nested(torch.jagged), "fn": lambda: 0}
    with pytest.raises(UnsafeCheckpointError, match="pickle cannot save") as caught:
        save_checkpoint(tmp_path / "c.pt", model=nn.Linear(2, 2), extra=extra, rng=False)
    message = str(caught.value)
    refused = "extra['fn']" if NESTED_LOADS else "extra['lengths'], extra['fn']"
    assert f"was not written: {refused} would hold" in message
    assert message.endswith("; keep extra to plain data")
    assert "module's state" not in message

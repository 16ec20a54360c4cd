"""pytorch_memo.checkpoint under SIGKILL at random moments, and concurrent writers.

One child process (its own process group) imports torch once and forks writers on
request; a writer saves two distinguishable states in turn, forever, until it is
killed. After every kill the target must load and be one of the two states; the next
save must leave no temporary file; and no process of the group may outlive the test.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from pytorch_memo.checkpoint import load_checkpoint, save_checkpoint
from tests.fileprocs import group_members

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 512  # a 512 x 512 layer: about 1 MB, a save of some milliseconds
KILLS = 25

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists() or not hasattr(os, "fork"),
    reason="needs fork, SIGKILL and /proc (Linux)",
)

FORKER = textwrap.dedent(
    """
    import os, sys, torch
    from torch import nn
    from pytorch_memo.checkpoint import save_checkpoint

    torch.set_num_threads(1)  # nothing threaded before fork
    width = int(sys.argv[1])
    models = []
    for value in (1.0, 2.0):
        model = nn.Linear(width, width)
        with torch.no_grad():
            model.weight.fill_(value)
            model.bias.fill_(value)
        models.append(model)
    print("ready", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "writer":  # saves A, B, A, B, ... forever (or `count` saves)
            count, target = int(args[0]), args[1]
            pid = os.fork()
            if pid == 0:
                try:
                    done = 0
                    while count == 0 or done < count:
                        which = done % 2
                        save_checkpoint(
                            target, model=models[which], extra={"state": which}, rng=False
                        )
                        done += 1
                finally:
                    os._exit(0 if count and done == count else 3)
            print(pid, flush=True)
        elif command == "reap":
            _, status = os.waitpid(int(args[0]), 0)
            print(status, flush=True)
    os._exit(0)  # stdin closed: the test is over
    """
)


class Forker:
    """The forking child: ``writer()`` starts a writer, ``reap()`` collects one."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", FORKER, str(WIDTH)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: pgid == its pid
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, f"the forking child stopped (exit status {self.process.poll()})"
        return line

    def _send(self, text: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        return self._line()

    def writer(self, target: Path, count: int = 0) -> int:
        assert " " not in str(target)
        return int(self._send(f"writer {count} {target}"))

    def reap(self, pid: int) -> int:
        return int(self._send(f"reap {pid}"))

    def close(self) -> None:
        group = self.process.pid
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            for pid in group_members(group):  # anything left, on failure
                os.kill(pid, signal.SIGKILL)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """One forking child for the module (torch is slow to import on a loaded machine)."""
    started = Forker()
    group = started.process.pid
    try:
        yield started
    finally:
        started.close()
    # No process of the group (the forking child, writers) outlives the tests.
    deadline = time.monotonic() + 10
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(group) == [], "processes of the test outlived it"


@pytest.fixture
def writers_reaped(forker: Forker) -> Iterator[None]:
    """The orphan check of each test: afterwards only the forking child is left."""
    yield
    assert group_members(forker.process.pid) == [forker.process.pid]


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _which_state(path: Path) -> int:
    """Load ``path`` (it must load) and say which of the two states it holds."""
    model = nn.Linear(WIDTH, WIDTH)
    extra = load_checkpoint(path, model=model, rng=False)
    value = float(model.weight[0, 0].detach())
    assert value in (1.0, 2.0)
    assert torch.all(model.weight == value)
    assert torch.all(model.bias == value)
    assert extra == {"state": int(value) - 1}  # weights and extra from the same save
    return int(value) - 1


def _save(path: Path, which: int) -> None:
    model = nn.Linear(WIDTH, WIDTH)
    with torch.no_grad():
        model.weight.fill_(which + 1.0)
        model.bias.fill_(which + 1.0)
    save_checkpoint(path, model=model, extra={"state": which}, rng=False)


@pytest.mark.usefixtures("writers_reaped")
def test_kills_at_random_moments_never_break_the_checkpoint(tmp_path: Path, forker: Forker) -> None:
    path = tmp_path / "ckpt.pt"
    _save(path, 0)
    start = time.monotonic()
    _save(path, 1)
    one_save = time.monotonic() - start
    chance = random.Random(20240611)
    seen_states, kills_with_a_temporary = set(), 0
    for kill in range(KILLS):
        writer = forker.writer(path)
        time.sleep(chance.uniform(0, 2.5 * one_save))  # any moment of the first saves
        os.kill(writer, signal.SIGKILL)
        status = forker.reap(writer)
        assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL, (
            f"writer {kill} ended by itself (status {status}): a save failed"
        )
        seen_states.add(_which_state(path))  # whole, and one of the two
        left = _temporaries(tmp_path)
        assert len(left) <= 1, left  # the writer removed earlier ones
        kills_with_a_temporary += bool(left)
        if kill % 5 == 4:  # a save by another process removes the dead writer's file
            _save(path, kill % 2)
            assert _temporaries(tmp_path) == []
            assert _which_state(path) == kill % 2
    _save(path, 0)
    assert _temporaries(tmp_path) == []
    assert seen_states == {0, 1}
    assert kills_with_a_temporary >= KILLS // 3, "too few kills landed inside a save"


@pytest.mark.usefixtures("writers_reaped")
def test_two_live_writers_never_remove_each_others_files(tmp_path: Path, forker: Forker) -> None:
    path = tmp_path / "ckpt.pt"
    _save(path, 0)
    writers = [forker.writer(path, count=12) for _ in range(2)]
    statuses = [forker.reap(pid) for pid in writers]
    for status in statuses:  # 0: every one of its 12 saves worked
        assert os.waitstatus_to_exitcode(status) == 0, status
    _which_state(path)
    assert _temporaries(tmp_path) == []

"""pytorch_memo._procs: a whole process tree stops, sessions and process groups included."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pytorch_memo._procs import descendants, kill_session, kill_tree, wait_gone
from tests.processes import no_orphans

# A parent with a child in its own process group and a grandchild in its own session:
# the ways ninja (process groups) and torchrun (sessions) start their commands.
TREE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    group = subprocess.Popen(sleep, process_group=0)
    session = subprocess.Popen(sleep, start_new_session=True)
    open(sys.argv[1], "w").write(f"{group.pid} {session.pid}")
    time.sleep(120)
    """
)


LEADER = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "time.sleep(120)"
)


def _tree(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    record = tmp_path / "pids"
    root = subprocess.Popen([sys.executable, "-c", TREE, str(record)])
    deadline = time.monotonic() + 60
    while not record.exists() or not record.read_text():
        assert time.monotonic() < deadline, "the tree did not start"
        time.sleep(0.05)
    return root, [int(p) for p in record.read_text().split()]


def test_kill_tree_reaches_other_process_groups_and_sessions(tmp_path: Path) -> None:
    with no_orphans():
        root, children = _tree(tmp_path)
        assert set(children) <= set(descendants(root.pid))
        killed = kill_tree(root.pid)
        root.wait()
        assert {root.pid, *children} <= set(killed)
        assert wait_gone(children, seconds=5) == []


def test_kill_session_kills_every_member(tmp_path: Path) -> None:
    with no_orphans():
        leader = subprocess.Popen([sys.executable, "-c", LEADER], start_new_session=True)
        deadline = time.monotonic() + 60
        while not descendants(leader.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        members = kill_session(leader.pid)
        leader.wait()
        assert leader.pid in members
        assert len(members) == 2

"""The author tools under SIGINT, SIGTERM and SIGKILL at random moments (issue 24).

``python -m memobook.execute`` and ``python -m memobook.scaffold`` run in a throwaway
book (:mod:`tests.authorbook`) and are killed at a moment drawn uniformly over the time
a whole run takes here, the three signals in turn; meanwhile the test saves edits, as an
author would (the notebook for execute, ``_toc.yml`` for the scaffold). After every kill:

- no edit is lost, and the notebook is valid and holds the edit, or else exactly the old
  notebook or the old one with new outputs (never torn);
- no kernel, watchdog or other process of the run is left, and no kernel connection
  file (Jupyter's runtime folder and the temporary folder are folders of the book);
- the scaffold's chapter is whole (notebook, module, test and ``_toc.yml`` entry) or
  absent: at once after SIGINT or SIGTERM, and once the next scaffold has settled its
  journal after a SIGKILL.

The seed is printed on failure: ``MEMO_KILL_SEED=N`` replays the same moments.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

from memobook import scaffold
from tests.authorbook import (
    POSIX_PROCESSES,
    alive,
    connection_files,
    finish,
    make_book,
    notebook,
    sources,
    tool,
    wait_for,
)
from tests.processes import no_orphans

pytestmark = POSIX_PROCESSES

KILLS = 10
"""Kills of each tool: SIGINT, SIGTERM and SIGKILL in turn."""
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)

PID_CELL = 'import os, pathlib\npathlib.Path("kernel.pid").write_text(str(os.getpid()))'


def _seed() -> int:
    return int(os.environ.get("MEMO_KILL_SEED") or random.SystemRandom().randrange(1 << 30))


def _edit(path: Path, label: str, *, in_place: bool) -> None:
    """Save an edit of the notebook's title, by rename (most editors) or in place (vim's
    backupcopy=yes)."""
    nb = json.loads(path.read_text())
    nb["cells"][0]["source"] = f"# {label}"
    text = json.dumps(nb, indent=1) + "\n"
    if in_place:
        with path.open("r+") as file:
            file.write(text)
            file.truncate()
    else:
        temporary = path.with_name(".edit.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)


def _strays(folder: Path) -> list[str]:
    """Hidden files (temporary files, a staged notebook) left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _gone(root: Path) -> None:
    """The run's kernel, if it started, and its connection file are gone (they may take a
    moment: the watchdog acts when the killed process's pipe closes)."""
    marker = root / "book" / "kernel.pid"
    if marker.is_file() and marker.read_text():
        kernel = int(marker.read_text())
        wait_for(lambda: not alive(kernel), 15, f"the kernel {kernel} to end")
    wait_for(lambda: connection_files(root) == [], 15, "the connection files to go")


def test_execute_killed_at_random_moments_loses_no_edit(tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    root = make_book(tmp_path, {"tiny": notebook(PID_CELL, "x = 41", "x + 1")})
    path = root / "book" / "tiny.ipynb"
    original = sources(path)
    seen = []
    with no_orphans(grace=15):
        started = time.monotonic()
        run = tool(root, "memobook.execute", "tiny")
        out = finish(run)
        whole = time.monotonic() - started
        assert run.returncode == 0, out
        for kill in range(KILLS):
            signum = SIGNALS[kill % 3]
            kill_at = rng.uniform(0, whole)
            edit_at = rng.uniform(0, whole) if kill % 2 else None
            before = path.read_bytes()
            (root / "book" / "kernel.pid").unlink(missing_ok=True)
            run = tool(root, "memobook.execute", "tiny")
            started, edited = time.monotonic(), None
            while run.poll() is None:
                now = time.monotonic() - started
                if edit_at is not None and edited is None and now >= edit_at:
                    edited = f"Edit {kill}"
                    _edit(path, edited, in_place=kill % 4 == 1)
                if now >= kill_at:
                    run.send_signal(signum)
                    break
                time.sleep(0.005)
            out = finish(run)
            where = f"seed {seed}, kill {kill} ({signum.name} at {kill_at:.2f} s of {whole:.2f})"
            _gone(root)
            after = sources(path)  # valid JSON: never torn
            if edited is not None:
                assert after[0] == f"# {edited}", f"{where}: the edit was lost\n{out}"
                assert after[1:] == original[1:], where
            else:
                old = ["".join(c["source"]) for c in json.loads(before)["cells"]]
                assert path.read_bytes() == before or after == old, where
            seen.append((signum.name, run.returncode, edited is not None))
        run = tool(root, "memobook.execute", "tiny")  # a last whole run
        out = finish(run)
        assert run.returncode == 0, out
        _gone(root)
    assert _strays(root / "book") == [], "temporary files left after a whole run"
    assert "x + 1" in sources(path)[-1]
    assert len(seen) == KILLS


def _whole_or_absent(root: Path, topic: str) -> bool:
    """Whether the chapter ``topic`` is complete (and True) or absent (and False); fails
    on anything in between."""
    pieces = {
        "notebook": (root / "book" / f"{topic}.ipynb").is_file(),
        "module": (root / "pytorch_memo" / f"{topic}.py").is_file(),
        "test": (root / "tests" / f"test_{topic}.py").is_file(),
        "entry": f"      - file: book/{topic}\n" in (root / "_toc.yml").read_text(),
    }
    assert len(set(pieces.values())) == 1, f"half a chapter {topic!r}: {pieces}"
    if pieces["notebook"]:
        assert sources(root / "book" / f"{topic}.ipynb")  # valid
    return pieces["notebook"]


def test_the_scaffold_killed_at_random_moments_leaves_no_half_chapter(tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    root = make_book(tmp_path, {"first": notebook("1 + 1")}, package=True)
    journal = root / "_build" / "scaffold" / "journal.json"
    durations = {}
    with no_orphans(grace=15):
        for topic, extra in (("quick", ["--no-execute"]), ("executed", [])):
            started = time.monotonic()
            run = tool(root, "memobook.scaffold", topic, "--title", topic.title(), *extra)
            out = finish(run, timeout=300)
            assert run.returncode == 0, out
            durations[topic] = time.monotonic() - started
        notes = []
        for kill in range(KILLS):
            signum = SIGNALS[kill % 3]
            executes = kill in (1, 5, 9)  # one run per signal executes the notebook
            whole = durations["executed" if executes else "quick"]
            kill_at = rng.uniform(0, whole)
            note_at = rng.uniform(0, whole) if kill % 2 else None
            topic = f"topic_{kill}"
            extra = [] if executes else ["--no-execute"]
            (root / "book" / "kernel.pid").unlink(missing_ok=True)
            run = tool(root, "memobook.scaffold", topic, "--title", f"Topic {kill}", *extra)
            started, noted = time.monotonic(), False
            while run.poll() is None:
                now = time.monotonic() - started
                if note_at is not None and not noted and now >= note_at:
                    toc = root / "_toc.yml"
                    (root / ".toc.tmp").write_text(toc.read_text() + f"# note {kill}\n")
                    os.replace(root / ".toc.tmp", toc)
                    notes.append(f"# note {kill}\n")
                    noted = True
                if now >= kill_at:
                    run.send_signal(signum)
                    break
                time.sleep(0.005)
            out = finish(run, timeout=300)
            where = f"seed {seed}, kill {kill} ({signum.name} at {kill_at:.2f} s of {whole:.2f})"
            _gone(root)
            if signum != signal.SIGKILL:  # rolled back (or finished) before it ended
                assert not journal.exists(), f"{where}: a journal is left\n{out}"
            else:
                said = scaffold.recover(root)  # what the next scaffold does first
                assert not journal.exists(), where
                assert all(repr(topic) in line for line in said), said
            _whole_or_absent(root, topic)
            for folder in ("book", "pytorch_memo", "tests"):
                assert _strays(root / folder) == [], f"{where}: {folder}\n{out}"
            text = (root / "_toc.yml").read_text()
            assert all(note in text for note in notes), f"{where}: an edit of _toc.yml was lost"
    assert _whole_or_absent(root, "quick")
    assert _whole_or_absent(root, "executed")

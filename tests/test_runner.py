"""memobook.checks: each check's commands, and the runner that runs the checks side by side."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import memobook
from memobook import checks
from memobook.checks import CHECKS, commands, resolve, run_side_by_side
from tests.processes import no_orphans

PY = sys.executable


def _py(code: str) -> tuple[str, ...]:
    return (PY, "-c", textwrap.dedent(code))


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_every_check_has_commands_run_from_the_books_environment() -> None:
    for check in CHECKS:
        listed = commands(check)
        assert listed, check
        assert all(c[0] in ("python", "ruff", "mypy", "jupyter-book") for c in listed), check


def test_the_notebooks_check_runs_every_chapter_strictly_in_parallel() -> None:
    (command,) = commands("notebooks")
    assert command[:4] == ("python", "-m", "pytest", "--nbval")
    assert command[-len(memobook.chapters()) :] == tuple(memobook.chapter_paths())
    assert "-n" in command
    (one,) = commands("notebooks", ["book/views.ipynb"])
    assert one[-1] == "book/views.ipynb"
    assert "-n" not in one  # one notebook: one kernel, no workers


def test_the_tests_check_runs_named_tests_alone_and_every_test_in_parallel() -> None:
    (everything,) = commands("tests")
    assert {"pytorch_memo", "memobook", "tests", "-n"} <= set(everything)
    assert "--ignore=tests/site" in everything
    (named,) = commands("tests", ["tests/test_record.py"])
    assert named[-1] == "tests/test_record.py"
    assert "-n" not in named


def test_the_gpu_run_is_memobook_gpu_with_the_chapters_named() -> None:
    assert commands("gpu") == [("python", "-m", "memobook.gpu")]
    assert commands("gpu", ["views"]) == [("python", "-m", "memobook.gpu", "views")]


def test_the_site_check_builds_prints_then_checks_in_a_browser() -> None:
    cleaned, built, printed, checked = commands("site")
    assert [cleaned, built] == commands("book")
    assert printed == ("python", "-m", "memobook.pdf")
    assert checked[-1] == "tests/site"


def test_the_book_is_built_into_an_emptied_html_folder(tmp_path: Path) -> None:
    # A page an older build wrote (a chapter since removed, Sphinx's genindex) must not
    # stay in the site the checks read.
    pytest.importorskip("jupyter_book", reason="runs jupyter-book: needs the book group")
    cleaned, built = commands("book")
    assert built[:2] == ("jupyter-book", "build")
    (tmp_path / "_build" / "html").mkdir(parents=True)
    (tmp_path / "_build" / "html" / "genindex.html").write_text("from an older build")
    (tmp_path / "_build" / ".doctrees").mkdir()
    subprocess.run([*resolve(cleaned)[:2], str(tmp_path), *cleaned[3:]], check=True)
    assert not (tmp_path / "_build" / "html").exists()
    assert (tmp_path / "_build" / ".doctrees").is_dir()


def test_an_unknown_check_is_named_in_the_error() -> None:
    with pytest.raises(KeyError, match="'nope'"):
        commands("nope")
    with pytest.raises(KeyError, match="'nope'"):
        checks.run_checks(["lint", "nope"])


def test_checks_run_side_by_side(tmp_path: Path) -> None:
    # Each check waits for the other's file: run one after the other, both would time out.
    def meet(mine: str, theirs: str) -> tuple[str, ...]:
        return _py(f"""
            import pathlib, time
            pathlib.Path({str(tmp_path / mine)!r}).touch()
            deadline = time.monotonic() + 60
            while not pathlib.Path({str(tmp_path / theirs)!r}).exists():
                assert time.monotonic() < deadline, "alone"
                time.sleep(0.05)
            print("met")
        """)

    plan = {"a": [meet("a", "b")], "b": [meet("b", "a")]}
    outcomes = run_side_by_side(plan, logs=tmp_path / "logs", report=False, timeout=120)
    assert [o.check for o in outcomes] == ["a", "b"]
    assert all(o.passed for o in outcomes)
    assert "met" in (tmp_path / "logs" / "a.log").read_text()


def test_a_check_stops_at_its_first_failure_and_the_others_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    failing = _py("import sys; print('the reason it failed'); sys.exit(3)")
    plan = {
        "bad": [_py("print('first')"), failing, _py(f"open({str(marker)!r}, 'w')")],
        "good": [_py("print('fi' + 'ne')")],
    }
    bad, good = run_side_by_side(plan, logs=tmp_path, report=True)
    assert (bad.returncode, bad.failed_command, bad.timed_out) == (3, failing, False)
    assert not bad.passed
    assert not marker.exists()  # the command after the failure never ran
    assert good.passed
    shown = capsys.readouterr().out
    assert "first" in shown  # the failed check's log, whole
    assert "the reason it failed" in shown
    assert "fine" not in shown  # a passing check's log is left in its file
    assert "bad FAILED (exit status 3)" in shown
    assert "checks:" in shown


HANG = """
import pathlib, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
pathlib.Path(sys.argv[1]).write_text(str(child.pid))
time.sleep(600)
"""


def test_a_check_past_its_time_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    plan = {"hangs": [(PY, "-c", HANG, str(pid_file)), _py("print('never')")]}
    with no_orphans(grace=5):
        (outcome,) = run_side_by_side(plan, logs=tmp_path, report=False, timeout=3)
    assert pid_file.exists()  # the grandchild had started, and no_orphans saw it gone
    assert outcome.timed_out
    assert outcome.returncode == -signal.SIGKILL
    assert "never" not in (tmp_path / "hangs.log").read_text()


def test_a_terminated_run_stops_every_check(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    runner = textwrap.dedent(f"""
        import signal, sys
        from pathlib import Path
        from memobook import checks
        signal.signal(signal.SIGTERM, checks._terminate)
        hang = (sys.executable, "-c", {HANG!r}, {str(pid_file)!r})
        sleep = (sys.executable, "-c", "import time; time.sleep(600)")
        checks.run_side_by_side({{"hangs": [hang], "sleeps": [sleep]}},
                                logs=Path({str(tmp_path)!r}), report=False)
    """)
    with no_orphans(grace=5):
        process = subprocess.Popen([PY, "-c", runner], cwd=memobook.ROOT)
        try:
            _wait_for(pid_file)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 128 + signal.SIGTERM
        finally:
            process.kill()
            process.wait()


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan])
def test_a_timeout_must_be_positive(timeout: float, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"timeout: expected a positive .* got {timeout!r}"):
        run_side_by_side({"a": [_py("pass")]}, timeout=timeout, logs=tmp_path)


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        ({}, "at least one check"),
        ({"../up": [("true",)]}, "'../up'"),
        ({"": [("true",)]}, "''"),
        ({"a": []}, "plan\\['a'\\]"),
        ({"a": [()]}, "plan\\['a'\\]"),
    ],
)
def test_a_bad_plan_is_refused_before_anything_runs(
    plan: dict[str, list[tuple[str, ...]]], named: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=named):
        run_side_by_side(plan, logs=tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


def test_the_command_line_refuses_unknown_checks_and_stray_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as raised:
        checks.main(["nope"])
    assert raised.value.code == 2
    assert "no check named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        checks.main(["lint", "tests", "--", "tests/test_record.py"])
    assert "exactly one check" in capsys.readouterr().err


def test_one_check_runs_in_the_terminal_and_returns_its_status(
    capfd: pytest.CaptureFixture[str],
) -> None:
    for tool in ("ruff", "mypy"):  # the version matrix installs the test group only
        pytest.importorskip(tool, reason="runs the lint check: needs the lint dependency group")
    assert checks.main(["lint", "--", "memobook/checks.py"]) == 0
    out = capfd.readouterr().out
    assert "$ ruff check memobook/checks.py" in out
    assert "$ mypy" in out


@pytest.mark.parametrize(("given", "seen"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_checks_side_by_side_let_openmp_threads_sleep_unless_told_otherwise(
    given: str | None, seen: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", given)
    show = _py("import os; print('policy', os.environ['OMP_WAIT_POLICY'])")
    (outcome,) = run_side_by_side({"env": [show]}, logs=tmp_path, report=False)
    assert outcome.passed
    assert f"policy {seen}" in (tmp_path / "env.log").read_text()


def test_each_check_reports_the_cpu_time_of_its_commands_and_their_children(
    tmp_path: Path,
) -> None:
    spin = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    child = _py(f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])")
    plan = {"busy": [child, child], "idle": [_py("import time; time.sleep(1)")]}
    busy, idle = run_side_by_side(plan, logs=tmp_path, report=False)
    assert busy.passed
    assert busy.cpu_seconds >= 1.0  # both grandchildren's half seconds are counted
    assert idle.cpu_seconds < idle.seconds - 0.5  # sleeping is not CPU time

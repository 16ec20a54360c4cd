"""The book's checks, and a runner that runs them side by side.

Plain ``nox`` runs every check: **lint** (ruff, mypy), **tests** (unit tests and
doctests), **notebooks** (strict nbval of every chapter) and **site** (the site and its
PDF built, then checked in Chromium). Each is also a nox session of its own
(``nox -s tests``); both ask :func:`commands` what to run, so a check's commands are
written once.

Much of a check's time is spent waiting (on a browser, a kernel, a process that must
time out), so ``python -m memobook.checks`` starts every check at once, each running
its commands in order. Side by side they run with ``OMP_WAIT_POLICY=PASSIVE`` (unless
set): torch's OpenMP threads then sleep between parallel regions instead of spinning,
which on a machine with more busy processes than cores burned about 200 CPU-seconds
of a run. A check's output goes to its log, ``_build/checks/NAME.log``;
the log of a check that fails is printed whole when it ends, and a table of outcomes
and times ends the run. A check that runs past ``--timeout`` seconds is stopped, with
everything it started, and fails; so does every check when the run is interrupted.

Usage: ``python -m memobook.checks [NAME ...] [--timeout SECONDS]``: exit status 1 when
a check fails. ``python -m memobook.checks NAME -- ARGS`` runs one check in the terminal,
with ARGS (``nox -s NAME -- ARGS`` does this). Run it in the book's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import memobook

CHECKS = ("lint", "tests", "notebooks", "site")
"""Every check of ``nox``, in the order their results are listed."""
ALONE = ("book", "gpu")
"""Commands of other nox sessions, run one at a time: the site alone, and the GPU run of
the chapters with ``gpu`` cells on a machine with CUDA (:mod:`memobook.gpu`)."""
LOGS = memobook.ROOT / "_build" / "checks"
TIMEOUT = 1800.0
"""Seconds a check may run by default before it is stopped (a run on 2 cores takes a
few minutes; a check that runs for half an hour has hung)."""

Command = tuple[str, ...]


def _given_paths(posargs: Sequence[str]) -> list[str]:
    return [a for a in posargs if Path(a).exists()]


def _notebook_paths(args: tuple[str, ...]) -> list[str]:
    """The arguments when one names a file; else every chapter, then the arguments."""
    return list(args) if _given_paths(args) else [*memobook.chapter_paths(), *args]


def commands(check: str, posargs: Sequence[str] = ()) -> list[Command]:
    """The commands of ``check``, in order, as ``nox -s CHECK -- POSARGS`` runs them.

    >>> commands("lint")[-1]
    ('mypy',)
    >>> commands("notebooks", ["book/views.ipynb"])[0][-1]
    'book/views.ipynb'
    """
    args = tuple(posargs)
    if check == "lint":
        targets = args or (".",)
        return [("ruff", "check", *targets), ("ruff", "format", "--check", *targets), ("mypy",)]
    if check == "tests":
        if _given_paths(args):  # some tests: in one process, as named
            return [("python", "-m", "pytest", "--doctest-modules", *args)]
        return [
            ("python", "-m", "pytest", "--doctest-modules", "--ignore=tests/site",
             "--ignore=tests/lab", *memobook.TEST_WORKERS, "pytorch_memo", "memobook",
             "tests", *args),
        ]  # fmt: skip
    if check == "notebooks":
        paths = _notebook_paths(args)
        many = sum(p.endswith(".ipynb") for p in paths) > 1
        workers = memobook.NBVAL_WORKERS if many else ()
        return [("python", "-m", "pytest", "--nbval", *memobook.NBVAL_ARGS, *workers, *paths)]
    if check == "book":  # from an empty _build/html: no page of an older build stays
        return [
            ("jupyter-book", "clean", ".", "--html"),
            ("jupyter-book", "build", ".", "--all", "--warningiserror", "--nitpick",
             "--keep-going", *args),
        ]  # fmt: skip
    if check == "site":
        return [
            *commands("book"),
            ("python", "-m", "memobook.pdf"),
            ("python", "-m", "pytest", "tests/site", *args),
        ]
    if check == "gpu":  # the chapters with gpu cells, each on a copy (memobook.gpu)
        return [("python", "-m", "memobook.gpu", *args)]
    raise KeyError(f"no check named {check!r}; the checks are {', '.join((*CHECKS, *ALONE))}")


def resolve(command: Command) -> list[str]:
    """``command`` with its program taken from this Python's environment when it is there.

    ``python`` is this interpreter; ``ruff``, ``mypy``, ``jupyter-book`` come from its
    ``bin`` folder, so the checks run in the book's environment even when it is not on
    ``PATH``; another program is looked up on ``PATH``.
    """
    program, *rest = command
    if program == "python":
        return [sys.executable, *rest]
    beside = Path(sys.executable).parent / program
    return [str(beside) if beside.is_file() else program, *rest]


@dataclass
class Outcome:
    """How one check ended."""

    check: str
    returncode: int
    """0 when every command passed; else the failing command's status (-9 when stopped)."""
    seconds: float
    log: Path
    failed_command: Command | None = None
    timed_out: bool = False
    cpu_seconds: float = 0.0
    """CPU time of the check's commands and every process they waited for."""

    @property
    def passed(self) -> bool:
        return self.returncode == 0


class _Check(threading.Thread):
    """Runs one check's commands in order, in process groups of their own."""

    def __init__(
        self,
        check: str,
        commands: Sequence[Command],
        log: Path,
        timeout: float,
        env: Mapping[str, str],
    ) -> None:
        super().__init__(name=check, daemon=True)
        self.check, self.commands, self.log, self.timeout = check, commands, log, timeout
        self.env = dict(env)
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = threading.Event()
        self.outcome: Outcome | None = None

    def run(self) -> None:
        start = time.monotonic()
        deadline = start + self.timeout
        code, failed, timed_out, cpu = 0, None, False, 0.0
        with self.log.open("wb") as out:
            for command in self.commands:
                if self.stopped.is_set():
                    code, failed = -signal.SIGKILL, command
                    break
                out.write(f"$ {' '.join(command)}\n".encode())
                out.flush()
                try:
                    self.process = subprocess.Popen(
                        resolve(command), cwd=memobook.ROOT, env=self.env, stdout=out,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        # A session (and process group) of its own: stopped with everything
                        # it starts. On Linux a session is also an "autogroup": the kernel
                        # shares the CPU equally between the checks (and Jupyter's kernels,
                        # which get sessions of their own), whatever their nice values.
                        start_new_session=True,
                    )  # fmt: skip
                except OSError as error:  # not found, not executable
                    out.write(f"{command[0]}: cannot run it: {error}\n".encode())
                    code, failed = 127, command
                    break
                if self.stopped.is_set():  # stop() came between the check above and now
                    self.stop()
                ended, used = self._wait(deadline)
                if ended is None:  # past the deadline: stopped with what it started
                    timed_out = True
                    self.stop()
                    ended, used = self._wait(math.inf)
                assert ended is not None  # waited without a deadline
                code, cpu = ended, cpu + used
                if code != 0:
                    failed = command
                    break
        self.outcome = Outcome(
            self.check, code, time.monotonic() - start, self.log, failed, timed_out, cpu
        )

    def _wait(self, deadline: float) -> tuple[int | None, float]:
        """Wait for the running command until ``deadline`` (monotonic): its exit code
        (None past the deadline) and the CPU seconds it and the processes it waited for
        used (``wait4``'s accounting)."""
        process = self.process
        assert process is not None
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid == process.pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                return process.returncode, usage.ru_utime + usage.ru_stime
            if time.monotonic() >= deadline:
                return None, 0.0
            time.sleep(0.1)

    def stop(self) -> None:
        """Kill the running command and everything it started; run no further command."""
        self.stopped.set()
        process = self.process
        if process is not None and process.returncode is None:  # not reaped yet
            with contextlib.suppress(ProcessLookupError):  # it has just ended
                os.killpg(process.pid, signal.SIGKILL)


def run_checks(
    checks: Sequence[str] = CHECKS,
    *,
    timeout: float = TIMEOUT,
    logs: Path = LOGS,
    report: bool = True,
) -> list[Outcome]:
    """Run ``checks`` side by side; return their outcomes in the order named.

    Raises:
        KeyError: a name is no check's, before anything runs.
    """
    return run_side_by_side(
        {c: commands(c) for c in checks}, timeout=timeout, logs=logs, report=report
    )


def run_side_by_side(
    plan: Mapping[str, Sequence[Command]],
    *,
    timeout: float = TIMEOUT,
    logs: Path = LOGS,
    report: bool = True,
) -> list[Outcome]:
    """Run each entry's commands in order, the entries side by side, from the book's root.

    Each entry's output goes to ``logs/NAME.log``. An entry stops at its first failing
    command; the others go on. Returns the outcomes in ``plan``'s order.
    """
    if not timeout > 0:  # also refuses NaN
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    if not plan:
        raise ValueError("plan: expected at least one check, got none")
    for name, listed in plan.items():
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"plan: a check's name must be a plain file name, got {name!r}")
        if not listed or not all(listed):
            raise ValueError(f"plan[{name!r}]: expected non-empty commands, got {listed!r}")
    logs.mkdir(parents=True, exist_ok=True)
    env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}  # see the module's docstring
    threads = [
        _Check(name, tuple(c), logs / f"{name}.log", timeout, env) for name, c in plan.items()
    ]
    try:
        for thread in threads:
            thread.start()
            if report:
                shown = " && ".join(map(" ".join, thread.commands))
                print(f"started {thread.check}: {shown}", flush=True)
        pending = list(threads)
        while pending:
            for thread in pending:
                thread.join(timeout=0.2)
                if not thread.is_alive():
                    pending.remove(thread)
                    if report and thread.outcome is not None:
                        _report(thread.outcome)
                    break
    except BaseException:  # interrupted (even while starting): stop every check it started
        started = [t for t in threads if t.ident is not None]
        for thread in started:
            thread.stop()
        for thread in started:
            thread.join()
        raise
    outcomes = [t.outcome for t in threads if t.outcome is not None]
    if report:
        width = max(len(o.check) for o in outcomes)
        print("\nchecks:")
        for o in outcomes:
            state = "passed" if o.passed else "FAILED"
            print(
                f"  {o.check:<{width}}  {state}  {o.seconds:4.0f} s  ({o.cpu_seconds:.0f} CPU-s)",
                flush=True,
            )
    return outcomes


def _report(outcome: Outcome) -> None:
    if outcome.passed:
        print(f"passed {outcome.check} in {outcome.seconds:.0f} s (log: {outcome.log})", flush=True)
        return
    print(f"\n===== {outcome.check} FAILED after {outcome.seconds:.0f} s: its log =====")
    sys.stdout.write(outcome.log.read_text(errors="replace"))
    why = "timed out" if outcome.timed_out else f"exit status {outcome.returncode}"
    command = " ".join(outcome.failed_command or ())
    print(f"===== {outcome.check} FAILED ({why}): {command} =====\n", flush=True)


def run_here(check: str, posargs: Sequence[str] = ()) -> int:
    """Run one check's commands in order in this terminal; return the first failure's status."""
    for command in commands(check, posargs):
        print(f"$ {' '.join(command)}", flush=True)
        try:
            code = subprocess.run(resolve(command), cwd=memobook.ROOT, check=False).returncode
        except OSError as error:  # not found, not executable
            print(f"{command[0]}: cannot run it: {error}", file=sys.stderr, flush=True)
            return 127
        if code != 0:
            return code
    return 0


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds run_checks, which stops every check


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    posargs: list[str] = []
    if "--" in argv:
        argv, posargs = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(prog="python -m memobook.checks", description=__doc__)
    parser.add_argument("checks", nargs="*", metavar="NAME", help=f"default: {' '.join(CHECKS)}")
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT,
        help="seconds a check may run (default %(default)s)",
    )
    args = parser.parse_args(argv)
    names = list(dict.fromkeys(args.checks or CHECKS))
    if len(names) > 1 and posargs:
        parser.error("arguments after -- need exactly one check")
    try:
        if len(names) == 1:  # one check: in this terminal, with the arguments after --
            return run_here(names[0], posargs)
        signal.signal(signal.SIGTERM, _terminate)
        outcomes = run_checks(names, timeout=args.timeout)
    except (KeyError, ValueError) as error:
        parser.error(str(error.args[0]))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())

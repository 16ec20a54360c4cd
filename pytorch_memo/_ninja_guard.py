"""Run ninja so that its compilers die with it (private; run as a script, stdlib only).

``build_extension`` puts a ``ninja`` first on ``PATH`` that runs
``python -I -S _ninja_guard.py REAL_NINJA ARGS...``. torch's ``load_inline`` then starts
this instead of ninja. Why: ninja starts each command (compiler, linker) in a process
group of its own, so when ninja is killed (torch kills it with ``SIGKILL`` when the
building Python gets ``KeyboardInterrupt``; a killed Python leaves it running) its
commands run on as orphans, and the next build of the extension competes with them.

On Linux this process:

1. starts a session of its own (``setsid``), so that ninja and everything it starts
   share one session id, ninja's pid, whatever process groups ninja makes;
2. asks the kernel to kill it (``SIGKILL``) when the Python that started it dies
   (``PR_SET_PDEATHSIG``), so a killed build does not go on building;
3. forks a guardian that the kernel signals when ninja ends, however it ends; the
   guardian then kills whatever is left in ninja's session (frozen with ``SIGSTOP``
   first, so nothing forks away) and exits;
4. becomes ninja (``exec``): torch sees ninja's own exit status and output.

Elsewhere (no ``prctl``), or for ``ninja --version``, it simply becomes ninja.
What it cannot do: survive ``SIGKILL`` of the guardian itself, or catch a command that
leaves the session on purpose (``setsid``, as a compiler cache's server does).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(signum: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0


def _members(session: int) -> list[int]:
    """Living processes of ``session`` (from ``/proc/<pid>/stat``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry))
    return found


def _sweep(session: int) -> None:
    """Freeze, then kill, every process left in ``session``."""
    frozen: list[int] = []
    for _ in range(50):
        new = [pid for pid in _members(session) if pid not in frozen]
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen.extend(new)
    for pid in frozen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _guard(session: int, ninja: int) -> None:
    """The guardian: wait for ninja (``ninja`` is its parent) to end, then sweep."""
    try:
        os.setsid()  # out of ninja's session (and its process group)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # do not hold torch's pipe to ninja's output open
            os.dup2(null, fd)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        if _set_parent_death_signal(signal.SIGTERM) and os.getppid() == ninja:
            signal.sigwait({signal.SIGTERM})  # ninja has ended
        else:  # pragma: no cover - ninja ended before we were set up
            time.sleep(0.05)
        _sweep(session)
    finally:
        os._exit(0)


def main(argv: list[str]) -> None:
    real, args = argv[1], argv[2:]
    command = [real, *args]
    if not sys.platform.startswith("linux") or args == ["--version"]:
        os.execv(real, command)
    parent = os.getppid()
    try:
        os.setsid()
    except OSError:  # already a session or group leader: run ninja as it is
        os.execv(real, command)
    session = os.getpid()
    if not _set_parent_death_signal(signal.SIGKILL):  # pragma: no cover - no prctl
        os.execv(real, command)
    if os.getppid() != parent:  # the building process died while we started
        sys.exit(1)
    if os.fork() == 0:
        _guard(session, ninja=session)
    os.execv(real, command)


if __name__ == "__main__":
    main(sys.argv)

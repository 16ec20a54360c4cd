"""Tasks of pytorch-memo. `nox -l` lists them; plain `nox` runs every check.

Plain `nox` runs the session `all`: the checks lint, tests, notebooks and site side by
side (`memobook.checks`); `nox -s tests` runs one of them alone, in the terminal.

Every session shares one environment, `.nox/memo`, built from `pins.txt` (the verified
stack) plus the package and its dependency groups, with uv when nox has it
(`pip install "nox[uv]"`), else pip. It is rebuilt only when its digest
(`memobook.env_digest`: `pins.txt`, `pyproject.toml`, the groups) changes, so torch is
installed once, not once per session. Set MEMO_PYTHON=/path/to/python to use an existing
environment instead (e.g. a GPU machine with its own torch and no package index).

Facts about the book (chapters, nbval options, tags, each check's commands) come from
`memobook`, the book's model, which imports only the standard library at import time.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))  # nox does not put the noxfile's folder on sys.path
import memobook
import memobook.pdf  # its import needs nothing beyond the standard library

nox.options.default_venv_backend = "none"  # the shared environment is made by _env()
nox.options.sessions = ["all"]  # every check of memobook.checks.CHECKS, side by side

ENV = ROOT / ".nox" / "memo"
BUILD = ROOT / "_build"


def _uv() -> str | None:
    """The uv program that came with nox (`nox[uv]`) or is on PATH, if any."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _install(session: nox.Session, py: str, *args: str) -> None:
    """Install into the environment of `py`, constrained by pins.txt (uv, else pip)."""
    pins = str(memobook.PINS)
    uv = _uv()
    if uv is not None:  # uv reads no pip configuration: pins.txt is its only constraint
        # Compiled once here, as pip does: else the first processes of the checks, side by
        # side, each compile torch's modules to bytecode at import (a fresh clone's `nox`
        # took 782 CPU-seconds without this, 556 with it, on 2 cores).
        compile_ = "--compile-bytecode"
        session.run(uv, "pip", "install", "-q", compile_, "--python", py, "-c", pins, *args)
        return
    # pins.txt is also pip's constraints file: it replaces any machine-wide pip
    # constraints (which may cap torch below the pin) for this environment.
    env = {"PIP_CONSTRAINT": pins}
    session.run(py, "-m", "pip", "install", "-q", "--upgrade", "pip>=25.1", env=env)
    session.run(py, "-m", "pip", "install", "-q", *args, env=env)


def _venv(session: nox.Session) -> None:
    """Make the environment (with pip) for this Python: uv takes under a second, where
    `python -m venv` takes about 4 (ensurepip)."""
    uv = _uv()
    if uv is not None:
        session.run(uv, "venv", "-q", "--seed", "--python", sys.executable, str(ENV))
    else:
        session.run(sys.executable, "-m", "venv", str(ENV))


def _env(session: nox.Session) -> str:
    """Make (or reuse) the shared environment and put it first on PATH; return its python."""
    given = os.environ.get("MEMO_PYTHON")
    if given:
        bindir = Path(given).parent
    else:
        bindir = ENV / "bin"
        stamp = ENV / ".installed"
        want = memobook.env_digest()
        ENV.parent.mkdir(parents=True, exist_ok=True)
        with (ENV.parent / "memo.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time, even across sessions
            if not stamp.exists() or stamp.read_text() != want:
                if not (bindir / "python").exists():
                    _venv(session)
                groups = [f"--group={g}" for g in memobook.ENV_GROUPS]
                py = str(bindir / "python")
                _install(session, py, "-r", str(memobook.PINS), "-e", ".", *groups)
                stamp.write_text(want)
    # nox looks programs up on this process's PATH when a session has no virtualenv.
    os.environ["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", "")])
    session.env["PATH"] = os.environ["PATH"]
    session.env["VIRTUAL_ENV"] = str(bindir.parent)
    session.env["JUPYTER_PLATFORM_DIRS"] = "1"
    session.env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return str(bindir / "python")


@nox.session
def env(session: nox.Session) -> None:
    """Build (or check) the book's environment, .nox/memo, and nothing else."""
    _env(session)


def _check(session: nox.Session, name: str) -> None:
    """Run the check `name` of memobook.checks in the terminal, with the session's posargs."""
    session.run("python", "-m", "memobook.checks", name, "--", *session.posargs)


@nox.session
def all(session: nox.Session) -> None:  # `nox -s all`: every check
    """Every check side by side: lint, tests, notebooks, site (`nox` runs this)."""
    _chromium(session, "the site checks")
    _env(session)
    session.run("python", "-m", "memobook.checks", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff on everything (notebooks too); mypy strict on the package, memobook, tests, noxfile."""
    _env(session)
    _check(session, "lint")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests and doctests of the package and the model, and the chapters' static checks."""
    _env(session)
    _check(session, "tests")


@nox.session
def notebooks(session: nox.Session) -> None:
    """Strict nbval over every chapter (or the ones named); `gpu` cells need CUDA."""
    _env(session)
    _check(session, "notebooks")


@nox.session
def book(session: nox.Session) -> None:
    """Build the static site from the stored outputs into _build/html (warnings are errors)."""
    _env(session)
    _check(session, "book")
    session.log(f"open {BUILD / 'html' / 'index.html'}")


def _chromium(session: nox.Session, needed_for: str) -> str:
    found = memobook.pdf.chromium()
    if found is None:
        session.error(
            f"{needed_for} needs Chromium (Debian: apt-get install -y chromium; or set "
            "MEMO_CHROMIUM=/path/to/chrome). To run the other checks alone: "
            "nox -s lint tests notebooks"
        )
    session.env["MEMO_CHROMIUM"] = found
    return found


@nox.session
def pdf(session: nox.Session) -> None:
    """The book as a PDF, _build/html/pytorch-memo.pdf, and each chapter's pages in
    _build/html/pdf/: the site is built, then Chromium prints its chapter pages."""
    _chromium(session, "printing the PDF")
    _env(session)
    _check(session, "book")
    session.run("python", "-m", "memobook.pdf")


@nox.session
def site(session: nox.Session) -> None:
    """Build the book and its PDF, and check the pages in headless Chromium (required)."""
    _chromium(session, "the site checks")
    _env(session)
    _check(session, "site")


@nox.session
def execute(session: nox.Session) -> None:
    """Re-execute chapters in place to refresh stored outputs (all, or the ones named)."""
    _env(session)
    session.run("python", "-m", "memobook.execute", *session.posargs)


@nox.session
def chapter(session: nox.Session) -> None:
    """Start a chapter: `nox -s chapter -- TOPIC --title "Title"` writes what it needs."""
    _env(session)
    session.run("python", "-m", "memobook.scaffold", *session.posargs)


def _lab(session: nox.Session) -> None:
    py = _env(session)
    if shutil.which("jupyter-lab", path=session.env["PATH"]) is None:
        _install(session, py, "--group=lab")


@nox.session
def lab(session: nox.Session) -> None:
    """Open JupyterLab on book/ in the book's environment."""
    _lab(session)
    as_root = ["--allow-root"] if hasattr(os, "getuid") and os.getuid() == 0 else []
    session.run("jupyter-lab", "book", *as_root, *session.posargs)


@nox.session(name="lab-check", default=False)
def lab_check(session: nox.Session) -> None:
    """JupyterLab as readers use it: chapters open unmodified and Run All passes (Chromium)."""
    _chromium(session, "the JupyterLab check")
    _lab(session)
    session.run("python", "-m", "pytest", "tests/lab", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """Lax nbval of every chapter, `gpu` cells included, for a machine with CUDA."""
    _env(session)
    session.run(
        "python", "-c",
        "import torch, sys; sys.exit(0 if torch.cuda.is_available() else "
        "'nox -s gpu needs CUDA: torch.cuda.is_available() is False')",
    )  # fmt: skip
    _check(session, "gpu")


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """The version matrix: unit tests and lax nbval on each torch of versions.toml (slow)."""
    _env(session)
    session.run("python", "-m", "memobook.matrix", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Measure the performance goals: verification overhead and Run All per chapter."""
    _env(session)
    session.run("python", "-m", "memobook.bench", *session.posargs)

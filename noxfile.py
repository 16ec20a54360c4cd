"""Tasks of pytorch-memo. `nox -l` lists them; plain `nox` runs every check.

Every session shares one environment, `.nox/memo`, built from `pins.txt` (the verified
stack) plus the package and its dependency groups. It is rebuilt only when `pins.txt` or
`pyproject.toml` change, so torch (about 5 GB) is installed once, not once per session.
Set MEMO_PYTHON=/path/to/python to use an existing environment instead (e.g. a GPU
machine with its own torch and no package index).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "none"  # the shared environment is made by _env()
nox.options.sessions = ["lint", "tests", "notebooks", "site"]

ROOT = Path(__file__).parent
PINS = ROOT / "pins.txt"
ENV = ROOT / ".nox" / "memo"
GROUPS = ("test", "book", "lint", "browser")
BUILD = ROOT / "_build"
NBVAL = (
    "-p",
    "tests.conftest",
    "--nbval-current-env",
    "--nbval-sanitize-with",
    "tests/sanitize.cfg",
)


def chapters() -> list[str]:
    """Every chapter notebook, in file order."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb"))


def _env(session: nox.Session) -> None:
    """Make (or reuse) the shared environment and put it first on PATH."""
    given = os.environ.get("MEMO_PYTHON")
    if given:
        bindir = Path(given).parent
    else:
        bindir = ENV / "bin"
        stamp = ENV / ".installed"
        digest = hashlib.sha256()
        for part in (PINS.read_bytes(), (ROOT / "pyproject.toml").read_bytes(), *GROUPS):
            digest.update(part if isinstance(part, bytes) else part.encode())
        want = digest.hexdigest()
        ENV.parent.mkdir(parents=True, exist_ok=True)
        with (ENV.parent / "memo.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time, even across sessions
            if not stamp.exists() or stamp.read_text() != want:
                if not (bindir / "python").exists():
                    session.run(sys.executable, "-m", "venv", str(ENV))
                py = str(bindir / "python")
                session.run(py, "-m", "pip", "install", "-q", "--upgrade", "pip>=25.1")
                groups = [f"--group={g}" for g in GROUPS]
                session.run(py, "-m", "pip", "install", "-q", "-r", str(PINS), "-e", ".", *groups)
                stamp.write_text(want)
    # nox looks programs up on this process's PATH when a session has no virtualenv.
    os.environ["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", "")])
    session.env["PATH"] = os.environ["PATH"]
    session.env["VIRTUAL_ENV"] = str(bindir.parent)
    session.env["JUPYTER_PLATFORM_DIRS"] = "1"
    session.env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"


def _paths_or_all(posargs: list[str]) -> list[str]:
    """The posargs, plus every chapter when none of them names a file."""
    if any(Path(a).exists() for a in posargs):
        return posargs
    return [*chapters(), *posargs]


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff on package, tests and notebooks; mypy strict on the package."""
    _env(session)
    session.run("ruff", "check", *(session.posargs or ["."]))
    session.run("ruff", "format", "--check", *(session.posargs or ["."]))
    session.run("mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests and doctests of the package, and the notebooks' hygiene checks."""
    _env(session)
    paths = session.posargs if any(Path(a).exists() for a in session.posargs) else []
    session.run(
        "python", "-m", "pytest", "--doctest-modules", "--ignore=tests/site",
        *(paths or ["pytorch_memo", "tests", *session.posargs]),
    )  # fmt: skip


@nox.session
def notebooks(session: nox.Session) -> None:
    """Strict nbval over every chapter (or the ones named); `gpu` cells need CUDA."""
    _env(session)
    paths = _paths_or_all(session.posargs)
    many = sum(p.endswith(".ipynb") for p in paths) > 1
    workers = ["-n", "auto", "--dist", "loadfile"] if many else []
    session.run("python", "-m", "pytest", "--nbval", *NBVAL, *workers, *paths)


@nox.session
def book(session: nox.Session) -> None:
    """Build the static site from the stored outputs into _build/html (warnings are errors)."""
    _env(session)
    session.run(
        "jupyter-book", "build", ".", "--all", "--warningiserror", "--nitpick",
        "--keep-going", *session.posargs,
    )  # fmt: skip
    session.log(f"open {BUILD / 'html' / 'index.html'}")


@nox.session
def site(session: nox.Session) -> None:
    """Build the book and check its pages in headless Chromium."""
    names = ("chromium", "chromium-browser", "google-chrome")
    chromium = os.environ.get("MEMO_CHROMIUM") or next(filter(None, map(shutil.which, names)), None)
    if chromium is None:
        msg = "chromium is not installed (Debian: apt-get install -y chromium)"
        if os.environ.get("CI"):
            session.error(msg)
        session.skip(msg)
    book(session)
    session.env["MEMO_CHROMIUM"] = chromium
    session.run("python", "-m", "pytest", "tests/site", *session.posargs)


@nox.session
def execute(session: nox.Session) -> None:
    """Re-execute notebooks in place to refresh stored outputs (all, or the ones named)."""
    _env(session)
    session.run("python", "tools/execute.py", *(session.posargs or chapters()))


@nox.session
def lab(session: nox.Session) -> None:
    """Open JupyterLab on book/ in the book's environment."""
    _env(session)
    if shutil.which("jupyter-lab", path=session.env["PATH"]) is None:
        session.run("python", "-m", "pip", "install", "-q", "--group=lab")
    session.run("jupyter-lab", "book", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """Lax nbval of every chapter, `gpu` cells included, for a machine with CUDA."""
    _env(session)
    session.run(
        "python", "-c",
        "import torch, sys; sys.exit(0 if torch.cuda.is_available() else "
        "'nox -s gpu needs CUDA: torch.cuda.is_available() is False')",
    )  # fmt: skip
    paths = _paths_or_all(session.posargs)
    session.run("python", "-m", "pytest", "--nbval-lax", "--memo-record-gpu", *NBVAL, *paths)


@nox.session
def bench(session: nox.Session) -> None:
    """Print per-chapter and whole-book execution times against a bare-notebook floor."""
    _env(session)
    session.run("python", "tools/bench.py", *session.posargs)

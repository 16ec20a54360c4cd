"""The version matrix (``nox -s matrix``): the book checked on several torch releases.

Usage::

    python -m memobook.matrix                  # every release of versions.toml
    python -m memobook.matrix --release 2.15.0 # some of them
    python -m memobook.matrix --newest         # the newest torch on the package index

For each release, an environment ``.nox/matrix/torch-VERSION`` is built from the package
index (once; rebuilt when what it is built from changes): that torch and torchvision,
the rest of ``pins.txt``, the test tools, and the package itself, installed as a reader
installs it (not editable). The machine-wide pip constraints, if any, are replaced by
this release's own (``PIP_CONSTRAINT``). Then, in that environment:

- the unit tests, less those about the pinned stack itself (marker ``pinned_stack``) and
  those about the repository's own files and tools (the scaffold's, the workflows',
  CONTRIBUTING's), which do not depend on torch's release;
- every chapter in lax nbval: the cells' own checks (asserts, raises), not their stored
  outputs, which come from the pin. The chapters run from a temporary folder outside the
  checkout, against the installed package, as on Colab: a chapter that assumes it runs
  inside the repository, or from ``book/``, fails here.

The outcomes are written to ``book/_data/matrix.json`` (:class:`~memobook.record.MatrixRecord`);
the status page shows chapter x release. The exit status is 1 when anything failed, so
a scheduled run on the newest release fails visibly when a claim breaks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import memobook
from memobook.record import MATRIX, MatrixRecord, MatrixRun, Outcome, now

VERSIONS = memobook.ROOT / "versions.toml"
ENVS = memobook.ROOT / ".nox" / "matrix"
UNIT_ARGS = (
    "--doctest-modules",
    "--ignore=tests/site",
    "--ignore=tests/lab",
    "--ignore=tests/test_scaffold.py",
    "--ignore=tests/test_publishing.py",
    "--ignore=tests/test_contributing.py",
    "-m",
    "not pinned_stack",
    *memobook.TEST_WORKERS,
    "pytorch_memo",
    "tests",
)


@dataclass(frozen=True)
class Release:
    """A torch release of the matrix and its torchvision (``None``: the newest)."""

    torch: str | None
    torchvision: str | None
    role: str = ""


def releases(path: Path = VERSIONS) -> list[Release]:
    """The releases listed in ``versions.toml``."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    found = []
    for index, entry in enumerate(data.get("release", [])):
        missing = [k for k in ("torch", "torchvision") if not isinstance(entry.get(k), str)]
        if missing:
            msg = f"{path.name} release {index} must give {missing} as strings"
            raise ValueError(msg)
        found.append(Release(entry["torch"], entry["torchvision"], str(entry.get("role", ""))))
    return found


def _requirements(release: Release) -> tuple[list[str], str]:
    """What to install (pins less torch and torchvision), and the constraints' text."""
    pins = {k: v for k, v in memobook.pins().items() if k not in ("torch", "torchvision")}
    wanted = [f"{k}=={v}" for k, v in pins.items()]
    torch = "torch" if release.torch is None else f"torch=={release.torch}"
    vision = "torchvision" if release.torchvision is None else f"torchvision=={release.torchvision}"
    constraints = "\n".join(c for c in (torch, vision) if "==" in c) + "\n"
    return [torch, vision, *wanted], constraints


def build(release: Release, *, log: bool = True) -> Path:
    """Make (or reuse) the environment of ``release``; return its python."""
    name = release.torch or "newest"
    env = ENVS / f"torch-{name}"
    python = env / "bin" / "python"
    wanted, constraints = _requirements(release)
    digest = hashlib.sha256(
        "\n".join([*wanted, memobook.PYPROJECT.read_text(), constraints]).encode()
    ).hexdigest()
    stamp = env / ".installed"
    if release.torch is not None and stamp.exists() and stamp.read_text() == digest:
        return python
    ENVS.mkdir(parents=True, exist_ok=True)
    constraint_file = ENVS / f"constraints-{name}.txt"
    constraint_file.write_text(constraints)
    pip_env = {**os.environ, "PIP_CONSTRAINT": str(constraint_file)}
    pip_env.pop("PYTHONPATH", None)

    def run(*command: str) -> None:
        if log:
            print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=pip_env, cwd=memobook.ROOT)

    if not python.exists():
        run(sys.executable, "-m", "venv", str(env))
    run(str(python), "-m", "pip", "install", "-q", "--upgrade", "pip>=25.1")
    run(str(python), "-m", "pip", "install", "-q", *wanted)
    run(str(python), "-m", "pip", "install", "-q", "--group=test")
    stamp.write_text(digest)
    return python


def install_package(python: Path, *, log: bool = True) -> None:
    """Install the checkout's package into ``python``'s environment, as a reader installs
    it (not editable): on every run, so the chapters never meet an older copy. It is built
    from a copy of its sources, so the build leaves nothing (``build/``) in the checkout."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "source"
        shutil.copytree(
            memobook.ROOT / "pytorch_memo",
            source / "pytorch_memo",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (memobook.ROOT / name).exists():
                shutil.copyfile(memobook.ROOT / name, source / name)
        command = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                   str(source)]  # fmt: skip
        if log:
            print("+", " ".join(command), flush=True)
        env = {**os.environ}
        env.pop("PYTHONPATH", None)
        subprocess.run(command, check=True, env=env, cwd=folder)


def _versions(python: Path) -> tuple[str, str, str]:
    code = "import torch, torchvision, platform; print(torch.__version__, torchvision.__version__, platform.python_version())"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    torch, vision, py = out.stdout.split()
    return torch.split("+")[0], vision.split("+")[0], py


def _pytest(
    python: Path,
    args: list[str],
    outcomes: Path,
    *,
    cwd: Path = memobook.ROOT,
    extra_env: dict[str, str] | None = None,
) -> dict[str, str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(extra_env or {})}
    env.pop("PYTHONPATH", None)  # the package comes from the environment, as installed
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", memobook.PLUGIN,
               f"--memo-outcomes={outcomes}", *args]  # fmt: skip
    subprocess.run(command, cwd=cwd, env=env, check=False)
    if not outcomes.exists():
        msg = f"pytest wrote no outcomes ({' '.join(command)}): it could not start"
        raise RuntimeError(msg)
    loaded: dict[str, str] = json.loads(outcomes.read_text())
    return loaded


def _outcome(results: dict[str, str]) -> Outcome:
    def count(kind: str) -> int:
        return sum(v == kind for v in results.values())

    failures = tuple(sorted(k for k, v in results.items() if v in ("failed", "error")))
    return Outcome(count("passed"), count("failed"), count("skipped"), count("error"), failures)


def _outside_the_checkout(folder: Path, paths: list[str]) -> Path:
    """A folder outside the checkout holding copies of the chapters (same relative paths)
    and of the book's pytest plugin; nothing of the package itself, which the kernel
    imports from the environment, installed as readers install it."""
    shutil.copytree(
        Path(memobook.__file__).parent,
        folder / "memobook",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for path in paths:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(memobook.ROOT / path, folder / path)
    return folder


def check(release: Release) -> MatrixRun:
    """Build the environment of ``release`` and run the unit tests and lax nbval there."""
    python = build(release)
    install_package(python)
    torch, vision, py = _versions(python)
    print(f"== torch {torch}, torchvision {vision}, Python {py}", flush=True)
    paths = memobook.chapter_paths()
    with tempfile.TemporaryDirectory() as folder:
        unit = _pytest(python, list(UNIT_ARGS), Path(folder) / "unit.json")
        outside = _outside_the_checkout(Path(folder) / "reader", paths)
        # Each release builds the chapters' extensions afresh, as on a new machine: torch
        # before 2.14 waits forever on the `lock` file that 2.14 and later leave in a
        # build folder, so a shared cache folder would hang an older release's run.
        builds = {"TORCH_EXTENSIONS_DIR": str(Path(folder) / "torch_extensions")}
        lax = _pytest(
            python,
            ["--nbval-lax", *memobook.NBVAL_OPTIONS, *memobook.NBVAL_WORKERS, *paths],
            Path(folder) / "lax.json",
            cwd=outside,
            extra_env=builds,
        )
    chapters = {}
    for path in paths:
        prefix = f"{path}::"
        chapters[Path(path).stem] = _outcome({k: v for k, v in lax.items() if k.startswith(prefix)})
    return MatrixRun(torch, vision, now(), py, _outcome(unit), chapters)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.matrix", description=__doc__)
    parser.add_argument(
        "--release", action="append", default=[], help="torch version(s) of versions.toml"
    )
    parser.add_argument("--newest", action="store_true", help="the newest torch on the index")
    args = parser.parse_args(argv)
    listed = releases()
    if args.newest:
        chosen = [Release(None, None, "the newest release on the package index")]
    elif args.release:
        known = {r.torch: r for r in listed}
        unknown = [v for v in args.release if v not in known]
        if unknown:
            parser.error(f"--release must be one of {list(known)} (versions.toml), got {unknown}")
        chosen = [known[v] for v in args.release]
    else:
        chosen = listed
    failed = []
    for release in chosen:
        run = check(release)
        MatrixRecord.read(MATRIX).with_run(run).write(MATRIX)
        bad = [c for c, o in run.chapters.items() if not o.ok]
        print(f"torch {run.torch}: unit {run.unit.passed} passed, {run.unit.failed} failed; "
              f"chapters failing lax: {bad or 'none'}", flush=True)  # fmt: skip
        if bad or not run.unit.ok:
            failed.append(run.torch)
    print(f"matrix: {'failures on torch ' + ', '.join(failed) if failed else 'all passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

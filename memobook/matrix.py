"""The version matrix (``nox -s matrix``): the book checked on several torch releases.

Usage::

    python -m memobook.matrix                   # every release of versions.toml, each
                                                # on every Python it lists
    python -m memobook.matrix 2.12.1            # one release (nox -s matrix -- 2.12.1)
    python -m memobook.matrix 2.15.0 --python 3.13   # one release on one Python
    python -m memobook.matrix --newest          # the newest torch on the package index

For each release and Python, an environment ``.nox/matrix/torch-VERSION-pyX.Y`` is
built from the package index (once; rebuilt when what it is built from changes; with uv,
installs after the first come from uv's cache): that torch and torchvision, the rest of
``pins.txt``, the test dependency group only, and the package itself, installed as a
reader installs it (not editable). The Python comes from PATH (``python3.12``, as CI's
setup-python puts it) or pyenv. The machine-wide pip constraints, if any, are replaced by
this release's own (``PIP_CONSTRAINT``). Then, in that environment:

- the unit tests, less those about the pinned stack itself (marker ``pinned_stack``) and
  those about the repository's own files and tools (the scaffold's, the workflows',
  CONTRIBUTING's, the release build's, the setup cell's, the book's claims against the
  record this run is writing), which do not depend on torch's release;
- every chapter in lax nbval: the cells' own checks (asserts, raises), not their stored
  outputs, which come from the pin. The chapters run from a temporary folder outside the
  checkout, against the installed package, as on Colab: a chapter that assumes it runs
  inside the repository, or from ``book/``, fails here.

The outcomes are written to ``book/_data/matrix.json`` (:class:`~memobook.record.MatrixRecord`):
per chapter, and per claim cell (its outcome, its source's digest, and the version
branches it took). The status page shows chapter x release, the memo each claim's
releases, and the claims checker's scope rules read it. The exit status is 1 when anything failed, so
a scheduled run on the newest release fails visibly when a claim breaks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import memobook
from memobook.record import (
    MATRIX,
    ClaimOutcome,
    MatrixRecord,
    MatrixRun,
    Outcome,
    gather_raised,
    now,
    run_key,
    source_digest,
)

VERSIONS = memobook.ROOT / "versions.toml"
DEFAULT_PYTHON = "3.11"
"""The Python a release of ``versions.toml`` runs on when it names none."""
ENVS = memobook.ROOT / ".nox" / "matrix"
UNIT_ARGS = (
    "--doctest-modules",
    "--ignore=tests/site",
    "--ignore=tests/lab",
    "--ignore=tests/test_scaffold.py",
    "--ignore=tests/test_publishing.py",
    "--ignore=tests/test_contributing.py",
    "--ignore=tests/test_release.py",
    "--ignore=tests/test_setup_cell.py",
    # The book's claims against the record a matrix run is itself writing: they read
    # book/_data/matrix.json mid-run, and do not depend on torch's release.
    "--deselect=tests/test_claims.py::test_every_chapter_keeps_the_scope_rules",
    "-m",
    "not pinned_stack",
    *memobook.TEST_WORKERS,
    "pytorch_memo",
    "tests",
)


@dataclass(frozen=True)
class Release:
    """A torch release of the matrix and its torchvision (``None``: the newest), and the
    Pythons (``"3.12"``) it runs on."""

    torch: str | None
    torchvision: str | None
    role: str = ""
    pythons: tuple[str, ...] = (DEFAULT_PYTHON,)


def releases(path: Path = VERSIONS) -> list[Release]:
    """The releases listed in ``versions.toml``."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    found = []
    for index, entry in enumerate(data.get("release", [])):
        missing = [k for k in ("torch", "torchvision") if not isinstance(entry.get(k), str)]
        if missing:
            msg = f"{path.name} release {index} must give {missing} as strings"
            raise ValueError(msg)
        pythons = entry.get("python", [DEFAULT_PYTHON])
        if (
            not isinstance(pythons, list)
            or not pythons
            or not all(isinstance(p, str) and re.fullmatch(r"3\.\d+", p) for p in pythons)
        ):
            msg = (
                f"{path.name} release {index} (torch {entry['torch']}): python must be a "
                f'non-empty list of versions such as ["3.11", "3.12"], got {pythons!r}'
            )
            raise ValueError(msg)
        found.append(
            Release(
                entry["torch"], entry["torchvision"], str(entry.get("role", "")), tuple(pythons)
            )
        )
    return found


def pythons(listed: list[Release] | None = None) -> list[str]:
    """Every Python the matrix runs on, oldest first (``pyproject.toml`` declares them)."""
    found = {p for r in (releases() if listed is None else listed) for p in r.pythons}
    return sorted(found, key=lambda p: tuple(int(n) for n in p.split(".")))


def interpreter(version: str) -> Path:
    """A Python interpreter of ``version`` (``"3.12"``) on this machine: this one, one on
    PATH (``python3.12``, as CI's setup-python puts it), or one under pyenv."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(sys.executable)
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"))]
    for candidate in candidates:
        if candidate is None:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return Path(candidate)
    msg = (
        f"python {version} is needed for this run of the matrix and was not found "
        f"(tried python{version} on PATH and {pyenv}/{version}.*): install it, "
        "or leave it out with --python"
    )
    raise FileNotFoundError(msg)


def _requirements(release: Release) -> tuple[list[str], str]:
    """What to install (pins less torch and torchvision), and the constraints' text."""
    pins = {k: v for k, v in memobook.pins().items() if k not in ("torch", "torchvision")}
    wanted = [f"{k}=={v}" for k, v in pins.items()]
    torch = "torch" if release.torch is None else f"torch=={release.torch}"
    vision = "torchvision" if release.torchvision is None else f"torchvision=={release.torchvision}"
    constraints = "\n".join(c for c in (torch, vision) if "==" in c) + "\n"
    return [torch, vision, *wanted], constraints


def env_path(release: Release, python: str) -> Path:
    """The environment of ``release`` on ``python``."""
    return ENVS / f"torch-{release.torch or 'newest'}-py{python}"


def _uv() -> str | None:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def build(release: Release, python: str = DEFAULT_PYTHON, *, log: bool = True) -> Path:
    """Make (or reuse) the environment of ``release`` on ``python``; return its python.

    With uv (``pip install "nox[uv]"``) the environment is made and filled by uv, whose
    cache serves every release after the first; else by venv and pip."""
    env = env_path(release, python)
    name = env.name
    executable = env / "bin" / "python"
    wanted, constraints = _requirements(release)
    digest = hashlib.sha256(
        "\n".join([*wanted, memobook.PYPROJECT.read_text(), constraints, python]).encode()
    ).hexdigest()
    stamp = env / ".installed"
    if release.torch is not None and stamp.exists() and stamp.read_text() == digest:
        return executable
    ENVS.mkdir(parents=True, exist_ok=True)
    constraint_file = ENVS / f"constraints-{name}.txt"
    constraint_file.write_text(constraints)
    pip_env = {**os.environ, "PIP_CONSTRAINT": str(constraint_file)}
    pip_env.pop("PYTHONPATH", None)

    def run(*command: str) -> None:
        if log:
            print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=pip_env, cwd=memobook.ROOT)

    base = interpreter(python)
    uv = _uv()
    if uv is not None:
        if not executable.exists():
            run(uv, "venv", "-q", "--seed", "--python", str(base), str(env))
        install = (uv, "pip", "install", "-q", "--python", str(executable))
        run(*install, "-c", str(constraint_file), *wanted, "--group=test")
    else:
        if not executable.exists():
            run(str(base), "-m", "venv", str(env))
        run(str(executable), "-m", "pip", "install", "-q", "--upgrade", "pip>=25.1")
        run(str(executable), "-m", "pip", "install", "-q", *wanted)
        run(str(executable), "-m", "pip", "install", "-q", "--group=test")
    stamp.write_text(digest)
    return executable


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


def claim_outcomes(
    notebook: Path, chapter_path: str, results: dict[str, str], torch: str
) -> dict[str, ClaimOutcome]:
    """Each claim cell's outcome in a lax run, by cell id, from nbval's node ids
    (``book/views.ipynb::Cell 7``: the 8th code cell), with the cell's source digest and
    the version branches it took on ``torch``."""
    from memobook.claims import cell_claims, version_branches

    cells = memobook.code_cells(memobook.load(notebook))
    found = {}
    for index, cell in enumerate(cells):
        text = memobook.source(cell)
        if not cell_claims(text):
            continue
        outcome = results.get(f"{chapter_path}::Cell {index}", "error")
        found[str(cell.get("id", index))] = ClaimOutcome(
            outcome,
            source_digest(text),
            tuple(branch.taken(torch) for branch in version_branches(text)),
        )
    return found


def _run_chapters(
    python: Path, torch: str, paths: list[str], folder: Path
) -> tuple[dict[str, Outcome], dict[str, dict[str, ClaimOutcome]], dict[str, list[list[str]]]]:
    """Run the chapters at ``paths`` in lax nbval from a copy outside the checkout (under
    ``folder``): each chapter's outcome, its claim cells' outcomes, and the errors the
    ``raises`` checks caught."""
    outside = _outside_the_checkout(folder / "reader", paths)
    # Each release builds the chapters' extensions afresh, as on a new machine: torch
    # before 2.14 waits forever on the `lock` file that 2.14 and later leave in a
    # build folder, so a shared cache folder would hang an older release's run.
    builds = {"TORCH_EXTENSIONS_DIR": str(folder / "torch_extensions")}
    raised = folder / "raised"  # the errors the `raises` checks caught
    raised.mkdir()
    builds["MEMO_RAISED"] = str(raised)
    lax = _pytest(
        python,
        ["--nbval-lax", *memobook.NBVAL_OPTIONS, *memobook.NBVAL_WORKERS, *paths],
        folder / "lax.json",
        cwd=outside,
        extra_env=builds,
    )
    chapters = {}
    claims = {}
    for path in paths:
        prefix = f"{path}::"
        name = Path(path).stem
        chapters[name] = _outcome({k: v for k, v in lax.items() if k.startswith(prefix)})
        claims[name] = claim_outcomes(outside / path, path, lax, torch)
    return chapters, claims, gather_raised(raised)


def check(release: Release, python_version: str = DEFAULT_PYTHON) -> MatrixRun:
    """Build the environment of ``release`` on ``python_version`` and run the unit tests
    and lax nbval there."""
    start = time.perf_counter()
    python = build(release, python_version)
    install_package(python)
    torch, vision, py = _versions(python)
    print(f"== torch {torch}, torchvision {vision}, Python {py}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        unit = _pytest(python, list(UNIT_ARGS), Path(folder) / "unit.json")
        chapters, claims, errors = _run_chapters(
            python, torch, memobook.chapter_paths(), Path(folder)
        )
    seconds = round(time.perf_counter() - start, 1)
    return MatrixRun(torch, vision, now(), py, _outcome(unit), chapters, claims, seconds, errors)


def rerun(
    release: Release, python_version: str, names: list[str], record: MatrixRecord
) -> MatrixRun:
    """Run the chapters ``names`` again on ``release`` and ``python_version``, without the
    unit tests, and return the run recorded for them in ``record`` with these chapters'
    results replaced (:meth:`MatrixRun.with_chapters`). For a chapter edited after the
    whole run: its cells' results on each release, at the cost of that chapter only."""
    paths = memobook.chapter_paths(names)
    key = run_key(str(release.torch), python_version)
    if key not in record.runs:
        msg = f"{key} has no run to update: run the release whole first (without --chapter)"
        raise ValueError(msg)
    python = build(release, python_version)
    install_package(python)
    torch, vision, py = _versions(python)
    print(f"== torch {torch}, torchvision {vision}, Python {py}: {', '.join(names)}", flush=True)
    earlier = record.runs[key]
    if (torch, vision) != (earlier.torch, earlier.torchvision):
        msg = (
            f"{key} was run with torch {earlier.torch} and torchvision {earlier.torchvision}, "
            f"this environment has {torch} and {vision}"
        )
        raise ValueError(msg)
    with tempfile.TemporaryDirectory() as folder:
        chapters, claims, errors = _run_chapters(python, torch, paths, Path(folder))
    return earlier.with_chapters(chapters, claims, errors, now())


def jobs(
    listed: list[Release], names: list[str], pythons_wanted: list[str]
) -> list[tuple[Release, str]]:
    """The runs asked for: releases named (all when none), on the Pythons asked (each
    release's own when none)."""
    known = {r.torch: r for r in listed}
    unknown = [v for v in names if v not in known]
    if unknown:
        msg = f"releases must be among {list(known)} (versions.toml), got {unknown}"
        raise ValueError(msg)
    chosen = [known[v] for v in names] if names else listed
    return [
        (release, python)
        for release in chosen
        for python in release.pythons
        if not pythons_wanted or python in pythons_wanted
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook.matrix", description=__doc__)
    parser.add_argument(
        "releases", nargs="*", help="torch version(s) of versions.toml (default: all)"
    )
    parser.add_argument(
        "--release", action="append", default=[], help="torch version(s) of versions.toml"
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        help="only the runs on this Python (3.12); default: every Python a release lists",
    )
    parser.add_argument(
        "--chapter",
        action="append",
        default=[],
        help="run only this chapter (compiling) again, no unit tests, updating the run "
        "recorded for each release; repeat for several",
    )
    parser.add_argument("--newest", action="store_true", help="the newest torch on the index")
    parser.add_argument(
        "--jobs", action="store_true", help="print the runs as JSON (CI's strategy matrix)"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="RECORD",
        type=Path,
        help="merge these records (matrix.json files of single runs) into book/_data/matrix.json",
    )
    args = parser.parse_args(argv)
    listed = releases()
    if args.jobs:
        chosen_jobs = jobs(listed, [*args.releases, *args.release], args.python)
        print(json.dumps([{"torch": r.torch, "python": p} for r, p in chosen_jobs]))
        return 0
    if args.merge:
        merged = MatrixRecord.read(MATRIX)
        for path in args.merge:
            for run in MatrixRecord.read(path).runs.values():
                merged = merged.with_run(run)
        merged.write(MATRIX)
        print(f"{MATRIX.name}: {len(merged.runs)} runs")
        return 0
    if args.newest:
        newest = Release(None, None, "the newest release on the package index")
        chosen = [(newest, p) for p in (args.python or [DEFAULT_PYTHON])]
    else:
        try:
            chosen = jobs(listed, [*args.releases, *args.release], args.python)
        except ValueError as error:
            parser.error(str(error))
        if not chosen:
            parser.error(f"no release of versions.toml runs on Python {args.python}")
    if args.chapter:
        try:
            memobook.chapter_paths(args.chapter)
        except KeyError as error:
            parser.error(str(error.args[0]))
        if args.newest:
            parser.error("--chapter updates a recorded run: name releases, not --newest")
        recorded = MatrixRecord.read(MATRIX).runs
        absent = [k for r, p in chosen if (k := run_key(str(r.torch), p)) not in recorded]
        if absent:
            parser.error(f"--chapter updates a recorded run; none yet for {', '.join(absent)}")
    failed = []
    for release, python in chosen:
        if args.chapter:
            run = rerun(release, python, args.chapter, MatrixRecord.read(MATRIX))
        else:
            run = check(release, python)
        MatrixRecord.read(MATRIX).with_run(run).write(MATRIX)
        bad = [c for c, o in run.chapters.items() if not o.ok]
        print(f"torch {run.torch} on Python {run.python}: unit {run.unit.passed} passed, "
              f"{run.unit.failed} failed; chapters failing lax: {bad or 'none'}", flush=True)  # fmt: skip
        if bad or not run.unit.ok:
            failed.append(run.key)
    print(f"matrix: {'failures on ' + ', '.join(failed) if failed else 'all passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

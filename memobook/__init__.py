"""The model of the book: the one place that knows what the book is made of.

Everything that needs a fact about the book asks this package: the noxfile, the tools
(``python -m memobook.execute``, ``.bench``, ``.scaffold``, ``.matrix``), the tests, the
pytest plugin of the notebook runs and the Sphinx extension of the site.

- the chapters, in reading order, from ``_toc.yml`` (:func:`chapters`);
- what each chapter teaches, in one line (:data:`DESCRIPTION_KEY`);
- the setup cell every chapter starts with (:func:`setup_cell_source`);
- the cell tags the book uses (:data:`GPU_TAG`, ...);
- the options of every nbval run (:data:`NBVAL_ARGS`);
- the run records stored in each notebook's metadata (:mod:`memobook.record`);
- the claims each chapter makes (:mod:`memobook.claims`);
- what each figure shows (:mod:`memobook.figures`);
- the concepts the book defines, and where (:mod:`memobook.concepts`).

This module imports only the standard library at import time (the noxfile imports it
from nox's own interpreter); reading YAML imports PyYAML when it is first needed.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root: ``_config.yml``, ``_toc.yml``, ``noxfile.py`` live here."""
BOOK = ROOT / "book"
PINS = ROOT / "pins.txt"
PYPROJECT = ROOT / "pyproject.toml"
SANITIZE = Path(__file__).resolve().parent / "sanitize.cfg"

# ------------------------------------------------------------------------------- cell tags

GPU_TAG = "gpu"
"""A cell that needs CUDA: skipped by CPU runs, run by ``nox -s gpu``; guarded so it
explains itself on a CPU."""
HIDE_INPUT_TAG = "hide-input"
"""The site folds the cell's code away (the setup cell)."""
IGNORE_OUTPUT_TAG = "nbval-ignore-output"
"""nbval does not compare the cell's output (timings, tables that vary); the cell asserts
something stable instead."""
RAISES_TAG = "raises-exception"
"""The cell is expected to raise (its stored error is allowed)."""
WIDE_OUTPUT_TAG = "wide-output"
"""The site keeps the output's lines and lets it scroll sideways (profiler tables)."""
CONTEXT_TAG = "context"
"""A markdown cell of history, opinion or pointers, not facts: it needs no claim cell
after it, and it links to its source."""
CHECK_TAG = "check"
"""A claim cell whose checks are longer than a few lines: it follows the demonstration
and the prose, and the site folds its code behind "Show the check" (it still runs in
every test run). :func:`fold_check` marks a cell so."""
TAGS = (
    GPU_TAG,
    HIDE_INPUT_TAG,
    IGNORE_OUTPUT_TAG,
    RAISES_TAG,
    WIDE_OUTPUT_TAG,
    CONTEXT_TAG,
    CHECK_TAG,
)
"""Every tag the book knows; a cell with another tag is a typo."""
CHECK_PROMPTS = {"code_prompt_show": "Show the check", "code_prompt_hide": "Hide the check"}
"""The labels of a folded check's toggle on the site (myst-nb's cell-level options,
stored in the cell's ``mystnb`` metadata)."""

ERRORS_DIRECTIVE = "memo-errors"
"""The directive of the Errors page (:mod:`memobook.site`); the PDF prints its page as an
appendix (:mod:`memobook.pdf`)."""
CHANGES_DIRECTIVE = "memo-changes"
"""The directive of the What changed page; an appendix of the PDF too."""


def fold_check(cell: dict[str, Any]) -> None:
    """Mark a code cell as a folded check: tags ``check`` and ``hide-input`` (myst-nb
    folds the code, the output stays visible) and the toggle's labels (:data:`CHECK_PROMPTS`)."""
    metadata = cell.setdefault("metadata", {})
    found = metadata.setdefault("tags", [])
    for tag in (CHECK_TAG, HIDE_INPUT_TAG):
        if tag not in found:
            found.append(tag)
    metadata["mystnb"] = {**metadata.get("mystnb", {}), **CHECK_PROMPTS}


# ------------------------------------------------------------------------------ nbval runs

PLUGIN = "memobook.plugin"
"""The pytest plugin of the notebook runs (skips ``gpu`` cells without CUDA, records runs)."""
NBVAL_OPTIONS = (
    "--nbval-current-env",
    "--nbval-sanitize-with",
    str(SANITIZE.relative_to(ROOT)),
    "--nbval-kernel-startup-timeout=180",
)
"""nbval's options: the kernel is this environment's Python; what to sanitize; a kernel
may take long to start on a loaded machine (nbval's default is 60 s)."""
NBVAL_ARGS = ("-p", PLUGIN, *NBVAL_OPTIONS)
"""pytest options of every notebook run, after ``--nbval`` (strict) or ``--nbval-lax``.
Run from the repository's root."""
NBVAL_WORKERS = ("-n", "auto", "--dist", "loadfile")
"""xdist options when several notebooks run: each notebook stays in one worker (its cells
share one kernel)."""

TEST_WORKERS = ("-n", str(os.cpu_count() or 1), "--dist", "loadfile", "--no-loadscope-reorder")
"""xdist options of the whole unit-test run: a file's tests stay in one worker (module
fixtures, and tests that share a build folder, run once and in order). One worker per
core: every worker imports torch and collects every test file (some 10 CPU-seconds), and
the waits of a worker (for a process to time out, a rank to start) are filled by the
other checks that ``nox`` runs beside it. On 2 cores a fresh clone's ``nox`` took about
5 min 32 s with 4 workers and 4 min 59 s with 2. Files are handed out in the order
collected (xdist would start with the files of most tests), so the long files marked
``early`` (``tests/conftest.py``) start first rather than finish last."""


def inductor_default_cache_dir() -> str:
    """Where Inductor caches what it compiles when ``TORCHINDUCTOR_CACHE_DIR`` is unset:
    ``torchinductor_<user>`` in this process's temporary folder (torch's
    ``default_cache_dir``, outside Meta's fbcode; a test compares the two)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)
    )


def kernel_environment(tmpdir: str) -> dict[str, str]:
    """What a kernel the book's tools start gets in its environment beyond this process's,
    and the one thing it plants in ``tmpdir`` (an empty folder of the caller's).

    ``TMPDIR`` is ``tmpdir``, a private folder its runner removes after it (Jupyter
    terminates a kernel that started a forkserver or a resource tracker before Python's
    exit removes its ``pymp-*`` folder). What Inductor compiles must outlive it, as in a
    reader's Jupyter, or a chapter that compiles would compile from scratch every run:
    ``TORCHINDUCTOR_CACHE_DIR`` (unless set) is where Inductor would cache without that
    ``TMPDIR``, and ``tmpdir/torchinductor_<user>`` is a link to that same folder, made
    if missing, since Inductor's precompiled headers (torch's ``_HEADER_DIR``, 2.8 to 2.15) go
    under its default folder whatever ``TORCHINDUCTOR_CACHE_DIR`` says: without the link
    each run rebuilt them, some 5 s. Removing ``tmpdir`` removes the link, not what it
    points to. Call it before this process's ``TMPDIR`` changes."""
    env = {"TMPDIR": tmpdir}
    shared = inductor_default_cache_dir()
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        env["TORCHINDUCTOR_CACHE_DIR"] = shared
    try:
        os.makedirs(shared, exist_ok=True)  # as Inductor makes it on its first compile
        os.symlink(shared, os.path.join(tmpdir, os.path.basename(shared)))
    except OSError:
        pass  # not ours to make: Inductor in the kernel keeps its default, in tmpdir
    return env


KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
"""The kernel every chapter runs on."""
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
"""What the kernel reports about its language, less the Python version, which
:func:`language_info` adds. JupyterLab writes this into a notebook it opens and marks the
notebook modified unless it is already stored, identical."""


def language_info() -> dict[str, Any]:
    """:data:`LANGUAGE_INFO` with this interpreter's version (the kernel's: chapters run on
    the environment's own Python)."""
    import platform

    return {**LANGUAGE_INFO, "version": platform.python_version()}


CODE_WIDTH = 84
"""Characters per code line the site shows beside both sidebars; ``book/ruff.toml``
formats the chapters to it (a test checks the two agree)."""

# ----------------------------------------------------------------------------- the files


def _yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


@functools.cache
def config() -> dict[str, Any]:
    """The parsed ``_config.yml``."""
    loaded: dict[str, Any] = _yaml(ROOT / "_config.yml")
    return loaded


def repository_url() -> str:
    """The repository's URL, from ``_config.yml`` (its one home)."""
    return str(config()["repository"]["url"]).rstrip("/")


def repository_branch() -> str:
    """The branch readers' launch buttons and the setup cell use."""
    return str(config()["repository"]["branch"])


def toc(root: Path | None = None) -> dict[str, Any]:
    """The parsed ``_toc.yml`` (of the repository at ``root``, this one by default)."""
    loaded: dict[str, Any] = _yaml((ROOT if root is None else root) / "_toc.yml")
    return loaded


@dataclass(frozen=True)
class TocEntry:
    """One file of the table of contents.

    Attributes:
        docname: the path without suffix, relative to the root (``book/views``).
        part: the caption of the part it is in (``""`` for the root page).
        numbered: whether the part is numbered (chapters are; reference pages are not).
    """

    docname: str
    part: str
    numbered: bool


def toc_entries(root: Path | None = None) -> list[TocEntry]:
    """Every file named in ``_toc.yml``, the root first, in reading order."""
    loaded = toc(root)
    found = [TocEntry(str(loaded["root"]), "", numbered=False)]

    def walk(entries: list[dict[str, Any]], part: str, numbered: bool) -> Iterator[TocEntry]:
        for entry in entries:
            if "file" in entry:
                yield TocEntry(str(entry["file"]), part, numbered)
            for key in ("chapters", "sections"):
                yield from walk(entry.get(key, []), part, numbered)

    for part in loaded.get("parts", []):
        found += walk(part["chapters"], str(part.get("caption", "")), bool(part.get("numbered")))
    found += walk(loaded.get("chapters", []), "", False)
    return found


@dataclass(frozen=True)
class Chapter:
    """A chapter: a notebook listed in ``_toc.yml``.

    Attributes:
        path: the notebook file.
        docname: its name in the site (``book/views``).
        part: the caption of its part of the book.
    """

    path: Path
    docname: str
    part: str

    @property
    def name(self) -> str:
        """The topic: the file's stem (``views``)."""
        return self.path.stem

    @property
    def title(self) -> str:
        """The chapter's title: its first markdown heading, without backticks."""
        return title_of(load(self.path))

    @property
    def description(self) -> str:
        """What the chapter teaches, in one line (:data:`DESCRIPTION_KEY`); ``""`` if unset."""
        return description_of(load(self.path))

    def load(self) -> dict[str, Any]:
        """The notebook as plain JSON."""
        return load(self.path)


def chapters(root: Path | None = None) -> list[Chapter]:
    """Every chapter, in reading order (the notebooks ``_toc.yml`` lists)."""
    base = ROOT if root is None else root
    return [
        Chapter(base / f"{entry.docname}.ipynb", entry.docname, entry.part)
        for entry in toc_entries(base)
        if (base / f"{entry.docname}.ipynb").is_file()
    ]


def chapter(name: str) -> Chapter:
    """The chapter whose topic (file stem) is ``name``."""
    for found in chapters():
        if found.name == name:
            return found
    msg = f"name must be a chapter of _toc.yml, one of {[c.name for c in chapters()]}; got {name!r}"
    raise KeyError(msg)


def chapter_paths(names: Sequence[str] = ()) -> list[str]:
    """Paths of the named chapters (topics or paths), relative to the root; all when empty."""
    found = chapters()
    if not names:
        return [str(c.path.relative_to(ROOT)) for c in found]
    by_name = {c.name: c for c in found} | {str(c.path.relative_to(ROOT)): c for c in found}
    missing = [n for n in names if n not in by_name]
    if missing:
        msg = f"not chapters of _toc.yml: {missing}; chapters are {[c.name for c in found]}"
        raise KeyError(msg)
    return [str(by_name[n].path.relative_to(ROOT)) for n in names]


# -------------------------------------------------------------------------- the notebooks


def load(path: Path) -> dict[str, Any]:
    """A notebook as plain JSON."""
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def code_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    """The notebook's code cells, in order."""
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell: dict[str, Any]) -> str:
    """A cell's source as one string."""
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else str(text)


def tags(cell: dict[str, Any]) -> list[str]:
    """A cell's tags."""
    return list(cell.get("metadata", {}).get("tags", []))


def title_of(nb: dict[str, Any]) -> str:
    """The first markdown heading of a notebook, without ``#`` and backticks."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in source(cell).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip().replace("`", "")
    return ""


DESCRIPTION_KEY = "pytorch_memo_description"
"""The notebook metadata that says, in one line, what the chapter teaches: the landing
page lists each chapter with it. Backticks mark code, as in the chapter's text."""


def description_of(nb: dict[str, Any]) -> str:
    """The notebook's one-line description (:data:`DESCRIPTION_KEY`); ``""`` when unset."""
    return str(nb.get("metadata", {}).get(DESCRIPTION_KEY, "")).strip()


SUMMARY_TITLE = "Summary: what to do"
"""The title of every chapter's last section: imperative lines a reader returns to."""


def sections(nb: dict[str, Any]) -> list[tuple[int, str]]:
    """``(cell index, title)`` of each section (a ``## `` heading of a markdown cell), in
    order; titles as written, backticks kept."""
    return [
        (index, line[3:].strip())
        for index, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "markdown"
        for line in source(cell).splitlines()
        if line.startswith("## ")
    ]


def summary_points(nb: dict[str, Any]) -> list[str]:
    """The points of the chapter's summary (its section titled :data:`SUMMARY_TITLE`):
    every ``- `` item of its lists, as markdown, its continuation lines joined."""
    start = next((index for index, title in sections(nb) if title == SUMMARY_TITLE), None)
    if start is None:
        return []
    points: list[str] = []
    current: list[str] | None = None
    for cell in nb["cells"][start:]:
        if cell["cell_type"] != "markdown":
            current = None
            continue
        for line in source(cell).splitlines():
            if line.startswith("- "):
                current = [line[2:].strip()]
                points.append("")
            elif current is not None and line.startswith("  ") and line.strip():
                current.append(line.strip())
            else:
                current = None
                continue
            points[-1] = " ".join(current)
        current = None
    return points


def package_imports(nb: dict[str, Any]) -> list[str]:
    """``pytorch_memo.module.name`` for every name the notebook imports from the package,
    in order of first import (cells that are not Python, such as magics, import nothing)."""
    import ast

    names: list[str] = []
    for cell in code_cells(nb):
        try:
            tree = ast.parse(source(cell))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytorch_memo."):
                names += [f"{node.module}.{alias.name}" for alias in node.names]
    return list(dict.fromkeys(names))


def package_release() -> str:
    """The helper package's release as a pip requirement, ``pytorch-memo==0.1.0``: its
    name and version from ``pyproject.toml`` (their one home)."""
    import tomllib

    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    return f"{project['name']}=={project['version']}"


def setup_cell_source(*, seconds: int = 300) -> str:
    """The first code cell of every chapter: installs ``pytorch_memo`` where it is missing.

    It installs the release :func:`package_release` names (the version in
    ``pyproject.toml``) from the package index, never a moving branch, so a chapter and
    the helpers it gets stay in step as long as the version is bumped (and released)
    when the helpers change: bumping it changes every chapter's setup cell
    (``python -m memobook.scaffold --sync``). pip gets a socket timeout of 15 s and two retries, the whole install at
    most ``seconds``. A failure (offline, a dead or silent proxy, no pip, no such
    release) ends the cell with one short message, what failed and what to do, and no
    traceback: IPython shows an exception's ``_render_traceback_`` instead of its
    traceback, and Run All stops there. Its first line says what it is, for readers
    who see it in JupyterLab or Colab (the site folds it away).
    """
    release = package_release()
    return (
        "# Setup cell (the same in every chapter): installs the book's helper package\n"
        "# where it is missing (Colab), pinned to the book's release.\n"
        "import importlib.util\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if importlib.util.find_spec("pytorch_memo") is None:\n'
        f'    release = "{release}"\n'
        f'    print(f"Installing {{release}} (at most {seconds} s)...")\n'
        '    pip = [sys.executable, "-m", "pip", "install", "-q", "--timeout", "15"]\n'
        '    pip += ["--retries", "2", "--disable-pip-version-check", release]\n'
        "    try:\n"
        f"        subprocess.run(pip, check=True, capture_output=True, text=True, timeout={seconds})\n"
        '        error = ""\n'
        "    except subprocess.TimeoutExpired:\n"
        f'        error = "pip took more than {seconds} s"\n'
        "    except subprocess.CalledProcessError as failed:\n"
        '        error = (failed.stderr.strip() or "pip failed").splitlines()[-1]\n'
        '        if "Retrying" in failed.stderr:  # pip warned of failed connections\n'
        '            error = "the package index could not be reached"\n'
        "    if error:\n"
        "\n"
        "        class SetupError(Exception):\n"
        "            def _render_traceback_(self):  # IPython: the message, no traceback\n"
        "                return [str(self)]\n"
        "\n"
        "        raise SetupError(\n"
        '            f"Could not install {release}: {error}.\\n"\n'
        '            "Check the network, or install it yourself, then restart the kernel:\\n"\n'
        '            f"  pip install {release}, or in a clone of\\n"\n'
        f'            "  {repository_url()}: pip install -e ."\n'
        "        )"
    )


# ---------------------------------------------------------------------------- the stack


def pins() -> dict[str, str]:
    """``{name: version}`` from ``pins.txt``, the verified stack."""
    found = {}
    for number, raw in enumerate(PINS.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if match is None:
            msg = f"pins.txt line {number} must be NAME==VERSION, got {raw!r}"
            raise ValueError(msg)
        found[match.group(1).lower()] = match.group(2)
    return found


ENV_GROUPS = ("test", "book", "lint", "browser")
"""The dependency groups of ``pyproject.toml`` installed into the book's environment."""


def env_digest(root: Path | None = None) -> str:
    """What the book's environment is built from: ``pins.txt``, ``pyproject.toml`` and the
    groups, hashed. The noxfile rebuilds ``.nox/memo`` when it changes; CI caches the
    environment under it."""
    base = ROOT if root is None else root
    digest = hashlib.sha256()
    for part in ((base / "pins.txt").read_bytes(), (base / "pyproject.toml").read_bytes()):
        digest.update(part)
    for group in ENV_GROUPS:
        digest.update(group.encode())
    return digest.hexdigest()

"""`nox -s chapter` (memobook.scaffold): a new chapter passes the book's checks as written.

The scaffold runs in a throwaway copy of the repository (its tracked files), in a fresh
process whose imports come from that copy, exactly as `nox -s chapter -- TOPIC` would;
then the checks of `nox` that concern a new chapter run there: ruff and mypy on the new
files, then, in one pytest run, the new unit tests, the hygiene and claim checks of every
chapter and strict nbval of the new chapter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import memobook
from memobook import scaffold

pytestmark = pytest.mark.early  # a long file: handed out first (tests/conftest.py)

BIN = Path(sys.executable).parent
TOPIC = "throwaway_topic"


def _call(copy: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` run in ``copy``, importing from it, whatever its outcome."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, check=False)


def _run(copy: Path, *command: str) -> subprocess.CompletedProcess[str]:
    done = _call(copy, *command)
    assert done.returncode == 0, (
        f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's tracked files with a scaffolded chapter in it."""
    root = tmp_path_factory.mktemp("repo")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=memobook.ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = memobook.ROOT / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    _run(root, sys.executable, "-m", "memobook.scaffold", TOPIC, "--title", "A throwaway chapter")
    return root


def test_the_scaffold_writes_the_files_and_the_toc_entry(copy: Path) -> None:
    for path in (f"book/{TOPIC}.ipynb", f"pytorch_memo/{TOPIC}.py", f"tests/test_{TOPIC}.py"):
        assert (copy / path).is_file(), path
    chapters = memobook.chapters(copy)
    assert chapters[-1].name == TOPIC, "appended at the end of the last numbered part"
    assert chapters[-1].part == memobook.chapters()[-1].part
    assert [c.name for c in chapters[:-1]] == [c.name for c in memobook.chapters()]


def test_the_new_files_pass_lint(copy: Path) -> None:
    new = [f"book/{TOPIC}.ipynb", f"pytorch_memo/{TOPIC}.py", f"tests/test_{TOPIC}.py"]
    _run(copy, str(BIN / "ruff"), "check", *new)
    _run(copy, str(BIN / "ruff"), "format", "--check", *new)
    _run(copy, str(BIN / "mypy"), f"pytorch_memo/{TOPIC}.py", f"tests/test_{TOPIC}.py")


FLOOR = "tests.test_claims::test_the_book_makes_at_least_300_claims"
"""The book's floor of claims, which a new chapter's one claim is below: it must fail."""


@pytest.fixture(scope="module")
def checked(copy: Path) -> dict[str, ET.Element]:
    """The copy's chapter checks, run once by pytest (one process, one torch import): the
    new module's doctests and tests, the hygiene, claim and record checks of every chapter,
    and strict nbval of the new chapter; each test case of its JUnit report, by id."""
    report = copy / "report.xml"
    done = _call(
        copy, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml",
        str(report), "--doctest-modules", "--nbval", *memobook.NBVAL_ARGS,
        f"pytorch_memo/{TOPIC}.py", f"tests/test_{TOPIC}.py", "tests/test_notebooks.py",
        "tests/test_claims.py", "tests/test_record.py", f"book/{TOPIC}.ipynb",
    )  # fmt: skip
    assert report.is_file(), (
        f"pytest wrote no report:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    cases = ET.parse(report).getroot().iter("testcase")
    return {f"{c.get('classname')}::{c.get('name')}": c for c in cases}


def _problems(case: ET.Element) -> list[ET.Element]:
    """A test case's failures and errors (a skip passes, as it does for pytest)."""
    return [e for e in case if e.tag in ("failure", "error")]


def test_the_new_tests_and_the_chapter_checks_pass(checked: dict[str, ET.Element]) -> None:
    own = [name for name in checked if f"test_{TOPIC}" in name or f"pytorch_memo.{TOPIC}" in name]
    assert own, f"no test of the new module ran: {sorted(checked)}"
    assert any(name.startswith("tests.test_notebooks::") for name in checked)
    failed = {
        name: [e.get("message") for e in _problems(case)]
        for name, case in checked.items()
        if _problems(case) and name != FLOOR
    }
    assert not failed, failed


def test_a_new_chapter_is_unfinished_until_it_makes_20_claims(
    checked: dict[str, ET.Element],
) -> None:
    """The book's floor of claims per chapter names the scaffold's chapter, with its one."""
    failures = [e for e in checked[FLOOR] if e.tag == "failure"]
    assert failures, f"{FLOOR} passed"
    message = f"fewer than 20 claims (a chapter is not finished): {{'{TOPIC}': 1}}"
    assert message in (failures[0].text or "") + (failures[0].get("message") or "")


def test_the_new_chapter_passes_strict_nbval(copy: Path, checked: dict[str, ET.Element]) -> None:
    cells = {n: c for n, c in checked.items() if n.startswith(f"book.{TOPIC}.ipynb::")}
    code = memobook.code_cells(memobook.load(copy / "book" / f"{TOPIC}.ipynb"))
    assert len(cells) == len(code) > 0, sorted(cells)
    assert not [n for n, c in cells.items() if _problems(c)]


def test_a_taken_or_bad_topic_writes_nothing(copy: Path) -> None:
    before = (copy / "_toc.yml").read_text()
    for topic, title, message in [
        (TOPIC, "Again", "is taken"),
        ("Views", "Capitals", "lowercase Python identifier"),
        ("class", "A keyword", "lowercase Python identifier"),
        ("fine", "", "one non-empty line"),
    ]:
        with pytest.raises(scaffold.ScaffoldError, match=message):
            scaffold.new_chapter(topic, title=title, root=copy, execute=False)
    with pytest.raises(scaffold.ScaffoldError, match="caption of a numbered part"):
        scaffold.new_chapter("fine", title="Fine", part="Reference", root=copy, execute=False)
    assert (copy / "_toc.yml").read_text() == before
    assert not (copy / "book" / "fine.ipynb").exists()

"""`nox -s chapter` (memobook.scaffold): a new chapter passes the book's checks as written.

The scaffold runs in a throwaway copy of the repository (its tracked files), in a fresh
process whose imports come from that copy, exactly as `nox -s chapter -- TOPIC` would;
then the checks of `nox` that concern a new chapter run there: ruff and mypy on the new
files, then, in one pytest run, the new unit tests, the hygiene and claim checks of every
chapter and strict nbval of the new chapter.

The tests after them run the scaffold in a small throwaway book (tests/authorbook.py):
topics and titles it must refuse or write intact (issue 24, D5 and D6), every file or
none when the execute step fails or the process is SIGKILLed (D5), and scaffolds
started at the same moment (D4). tests/test_author_kills.py kills it at random moments.
"""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import memobook
from memobook import scaffold
from tests.authorbook import environment, make_book, notebook, snapshot

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
    assert chapters[-1].description, "a placeholder for the landing page's line"
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


# ------------------------------------------- the scaffold never leaves half a chapter
# These run in a small throwaway book (tests/authorbook.py), not the copy above.


@pytest.fixture
def book(tmp_path: Path) -> Path:
    """A book with one chapter, the package and a tests folder."""
    return make_book(tmp_path, {"first": notebook("1 + 1")}, package=True)


@pytest.mark.parametrize(
    ("topic", "rule"),
    [
        ("intro", r"is taken: it names an existing page \['book/intro.md'\]"),
        ("memo", r"is taken: it names an existing page \['book/memo.md'\]"),
        ("con", "a file name Windows reserves"),
        ("nul", "a file name Windows reserves"),
        ("com1", "a file name Windows reserves"),
        ("lpt9", "a file name Windows reserves"),
        ("a" * 41, "at most 40 characters .* got 41"),
        ("a" * 249, "at most 40 characters .* got 249"),
    ],
)
def test_a_topic_that_names_a_page_or_a_reserved_name_or_is_too_long_is_refused(
    book: Path, topic: str, rule: str
) -> None:
    """D6: each is refused before anything is written, with the rule it breaks."""
    before = snapshot(book)
    with pytest.raises(scaffold.ScaffoldError, match=rule):
        scaffold.new_chapter(topic, title="A title", root=book, execute=False)
    assert snapshot(book) == before


def test_a_topic_of_40_characters_is_fine(book: Path) -> None:
    topic = "a" * 40
    scaffold.new_chapter(topic, title="Long", root=book, execute=False)
    assert (book / "book" / f"{topic}.ipynb").is_file()


@pytest.mark.parametrize(
    "title",
    ['Quotes """ inside', "C:\\Users\\x", 'Ends with a quote"', "Ends with \\", "'Single' \"x\""],
)
def test_any_printable_title_is_written_as_itself(book: Path, title: str) -> None:
    """D5: the title reaches the notebook's heading intact, and the module stays valid
    Python (a title once pasted unescaped into its docstring was a SyntaxError; the
    module no longer names its chapter: the API page does, from the imports)."""
    scaffold.new_chapter("titled", title=title, root=book, execute=False)
    text = (book / "pytorch_memo" / "titled.py").read_text()
    assert ast.get_docstring(ast.parse(text))
    assert title not in text
    assert memobook.title_of(memobook.load(book / "book" / "titled.ipynb")) == title


@pytest.mark.parametrize("title", ["Tab\there", "Escape \x1b[31m", "Line\u2028separator", " "])
def test_a_title_with_control_characters_is_refused(book: Path, title: str) -> None:
    before = snapshot(book)
    with pytest.raises(scaffold.ScaffoldError, match="one non-empty line of printable"):
        scaffold.new_chapter("titled", title=title, root=book, execute=False)
    assert snapshot(book) == before


def test_a_failed_execute_step_rolls_back_every_file(
    book: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """D5: when the execute step fails, nothing of the chapter is left (the rerun used to
    say "topic is taken"), and the command says so in a few lines, not a traceback."""
    import memobook.execute

    def fails(path: Path, **options: object) -> None:
        raise RuntimeError("the kernel died")

    monkeypatch.setattr(memobook.execute, "execute", fails)
    monkeypatch.setattr(memobook, "ROOT", book)
    before = snapshot(book)
    try:
        status: object = scaffold.main(["failing", "--title", "Fails"])
    except RuntimeError as error:  # how it ended before: a traceback
        status = error
    err = capsys.readouterr().err
    assert snapshot(book) == before, "a file of the failed chapter was left"
    assert status == 1
    assert "rolled back the unfinished chapter 'failing'" in err, err
    assert "could not be made, and nothing of it is left" in err, err
    assert "RuntimeError: the kernel died" in err
    assert "Traceback" not in err
    assert not (book / "_build" / "scaffold" / "journal.json").exists()


KILLS_ITSELF = (
    "import os, sys\n"
    "import memobook.execute\n"
    "memobook.execute.execute = lambda path, **options: os.kill(os.getpid(), 9)\n"
    "from memobook import scaffold\n"
    "sys.exit(scaffold.main(sys.argv[1:]))\n"
)
"""The scaffold, SIGKILLed in its execute step."""


def test_the_next_scaffold_repairs_what_a_killed_one_left(book: Path) -> None:
    """D5: a SIGKILL in the execute step leaves files and a _toc.yml entry; the next
    scaffold of the book removes them, says so, and the topic is free again."""
    before = snapshot(book)
    env = environment(book)
    killed = subprocess.run(
        [sys.executable, "-c", KILLS_ITSELF, "half", "--title", "Half"],
        cwd=book, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert snapshot(book) != before, "the killed scaffold had written something"
    again = subprocess.run(
        [sys.executable, "-m", "memobook.scaffold", "half", "--title", "Half", "--no-execute"],
        cwd=book, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "a scaffold stopped before it finished: rolled back the unfinished chapter 'half'" in (
        again.stderr
    )
    assert [c.name for c in memobook.chapters(book)] == ["first", "half"]
    assert not [p for p in (book / "book").iterdir() if p.name.startswith(".")]


RACER = (
    "import sys\n"
    "from memobook import scaffold\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "sys.exit(scaffold.main(sys.argv[1:]))\n"
)
"""The scaffold, started when a line arrives (so that several start at once)."""


def test_scaffolds_at_once_lose_no_entry_and_never_share_a_topic(book: Path) -> None:
    """D4: four scaffolds released at the same moment, two of them of the same topic:
    every other topic gets its entry, and one of the two is refused (it used to
    overwrite the other's chapter)."""
    runs = [("alpha", "Alpha one"), ("beta", "Beta"), ("alpha", "Alpha two"), ("gamma", "Gamma")]
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, topic, "--title", title, "--no-execute"],
            cwd=book,
            env=environment(book),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for topic, title in runs
    ]
    for racer in racers:
        assert racer.stdout is not None
        assert racer.stdout.readline().strip() == "ready"
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    outcomes = [racer.communicate(timeout=120) for racer in racers]
    statuses = [racer.returncode for racer in racers]
    assert sorted(c.name for c in memobook.chapters(book)) == ["alpha", "beta", "first", "gamma"]
    assert statuses[1] == statuses[3] == 0, outcomes
    assert sorted([statuses[0], statuses[2]]) == [0, 2], outcomes  # argparse's error: 2
    loser = 0 if statuses[0] else 2
    assert "topic 'alpha' is taken" in outcomes[loser][1]
    winner_title = runs[2 - loser][1]
    assert memobook.title_of(memobook.load(book / "book" / "alpha.ipynb")) == winner_title

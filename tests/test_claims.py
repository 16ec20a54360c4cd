"""The rules of claims (memobook.claims): shown failing on planted examples, then held by
every chapter of the book."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

import memobook
from memobook import claims as rules
from memobook.claims import (
    book_claims,
    cell_claims,
    chapter_claims,
    notebook_problems,
    section_claims,
)
from memobook.record import GPU_MARK, ClaimOutcome, MatrixRecord, MatrixRun, Outcome, source_digest


def _code(source: str, tags: tuple[str, ...] = ()) -> Any:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = list(tags)
    return cell


def _markdown(source: str, tags: tuple[str, ...] = ()) -> Any:
    cell = nbformat.v4.new_markdown_cell(source)
    cell.metadata["tags"] = list(tags)
    return cell


def _problems(*cells: Any) -> list[str]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [_markdown("# Title\n\nWhat the chapter shows."), *cells]
    return notebook_problems(nb, "planted")


GOOD = "# Claim: `sum` over `()` of an int tensor is 0.\nassert torch.tensor([], dtype=torch.int64).sum(()) == 0"


def test_a_checked_claim_passes() -> None:
    assert _problems(_markdown("## Sums\n\nAn empty sum is zero."), _code(GOOD)) == []


def test_continuation_lines_join_and_other_comments_end_a_claim() -> None:
    source = "# Claim: one line\n#   goes on.\n# Claim: two.\n# a plain comment\nx = 1\n# Claim: not here.\n"
    assert cell_claims(source) == ["one line goes on.", "two."]


def test_a_claim_cell_without_a_check_fails() -> None:
    planted = _code("# Claim: `zeros` makes zeros.\nprint(torch.zeros(2))")
    assert any("not checked" in p for p in _problems(_markdown("Zeros."), planted))


@pytest.mark.parametrize(
    "check",
    [
        "assert x == 1",
        "with raises(ValueError, match='x'):\n    f()",
        "torch.testing.assert_close(a, b)",
        "torch.autograd.gradcheck(f, (x,))",
    ],
)
def test_each_kind_of_check_counts(check: str) -> None:
    assert _problems(_markdown("Facts."), _code(f"# Claim: a fact.\n{check}")) == []


def test_a_claim_wider_than_its_check_fails() -> None:
    """A sentence naming three reductions gets three exercised."""
    planted = _code(
        "# Claim: `sum`, `max` and `std` reduce over a list of dims.\n"
        "assert x.sum((0, 1)).shape == ()"
    )
    problems = _problems(_markdown("Reductions."), planted)
    assert [p.split("quotes ")[1].split(",")[0] for p in problems] == ["`max`", "`std`"]


def test_quoted_names_in_comments_do_not_count() -> None:
    planted = _code("# Claim: `prod` reduces.\nassert x.sum() == 6  # not prod")
    assert any("`prod`" in p for p in _problems(_markdown("Products."), planted))


def test_prose_bound_to_no_claim_fails_unless_it_is_context() -> None:
    unbound = _problems(_markdown("## Facts\n\nTensors are fast."), _code("x = 1"))
    assert any("bound to no claim" in p for p in unbound)
    linked = _markdown("History: see [the RFC](https://github.com/pytorch/rfcs).", ("context",))
    assert _problems(linked, _code("x = 1")) == []
    unlinked = _problems(_markdown("In my opinion tensors are nice.", ("context",)))
    assert any("links to its source" in p for p in unlinked)
    assert _problems(_markdown("## A heading alone"), _markdown("Facts."), _code(GOOD)) == []


def test_claims_open_their_cell_and_are_sentences() -> None:
    stray = _problems(_markdown("Facts."), _code("x = 1\n# Claim: late.\nassert x"))
    assert any("comment block that opens the cell" in p for p in stray)
    no_period = _problems(_markdown("Facts."), _code("# Claim: no period\nassert True"))
    assert any("ending with a period" in p for p in no_period)
    twice = _problems(_markdown("Facts."), _code(GOOD), _markdown("Again."), _code(GOOD))
    assert any("made twice" in p for p in twice)


@pytest.mark.parametrize("chapter", memobook.chapters(), ids=lambda c: c.name)
def test_every_chapter_keeps_the_rules_of_claims(chapter: memobook.Chapter) -> None:
    assert notebook_problems(chapter.load(), chapter.name) == []
    assert chapter_claims(chapter), f"{chapter.name} makes no claim"


def test_the_book_makes_at_least_300_claims() -> None:
    """The memo page is the book's index of facts: every chapter contributes."""
    claims = book_claims()
    assert len(claims) >= 300, len(claims)
    per_chapter = {c.name: 0 for c in memobook.chapters()}
    for claim in claims:
        per_chapter[claim.chapter] += 1
    short = {name: n for name, n in per_chapter.items() if n < 20}
    assert not short, f"chapters with fewer than 20 claims (a chapter is not finished): {short}"


def test_claims_group_by_the_section_they_are_in(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    claim = "# Claim: `sum` of nothing is 0.\nassert torch.zeros(0).sum() == 0"
    nb.cells = [
        _markdown("# Sums\n\nWhat the chapter shows."),
        _code(claim),
        _markdown("## Empty sums\n\nProse."),
        _code(claim),
        _markdown("### A subsection\n\nStill the same section."),
        _code(claim),
        _markdown("## No claims here"),
        _markdown("## `sum` of ones\n\nProse."),
        _code(claim),
    ]
    path = tmp_path / "sums.ipynb"
    nbformat.write(nb, path)
    chapter = memobook.Chapter(path, "book/sums", "Tensors")
    groups = [(title, [c.cell for c in claims]) for title, claims in section_claims(chapter)]
    assert groups == [("Sums", [1]), ("Empty sums", [3, 5]), ("`sum` of ones", [8])]


def test_every_chapter_has_summary_points() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _markdown("# T\n\n- not a summary point"),
        _markdown(
            f"## {memobook.SUMMARY_TITLE}\n\nIntro.\n\n- One `a`\n  continued.\n- Two.\n\nAfter."
        ),
        _code(GOOD),
        _markdown("- Three."),
    ]
    assert memobook.summary_points(nb) == ["One `a` continued.", "Two.", "Three."]
    for chapter in memobook.chapters():
        assert memobook.summary_points(chapter.load()), f"{chapter.name}: no summary points"


def test_claims_have_stable_unique_anchors() -> None:
    claims = book_claims()
    ids = [c.cell_id for c in claims]
    assert all(ids), "every claim cell has an id (nbformat 4.5)"
    cells = {(c.chapter, c.cell) for c in claims}
    assert len({c.cell_id for c in claims}) == len(cells), "cell ids are unique across the book"


# ------------------------------------------------------------------------- scope rules


def _matrix(*versions: str) -> MatrixRecord:
    record = MatrixRecord()
    for version in versions:
        record = record.with_run(MatrixRun(version, "0", "now", "3.11.7", Outcome(1, 0, 0)))
    return record


def _scope(*cells: Any, ran: tuple[str, ...] = ("2.8.0", "2.11.0", "2.15.0")) -> list[str]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [_markdown("# Title"), *cells]
    return rules.scope_problems(nb, "planted", _matrix(*ran))


@pytest.mark.parametrize(
    ("sentence", "missing"),
    [
        ("It holds from 2.8 to 2.15.", "2.9"),
        ("It holds on torch 2.9-2.11.", "2.9"),
        ("Since torch 2.9, it warns.", "2.9"),
        ("Up to 2.14 it raised.", "2.9"),
        ("Until 2.13 it raised.", "2.12"),
        ("Before 2.10 it raised.", "2.9"),
        ("Torch 2.12 and later warn.", "2.12"),
        ("Torch 2.9 and earlier raise.", "2.9"),
        # a list mixing a single release with a range: the range is read too
        ("It raises on torch 2.8 and 2.10 to 2.15.", "2.10"),
        ("It warns on 2.9 and 2.11 to 2.15.", "2.12"),
        ("It holds on torch 2.8, 2.9 and 2.11 to 2.14.", "2.12"),
        ("A DeprecationWarning on 2.8, a FutureWarning from 2.11 to 2.15.", "2.12"),
        ("It holds on 2.8–2.12.", "2.9"),
        ("From torch 2.9 on it warns.", "2.9"),
        ("Torch 2.14 or later warns.", "2.14"),
        ("Between 2.9 and 2.11 it warned.", "2.9"),
    ],
)
def test_6a_a_range_of_releases_the_matrix_did_not_run_fails(sentence: str, missing: str) -> None:
    problems = _scope(_markdown(sentence), _code(f"# Claim: {sentence}\n{GOOD}"))
    assert len(problems) == 2, problems  # the prose and the claim
    assert all(f"never ran {missing}" in p or f", {missing}" in p for p in problems), problems


@pytest.mark.parametrize(
    "sentence",
    [
        "It holds on 2.8, 2.11 and 2.15.",  # names the releases checked
        "From 2.8 to 2.11 it holds.",  # every minor in between ran (below)
        "Since 2.14 it warns.",
        "Torch 2.8 and 2.15 agree.",  # two releases, not a range
        "It changed in 2.15.",
        "It raises on torch 2.8 and 2.10 to 2.11.",
        "It runs on 2.11 on Python 3.12 and on 2.15 on Python 3.13.",
        "The folder is named `torch-2.15.0-py311-cu132`.",
    ],
)
def test_6a_releases_named_or_fully_run_pass(sentence: str) -> None:
    ran = ("2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.14.1", "2.15.0")
    assert _scope(_markdown(sentence), _code(f"# Claim: {sentence}\n{GOOD}"), ran=ran) == []


@pytest.mark.parametrize(
    ("sentence", "ranges"),
    [
        ("on torch 2.8 and 2.10 to 2.15", [("2.10 to 2.15", 10, 15)]),
        ("on 2.8, 2.9 and 2.11 to 2.15; 2.10.0 builds it", [("2.11 to 2.15", 11, 15)]),
        (
            "a DeprecationWarning from torch 2.10 to 2.13 and a FutureWarning from 2.14 to 2.15",
            [("from torch 2.10 to 2.13", 10, 13), ("from 2.14 to 2.15", 14, 15)],
        ),
        ("torch 2.8 to 2.14 refuse it; from 2.15 on it runs", [("2.8 to 2.14", 8, 14), ("from 2.15", 15, 15)]),
        ("on 2.8-2.12 and 2.13–2.15", [("2.8-2.12", 8, 12), ("2.13–2.15", 13, 15)]),
        ("since 2.9, until 2.13, up to 2.14, before 2.10", [("since 2.9", 9, 15), ("until 2.13", 8, 13), ("up to 2.14", 8, 14), ("before 2.10", 8, 9)]),
        ("2.12 and later, 2.14 or later, 2.9+, 2.9 and earlier", [("2.12 and later", 12, 15), ("2.14 or later", 14, 15), ("2.9+", 9, 15), ("2.9 and earlier", 8, 9)]),
        ("between torch 2.9 and 2.11", [("between torch 2.9 and 2.11", 9, 11)]),
        ("on 2.8 and 2.15; 2.10.0 and 2.15.0+cu132; `torch-2.15.0-py311`", []),
        ("on 2.11 on Python 3.12", []),
    ],
)  # fmt: skip
def test_6a_every_range_form_is_read(sentence: str, ranges: list[tuple[str, int, int]]) -> None:
    assert rules.release_ranges(sentence, "2.8", "2.15") == ranges


EVERY_RELEASE = ("2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")


def _cell_matrix(*cells: tuple[Any, dict[str, str]], stale: tuple[str, ...] = ()) -> MatrixRecord:
    """A run of every release, each with an outcome for each cell as it reads now:
    ``(cell, {release: outcome})``, ``passed`` where none is given; the runs of the
    releases in ``stale`` ran the cells' older code (another digest)."""
    record = MatrixRecord()
    for version in EVERY_RELEASE:
        digest = "0ld0ld0ld0ld" if version in stale else None
        outcomes = {
            cell.id: ClaimOutcome(
                given.get(version, "passed"), digest or source_digest(cell.source)
            )
            for cell, given in cells
        }
        run = MatrixRun(version, "0", "now", "3.11.7", Outcome(1, 0, 0), {}, {"planted": outcomes})
        record = record.with_run(run)
    return record


def _chapter(*cells: Any) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = [_markdown("# Title"), *cells]
    return nb


def test_6a_a_claims_range_is_judged_by_the_runs_of_its_own_cell() -> None:
    """The matrix ran 2.9, but not this cell: its 2.9.1 run raised before the cell's
    checks (as the indexing chapter's did), failed it, skipped it, ran its older code or
    did not record it."""
    claim = _code(f"# Claim: It holds from 2.8 to 2.15.\n{GOOD}")
    other = _code(f"# Claim: It holds on 2.9.\n{GOOD}")
    nb = _chapter(_markdown("Facts."), claim, other)
    assert rules.scope_problems(nb, "planted", _cell_matrix((claim, {}), (other, {}))) == []
    for record in (
        _cell_matrix((claim, {"2.9.1": "error"}), (other, {})),
        _cell_matrix((claim, {"2.9.1": "failed"}), (other, {})),
        _cell_matrix((claim, {"2.9.1": "skipped"}), (other, {})),
        _cell_matrix((claim, {}), (other, {}), stale=("2.9.1",)),
        _cell_matrix((claim, {}), (other, {})).with_run(  # the cell is missing from 2.9.1
            _cell_matrix((other, {})).runs["2.9.1 py3.11"]
        ),
    ):
        (problem,) = rules.scope_problems(nb, "planted", record)
        assert problem.startswith("planted cell 2: 'from 2.8 to 2.15'"), problem
        assert "passed this cell (as it reads now) on 2.9:" in problem, problem


def _scope_of(cell: Any, outcomes: dict[str, str]) -> list[str]:
    nb = _chapter(_markdown("Facts."), cell)
    return rules.scope_problems(nb, "planted", _cell_matrix((cell, outcomes)))


def test_6a_a_cause_comment_is_judged_like_its_claim() -> None:
    cell = _code(f"# Claim: It holds.\n# Cause: torch 2.8 to 2.15 refuse it.\n{GOOD}")
    (problem,) = _scope_of(cell, {"2.10.0": "error"})
    assert "'2.8 to 2.15'" in problem
    assert "on 2.10:" in problem


def test_6a_one_release_named_as_torchs_is_judged_like_a_range() -> None:
    cell = _code(f"# Claim: It holds on torch 2.9, and the loss is 2.5 here.\n{GOOD}")
    passed = dict.fromkeys(EVERY_RELEASE, "passed")
    assert _scope_of(cell, passed) == []  # 2.5 is a value, not a release of torch
    (problem,) = _scope_of(cell, {**passed, "2.9.1": "failed"})
    assert "it says what torch 2.9 does" in problem
    assert "passed this cell (as it reads now) on 2.9" in problem
    unrun = _code(f"# Claim: On torch 2.9 it holds.\n{GOOD}")
    (problem,) = _scope(unrun)  # judged by the releases the matrix ran: 2.8, 2.11, 2.15
    assert "the version matrix never ran 2.9" in problem
    ranged = _code(f"# Claim: It holds from torch 2.9 to 2.11.\n{GOOD}")
    (problem,) = _scope(ranged)  # the range's problem only, not one more for 2.9
    assert "'from torch 2.9 to 2.11' names a range" in problem


def test_6a_a_gpu_cells_range_is_judged_by_its_gpu_run() -> None:
    """The CPU matrix skips a `gpu` cell; its GPU run (the mark) is its one release."""
    cell = _code(
        f"# Claim: On CUDA it holds on torch 2.11; before 2.10 it raised.\n{GOOD}", ("gpu",)
    )
    skipped = dict.fromkeys(EVERY_RELEASE, "skipped")
    assert _scope_of(cell, skipped) == []  # never checked: judged by the matrix as a whole
    cell.metadata[GPU_MARK] = {
        "executed": "now", "torch": "2.11.0+cu130", "device": "H200",
        "code": source_digest(cell.source),
    }  # fmt: skip
    (problem,) = _scope_of(cell, skipped)
    assert "'before 2.10'" in problem
    assert "checked (2.11)" in problem


def test_6a_prose_is_judged_by_the_claim_cells_of_its_section() -> None:
    """A release counts where one of the section's claim cells passed and none failed."""
    prose = _markdown("## Lists\n\nOn torch 2.8 to 2.15 it holds.")
    one, two = _code(f"# Claim: It holds.\n{GOOD}"), _code(f"# Claim: It holds too.\n{GOOD}")
    later = _markdown("## Another section\n\nFacts.")
    elsewhere = _code(f"# Claim: Elsewhere.\n{GOOD}")
    nb = _chapter(prose, one, _markdown("More."), two, later, elsewhere)
    error = {"2.9.1": "error"}

    def problems(*outcomes: dict[str, str]) -> list[str]:
        cells = zip((one, two, elsewhere), outcomes, strict=True)
        return rules.scope_problems(nb, "planted", _cell_matrix(*cells))

    assert problems({}, {}, error) == []  # another section's cell does not count
    assert problems(error, {}, {}) != []  # one of its cells failed on 2.9
    (problem,) = problems(error, error, {})
    assert problem.startswith("planted cell 1: '2.8 to 2.15'"), problem
    assert "claim cells of its section (as they read now) on 2.9:" in problem
    # a demonstration cell's comments are prose of its section too
    nb.cells.insert(3, _code("# on torch 2.8 to 2.15 it prints 3\nprint(3)"))
    assert [p.split(":")[0] for p in problems(error, error, {})] == [
        "planted cell 1", "planted cell 3"
    ]  # fmt: skip


def test_6a_what_the_matrix_never_ran_as_it_reads_now_is_judged_by_the_whole_matrix() -> None:
    """A new chapter, or a cell whose code just changed, has no runs of its own: its
    ranges pass where the matrix ran every release in them, so the CI can stay green."""
    claim = _code(f"# Claim: It holds from 2.8 to 2.15.\n{GOOD}")
    nb = _chapter(_markdown("## New\n\nSince 2.9 it warns."), claim)
    assert rules.scope_problems(nb, "planted", _cell_matrix()) == []
    changed = _cell_matrix((claim, {}), stale=EVERY_RELEASE)
    assert rules.scope_problems(nb, "planted", changed) == []
    older = _chapter(_markdown("Facts."), _code(f"# Claim: It holds from 2.7 to 2.15.\n{GOOD}"))
    (problem,) = rules.scope_problems(older, "planted", _cell_matrix())
    assert "the version matrix never ran 2.7:" in problem


def test_6a_history_in_a_context_cell_is_not_a_claim() -> None:
    context = _markdown(
        "Fixed in torch 2.6, before 2.10 unsafe ([advisory](https://x.org)).", ("context",)
    )
    assert _scope(context) == []


BRANCHED = """# Claim: `torch.thing` is 2 on torch 2.11 and 2.15, 1 on 2.8.
if torch.__version__ >= "2.11":
    expected = 2
else:
    expected = 1
assert torch.thing == expected
"""


def test_6b_a_branch_checked_in_both_ways_and_taken_both_ways_passes() -> None:
    assert _scope(_code(BRANCHED)) == []
    cell = _code(BRANCHED.replace("assert torch.thing == expected", "")
                 .replace("expected = 2", "assert torch.thing == 2")
                 .replace("expected = 1", "assert torch.thing == 1"))  # fmt: skip
    assert _scope(cell) == []


def test_6b_a_branch_without_a_check_fails() -> None:
    cell = _code('# Claim: `torch.thing` is 2 on torch 2.11 and 2.15.\nif torch.__version__ >= "2.11":\n'
                 "    assert torch.thing == 2\n")  # fmt: skip
    problems = _scope(cell)
    assert len(problems) == 1
    assert "its else (or what follows) checks nothing" in problems[0]


def test_6b_a_branch_no_release_of_the_matrix_takes_fails() -> None:
    cell = _code(
        BRANCHED.replace('"2.11"', '"2.16"').replace("`torch.thing`", "`torch.thing` (2.16)")
    )
    problems = _scope(cell)
    assert len(problems) == 1
    assert "'then' branch is taken by no release" in problems[0]


def test_6b_a_gpu_cells_branches_are_judged_by_its_gpu_runs() -> None:
    """The CPU matrix skips a `gpu` cell: only the releases that ran it on a GPU take
    its branches."""
    cell = _code(BRANCHED.replace("# Claim: `torch.thing`", "# Claim: On CUDA, `torch.thing`"),
                 ("gpu",))  # fmt: skip
    skipped = dict.fromkeys(EVERY_RELEASE, "skipped")
    then, otherwise = _scope_of(cell, skipped)  # never on a GPU: neither branch checked
    assert "'then' branch is taken by no release that ran this `gpu` cell (none)" in then
    assert "'else' branch is taken by no release that ran this `gpu` cell (none)" in otherwise
    cell.metadata[GPU_MARK] = {
        "executed": "now", "torch": "2.11.0+cu130", "device": "H100",
        "code": source_digest(cell.source),
    }  # fmt: skip
    (problem,) = _scope_of(cell, skipped)
    assert "'else' branch is taken by no release that ran this `gpu` cell (2.11.0+cu130)" in problem
    assert _scope_of(_code(BRANCHED), dict.fromkeys(EVERY_RELEASE, "passed")) == []


def test_6b_the_branch_taken_follows_torchs_version_order() -> None:
    (branch,) = rules.version_branches(BRANCHED)
    assert [branch.taken(v) for v in ("2.9.1", "2.10.0", "2.11.0", "2.15.0+cu132")] == [
        "else", "else", "then", "then"
    ]  # fmt: skip
    assert rules.version_branches("if torch.cuda.is_available():\n    pass\n") == []


def test_6b_a_chained_comparison_is_a_version_branch_too() -> None:
    chained = 'if "2.10" <= torch.__version__ < "2.11":\n    assert a\nelse:\n    assert b\n'
    (branch,) = rules.version_branches(chained)
    assert [branch.taken(v) for v in ("2.9.1", "2.10.0", "2.11.0")] == ["else", "then", "else"]
    mixed = 'if "2.10" <= torch.__version__ < limit:\n    assert a\n'  # not torch's alone
    assert rules.version_branches(mixed) == []


def test_6c_a_universal_claim_checked_on_one_case_fails() -> None:
    one = _code(
        "# Claim: `sum` of every int tensor is an int.\nassert torch.tensor([1]).sum().dtype == torch.int64"
    )
    (problem,) = _scope(one)
    assert "says 'every' but checks one case" in problem


def test_6c_a_loop_or_a_reviewed_exemption_passes() -> None:
    loop = _code("# Claim: `sum` of every int dtype is int64.\n"
                 "for d in (torch.int8, torch.int32):\n    assert torch.ones(1, dtype=d).sum().dtype == torch.int64")  # fmt: skip
    exempt = _code("# Claim: `x.all()` is True for any True 0-d bool tensor.\n"
                   "# Whole domain: a 0-d bool tensor that is True has one value.\n"
                   "assert torch.tensor(True).item() is True")  # fmt: skip
    assert _scope(loop, exempt) == []


@pytest.mark.parametrize("chapter", memobook.chapters(), ids=lambda c: c.name)
def test_every_chapter_keeps_the_scope_rules(chapter: memobook.Chapter) -> None:
    """Ranges name only releases the matrix ran (book/_data/matrix.json), version branches
    check and are taken, universal claims loop (memobook.claims.scope_problems)."""
    assert rules.scope_problems(chapter.load(), chapter.name) == []

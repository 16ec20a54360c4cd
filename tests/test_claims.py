"""The rules of claims (memobook.claims): shown failing on planted examples, then held by
every chapter of the book."""

from __future__ import annotations

from typing import Any

import nbformat
import pytest

import memobook
from memobook.claims import book_claims, cell_claims, chapter_claims, notebook_problems


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


def test_claims_have_stable_unique_anchors() -> None:
    claims = book_claims()
    ids = [c.cell_id for c in claims]
    assert all(ids), "every claim cell has an id (nbformat 4.5)"
    cells = {(c.chapter, c.cell) for c in claims}
    assert len({c.cell_id for c in claims}) == len(cells), "cell ids are unique across the book"

"""The Errors and What changed generators (memobook.errors), compared with tests/golden/."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from memobook.claims import version_branches
from memobook.errors import changes, changes_text, deprecations, errors, errors_text
from memobook.record import ClaimOutcome, MatrixRecord, MatrixRun, Outcome, source_digest
from tests.conftest import UPDATE_GOLDEN, golden_rewritten

GOLDEN = Path(__file__).parent / "golden" / "pages"

RAISING = """\
# Claim: adding tensors on two devices is refused.
# Cause: the operands live on different devices.
# Fix: move one first,
#   `x.to(y.device)`.
with raises(RuntimeError, match="same device"):
    add_across_devices()
with raises((KeyError, IndexError), match="out of range"):
    look_up()
with raises(refusal, match="unknown type"):  # a type held in a variable: left out
    other()
"""
BRANCHING = """\
# Claim: `new_default` and `old_default` take no arguments.
# Claim: the default changed in 2.13.
# Claim: `old_default` is the default on 2.10 to 2.12.
if torch.__version__ >= "2.13":
    assert new_default()
else:
    assert old_default()
"""
ONE_RELEASE = """\
# Claim: 2.10.0 alone accepts it.
if "2.10" <= torch.__version__ < "2.11":
    assert accepted()
else:
    assert refused()
"""
DEPRECATED = """\
# Claim: the old call warns.
assert new_call() == 1
# Deprecated: `old_call()`.
# Use: `new_call()`,
#   with no arguments.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old_call()
assert caught[0].category is FutureWarning
assert "old_call is deprecated" in str(caught[0].message)
assert "not the deprecation" in other_text  # not a message: not the warning's text
"""
NOT_A_CLAIM = """\
# Deprecated: `helper()`, in a cell that claims nothing: left out.
helper()
"""


def _book(root: Path) -> Path:
    (root / "book").mkdir(parents=True)
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - caption: Part\n    chapters:\n"
        "      - file: book/topic\n"
    )
    nb = nbformat.v4.new_notebook()
    raising = nbformat.v4.new_code_cell(RAISING, id="raising")
    raising.outputs = [
        nbformat.v4.new_output(
            "stream", text="RuntimeError: Expected all tensors to be on the same device\n"
        )
    ]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A topic"),
        raising,
        nbformat.v4.new_code_cell(BRANCHING, id="branching"),
        nbformat.v4.new_code_cell(ONE_RELEASE, id="onerelease"),
        nbformat.v4.new_code_cell(DEPRECATED, id="deprecated"),
        nbformat.v4.new_code_cell(NOT_A_CLAIM, id="notaclaim"),
    ]
    (root / "book" / "topic.ipynb").write_text(nbformat.writes(nb))
    return root


def _run(torch: str, python: str, then: bool, raised: dict[str, list[list[str]]]) -> MatrixRun:
    side = "then" if then else "else"
    only_210 = "then" if torch.startswith("2.10.") else "else"
    claims = {
        "topic": {
            "branching": ClaimOutcome("passed", source_digest(BRANCHING), (side,)),
            "onerelease": ClaimOutcome("passed", source_digest(ONE_RELEASE), (only_210,)),
            "deprecated": ClaimOutcome(
                "failed" if torch.startswith("2.10.") else "passed", source_digest(DEPRECATED)
            ),
        }
    }
    return MatrixRun(torch, "0", "d", python, Outcome(1, 0, 0), {}, claims, raised=raised)


def _matrix() -> MatrixRecord:
    old = {"same device": [["RuntimeError", "Expected all tensors on one device"]]}
    new = {
        "same device": [["RuntimeError", "Expected all tensors to be on the same device"]],
        "out of range": [["IndexError", "index 5 is out of range"]],
    }
    runs = [
        _run("2.12.1", "3.11.7", False, old),
        _run("2.10.0", "3.11.7", False, old),
        _run("2.13.0", "3.11.7", True, new),
        _run("2.15.0", "3.11.7", True, new),
        _run("2.15.0", "3.12.1", True, new),
    ]
    record = MatrixRecord()
    for run in runs:
        record = record.with_run(run)
    return record


@pytest.mark.parametrize("page", ["errors", "changes"])
def test_the_generated_page_matches_its_golden_file(
    page: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = _book(tmp_path)
    text = (
        errors_text(errors(root, _matrix()))
        if page == "errors"
        else changes_text(changes(root, _matrix()), deprecations(root, _matrix()))
    )
    path = GOLDEN / f"{page}.txt"
    if request.config.getoption(UPDATE_GOLDEN):
        path.write_text(text)
        golden_rewritten(request.config).append(str(path.relative_to(GOLDEN.parents[2])))
    assert text == path.read_text()


def test_an_entry_names_its_types_cause_fix_and_messages(tmp_path: Path) -> None:
    found = errors(_book(tmp_path), _matrix())
    assert [e.types for e in found] == [("KeyError", "IndexError"), ("RuntimeError",)]
    index, device = found  # sorted by message
    assert device.message == "RuntimeError: Expected all tensors to be on the same device"
    assert device.cause == "the operands live on different devices."
    assert device.fix == "move one first, `x.to(y.device)`."
    assert list(device.releases.values()) == [
        ["2.10 py3.11", "2.12 py3.11"],
        ["2.13 py3.11", "2.15 py3.11", "2.15 py3.12"],
    ]
    assert index.message == ""  # not shown by the stored output: named by its pattern
    assert index.key == "IndexError/KeyError: /out of range/"


def test_a_change_is_dated_by_the_first_release_on_its_new_side(tmp_path: Path) -> None:
    found = changes(_book(tmp_path), _matrix())
    assert [c.changed_in for c in found] == ["2.13", ""]  # 2.10 alone splits nothing in two


def test_a_change_is_labelled_by_the_claims_its_branch_is_about(tmp_path: Path) -> None:
    """Not by the cell's first claim (a claim cell often opens with what holds everywhere)."""
    labels = {c.cell_id: c.claims for c in changes(_book(tmp_path), _matrix())}
    assert labels["branching"] == (
        "the default changed in 2.13.",
        "`old_default` is the default on 2.10 to 2.12.",
    )
    claims = [
        "`Timer` warms up first.",
        "from torch 2.13 on, its clock synchronizes.",
        "on torch 2.8 to 2.12, its clock is chosen at import.",
        "it warns on 2.9.",
        "`Timer` runs on one thread.",
    ]
    branch = 'if torch.__version__ {} "{}":\n    assert a\nelse:\n    assert b\n'
    (at_213,) = version_branches(branch.format(">=", "2.13"))
    assert at_213.claims_about(claims) == claims[1:3]  # where its ranges start or stop
    (below_213,) = version_branches(branch.format("<", "2.13"))
    assert below_213.claims_about(claims) == claims[1:3]
    (at_215,) = version_branches(branch.format(">=", "2.15"))
    assert at_215.claims_about(claims) == claims[1:4]  # none names 2.15: those naming one
    assert at_215.claims_about([claims[0], claims[4]]) == [claims[0], claims[4]]


TWICE = """\
# Claim: both flags changed in 2.13.
if torch.__version__ >= "2.13":
    assert new_flag()
else:
    assert old_flag()
if torch.__version__ >= "2.13":
    assert new_other()
else:
    assert old_other()
if torch.__version__ >= "2.14":
    assert newest()
"""


def test_a_cell_branching_on_one_test_twice_is_one_change(tmp_path: Path) -> None:
    root = _book(tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(TWICE, id="twice")]
    (root / "book" / "topic.ipynb").write_text(nbformat.writes(nb))
    record = MatrixRecord()
    for torch, sides in [
        ("2.12.1", ("else", "else", "else")),
        ("2.13.0", ("then", "then", "else")),
        ("2.14.1", ("then", "then", "then")),
    ]:
        outcome = ClaimOutcome("passed", source_digest(TWICE), sides)
        run = MatrixRun(
            torch, "0", "d", "3.11.7", Outcome(1, 0, 0), {}, {"topic": {"twice": outcome}}
        )
        record = record.with_run(run)
    found = changes(root, record)
    assert [(c.test, c.changed_in) for c in found] == [
        ("if torch.__version__ >= '2.14'", "2.14"),
        ("if torch.__version__ >= '2.13'", "2.13"),
    ]


GPU_BRANCHING = """\
# Claim: on CUDA, torch 2.11 takes the new path.
if not torch.cuda.is_available():
    print("needs a GPU")
elif torch.__version__ >= "2.10":
    assert new_path()
else:
    assert old_path()
"""


def test_a_gpu_cells_sides_come_from_its_gpu_run_not_the_cpu_runs_that_skipped_it(
    tmp_path: Path,
) -> None:
    from memobook.record import GPU_MARK

    root = _book(tmp_path)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(GPU_BRANCHING, id="gpu", metadata={"tags": ["gpu"]})
    mark = {"executed": "2026-11-26 11:24 UTC", "torch": "2.11.0+cu130", "device": "H100"}
    cell.metadata[GPU_MARK] = {**mark, "code": source_digest(GPU_BRANCHING)}
    nb.cells = [cell]
    (root / "book" / "topic.ipynb").write_text(nbformat.writes(nb))
    record = MatrixRecord()
    for torch, outcome in [("2.9.1", "skipped"), ("2.12.1", "skipped"), ("2.13.0", "failed")]:
        side = "then" if torch >= "2.10" else "else"
        claim = ClaimOutcome(outcome, source_digest(GPU_BRANCHING), (side,))
        run = MatrixRun(torch, "0", "d", "3.11.7", Outcome(1, 0, 0), {}, {"topic": {"gpu": claim}})
        record = record.with_run(run)
    (found,) = changes(root, record)
    assert (found.then_runs, found.else_runs) == (["2.11 GPU"], [])
    assert found.changed_in == "", "one run on one side says nothing of when it changed"
    assert "torch 2.11 (GPU)" in changes_text([found])
    cell.metadata.pop(GPU_MARK)  # never run on a GPU: no run took a side
    nb.cells = [cell]
    (root / "book" / "topic.ipynb").write_text(nbformat.writes(nb))
    (found,) = changes(root, record)
    assert (found.then_runs, found.else_runs) == ([], [])


def test_a_deprecation_names_old_new_warning_and_the_runs_that_passed(
    tmp_path: Path,
) -> None:
    (found,) = deprecations(_book(tmp_path), _matrix())
    assert (found.old, found.new) == ("`old_call()`.", "`new_call()`, with no arguments.")
    assert found.categories == ("FutureWarning",)
    assert found.texts == ("old_call is deprecated",)
    assert found.runs == ["2.12 py3.11", "2.13 py3.11", "2.15 py3.11", "2.15 py3.12"]
    assert found.began == ""  # no version branch: only the runs are named


def test_the_books_own_pages_have_entries() -> None:
    found = errors()
    assert len({e.key for e in found}) >= 60
    messages = " ".join(e.key for e in found)
    for words in ("view size is not compatible", "Can't call numpy() on Tensor that requires grad"):
        assert words in messages
    assert changes(), "the book has version-conditional claims"
    dated = {d.old: d.began for d in deprecations(matrix=MatrixRecord.read())}
    assert dated["`torch.jit.script(fn)`."] == "2.10"  # its check branches on the release
    json.dumps([e.key for e in found])  # plain text throughout


def test_a_check_in_a_loop_gives_one_entry_per_error_it_printed() -> None:
    from memobook.errors import _is_a, _stored_messages

    printed = [
        "RuntimeError: max(): Expected reduction dim to be specified",
        "RuntimeError: min(): Expected reduction dim to be specified",
        "RuntimeError: max(): Expected reduction dim to be specified",  # again: once
        "ValueError: Expected reduction dim to be specified",  # another type: not it
    ]
    assert _stored_messages(printed, {"RuntimeError"}, "Expected reduction dim") == printed[:2]
    assert _is_a("NotImplementedError", {"RuntimeError"})  # a subclass, as `raises` allows
    assert not _is_a("ValueError", {"RuntimeError"})
    assert not _is_a("BroadcastError", {"RuntimeError"})  # neither Python's nor torch's
    # torch's own classes too: what a CUDA kernel's assert raises, printed by its class
    assert _is_a("AcceleratorError", {"RuntimeError"})
    assert _is_a("OutOfMemoryError", {"torch.OutOfMemoryError"})
    assert not _is_a("OutOfMemoryError", {"ValueError"})


def test_a_run_is_credited_only_with_this_entrys_wording() -> None:
    from memobook.errors import _wordings

    pin = "RuntimeError: expected target dtype to be Long or Byte, but got Float"
    same_shape = ["RuntimeError: expected target dtype to be Long or Byte, but got Float"]
    assert _wordings(same_shape, pin) == same_shape
    older = [  # a loop's other cases were caught too; the wording changed since
        "RuntimeError: expected scalar type Long but found Float",
        "RuntimeError: expected scalar type Long but found Int",
    ]
    assert _wordings(older, pin) == ["RuntimeError: expected scalar type Long but found Float"]
    assert _wordings(older, "") == older  # no stored message to compare with: all

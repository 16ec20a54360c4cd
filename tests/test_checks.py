"""pytorch_memo.checks.raises: passes only for the promised error, shows its message."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from pytorch_memo.checks import raises


def _fail(error: BaseException) -> None:
    # Raised from a call, not a raise statement: mypy reads a @contextmanager's __exit__
    # (-> bool | None) as never swallowing, so code after a bare raise is "unreachable".
    raise error


def test_catches_and_shows_the_first_line(capsys: pytest.CaptureFixture[str]) -> None:
    with raises(ValueError, match="bad value") as caught:
        _fail(ValueError("a bad value\nsecond line"))
    assert isinstance(caught.exception, ValueError)
    assert caught.message == "a bad value\nsecond line"
    assert capsys.readouterr().out == "ValueError: a bad value\n"


def test_what_the_failed_block_held_is_freed_at_once() -> None:
    """The caught error keeps no traceback, so the frames it went through (and what they
    hold) are freed by reference counting, not by a later garbage collection."""

    class Held:
        pass

    freed: list[bool] = []

    def fail_holding() -> None:
        held = Held()
        weakref.finalize(held, freed.append, True)
        raise ValueError("bad")

    gc.disable()  # only reference counting frees it now
    try:
        with raises(ValueError, match="bad", show=False) as caught:
            fail_holding()
        assert freed == [True]
        assert caught.exception is not None
        assert caught.exception.__traceback__ is None
    finally:
        gc.enable()


def test_tuple_of_types_and_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    with raises((KeyError, IndexError), match="out of range", show=False):
        [][3]
    assert capsys.readouterr().out == ""


def test_fails_when_nothing_is_raised() -> None:
    with (
        pytest.raises(AssertionError, match="expected RuntimeError matching 'x', but nothing"),
        raises(RuntimeError, match="x"),
    ):
        pass


def test_fails_when_the_message_differs() -> None:
    with (
        pytest.raises(AssertionError, match="its message 'other' does not match 'wanted'"),
        raises(ValueError, match="wanted"),
    ):
        raise ValueError("other")


def test_other_exception_types_pass_through() -> None:
    with pytest.raises(KeyError), raises(ValueError, match="x"):
        raise KeyError("x")


def test_match_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="match must be a str"), raises(ValueError, match=3):  # type: ignore[arg-type]
        pass


def _fail_with_two_lines() -> None:
    raise ValueError("bad value\nsecond line")


def test_raises_notes_each_caught_error_where_memo_raised_names_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os

    monkeypatch.setenv("MEMO_RAISED", str(tmp_path))
    with raises(ZeroDivisionError, match="by zero", show=False):
        1 / 0  # noqa: B018
    with raises((KeyError, ValueError), match="bad", show=False):
        _fail_with_two_lines()
    (path,) = tmp_path.iterdir()
    assert path.name == f"raised-{os.getpid()}.jsonl"
    notes = [json.loads(line) for line in path.read_text().splitlines()]
    assert notes == [
        {"type": "ZeroDivisionError", "match": "by zero", "message": "division by zero"},
        {
            "type": "ValueError",
            "match": "bad",
            "message": "bad value",
        },
    ]


def test_raises_notes_nothing_without_memo_raised_and_never_fails_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMO_RAISED", raising=False)
    with raises(ZeroDivisionError, match="by zero", show=False):
        1 / 0  # noqa: B018
    monkeypatch.setenv("MEMO_RAISED", str(tmp_path / "missing" / "folder"))
    with raises(ZeroDivisionError, match="by zero", show=False):
        1 / 0  # noqa: B018
    assert list(tmp_path.iterdir()) == []

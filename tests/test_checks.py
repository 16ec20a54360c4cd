"""pytorch_memo.checks.raises: passes only for the promised error, shows its message."""

from __future__ import annotations

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

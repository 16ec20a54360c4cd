"""Checks that notebook cells use to assert what the prose claims.

:func:`raises` shows an error's message to the reader and fails
the cell when the error does not come, so a chapter never stores a traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pytorch_memo._checks import check_exception_types, check_pattern, check_type

__all__ = ["Raised", "raises"]


@dataclass
class Raised:
    """What :func:`raises` caught: the exception (without its traceback), once the block
    has ended."""

    exception: BaseException | None = field(default=None)

    @property
    def message(self) -> str:
        """The exception's message (empty before the block ends)."""
        return str(self.exception) if self.exception is not None else ""


@contextmanager
def raises(
    expected: type[BaseException] | tuple[type[BaseException], ...],
    *,
    match: str,
    show: bool = True,
) -> Iterator[Raised]:
    """Assert that the block raises ``expected`` with a message matching ``match``.

    The first line of the message is printed (``TypeError: ...``) so the reader sees
    what torch says, while the cell itself succeeds.

    Where the environment variable ``MEMO_RAISED`` names a folder (the book's version
    matrix sets it), each error caught as expected is also noted there, in
    ``raised-<process id>.jsonl`` (its type, ``match`` and first line), so that the
    book's Errors page can show each message as every release prints it. Nothing is
    noted, and nothing fails, when the variable is unset or the folder cannot be written.

    Args:
        expected: the exception type, or a tuple of them.
        match: a regular expression searched for in ``str(exception)``.
        show: print the exception's type and first line.

    Yields:
        A :class:`Raised` that holds the exception once the block has ended.

    Raises:
        TypeError: ``expected`` is not an exception class (or a tuple of them), ``match``
            is not a str, or ``show`` is not a bool.
        ValueError: ``match`` is not a valid regular expression.
        AssertionError: nothing was raised, or the message does not match ``match``.
        BaseException: an exception of another type passes through unchanged.

    Example:
        >>> with raises(ZeroDivisionError, match="division by zero"):
        ...     1 / 0
        ZeroDivisionError: division by zero
    """
    classes = check_exception_types("expected", expected)
    pattern = check_pattern("match", match)
    check_type("show", show, bool, "a bool")
    caught = Raised()
    try:
        yield caught
    except classes as error:
        caught.exception = error
    names = " or ".join(e.__name__ for e in classes)
    if caught.exception is None:
        msg = f"expected {names} matching {match!r}, but nothing was raised"
        raise AssertionError(msg)
    if pattern.search(caught.message) is None:
        msg = f"{names} was raised, but its message {caught.message!r} does not match {match!r}"
        raise AssertionError(msg) from caught.exception
    # Kept without its traceback: the frames the error went through, and what they hold
    # (a DataLoader iterator and its workers, large tensors), are freed now. Held, they
    # form a cycle with this generator's frame that only the garbage collector frees, and
    # a DataLoader iterator freed that way waits 5 s per worker to stop them.
    caught.exception = caught.exception.with_traceback(None)
    first = caught.message.strip().splitlines()[0] if caught.message.strip() else ""
    _note(type(caught.exception).__name__, match, first)
    if show:
        print(f"{type(caught.exception).__name__}: {first}")


def _note(kind: str, match: str, first_line: str) -> None:
    """Append one caught error to ``$MEMO_RAISED/raised-<pid>.jsonl`` (see :func:`raises`)."""
    folder = os.environ.get("MEMO_RAISED")
    if not folder:
        return
    line = json.dumps({"type": kind, "match": match, "message": first_line[:500]})
    try:
        with open(os.path.join(folder, f"raised-{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError:  # a side note for the matrix: never a reason to fail the reader's cell
        return

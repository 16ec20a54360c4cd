"""Files written whole or not at all (private).

The new content goes to a temporary file beside the target, is flushed and fsynced,
then renamed over the target with :func:`os.replace` (atomic on POSIX and Windows); the
directory is fsynced so the rename itself survives a crash. Until the rename the old
file is untouched; if anything fails, the temporary file is removed.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_file(target: str | os.PathLike[str]) -> Iterator[tuple[BinaryIO, Path]]:
    """Yield ``(file, temporary_path)`` to write; on success the file replaces ``target``.

    An exception inside the block (raised by the writer, or on purpose after checking
    the temporary file) leaves ``target`` as it was and no temporary file behind. The
    new file gets the usual permissions (``0o666`` less the umask), like ``open``.
    """
    target = Path(target)
    temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file, temporary
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def write_text(target: str | os.PathLike[str], text: str) -> None:
    """Replace ``target`` with ``text`` (UTF-8) atomically."""
    with atomic_file(target) as (file, _):
        file.write(text.encode("utf-8"))


def fsync_directory(directory: Path) -> None:
    """Make a rename durable. POSIX only: Windows cannot open a directory this way."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

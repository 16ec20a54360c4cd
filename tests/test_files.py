"""pytorch_memo._files: a file is replaced whole, or left as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytorch_memo._files import atomic_file, write_text


def test_write_text_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("old")
    write_text(target, "new: ü\n")
    assert target.read_bytes() == "new: ü\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    seen: list[Path] = []

    def write_half() -> None:
        with atomic_file(target) as (file, temporary):
            file.write(b"half of the new con")
            seen.append(temporary)
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_half()
    assert seen[0].parent == tmp_path
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_the_temporary_file_can_be_checked_before_it_replaces_the_target(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    with atomic_file(target) as (file, temporary):
        file.write(b"checked")
        file.flush()
        assert temporary.read_bytes() == b"checked"
        assert not target.exists()  # nothing is replaced until the block ends
    assert target.read_bytes() == b"checked"


def test_new_files_get_the_usual_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644


def test_a_missing_folder_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_text(tmp_path / "missing" / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []

"""pytorch_memo.archive, checked against zipfile and the saved tensors' own bytes."""

from __future__ import annotations

import errno
import os
import re
import socket
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib as mpl
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytorch_memo.archive import archive_records, plot_archive
from tests.fileprocs import forked

mpl.use("Agg")
import matplotlib.pyplot as plt

DTYPES = [torch.float32, torch.float64, torch.int8, torch.int64, torch.bfloat16, torch.bool]


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=4),
    dtype=st.sampled_from(DTYPES),
)
def test_records_hold_the_tensors_bytes(
    tmp_path: Path, sizes: list[int], dtype: torch.dtype
) -> None:
    tensors = {f"t{i}": torch.arange(n).to(dtype) for i, n in enumerate(sizes)}
    path = tmp_path / "x.pt"
    torch.save(tensors, path)
    records = archive_records(path)
    data = path.read_bytes()

    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        assert len(records) == len(infos)
        for info in infos:  # each record's bytes are exactly what zipfile reads
            name = info.filename.split("/", 1)[1]
            (record,) = [r for r in records if r.name == name]
            assert data[record.offset : record.offset + record.size] == archive.read(info)

    assert [r.offset for r in records] == sorted(r.offset for r in records)
    payloads = {data[r.offset : r.offset + r.size] for r in records if r.kind == "tensor data"}
    for tensor in tensors.values():  # every tensor's raw bytes are one record
        assert tensor.view(torch.uint8).numpy().tobytes() in payloads
    for record in records:
        if record.kind == "tensor data":
            assert record.offset % 64 == 0  # aligned, which is what lets mmap=True work
    assert [r.kind for r in records].count("pickle") == 1


def test_views_of_one_storage_are_one_record(tmp_path: Path) -> None:
    base = torch.arange(10.0)
    torch.save({"a": base[:4], "b": base[2:]}, tmp_path / "v.pt")
    data_records = [r for r in archive_records(tmp_path / "v.pt") if r.kind == "tensor data"]
    assert [r.size for r in data_records] == [base.numel() * base.element_size()]


def test_plot_archive_draws_every_record(tmp_path: Path) -> None:
    torch.save({"w": torch.zeros(1000), "b": torch.zeros(10)}, tmp_path / "m.pt")
    ax = plot_archive(tmp_path / "m.pt")
    records = archive_records(tmp_path / "m.pt")
    assert len(ax.patches) == 1 + len(records)  # the frame and one bar per record
    assert ax.get_xlim() == (0.0, float((tmp_path / "m.pt").stat().st_size))
    legend = ax.get_legend()
    assert legend is not None
    assert "zip headers, padding, index" in [t.get_text() for t in legend.get_texts()]
    labels = [t.get_text() for t in ax.texts]
    assert "data/0" in labels
    _, given_ax = plt.subplots()
    assert plot_archive(tmp_path / "m.pt", ax=given_ax) is given_ax


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike, got int: 3"):
        archive_records(3)  # type: ignore[arg-type]
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"'.*junk\.pt' is not a zip archive"):
        archive_records(tmp_path / "junk.pt")


# ------------------------------------------------------------- odd files (hostile input)


def _outcome(call: Any) -> tuple[str, Any]:
    """``call()`` in a forked child, at most 30 s and 512 MiB more memory."""
    return forked(call, timeout=30, memory=512 << 20)


def _records_of(path: Path) -> Any:
    return lambda: archive_records(path)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs, sockets and /dev/zero are POSIX")
def test_special_files_are_refused_without_reading_them(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)  # opening it would block until a writer comes
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.pt"))
    server.close()
    (tmp_path / "zero.pt").symlink_to("/dev/zero")  # read whole, it never ends
    cases = [
        (fifo, r"is a FIFO \(named pipe\), not a regular file"),
        (Path("/dev/zero"), "is a character device, not a regular file"),
        (tmp_path / "zero.pt", "is a character device, not a regular file"),
        (tmp_path / "sock.pt", "is a socket, not a regular file"),
    ]
    for path, match in cases:
        for call in (_records_of(path), lambda p=path: plot_archive(p)):
            kind, detail = _outcome(call)
            assert kind == "raised", (path, kind, detail)  # not a hang, nor a MemoryError
            name, message, _ = detail
            assert name == "SpecialFileError", (path, detail)
            assert re.search(f"path '{re.escape(str(path))}' {match}", message), message


def test_missing_files_and_directories_are_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"path '.*absent\.pt' does not exist"):
        archive_records(tmp_path / "absent.pt")
    with pytest.raises(IsADirectoryError, match=r"path '.*' is a directory; expected a torch"):
        archive_records(tmp_path)
    with pytest.raises(ValueError, match=r"path must not contain a NUL byte"):
        archive_records(f"{tmp_path}/a\x00.pt")


def test_a_huge_file_is_read_only_in_bounded_pieces(tmp_path: Path) -> None:
    # 3 GiB, sparse (no disk used): not a zip, then a zip whose end claims a 3 GiB index.
    size = 3 << 30
    big = tmp_path / "big.pt"
    with big.open("wb") as file:
        file.truncate(size)
    kind, detail = _outcome(_records_of(big))
    assert (kind, detail[0]) == ("raised", "ValueError"), detail
    assert "is not a zip archive" in detail[1]

    index_size = size - 22 - 100
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, index_size, 100, 0)
    with big.open("r+b") as file:
        file.seek(size - 22)
        file.write(end)
    assert zipfile.is_zipfile(big)  # zipfile takes it for a zip, and would read 3 GiB
    kind, detail = _outcome(_records_of(big))
    assert (kind, detail[0]) == ("raised", "ValueError"), detail
    assert f"asks for a read of {index_size} bytes" in detail[1]


def _damaged(tmp_path: Path, change: Any) -> Path:
    path = tmp_path / "d.pt"
    torch.save({"w": torch.zeros(10)}, path)
    data = bytearray(path.read_bytes())
    change(data)
    path.write_bytes(bytes(data))
    return path


def _central(data: bytearray, index: int) -> int:
    at = -1
    for _ in range(index + 1):
        at = data.index(b"PK\x01\x02", at + 1)
    return at


def test_damaged_archives_are_value_errors_naming_the_file(tmp_path: Path) -> None:
    def name_byte(data: bytearray) -> None:
        data[_central(data, 0) + 46 + 1] = 0xFF  # a name flagged UTF-8 that is not

    def offset_past_the_end(data: bytearray) -> None:
        struct.pack_into("<I", data, _central(data, 1) + 42, len(data) + 1000)

    def no_local_header(data: bytearray) -> None:
        struct.pack_into("<I", data, _central(data, 1) + 42, 5)

    def longer_than_the_file(data: bytearray) -> None:
        for offset in (20, 24):  # compressed and uncompressed sizes
            struct.pack_into("<I", data, _central(data, 0) + offset, 10**8)

    cases = [
        (name_byte, "is a damaged zip archive: UnicodeDecodeError"),
        (offset_past_the_end, r"is a damaged zip archive: record .* has no local header"),
        (no_local_header, "is a damaged zip archive: record .* has no local header at byte 5"),
        (longer_than_the_file, r"is a damaged zip archive: record .* ends past the end of"),
    ]
    for change, match in cases:
        path = _damaged(tmp_path, change)
        with pytest.raises(ValueError, match=rf"path '.*d\.pt' {match}"):
            archive_records(path)


def test_plot_archive_names_a_wrong_ax(tmp_path: Path) -> None:
    torch.save({"w": torch.zeros(4)}, tmp_path / "w.pt")
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes or None, got str: 'ax'"):
        plot_archive(tmp_path / "w.pt", ax="ax")  # type: ignore[arg-type]


# ------------------------------------------------ issue 24, D7: damaged ends, named paths


def test_every_bit_flip_in_the_end_of_the_file_is_a_value_error_naming_it(
    tmp_path: Path,
) -> None:
    # Before, 56 of these 960 flips (the last 120 bytes: the index's end, the zip64 and
    # classic end records) raised a bare "OSError: [Errno 22] Invalid argument" from a
    # seek before the file's start, naming no path.
    path = tmp_path / "e.pt"
    torch.save({"w": torch.arange(6.0), "b": torch.ones(2)}, path)
    good = path.read_bytes()
    expected = [(r.name, r.size) for r in archive_records(path)]
    refused = 0
    for position in range(len(good) - 120, len(good)):
        for bit in range(8):
            data = bytearray(good)
            data[position] ^= 1 << bit
            path.write_bytes(bytes(data))
            try:
                records = archive_records(path)
            except ValueError as error:
                assert f"path '{path}' " in str(error), (position, bit, error)  # noqa: PT017
                refused += 1
            else:  # a flip in a field zipfile does not use (or reads the same way)
                assert len(records) == len(expected), (position, bit)
    assert refused > 0


def test_an_index_before_the_start_of_the_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s.pt"
    torch.save({"w": torch.zeros(4)}, path)
    data = bytearray(path.read_bytes())
    zip64 = bytes(data).rfind(b"PK\x06\x06")  # torch's writer adds a zip64 end record
    struct.pack_into("<Q", data, zip64 + 48, struct.unpack_from("<Q", data, zip64 + 48)[0] + 4096)
    path.write_bytes(bytes(data))
    with pytest.raises(
        ValueError,
        match=r"path '.*s\.pt' is a damaged zip archive: (its offsets|Corrupt zip64 end)",
    ):
        archive_records(path)


def test_torchs_legacy_format_is_named_as_such(tmp_path: Path) -> None:
    # Issue 24, D8: "is not a zip archive (expected a torch.save file)" was half true.
    path = tmp_path / "old.pt"
    torch.save({"w": torch.zeros(4)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match=r"old\.pt' is in torch's legacy format, not the zip"):
        archive_records(path)


def test_an_io_error_is_an_os_error_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "io.pt"
    torch.save({"w": torch.zeros(4)}, path)

    def failing(*_: Any, **__: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(zipfile, "ZipFile", failing)
    with pytest.raises(OSError, match=r"reading '.*io\.pt' failed: Input/output error") as caught:
        archive_records(path)
    assert caught.value.errno == errno.EIO

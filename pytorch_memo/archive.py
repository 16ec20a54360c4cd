"""What is inside a file written by ``torch.save``: a zip archive of records.

Since PyTorch 1.6 ``torch.save`` writes an uncompressed zip archive: ``data.pkl`` (the
pickle of the saved object, in which every tensor is a reference to a storage), one
record ``data/<key>`` per storage holding its raw bytes (aligned so they can be
memory-mapped), and small metadata records (``version``, ``byteorder``, ...).
"""

from __future__ import annotations

import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytorch_memo._checks import check_type
from pytorch_memo._files import check_file_path, open_regular

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Record", "archive_records", "plot_archive"]

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip local file header: 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"
_MAX_READ = 64 << 20  # the most read at once: a zip's index (~64 bytes a record) or its end
_COLOURS = {"pickle": "tab:orange", "tensor data": "tab:blue", "metadata": "tab:gray"}
# torch's legacy format starts with a pickle (PROTO, maybe FRAME) of this number, LONG1
_LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
LEGACY_HEAD = 512
"""Bytes :func:`legacy_format` needs from a file's start (a tar header is 512)."""


@dataclass(frozen=True)
class Record:
    """One record of a ``torch.save`` archive.

    Attributes:
        name: the record's name without the archive's folder (``data.pkl``, ``data/0``).
        kind: ``"pickle"``, ``"tensor data"`` or ``"metadata"``.
        offset: where its bytes start in the file.
        size: how many bytes it takes in the file (torch.save stores records
            uncompressed, so this is also the record's length).
    """

    name: str
    kind: str
    offset: int
    size: int


def _kind(name: str) -> str:
    if name == "data.pkl":
        return "pickle"
    if name.startswith("data/"):
        return "tensor data"
    return "metadata"


_ZIP_START = b"PK\x03\x04"
"""The first bytes of a zip archive that starts with a record, as torch.save writes it."""


class ZipView:
    """A file as :mod:`zipfile` should read an untrusted archive (private to the package).

    zipfile trusts the offsets in a zip's end record: a damaged one makes it seek before
    the file's start, which the OS answers with ``OSError: [Errno 22] Invalid
    argument``, an error that reads like a failing disk. Here such a seek raises
    :class:`DamagedZipError` instead, and with ``limit`` a read of more than ``limit``
    bytes at once (zipfile reads a zip's index in one piece, as large as the end of the
    file claims it is) raises it too. Real I/O errors stay ``OSError``.
    """

    def __init__(self, file: IO[bytes], size: int, *, limit: int | None = None) -> None:
        self.file, self.size, self.limit = file, size, limit

    def read(self, count: int | None = -1) -> bytes:
        wanted = self.size - self.file.tell() if count is None or count < 0 else count
        if self.limit is not None and wanted > self.limit:
            msg = (
                f"it asks for a read of {wanted} bytes (the zip's index as its end claims "
                f"it), over {self.limit >> 20} MiB"
            )
            raise DamagedZipError(msg)
        return self.file.read(-1 if count is None else count)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        start = {os.SEEK_SET: 0, os.SEEK_CUR: self.file.tell(), os.SEEK_END: self.size}
        target = start.get(whence, 0) + offset
        if target < 0:
            msg = f"its offsets point {-target} bytes before the start of the file"
            raise DamagedZipError(msg)
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def seekable(self) -> bool:
        return True


class DamagedZipError(OSError):
    """A zip archive whose own bytes (its end record, index or headers) are damaged.

    An OSError because zipfile catches OSError from the seek it uses to probe a file
    too short to be a zip (and then reports "not a zip file"); callers catch it before
    OSError, which they report as a failed read."""


def legacy_format(head: bytes) -> str | None:
    """Which of torch's older formats a file starting with ``head`` is in, if any:
    ``"legacy format"`` (``torch.save(..., _use_new_zipfile_serialization=False)``, and
    torch before 1.6: pickles, no zip) or ``"tar format (torch before 0.4)"``."""
    if head.startswith(b"\x80") and _LEGACY_MAGIC in head[:32]:
        return "legacy format"
    if head[257:262] == b"ustar":
        return "tar format (torch before 0.4)"
    return None


def _reading_failed(error: OSError, shown: str) -> OSError:
    """An I/O error while reading (the file may be fine): an OSError naming the path."""
    if error.errno is None:
        return OSError(f"reading {shown!r} failed: {error}")
    return OSError(error.errno, f"reading {shown!r} failed: {error.strerror}")


def _read_records(path: Any) -> tuple[list[Record], int]:
    """The records and the file's size; see :func:`archive_records`."""
    source = check_file_path("path", path)
    shown = os.fspath(path)
    with open_regular(source, shown, expected="a torch.save file") as file:
        size = os.fstat(file.fileno()).st_size
        view = ZipView(file, size, limit=_MAX_READ)
        try:
            archive = zipfile.ZipFile(view)
            with archive:
                records = [_record(view, info, size, shown) for info in archive.infolist()]
        except DamagedZipError as error:
            msg = f"path {shown!r} is a damaged zip archive: {error}"
            raise ValueError(msg) from error
        except OSError as error:  # reading failed: not the file's bytes
            raise _reading_failed(error, shown) from error
        except zipfile.BadZipFile as error:
            file.seek(0)
            head = file.read(LEGACY_HEAD)
            older = legacy_format(head)
            if head.startswith(_ZIP_START):  # a zip's first record, whatever its end says
                # (CPython releases that check the zip64 end record say so here, where
                # others seek before the file's start: the DamagedZipError above)
                msg = f"path {shown!r} is a damaged zip archive: {error}"
                raise ValueError(msg) from error
            if older is not None:
                msg = (
                    f"path {shown!r} is in torch's {older}, not the zip archive torch.save "
                    "writes by default: it has no records to list"
                )
                raise ValueError(msg) from error
            msg = f"path {shown!r} is not a zip archive (expected a torch.save file): {error}"
            raise ValueError(msg) from error
        except Exception as error:  # UnicodeDecodeError, struct.error, ... on damaged bytes
            msg = f"path {shown!r} is a damaged zip archive: {type(error).__name__}: {error}"
            raise ValueError(msg) from error
    return sorted(records, key=lambda r: r.offset), size


def _record(file: ZipView, info: zipfile.ZipInfo, size: int, shown: str) -> Record:
    start = record_start(file, info, size)
    name = info.filename.split("/", 1)[1] if "/" in info.filename else info.filename
    return Record(name, _kind(name), start, info.compress_size)


def record_start(file: ZipView, info: zipfile.ZipInfo, size: int) -> int:
    """Where a record's bytes start: after its local header, name and extra field.

    Raises :class:`DamagedZipError` if it has no local header there, or ends past the
    end of the file (``size`` bytes); a header offset before the file's start is refused
    by ``file``'s seek."""
    file.seek(info.header_offset)
    raw = file.read(_LOCAL_HEADER.size)
    if len(raw) < _LOCAL_HEADER.size or not raw.startswith(_LOCAL_MAGIC):
        msg = f"record {info.filename!r} has no local header at byte {info.header_offset}"
        raise DamagedZipError(msg)
    header = _LOCAL_HEADER.unpack(raw)
    name_length, extra_length = header[-2], header[-1]
    start: int = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    if start + info.compress_size > size:
        msg = (
            f"record {info.filename!r} ({info.compress_size} bytes from byte {start}) "
            f"ends past the end of the file ({size} bytes)"
        )
        raise DamagedZipError(msg)
    return start


def archive_records(path: str | os.PathLike[str]) -> list[Record]:
    """The records of a ``torch.save`` file, in file order, with where their bytes lie.

    Only the zip's index and each record's header are read (at most 64 MiB at once),
    never the records themselves; a FIFO, device or directory is refused unopened.

    Args:
        path: a file written by ``torch.save`` (the zip format, the default since 1.6).

    Returns:
        One :class:`Record` per record, sorted by ``offset``.

    Raises:
        TypeError: ``path`` is not a str or path.
        FileNotFoundError: ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        shutil.SpecialFileError: ``path`` is a FIFO, a device or a socket.
        ValueError: the file is not a zip archive (torch's legacy format is named as
            such), or a damaged one (its end record, index or a header); ``path``
            contains a NUL byte. The message names ``path``.
        OSError: reading failed (an I/O error, not the file's bytes); the message
            names ``path``.

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     torch.save({"w": torch.zeros(4)}, f"{d}/w.pt")
        ...     records = archive_records(f"{d}/w.pt")
        >>> [(r.name, r.kind) for r in records if r.kind != "metadata"]
        [('data.pkl', 'pickle'), ('data/0', 'tensor data')]
        >>> [r.size for r in records if r.name == "data/0"]  # 4 float32 numbers
        [16]
    """
    return _read_records(path)[0]


def plot_archive(path: str | os.PathLike[str], *, ax: Axes | None = None) -> Axes:
    """Draw a ``torch.save`` file as one bar: each record where its bytes lie.

    The white between records is the zip format's own bytes: each record's header, the
    padding that aligns tensor data to 64 bytes, and the index at the end.

    Args:
        path: a file written by ``torch.save``.
        ax: the axes to draw on (a new figure when None).

    Returns:
        The axes.

    Raises:
        TypeError: ``path`` is not a str or path, or ``ax`` is not a matplotlib Axes.
        FileNotFoundError, IsADirectoryError, shutil.SpecialFileError, ValueError: as
            :func:`archive_records`.

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     torch.save({"w": torch.zeros(64)}, f"{d}/w.pt")
        ...     ax = plot_archive(f"{d}/w.pt")
        >>> ax.get_xlabel()
        'byte offset in the file'
    """
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    if ax is not None:
        check_type("ax", ax, Axes, "a matplotlib Axes or None")
    records, total = _read_records(path)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 1.8))
    ax.barh(
        0, total, height=0.5, color="white", edgecolor="black", linewidth=0.8,
        label="zip headers, padding, index",
    )  # fmt: skip
    seen: set[str] = set()
    for record in records:
        label: Any = record.kind if record.kind not in seen else None
        seen.add(record.kind)
        ax.barh(
            0, max(record.size, 1), left=record.offset, height=0.5,
            color=_COLOURS[record.kind], label=label,
        )  # fmt: skip
        if record.kind != "metadata" and record.size >= total * 0.06:
            ax.text(
                record.offset + record.size / 2, 0, record.name,
                ha="center", va="center", fontsize=8, color="white",
            )  # fmt: skip
    ax.set_xlim(0, total)
    ax.set_yticks([])
    ax.set_xlabel("byte offset in the file")
    ax.set_title(f"{Path(path).name}: {total} bytes, {len(records)} records")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, frameon=False)
    return ax

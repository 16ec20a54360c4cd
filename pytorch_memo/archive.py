"""What is inside a file written by ``torch.save``: a zip archive of records.

Since PyTorch 1.6 ``torch.save`` writes an uncompressed zip archive: ``data.pkl`` (the
pickle of the saved object, in which every tensor is a reference to a storage), one
record ``data/<key>`` per storage holding its raw bytes (aligned so they can be
memory-mapped), and small metadata records (``version``, ``byteorder``, ...).

Used by the chapter *Saving and loading*.
"""

from __future__ import annotations

import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytorch_memo._checks import check_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Record", "archive_records", "plot_archive"]

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip local file header: 30 bytes
_COLOURS = {"pickle": "tab:orange", "tensor data": "tab:blue", "metadata": "tab:gray"}


@dataclass(frozen=True)
class Record:
    """One record of a ``torch.save`` archive.

    Attributes:
        name: the record's name without the archive's folder (``data.pkl``, ``data/0``).
        kind: ``"pickle"``, ``"tensor data"`` or ``"metadata"``.
        offset: where its bytes start in the file.
        size: how many bytes it holds.
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


def archive_records(path: str | os.PathLike[str]) -> list[Record]:
    """The records of a ``torch.save`` file, in file order, with where their bytes lie.

    Args:
        path: a file written by ``torch.save`` (the zip format, the default since 1.6).

    Returns:
        One :class:`Record` per record, sorted by ``offset``.

    Raises:
        TypeError: ``path`` is not a str or path.
        ValueError: the file is not a zip archive.

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
    source = check_path("path", path)
    if not zipfile.is_zipfile(source):
        msg = f"path {os.fspath(path)!r} is not a zip archive (expected a torch.save file)"
        raise ValueError(msg)
    records = []
    with zipfile.ZipFile(source) as archive, source.open("rb") as raw:
        for info in archive.infolist():
            raw.seek(info.header_offset)
            header = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
            name_length, extra_length = header[-2], header[-1]
            start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
            name = info.filename.split("/", 1)[1] if "/" in info.filename else info.filename
            records.append(Record(name, _kind(name), start, info.file_size))
    return sorted(records, key=lambda r: r.offset)


def plot_archive(path: str | os.PathLike[str], *, ax: Axes | None = None) -> Axes:
    """Draw a ``torch.save`` file as one bar: each record where its bytes lie.

    The white between records is the zip format's own bytes: each record's header, the
    padding that aligns tensor data to 64 bytes, and the index at the end.

    Args:
        path: a file written by ``torch.save``.
        ax: the axes to draw on (a new figure when None).

    Returns:
        The axes.

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     torch.save({"w": torch.zeros(64)}, f"{d}/w.pt")
        ...     ax = plot_archive(f"{d}/w.pt")
        >>> ax.get_xlabel()
        'byte offset in the file'
    """
    import matplotlib.pyplot as plt

    records = archive_records(path)
    total = Path(path).stat().st_size
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

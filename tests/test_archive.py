"""pytorch_memo.archive, checked against zipfile and the saved tensors' own bytes."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import matplotlib as mpl
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytorch_memo.archive import archive_records, plot_archive

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
    assert "zip headers, padding, index" in [t.get_text() for t in ax.get_legend().get_texts()]
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

"""The run records: what ran, when, where, stored with the book.

- :class:`RunRecord`, in each chapter's notebook metadata under ``pytorch_memo``: the
  last ``nox -s execute`` of the chapter (whose outputs are stored) and the last run of
  its ``gpu`` cells on a GPU (:class:`GpuRun`).
- :class:`MatrixRecord`, in ``book/_data/matrix.json``: how every chapter and the unit
  tests fared on each torch release of the version matrix (``nox -s matrix``).

Readers check what they read and name the file and the field that is wrong; writers
write atomically. The site's status and memo pages, the tools and the tests all go
through this module.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from memobook import BOOK

METADATA_KEY = "pytorch_memo"
"""Where a notebook's metadata holds its :class:`RunRecord`."""
MATRIX = BOOK / "_data" / "matrix.json"
"""The version matrix's committed record."""


class RecordError(ValueError):
    """A stored record that does not have the expected fields and types."""


def now() -> str:
    """The time records use: UTC, to the minute (``2026-11-22 10:00 UTC``)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        msg = f"{where}: the field {key!r} is missing (it has {sorted(data)})"
        raise RecordError(msg)
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        msg = f"{where}: {key} must be {kind}, got {type(value).__name__}: {value!r}"
        raise RecordError(msg)
    return value


@dataclass(frozen=True)
class GpuRun:
    """The last run of a chapter's ``gpu`` cells on a GPU, all of which passed.

    Attributes:
        executed: when (:func:`now`).
        torch: ``torch.__version__`` of that run.
        device: the GPU's name (``torch.cuda.get_device_name``).
        cells: how many ``gpu`` cells ran and passed (None in records made before it was
            counted).
    """

    executed: str
    torch: str
    device: str
    cells: int | None = None

    @classmethod
    def from_json(cls, data: Any, where: str) -> GpuRun:
        if not isinstance(data, Mapping):
            msg = f"{where}: gpu_run must be a mapping or null, got {type(data).__name__}"
            raise RecordError(msg)
        cells = data.get("cells")
        if cells is not None:
            cells = _field(data, "cells", int, where)
        return cls(
            executed=_field(data, "executed", str, where),
            torch=_field(data, "torch", str, where),
            device=_field(data, "device", str, where),
            cells=cells,
        )


@dataclass(frozen=True)
class RunRecord:
    """How a chapter's stored outputs were made (``nox -s execute``).

    Attributes:
        executed: when (:func:`now`).
        seconds: how long the whole notebook took.
        torch: ``torch.__version__``.
        device: ``cpu``, or the GPU's name when the run had one.
        gpu_cells: how many cells are tagged ``gpu``.
        gpu_run: the last GPU run of those cells, or None.
    """

    executed: str
    seconds: float
    torch: str
    device: str
    gpu_cells: int
    gpu_run: GpuRun | None = None

    @classmethod
    def from_json(cls, data: Any, where: str) -> RunRecord:
        if not isinstance(data, Mapping):
            msg = f"{where}: the run record must be a mapping, got {type(data).__name__}"
            raise RecordError(msg)
        gpu = data.get("gpu_run")
        return cls(
            executed=_field(data, "executed", str, where),
            seconds=float(_field(data, "seconds", (int, float), where)),
            torch=_field(data, "torch", str, where),
            device=_field(data, "device", str, where),
            gpu_cells=_field(data, "gpu_cells", int, where),
            gpu_run=None if gpu is None else GpuRun.from_json(gpu, where),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.gpu_run is not None and self.gpu_run.cells is None:
            del data["gpu_run"]["cells"]
        return data


def read_record(nb: Mapping[str, Any], *, where: str = "notebook") -> RunRecord | None:
    """The notebook's :class:`RunRecord`, or None when it has never been executed."""
    data = nb.get("metadata", {}).get(METADATA_KEY)
    return None if data is None else RunRecord.from_json(data, f"{where} metadata")


def write_record(nb: dict[str, Any], record: RunRecord) -> None:
    """Store ``record`` in the notebook's metadata (the caller writes the file)."""
    nb.setdefault("metadata", {})[METADATA_KEY] = record.to_json()


# --------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Outcome:
    """Counts of one pytest run: a chapter's cells in lax nbval, or the unit tests."""

    passed: int
    failed: int
    skipped: int
    errors: int = 0
    failures: tuple[str, ...] = ()
    """The ids of what failed (cell or test ids), so the status page can name them."""

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.errors == 0 and self.passed > 0

    @classmethod
    def from_json(cls, data: Any, where: str) -> Outcome:
        if not isinstance(data, Mapping):
            msg = f"{where} must be a mapping, got {type(data).__name__}"
            raise RecordError(msg)
        failures = data.get("failures", [])
        if not isinstance(failures, list) or not all(isinstance(f, str) for f in failures):
            msg = f"{where}: failures must be a list of str"
            raise RecordError(msg)
        return cls(
            passed=_field(data, "passed", int, where),
            failed=_field(data, "failed", int, where),
            skipped=_field(data, "skipped", int, where),
            errors=int(data.get("errors", 0)),
            failures=tuple(failures),
        )


@dataclass(frozen=True)
class ClaimOutcome:
    """How one claim cell fared in one run of the matrix.

    Attributes:
        outcome: ``passed``, ``failed``, ``skipped`` (a ``gpu`` cell without CUDA) or
            ``error``.
        source: :func:`source_digest` of the cell's source in that run: a cell edited
            since no longer matches, and its old outcome is not shown as its own.
        branches: for a cell that branches on the torch version, the branch each such
            ``if`` took in that run, in order (``then`` or ``else``).
    """

    outcome: str
    source: str
    branches: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any, where: str) -> ClaimOutcome:
        if not isinstance(data, Mapping):
            msg = f"{where} must be a mapping, got {type(data).__name__}"
            raise RecordError(msg)
        branches = data.get("branches", [])
        if not isinstance(branches, list) or not all(b in ("then", "else") for b in branches):
            msg = f"{where}: branches must be a list of 'then'/'else', got {branches!r}"
            raise RecordError(msg)
        outcome = _field(data, "outcome", str, where)
        if outcome not in OUTCOMES:
            msg = f"{where}: outcome must be one of {OUTCOMES}, got {outcome!r}"
            raise RecordError(msg)
        return cls(outcome, _field(data, "source", str, where), tuple(branches))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"outcome": self.outcome, "source": self.source}
        if self.branches:
            data["branches"] = list(self.branches)
        return data


OUTCOMES = ("passed", "failed", "skipped", "error")


GPU_MARK = "pytorch_memo_gpu"
"""The key, in a ``gpu`` cell's metadata, of the GPU run its stored output comes from."""


def gpu_mark(cell: Mapping[str, Any]) -> GpuRun | None:
    """The GPU run whose output ``cell`` stores, when the cell's code is still the code
    that ran (:func:`source_digest`); None for a cell never run on a GPU, or edited since."""
    metadata = cell.get("metadata", {})
    mark = metadata.get(GPU_MARK) if isinstance(metadata, Mapping) else None
    if not isinstance(mark, Mapping):
        return None
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else str(source)
    if mark.get("code") != source_digest(text):
        return None
    return GpuRun(str(mark.get("executed")), str(mark.get("torch")), str(mark.get("device")))


def code_of(source: str) -> str:
    """``source`` without its comments, trailing spaces and blank lines: what runs.

    Comments (the claims, a check's cause and fix) do not change what a cell's checks
    do, so rewording them keeps the cell's matrix results; any change to the code drops
    them. Source that does not tokenize is kept whole.
    """
    import io
    import tokenize

    lines = source.splitlines()
    try:
        comments = [
            token.start
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):
        return source
    for row, column in comments:
        lines[row - 1] = lines[row - 1][:column]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def source_digest(source: str) -> str:
    """A short digest of a cell's code (:func:`code_of`), to tell whether a recorded
    outcome is its own: one recorded before the code last changed is not."""
    import hashlib

    return hashlib.sha256(code_of(source).encode()).hexdigest()[:12]


def minor(version: str) -> str:
    """``2.15.0+cu132`` -> ``2.15``; ``3.12.1`` -> ``3.12``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def run_key(torch: str, python: str) -> str:
    """The name of a matrix run in the record: ``run_key("2.15.0", "3.12.1")`` is
    ``2.15.0 py3.12``."""
    return f"{torch} py{minor(python)}"


def release_spans(minors: list[str]) -> str:
    """``["2.8", "2.9", "2.10", "2.15"]`` -> ``2.8–2.10, 2.15``: runs of consecutive
    minor releases joined (only where every release in between ran); repeats counted once."""
    groups: list[list[str]] = []
    for release in sorted(set(minors), key=version_key):
        major, number = version_key(release)[:2]
        if groups and version_key(groups[-1][-1])[:2] == (major, number - 1):
            groups[-1].append(release)
        else:
            groups.append([release])
    return ", ".join(g[0] if len(g) == 1 else f"{g[0]}–{g[-1]}" for g in groups)


def version_key(version: str) -> tuple[int, ...]:
    """A version string as numbers, for sorting (``2.9.1`` before ``2.10.0``)."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+")[0].split("."))


@dataclass(frozen=True)
class MatrixRun:
    """One torch release of the version matrix, on one Python."""

    torch: str
    torchvision: str
    executed: str
    python: str
    unit: Outcome
    chapters: dict[str, Outcome] = field(default_factory=dict)
    """Lax nbval outcome by chapter topic (``views``)."""
    claims: dict[str, dict[str, ClaimOutcome]] = field(default_factory=dict)
    """By chapter topic, then claim cell id: each claim cell's outcome in this run."""
    seconds: float = 0.0
    """How long the run took here (building its environment, the unit tests, the
    chapters); 0 in runs recorded before it was kept."""
    raised: dict[str, list[list[str]]] = field(default_factory=dict)
    """By the ``match`` of a ``raises`` check: the errors it caught in this run, each
    ``[type, first line of the message]``, sorted (see :func:`pytorch_memo.checks.raises`)."""
    reruns: dict[str, str] = field(default_factory=dict)
    """By chapter topic: when the chapter ran again on its own after the run
    (``python -m memobook.matrix 2.12.1 --chapter compiling``); its outcome, claims and
    the errors its checks caught come from that re-run."""

    @property
    def key(self) -> str:
        """The run's name in the record: ``2.15.0 py3.12``."""
        return run_key(self.torch, self.python)

    @classmethod
    def from_json(cls, data: Any, where: str) -> MatrixRun:
        if not isinstance(data, Mapping):
            msg = f"{where} must be a mapping, got {type(data).__name__}"
            raise RecordError(msg)
        chapters = _field(data, "chapters", Mapping, where)
        claims = data.get("claims", {})
        if not isinstance(claims, Mapping) or not all(
            isinstance(v, Mapping) for v in claims.values()
        ):
            msg = f"{where}: claims must map chapters to mappings of cell ids"
            raise RecordError(msg)
        return cls(
            torch=_field(data, "torch", str, where),
            torchvision=_field(data, "torchvision", str, where),
            executed=_field(data, "executed", str, where),
            python=_field(data, "python", str, where),
            unit=Outcome.from_json(data.get("unit"), f"{where} unit"),
            chapters={
                str(k): Outcome.from_json(v, f"{where} chapter {k}") for k, v in chapters.items()
            },
            claims={
                str(chapter): {
                    str(cell): ClaimOutcome.from_json(v, f"{where} claim {chapter}/{cell}")
                    for cell, v in cells.items()
                }
                for chapter, cells in claims.items()
            },
            seconds=float(_field(data, "seconds", (int, float), where))
            if "seconds" in data
            else 0.0,
            raised=_raised(data.get("raised", {}), where),
            reruns=_reruns(data.get("reruns", {}), where),
        )

    def with_chapters(
        self,
        chapters: Mapping[str, Outcome],
        claims: Mapping[str, dict[str, ClaimOutcome]],
        raised: Mapping[str, list[list[str]]],
        executed: str,
    ) -> MatrixRun:
        """A copy in which the chapters of a re-run (``chapters``, with their ``claims``)
        replace their earlier results, noted as re-run at ``executed``. The errors the
        re-run's checks caught replace those of the same ``match``; the rest of the run
        (the unit tests, the other chapters, its date and duration) stays as it was."""
        missing = sorted(set(chapters) ^ set(claims))
        if missing:
            msg = (
                f"a re-run needs the outcome and the claims of each chapter, not only of {missing}"
            )
            raise ValueError(msg)
        return replace(
            self,
            chapters={**self.chapters, **chapters},
            claims={**self.claims, **claims},
            raised=dict(sorted({**self.raised, **raised}.items())),
            reruns=dict(sorted({**self.reruns, **dict.fromkeys(chapters, executed)}.items())),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["claims"] = {
            chapter: {cell: outcome.to_json() for cell, outcome in cells.items()}
            for chapter, cells in self.claims.items()
        }
        return data


def _reruns(data: Any, where: str) -> dict[str, str]:
    """A run's ``reruns`` mapping, checked: chapter -> when it ran again."""
    if not isinstance(data, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        msg = f"{where}: reruns must map chapters to the time each ran again"
        raise RecordError(msg)
    return dict(data)


def _raised(data: Any, where: str) -> dict[str, list[list[str]]]:
    """A run's ``raised`` mapping, checked: match -> list of [type, message] pairs."""
    ok = isinstance(data, Mapping) and all(
        isinstance(pairs, list)
        and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in pairs
        )
        for pairs in data.values()
    )
    if not ok:
        msg = f"{where}: raised must map each match to a list of [type, message] pairs"
        raise RecordError(msg)
    return {str(k): [list(p) for p in v] for k, v in data.items()}


def gather_raised(folder: Path) -> dict[str, list[list[str]]]:
    """The errors :func:`pytorch_memo.checks.raises` noted in ``folder`` (``MEMO_RAISED``):
    by ``match``, each distinct ``[type, message]``, sorted."""
    found: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(folder.glob("raised-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                note = json.loads(line)
                key, pair = str(note["match"]), (str(note["type"]), str(note["message"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kernel that died while writing it
            found.setdefault(key, set()).add(pair)
    return {k: [list(p) for p in sorted(v)] for k, v in sorted(found.items())}


@dataclass(frozen=True)
class MatrixRecord:
    """Every run of the matrix (a torch release on a Python), by :attr:`MatrixRun.key`."""

    runs: dict[str, MatrixRun] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path = MATRIX) -> MatrixRecord:
        """The record at ``path``; empty when the matrix never ran."""
        if not path.exists():
            return cls()
        data = json.loads(path.read_text(encoding="utf-8"))
        runs = _field({"runs": data.get("runs")}, "runs", Mapping, str(path))
        found = [MatrixRun.from_json(v, f"{path} run {k}") for k, v in runs.items()]
        return cls({run.key: run for run in found})

    def with_run(self, run: MatrixRun) -> MatrixRecord:
        """A copy with ``run`` replacing any earlier run of the same release and Python."""
        return MatrixRecord({**self.runs, run.key: run})

    def sorted_runs(self) -> list[MatrixRun]:
        """The runs by Python, then torch release, oldest first."""
        return sorted(
            self.runs.values(), key=lambda r: (version_key(minor(r.python)), version_key(r.torch))
        )

    def cell_runs(
        self, chapter: str, cell_id: str, digest: str
    ) -> list[tuple[MatrixRun, ClaimOutcome]]:
        """The runs that ran a claim cell as it reads now, with the cell's outcome in each,
        in :meth:`sorted_runs` order: those that recorded ``digest`` (the
        :func:`source_digest` of the cell's source) for it. A run of the cell before its
        code last changed is not the cell's."""
        found = []
        for run in self.sorted_runs():
            outcome = run.claims.get(chapter, {}).get(cell_id)
            if outcome is not None and outcome.source == digest:
                found.append((run, outcome))
        return found

    def torch_minors(self) -> set[str]:
        """The minor releases of torch (``2.9``) that some run checked."""
        return {minor(run.torch) for run in self.runs.values()}

    def write(self, path: Path = MATRIX) -> None:
        """Write the record atomically, runs sorted by Python, then torch release."""
        from pytorch_memo._files import write_text

        runs = {run.key: run.to_json() for run in self.sorted_runs()}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"runs": runs}, indent=1) + "\n")

"""Sphinx additions for the pytorch-memo site (``_config.yml`` loads it as ``memobook.site``).

- ``memo-status``: a directive that renders the execution-status table from what
  `nox -s execute` (and a GPU run) recorded in each chapter's notebook metadata.
- ``memo-errors`` and ``memo-changes``: the Errors and What changed pages
  (:mod:`memobook.errors`).
- ``memo-teaching``: per chapter, the share of visible code that checks rather than
  teaches (:mod:`memobook.teaching`), against the book's targets.
- A "Helpers used in this chapter" section appended to every chapter, generated from
  the chapter's ``from pytorch_memo... import ...`` lines and linked to the API reference
  (nitpicky builds fail when a helper is missing from the reference).
- ``memo-chapters``, ``memo-figure`` and ``memo-concepts``: the landing page's list of
  chapters (each with its one-line description), a figure from a chapter, and the index
  of concepts (:mod:`memobook.concepts`).
- Figures: alt text that says what each shows (:mod:`memobook.figures`), and a link to
  the full-size image (a phone shows it scaled to the column).
- Search that finds the section (:mod:`memobook.search`): a Pagefind index of every
  section, written after the HTML.
- ``memo-claims``: the memo, a cheat sheet: per chapter its summary, then its claims by
  section, each with a link to its proof and the releases it holds on, and a filter box.
- The download menu's ".pdf" gives the chapter's pages of the printed book
  (:mod:`memobook.pdf`).
- Small fixes: repeated <script> tags removed; figures kept legible in dark mode.
"""

from __future__ import annotations

import pkgutil
import posixpath
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import memobook
from memobook import search
from memobook.claims import anchor, cell_claims
from memobook.record import (
    MATRIX,
    GpuRun,
    MatrixRecord,
    Outcome,
    RunRecord,
    gpu_mark,
    minor,
    read_record,
    release_spans,
    source_digest,
)

STATIC = Path(__file__).parent / "static"
HELPERS_TITLE = "Helpers used in this chapter"


PNG_ICONS = (
    ("icon", "favicon-32.png", "32x32"),
    ("apple-touch-icon", "apple-touch-icon.png", "180x180"),
)
"""Icons beside the SVG favicon (``html_favicon``), made from ``static/logo.svg``: browsers
that show no SVG favicon (Safari) take the PNG, and a phone's home screen the 180 px one."""


def _icon_links(prefix: str) -> str:
    """The ``<link>`` tags of :data:`PNG_ICONS`, their files under ``prefix``."""
    from html import escape

    return "".join(
        f'<link rel="{rel}" type="image/png" sizes="{size}" href="{escape(prefix + name)}">\n'
        for rel, name, size in PNG_ICONS
    )


def _png_icons(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    prefix = context["pathto"]("_static/", 1)
    context["metatags"] = context.get("metatags", "") + "\n" + _icon_links(prefix)


def _dedupe_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Drop repeated <script> entries.

    sphinx-thebe registers its inline configuration script once per build phase, and
    Jupyter Book 1 triggers that twice; the browser then stops on "Identifier
    'THEBE_JS_URL' has already been declared".
    """
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        filename = getattr(script, "filename", script) or ""  # inline scripts: None or ""
        key = (str(filename), tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _doc_link(docname: str, title: str) -> addnodes.pending_xref:
    ref = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget=f"/{docname}", refexplicit=True
    )
    ref += nodes.inline(text=title)
    return ref


def _table(
    headers: list[str], rows: list[list[nodes.Node | str]], *, css_class: str = "memo-status"
) -> nodes.table:
    table = nodes.table(classes=[css_class])
    group = nodes.tgroup(cols=len(headers))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in headers)
    head = nodes.thead()
    body = nodes.tbody()
    group += head
    group += body
    lines: list[tuple[nodes.Element, list[nodes.Node | str]]] = [(head, list(headers))]
    lines += [(body, row) for row in rows]
    for target, cells in lines:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            paragraph = nodes.paragraph()
            paragraph += nodes.Text(cell) if isinstance(cell, str) else cell
            entry += paragraph
            row += entry
        target += row
    return table


class StatusDirective(SphinxDirective):
    """The execution status of every chapter, from its notebook's metadata."""

    def run(self) -> list[nodes.Node]:
        rows: list[list[nodes.Node | str]] = []
        for chapter in memobook.chapters(Path(self.env.srcdir)):
            self.env.note_dependency(str(chapter.path))
            record = read_record(chapter.load(), where=str(chapter.path))
            link = _doc_link(chapter.docname, chapter.title)
            if record is None:
                rows.append([link, "never", "", "", "", "", ""])
                continue
            gpu = record.gpu_run
            if record.gpu_cells == 0:
                gpu_text = "no GPU cells"
            elif gpu is None:
                gpu_text = "not run yet"
            else:
                gpu_text = f"{gpu.executed} on {gpu.device} (torch {gpu.torch})"
            rows.append(
                [
                    link,
                    record.executed,
                    f"{record.seconds:.1f} s",
                    record.torch,
                    record.device,
                    str(record.gpu_cells),
                    gpu_text,
                ]
            )
        headers = [
            "chapter",
            "last executed",
            "time",
            "torch",
            "device",
            "GPU cells",
            "GPU cells last ran",
        ]
        return [_table(headers, rows)]


class MatrixDirective(SphinxDirective):
    """Chapter x run of the version matrix (a torch release on a Python): how each
    chapter's checks fared."""

    def run(self) -> list[nodes.Node]:
        srcdir = Path(self.env.srcdir)
        path = srcdir / MATRIX.relative_to(memobook.ROOT)
        self.env.note_dependency(str(path))
        matrix = MatrixRecord.read(path)
        if not matrix.runs:
            return [nodes.paragraph(text="The version matrix has not run yet (nox -s matrix).")]
        runs = matrix.sorted_runs()
        headers = ["chapter", *(f"torch {run.torch} Python {minor(run.python)}" for run in runs)]
        rows: list[list[nodes.Node | str]] = []
        for chapter in memobook.chapters(srcdir):
            cells: list[nodes.Node | str] = [_doc_link(chapter.docname, chapter.title)]
            for run in runs:
                outcome = run.chapters.get(chapter.name)
                text = "not run" if outcome is None else _outcome_text(outcome)
                if chapter.name in run.reruns:  # the day it ran again on its own
                    text += f" (re-run {run.reruns[chapter.name].split()[0]})"
                cells.append(text)
            rows.append(cells)
        rows.append(["unit tests", *(_outcome_text(run.unit) for run in runs)])
        rows.append(
            [
                "ran",
                *(
                    f"{run.executed}, torchvision {run.torchvision}, Python {run.python}"
                    + (f", {run.seconds / 60:.1f} min" if run.seconds else "")
                    for run in runs
                ),
            ]
        )
        table = _table(headers, rows, css_class="memo-matrix")
        failures = [
            nodes.list_item(
                "", nodes.paragraph(text=f"torch {run.torch}, Python {run.python}: {failure}")
            )
            for run in runs
            for outcome in (run.unit, *run.chapters.values())
            for failure in outcome.failures
        ]
        return [table] + ([nodes.bullet_list("", *failures)] if failures else [])


def claim_releases(matrix: MatrixRecord, chapter: str, cell_id: str, digest: str) -> str:
    """Where a claim holds, from the matrix runs that ran its cell as it is now: ``torch
    2.8-2.15 on Python 3.11; 2.11, 2.15 on Python 3.12, 3.13``."""
    passed: dict[str, list[str]] = {}
    failed: list[str] = []
    for run, outcome in matrix.cell_runs(chapter, cell_id, digest):
        if outcome.outcome == "passed":
            passed.setdefault(minor(run.python), []).append(minor(run.torch))
        elif outcome.outcome in ("failed", "error"):
            failed.append(f"torch {minor(run.torch)} on Python {minor(run.python)}")
    if not passed and not failed:
        return "not yet in the version matrix as it reads now"
    by_releases: dict[str, list[str]] = {}
    for python, minors in passed.items():
        by_releases.setdefault(release_spans(minors), []).append(python)
    parts = [f"{spans} on Python {', '.join(p)}" for spans, p in by_releases.items()]
    text = f"holds on torch {'; '.join(parts)}" if parts else ""
    if failed:
        text += ("; " if text else "") + f"fails on {', '.join(failed)}"
    return text


class TeachingDirective(SphinxDirective):
    """Per chapter: the share of visible code lines that check, and of visible code cells
    that show nothing (:mod:`memobook.teaching`), against the book's targets."""

    def run(self) -> list[nodes.Node]:
        from memobook import teaching

        chapters = memobook.chapters(Path(self.env.srcdir))
        for chapter in chapters:
            self.env.note_dependency(str(chapter.path))
        rows: list[list[nodes.Node | str]] = []
        for figures in teaching.book_figures(chapters):
            name: nodes.Node | str = figures.name
            for chapter in chapters:
                if chapter.name == figures.name:
                    name = _doc_link(chapter.docname, chapter.title)
            rows.append(
                [
                    name,
                    f"{figures.check_share:.0%} ({figures.check_lines} of {figures.code_lines})",
                    f"{figures.silent_share:.0%} ({figures.silent_cells} of {figures.cells})",
                ]
            )
        headers = [
            "chapter",
            f"check lines (book target: at most {teaching.CHECK_LINES_TARGET:.0%})",
            f"code cells without output (at most {teaching.SILENT_CELLS_TARGET:.0%})",
        ]
        return [_table(headers, rows, css_class="memo-teaching")]


def _outcome_text(outcome: Outcome) -> str:
    mark = "pass" if outcome.ok else "FAIL"
    text = f"{mark}: {outcome.passed} passed"
    if outcome.failed or outcome.errors:
        text += f", {outcome.failed + outcome.errors} failed"
    if outcome.skipped:
        text += f", {outcome.skipped} skipped"
    return text


class ApiDirective(SphinxDirective):
    """One section per public module of pytorch_memo, documented by autodoc.

    Generated from the package itself, so a new module cannot be left out.
    """

    def run(self) -> list[nodes.Node]:
        import pytorch_memo

        users = module_users(Path(self.env.srcdir))
        lines: list[str] = []
        for module in pkgutil.iter_modules(pytorch_memo.__path__):
            if module.name.startswith("_"):
                continue
            name = f"pytorch_memo.{module.name}"
            chapters = users.get(name, [])
            used = ", ".join(f"[{c.title}](/{c.docname})" for c in chapters) or "no chapter yet"
            # The page is MyST markdown; autodoc writes reStructuredText, hence eval-rst.
            rst = ["```{eval-rst}", f".. automodule:: {name}", "   :members:", "```"]
            lines += [f"## `{name}`", "", f"Used by: {used}.", "", *rst, ""]
        for chapter in memobook.chapters(Path(self.env.srcdir)):
            self.env.note_dependency(str(chapter.path))
        container = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, source="memo-api"), container)
        return list(container.children)


def module_users(root: Path) -> dict[str, list[memobook.Chapter]]:
    """For each module of the package, the chapters that import from it, in reading order."""
    users: dict[str, list[memobook.Chapter]] = {}
    for chapter in memobook.chapters(root):
        modules = {name.rsplit(".", 1)[0] for name in memobook.package_imports(chapter.load())}
        for module in sorted(modules):
            users.setdefault(module, []).append(chapter)
    return users


def _inline(text: str) -> list[nodes.Node]:
    """A claim's text, its backticked names as code."""
    parts = text.split("`")
    return [
        nodes.literal(text=part) if i % 2 else nodes.Text(part)
        for i, part in enumerate(parts)
        if part
    ]


def _verified(record: RunRecord | None, matrix: MatrixRecord, chapter: str) -> str:
    """Where a chapter's claims were last checked: the stored run and the version matrix."""
    if record is None:
        return "Never executed."
    text = f"Checked with torch {record.torch} on {record.device.upper() if record.device == 'cpu' else record.device} ({record.executed})"
    passed = [
        f"{run.torch} (Python {minor(run.python)})"
        for run in matrix.sorted_runs()
        if chapter in run.chapters and run.chapters[chapter].ok
    ]
    failed = [
        f"{run.torch} (Python {minor(run.python)})"
        for run in matrix.sorted_runs()
        if chapter in run.chapters and not run.chapters[chapter].ok
    ]
    if passed:
        text += f"; its checks also pass on torch {', '.join(passed)} (version matrix)"
    if failed:
        text += f"; some fail on torch {', '.join(failed)} (see the status page)"
    return text + "."


def _gpu_note(run: GpuRun | None) -> str:
    if run is None:
        return "GPU claim: not yet run on a GPU as it reads now"
    return f"GPU claim: checked with torch {run.torch} on {run.device} ({run.executed})"


FILTER = (
    '<div class="memo-filter"><label for="memo-filter">Filter</label>'
    '<input id="memo-filter" type="search" autocomplete="off" spellcheck="false" '
    'placeholder="e.g. reshape, seed, bf16">'
    '<p class="memo-filter-count" aria-live="polite"></p></div>'
)
"""The memo's filter box; ``memo.js`` narrows the lists as the reader types."""


class ClaimsDirective(SphinxDirective):
    """The memo: per chapter, its summary (what to do), then every claim, grouped by
    section, each with a link to the cell proving it and the releases it holds on."""

    def run(self) -> list[nodes.Node]:
        from memobook.claims import section_claims

        matrix = MatrixRecord.read(Path(self.env.srcdir) / MATRIX.relative_to(memobook.ROOT))
        here = self.env.docname
        out: list[nodes.Node] = []
        total = 0
        for chapter in memobook.chapters(Path(self.env.srcdir)):
            self.env.note_dependency(str(chapter.path))
            nb = chapter.load()
            record = read_record(nb, where=str(chapter.path))
            groups = section_claims(chapter)
            count = sum(len(claims) for _, claims in groups)
            section = nodes.section(
                ids=[f"memo-{chapter.name}"],
                names=[f"memo {chapter.name}"],
                classes=["memo-chapter"],
            )
            title = nodes.title()
            title += _doc_link(chapter.docname, chapter.title)
            section += title
            section += nodes.paragraph(
                text=f"{count} claims. {_verified(record, matrix, chapter.name)}",
                classes=["memo-verified"],
            )
            section += self._summary(memobook.summary_points(nb))
            for heading, claims in groups:
                group = nodes.container(classes=["memo-group"])
                group += nodes.paragraph("", "", *_inline(heading), classes=["memo-group-title"])
                items = nodes.bullet_list(classes=["memo-claims"])
                for claim in claims:
                    digest = source_digest(memobook.source(nb["cells"][claim.cell]))
                    releases = claim_releases(matrix, chapter.name, claim.cell_id, digest)
                    paragraph = nodes.paragraph()
                    paragraph += nodes.inline(
                        "", "", *_inline(claim.text), classes=["memo-claim-text"]
                    )
                    paragraph += nodes.Text(" ")
                    paragraph += _proof(chapter.docname, here, claim.cell_id)
                    paragraph += nodes.inline(text=f" {releases}", classes=["memo-releases"])
                    if claim.gpu:
                        mark = gpu_mark(nb["cells"][claim.cell])
                        paragraph += nodes.inline(
                            text=f" ({_gpu_note(mark)})", classes=["memo-gpu"]
                        )
                    items += nodes.list_item("", paragraph, classes=["memo-claim"])
                group += items
                section += group
            out.append(section)
            total += count
        summary = nodes.paragraph(
            text=f"{total} claims in {len(out)} chapters.", classes=["memo-total"]
        )
        return [nodes.raw("", FILTER, format="html"), summary, *out]

    def _summary(self, points: list[str]) -> nodes.Node:
        """The chapter's summary points (markdown), under "What to do"."""
        box = nodes.container(classes=["memo-group", "memo-summary"])
        box += nodes.paragraph(text="What to do", classes=["memo-group-title"])
        parsed = nodes.container()
        lines = [f"- {point}" for point in points]
        self.state.nested_parse(StringList(lines, source="memo-summary"), 0, parsed)
        for child in parsed.children:
            if isinstance(child, nodes.bullet_list):
                child["classes"].append("memo-summary-points")
            box += child
        return box


class ChaptersDirective(SphinxDirective):
    """The chapters, part by part in reading order, each linked, with what it teaches in
    one line (:attr:`memobook.Chapter.description`)."""

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        items = nodes.enumerated_list()
        part = None
        for number, chapter in enumerate(memobook.chapters(Path(self.env.srcdir)), 1):
            self.env.note_dependency(str(chapter.path))
            if chapter.part != part:  # chapters are numbered through the book, as in the menu
                part = chapter.part
                heading = nodes.paragraph(classes=["memo-part"])
                heading += nodes.strong(text=part)
                items = nodes.enumerated_list(enumtype="arabic", classes=["memo-chapters"])
                if number > 1:
                    items["start"] = number
                out += [heading, items]
            paragraph = nodes.paragraph()
            paragraph += _doc_link(chapter.docname, chapter.title)
            description = chapter.description
            if not description:
                msg = f"{chapter.path.name} has no {memobook.DESCRIPTION_KEY} in its metadata"
                raise self.error(msg)
            paragraph += nodes.Text(": ")
            paragraph.extend(_inline(description))
            item = nodes.list_item()
            item += paragraph
            items += item
        return out


def _figure_file(app: Sphinx, data: str) -> str:
    """Write a notebook's base64 PNG where myst-nb writes its images (the same file as
    the chapter's, so the site holds it once); return its path for an image node."""
    import base64
    import hashlib
    import os

    from myst_nb.sphinx_ext import OUTPUT_FOLDER  # type: ignore[import-untyped]

    content = base64.b64decode(data)
    folder = Path(app.outdir).parent / OUTPUT_FOLDER
    path = folder / f"{hashlib.sha256(content).hexdigest()}.png"
    if not path.exists():
        from pytorch_memo._files import atomic_file

        folder.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as (file, _):
            file.write(content)
    return "/" + Path(os.path.relpath(path.resolve(), Path(app.srcdir).resolve())).as_posix()


def _section_of(nb: dict[str, Any], index: int) -> str:
    """The anchor of the section that holds cell ``index``."""
    from memobook.concepts import section_anchor

    found = ""
    for cell in nb["cells"][: index + 1]:
        if cell["cell_type"] == "markdown":
            for line in memobook.source(cell).splitlines():
                if line.startswith(("## ", "### ")):
                    found = section_anchor(line.lstrip("#").strip())
    return found


class FigureDirective(SphinxDirective):
    """A figure from a chapter, by topic and cell id (``views 82b6192c``): its stored
    image, described as on its page (:mod:`memobook.figures`), and a caption that links
    to the section it comes from."""

    required_arguments = 2

    def run(self) -> list[nodes.Node]:
        from memobook.figures import description

        topic, cell_id = self.arguments
        chapters = {c.name: c for c in memobook.chapters(Path(self.env.srcdir))}
        if topic not in chapters:
            raise self.error(
                f"memo-figure: {topic!r} is not a chapter; chapters: {sorted(chapters)}"
            )
        chapter = chapters[topic]
        self.env.note_dependency(str(chapter.path))
        nb = chapter.load()
        index = next((i for i, c in enumerate(nb["cells"]) if c.get("id") == cell_id), None)
        images = [
            o["data"]["image/png"]
            for o in (nb["cells"][index].get("outputs", []) if index is not None else [])
            if "image/png" in o.get("data", {})
        ]
        if index is None or len(images) != 1:
            msg = f"memo-figure: cell {cell_id!r} of {chapter.path.name} must hold one PNG figure"
            raise self.error(msg)
        text = description(memobook.source(nb["cells"][index]))
        data = images[0]
        uri = _figure_file(self.env.app, data if isinstance(data, str) else "".join(data))
        container = nodes.container(classes=["memo-landing-figure"])
        container += nodes.image(uri=uri, alt=text)
        caption = nodes.paragraph(classes=["memo-landing-caption"])
        caption.extend(_inline(text[:1].upper() + text[1:]))
        caption += nodes.Text(" From ")
        relative = posixpath.relpath(chapter.docname, posixpath.dirname(self.env.docname))
        ref = nodes.reference("", "", refuri=f"{relative}.html#{_section_of(nb, index)}")
        ref += nodes.Text(chapter.title)
        caption += ref
        caption += nodes.Text(".")
        container += caption
        return [container]


class ConceptsDirective(SphinxDirective):
    """The index of concepts, A to Z: each term linked to the section that explains it
    (:data:`memobook.concepts.CONCEPTS`)."""

    def run(self) -> list[nodes.Node]:
        from memobook.concepts import by_initial, heading_text, sections

        chapters = {c.name: c for c in memobook.chapters(Path(self.env.srcdir))}
        headings: dict[tuple[str, str], str] = {}
        for chapter in chapters.values():
            self.env.note_dependency(str(chapter.path))
            for found in sections(chapter.load()):
                headings.setdefault((chapter.name, found.anchor), found.heading)
        out: list[nodes.Node] = []
        for initial, concepts in by_initial().items():
            section = nodes.section(
                ids=[f"concepts-{initial.lower()}"], names=[f"concepts {initial}"]
            )
            section += nodes.title(text=initial)
            items = nodes.bullet_list(classes=["memo-concepts"])
            for concept in concepts:
                heading = headings.get((concept.chapter, concept.anchor))
                if concept.chapter not in chapters or heading is None:
                    msg = f"concept {concept.term!r}: no section {concept.anchor!r} in {concept.chapter!r}"
                    raise self.error(msg)
                chapter = chapters[concept.chapter]
                paragraph = nodes.paragraph()
                paragraph += nodes.strong("", "", *_inline(concept.term))
                paragraph += nodes.Text(": ")
                relative = posixpath.relpath(chapter.docname, posixpath.dirname(self.env.docname))
                ref = nodes.reference(
                    "",
                    "",
                    refuri=f"{relative}.html#{concept.anchor}",
                    classes=["memo-concept-link"],
                )
                ref += nodes.Text(f"{chapter.title} \u203a ")
                ref.extend(_inline(heading_text(heading, code=True)))
                paragraph += ref
                item = nodes.list_item()
                item += paragraph
                items += item
            section += items
            out.append(section)
        return out


def _chapter_section(chapter: memobook.Chapter, prefix: str) -> nodes.section:
    section = nodes.section(ids=[f"{prefix}-{chapter.name}"], names=[f"{prefix} {chapter.name}"])
    title = nodes.title()
    title += _doc_link(chapter.docname, chapter.title)
    section += title
    return section


def _proof(docname: str, here: str, cell_id: str, text: str = "proof") -> nodes.reference:
    relative = posixpath.relpath(docname, posixpath.dirname(here))
    return nodes.reference(
        "", text, refuri=f"{relative}.html#claim-{cell_id}", classes=["memo-proof-link"]
    )


class ErrorsDirective(SphinxDirective):
    """The Errors page: every error a claim cell provokes, by chapter, by message."""

    def run(self) -> list[nodes.Node]:
        from memobook.errors import errors, release_text

        root = Path(self.env.srcdir)
        matrix = MatrixRecord.read(root / MATRIX.relative_to(memobook.ROOT))
        entries = errors(root, matrix)
        out: list[nodes.Node] = []
        for chapter in memobook.chapters(root):
            self.env.note_dependency(str(chapter.path))
            mine = [e for e in entries if e.chapter == chapter.name]
            if not mine:
                continue
            section = _chapter_section(chapter, "errors")
            items = nodes.bullet_list(classes=["memo-errors"])
            for entry in mine:
                item = nodes.list_item(classes=["memo-error"])
                head = nodes.paragraph(classes=["memo-error-message"])
                head += nodes.literal(text=entry.key)
                head += nodes.Text(" ")
                head += _proof(chapter.docname, self.env.docname, entry.cell_id)
                item += head
                for label, text in (("Cause", entry.cause), ("Fix", entry.fix)):
                    if text:
                        line = nodes.paragraph(classes=[f"memo-error-{label.lower()}"])
                        line += nodes.strong(text=f"{label}: ")
                        line.extend(_inline(text))
                        item += line
                item += nodes.paragraph(text=release_text(entry), classes=["memo-releases"])
                items += item
            section += items
            out.append(section)
        count = len({e.key for e in entries})
        summary = nodes.paragraph(
            text=f"{count} distinct errors from {len(entries)} checks in {len(out)} chapters.",
            classes=["memo-total"],
        )
        return [summary, *out]


class ChangesDirective(SphinxDirective):
    """The What changed page: each version branch of a claim cell, by the release that
    changed it, newest first."""

    def run(self) -> list[nodes.Node]:
        from memobook.errors import (
            changes,
            deprecation_when,
            deprecations,
            span_text,
        )

        root = Path(self.env.srcdir)
        matrix = MatrixRecord.read(root / MATRIX.relative_to(memobook.ROOT))
        for chapter in memobook.chapters(root):
            self.env.note_dependency(str(chapter.path))
        out: list[nodes.Node] = []
        items = nodes.bullet_list()
        heading = None
        for change in changes(root, matrix):
            title = f"torch {change.changed_in}" if change.changed_in else "Other differences"
            if title != heading:
                heading = title
                slug = title.lower().replace(" ", "-").replace(".", "-")
                section = nodes.section(ids=[f"changes-{slug}"], names=[f"changes {title}"])
                section += nodes.title(text=title)
                items = nodes.bullet_list(classes=["memo-changes"])
                section += items
                out.append(section)
            item = nodes.list_item(classes=["memo-change"])
            head = nodes.paragraph()
            head.extend(_inline(" ".join(change.claims)))
            head += nodes.Text(" ")
            head += _proof(change.docname, self.env.docname, change.cell_id)
            item += head
            tested = nodes.paragraph(classes=["memo-releases"])
            tested += nodes.literal(text=change.test)
            tested += nodes.Text(f": {span_text(change.then_runs)}; otherwise: "
                                 f"{span_text(change.else_runs)}")  # fmt: skip
            item += tested
            items += item
        deprecated = deprecations(root, matrix)
        if deprecated:
            section = nodes.section(ids=["changes-deprecations"], names=["changes deprecations"])
            section += nodes.title(text="Deprecations")
            items = nodes.bullet_list(classes=["memo-changes"])
            for entry in deprecated:
                item = nodes.list_item(classes=["memo-change", "memo-deprecation"])
                head = nodes.paragraph()
                head += nodes.strong(text="Deprecated: ")
                head.extend(_inline(entry.old))
                head += nodes.Text(" ")
                head += _proof(entry.docname, self.env.docname, entry.cell_id)
                item += head
                if entry.new:
                    use = nodes.paragraph()
                    use += nodes.strong(text="Use: ")
                    use.extend(_inline(entry.new))
                    item += use
                warned = nodes.paragraph(classes=["memo-releases"])
                warned += nodes.Text(f"Warning: {entry.kind}")
                for number, said in enumerate(entry.texts):  # verbatim: no smart quotes
                    warned += nodes.Text(": " if number == 0 else "; ")
                    warned += nodes.literal(text=said)
                warned += nodes.Text(". ")
                warned += nodes.Text(f"{deprecation_when(entry)}.")
                item += warned
                items += item
            section += items
            out.append(section)
        return out


def _gpu_text(run: GpuRun | None) -> str:
    text = "GPU cell: it runs only where CUDA is available; on a CPU it prints why it skips."
    if run is None:
        return text + " It has not run on a GPU as it reads now, so no GPU output is shown."
    return (
        text
        + f" The output below comes from its GPU run: {run.device}, torch {run.torch}, {run.executed}."
    )


def _mark_cells(app: Sphinx, doctree: nodes.document) -> None:
    """On a chapter page: anchor each claim cell (``claim-<cell id>``) and mark GPU cells."""
    notebook = Path(app.srcdir) / f"{app.env.docname}.ipynb"
    if not app.env.docname.startswith("book/") or not notebook.exists():
        return
    from memobook.figures import description

    nb = memobook.load(notebook)
    cells = nb["cells"]
    for container in list(doctree.findall(nodes.container)):
        if container.get("nb_element") != "cell_code":
            continue
        cell = cells[container["cell_index"]]
        for image in container.findall(nodes.image):  # a figure: say what it shows
            image["alt"] = description(memobook.source(cell))
            image["classes"].append("memo-figure")
        if cell_claims(memobook.source(cell)):
            container["ids"].append(anchor(str(cell.get("id", ""))))
            container["classes"].append("memo-claim")
        if memobook.GPU_TAG in memobook.tags(cell):
            mark = gpu_mark(cell)
            if mark is None:  # an output from before an edit, or from a CPU: not shown
                for child in list(container.children):
                    if isinstance(child, nodes.Element) and child.get("nb_element") == (
                        "cell_code_output"
                    ):
                        container.remove(child)
            note = nodes.container(classes=["memo-gpu-note"])
            note += nodes.paragraph(text=_gpu_text(mark))
            container.parent.insert(container.parent.index(container), note)


def _link_figures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Wrap each figure of a chapter in a link to its full-size image: a phone shows it
    scaled to the column, and a tap opens it whole. (Sphinx links only images given a
    size; the name of the copy in ``_images`` is known once every page is read.)"""
    if app.builder.name != "html":
        return
    from sphinx.util.osutil import relative_uri

    for image in list(doctree.findall(nodes.image)):
        if "memo-figure" not in image["classes"] or isinstance(image.parent, nodes.reference):
            continue
        copied = app.env.images.get(image["uri"])
        if copied is None:
            continue
        target = relative_uri(app.builder.get_target_uri(docname), f"_images/{copied[1]}")
        link = nodes.reference("", "", refuri=target, internal=True, classes=["memo-figure-link"])
        image.replace_self(link)
        link += image


def _add_helper_links(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    notebook = Path(app.srcdir) / f"{docname}.ipynb"
    if not docname.startswith("book/") or not notebook.exists():
        return
    helpers = memobook.package_imports(memobook.load(notebook))
    chapter = next(iter(doctree.findall(nodes.section)), None)
    if not helpers or chapter is None:
        return
    section = nodes.section(ids=["helpers-used-in-this-chapter"], names=[HELPERS_TITLE.lower()])
    section += nodes.title(text=HELPERS_TITLE)
    section += nodes.paragraph(
        text="The chapter imports these from the book's package; each links to its reference."
    )
    items = nodes.bullet_list()
    for target in helpers:
        ref = addnodes.pending_xref(
            "", refdomain="py", reftype="obj", reftarget=target, refexplicit=False, refwarn=True
        )
        ref += nodes.literal(text=target)
        item = nodes.list_item()
        paragraph = nodes.paragraph()
        paragraph += ref
        item += paragraph
        items += item
    section += items
    chapter += section


def _pdf_download(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """The download menu's ".pdf" entry gives a file: on a chapter its pages of the
    printed book (:func:`memobook.pdf.chapter_pdf`), on the root page the whole book;
    other pages have no entry (sphinx-book-theme's opened the browser's print dialog)."""
    from memobook import pdf

    root = Path(app.srcdir)
    chapters = {chapter.docname: chapter for chapter in memobook.chapters(root)}
    if pagename in chapters:
        chapter = chapters[pagename]
        target: str | None = pdf.chapter_pdf(chapter.name)
        tooltip = "This chapter's pages of the book (PDF)"
    elif pagename == memobook.toc_entries(root)[0].docname:
        target, tooltip = pdf.PDF_NAME, "The whole book (PDF)"
    else:
        target = None
    for group in context.get("header_buttons", []):
        buttons = group.get("buttons", [])
        for index, button in enumerate(buttons):
            if button.get("label") != "download-pdf-button":
                continue
            if target is None:
                del buttons[index]
            else:
                buttons[index] = {
                    "type": "link",
                    "url": context["pathto"](target, 1),
                    "text": ".pdf",
                    "tooltip": tooltip,
                    "icon": "fas fa-file-pdf",
                    "label": "download-pdf-button",
                }
            break


def _add_static(app: Sphinx) -> None:
    app.config.html_static_path.append(str(STATIC))


def _mathjax() -> Path:
    """MathJax 3 as the ``sphinx-mathjax-offline`` package ships it (a dependency of the
    book group); the site serves the parts it uses itself, so math renders offline."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        msg = "sphinx-mathjax-offline is not installed: the site serves MathJax from it"
        raise RuntimeError(msg)
    return Path(spec.origin).parent / "static" / "mathjax"


MATHJAX_FILES = ("tex-chtml.js", "output/chtml/fonts/woff-v2")
"""What the site needs of MathJax: the TeX-to-HTML bundle and its fonts (about 1.5 MB)."""


def _configure(app: Sphinx, config: Any) -> None:
    """Math from the site itself, not a CDN; a source button on every page; the title
    beside the logo."""
    _mathjax()  # fail early, with the reason, when it is missing
    config.mathjax_path = "mathjax/tex-chtml.js"
    options = config.html_theme_options
    # The logo, and beside it the book's title (with a logo the theme shows no title).
    logo = {**options.get("logo", {}), "text": config.html_title}
    config.html_theme_options = {**options, "use_source_button": True, "logo": logo}


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util.fileutil import copy_asset

    source = _mathjax()
    for name in MATHJAX_FILES:
        target = Path(app.outdir) / "_static" / "mathjax" / name
        if (source / name).is_dir():
            copy_asset(str(source / name), str(target))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_asset(str(source / name), str(target.parent))


def _write_root_page(app: Sphinx, exception: Exception | None) -> None:
    """The site's root, ``index.html``: a redirect to the landing page, as the table of
    contents' extension writes it, with the site's title and favicon (without one the
    browser asks for ``/favicon.ico``, which does not exist)."""
    if exception is not None or app.builder.name != "html":
        return
    from html import escape

    from pytorch_memo._files import atomic_file

    target = escape(f"{app.config.root_doc}.html")
    icon = Path(app.config.html_favicon or "").name
    link = f'<link rel="icon" href="_static/{escape(icon)}">\n' if icon else ""
    link += _icon_links("_static/")
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(app.config.html_title)}</title>\n{link}"
        f'<meta http-equiv="Refresh" content="0; url={target}">\n</head>\n'
        f'<body><a href="{target}">{escape(app.config.html_title)}</a></body>\n</html>\n'
    )
    with atomic_file(Path(app.outdir) / "index.html") as (file, _):
        file.write(page.encode())


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("memo-status", StatusDirective)
    app.add_directive("memo-api", ApiDirective)
    app.add_directive("memo-claims", ClaimsDirective)
    app.add_directive("memo-matrix", MatrixDirective)
    app.add_directive("memo-teaching", TeachingDirective)
    app.add_directive(memobook.ERRORS_DIRECTIVE, ErrorsDirective)
    app.add_directive(memobook.CHANGES_DIRECTIVE, ChangesDirective)
    app.add_directive("memo-chapters", ChaptersDirective)
    app.add_directive("memo-figure", FigureDirective)
    app.add_directive("memo-concepts", ConceptsDirective)
    app.connect("doctree-resolved", _link_figures)
    app.connect("doctree-read", _mark_cells)
    app.connect("builder-inited", _add_static)
    app.connect("config-inited", _configure)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _write_root_page, priority=900)  # after the toc's own
    app.add_css_file("memo.css")
    app.add_js_file("memo.js")
    search.setup(app)  # the section search: its index after the build, its script
    # Before Sphinx's collectors (priority 500) read the page's sections, so the helpers
    # section is numbered in order and listed in the page's contents.
    app.connect("doctree-read", _add_helper_links, priority=400)
    app.connect("html-page-context", _pdf_download, priority=600)  # after the theme's buttons
    app.connect("html-page-context", _dedupe_scripts, priority=1000)  # after the others
    app.connect("html-page-context", _png_icons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

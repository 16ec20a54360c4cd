"""Sphinx additions for the pytorch-memo site (loaded through _config.yml).

- ``memo-status``: a directive that renders the execution-status table from what
  `nox -s execute` (and a GPU run) recorded in each chapter's notebook metadata.
- A "Helpers used in this chapter" section appended to every chapter, generated from
  the chapter's ``from pytorch_memo... import ...`` lines and linked to the API reference
  (nitpicky builds fail when a helper is missing from the reference).
- Small fixes: repeated <script> tags removed; figures kept legible in dark mode.
"""

from __future__ import annotations

import ast
import json
import pkgutil
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

STATIC = Path(__file__).parent / "static"
HELPERS_TITLE = "Helpers used in this chapter"


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


def _toc_chapters(srcdir: Path) -> list[str]:
    """Docnames of the notebooks listed in _toc.yml, in order."""
    toc = yaml.safe_load((srcdir / "_toc.yml").read_text())
    found: list[str] = []

    def walk(entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if "file" in entry and (srcdir / f"{entry['file']}.ipynb").exists():
                found.append(entry["file"])
            walk(entry.get("chapters", []) + entry.get("sections", []))

    for part in toc.get("parts", []):
        walk(part["chapters"])
    walk(toc.get("chapters", []))
    return found


def _doc_link(docname: str, title: str) -> addnodes.pending_xref:
    ref = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget=f"/{docname}", refexplicit=True
    )
    ref += nodes.inline(text=title)
    return ref


def _table(headers: list[str], rows: list[list[nodes.Node | str]]) -> nodes.table:
    table = nodes.table(classes=["memo-status"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in headers)
    head = nodes.thead()
    body = nodes.tbody()
    group += head
    group += body
    for target, cells in ((head, headers), *((body, r) for r in rows)):
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
        srcdir = Path(self.env.srcdir)
        rows: list[list[nodes.Node | str]] = []
        for docname in _toc_chapters(srcdir):
            path = srcdir / f"{docname}.ipynb"
            self.env.note_dependency(str(path))
            nb = json.loads(path.read_text(encoding="utf-8"))
            title = next(
                "".join(c["source"]).splitlines()[0].lstrip("# ").replace("`", "")
                for c in nb["cells"]
                if c["cell_type"] == "markdown"
            )
            record = nb.get("metadata", {}).get("pytorch_memo")
            if record is None:
                rows.append([_doc_link(docname, title), "never", "", "", "", "", ""])
                continue
            gpu = record.get("gpu_run")
            if record.get("gpu_cells", 0) == 0:
                gpu_text = "no GPU cells"
            elif gpu is None:
                gpu_text = "not run yet"
            else:
                gpu_text = f"{gpu['executed']} on {gpu['device']} (torch {gpu['torch']})"
            rows.append(
                [
                    _doc_link(docname, title),
                    record["executed"],
                    f"{record['seconds']:.1f} s",
                    record["torch"],
                    record["device"],
                    str(record.get("gpu_cells", 0)),
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


class ApiDirective(SphinxDirective):
    """One section per public module of pytorch_memo, documented by autodoc.

    Generated from the package itself, so a new module cannot be left out.
    """

    def run(self) -> list[nodes.Node]:
        import pytorch_memo

        lines: list[str] = []
        for module in pkgutil.iter_modules(pytorch_memo.__path__):
            if module.name.startswith("_"):
                continue
            name = f"pytorch_memo.{module.name}"
            # The page is MyST markdown; autodoc writes reStructuredText, hence eval-rst.
            rst = ["```{eval-rst}", f".. automodule:: {name}", "   :members:", "```"]
            lines += [f"## `{name}`", "", *rst, ""]
        container = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, source="memo-api"), container)
        return list(container.children)


def _imported_helpers(notebook: Path) -> list[str]:
    """``pytorch_memo.module.name`` for every name a notebook imports from the package."""
    names: list[str] = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics; they import nothing from the package
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytorch_memo."):
                names += [f"{node.module}.{alias.name}" for alias in node.names]
    return list(dict.fromkeys(names))


def _add_helper_links(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    notebook = Path(app.srcdir) / f"{docname}.ipynb"
    if not docname.startswith("book/") or not notebook.exists():
        return
    helpers = _imported_helpers(notebook)
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


def _add_static(app: Sphinx) -> None:
    app.config.html_static_path.append(str(STATIC))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("memo-status", StatusDirective)
    app.add_directive("memo-api", ApiDirective)
    app.connect("builder-inited", _add_static)
    app.add_css_file("memo.css")
    app.connect("doctree-read", _add_helper_links)
    app.connect("html-page-context", _dedupe_scripts, priority=1000)  # after the others
    return {"parallel_read_safe": True, "parallel_write_safe": True}

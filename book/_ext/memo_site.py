"""Sphinx additions for the pytorch-memo site (loaded through _config.yml)."""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


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


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", _dedupe_scripts, priority=1000)  # after the others
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""CONTRIBUTING.md stands on its own: every file it names is in the repository."""

from __future__ import annotations

import re

import memobook

ROOT = memobook.ROOT


# Files CONTRIBUTING.md names as examples of what a command would write.
EXAMPLE_FILES = {
    "book/quantization.ipynb",
    "pytorch_memo/quantization.py",
    "tests/test_quantization.py",
}


def test_contributing_names_only_files_in_the_repository() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"`([\w./-]+(?:/|\.(?:py|md|yml|toml|txt|ipynb|json|cfg)))`", text))
    assert "memobook/claims.py" in named  # the pattern finds what it should
    # What a build writes (`_build/html/pagefind/`) is not in a fresh clone.
    built = {n for n in named if n.startswith("_build/")}
    missing = sorted(n for n in named - EXAMPLE_FILES - built if not (ROOT / n).exists())
    assert not missing, f"CONTRIBUTING.md names files the repository lacks: {missing}"
    for example in EXAMPLE_FILES:
        assert example in text
        assert not (ROOT / example).exists()

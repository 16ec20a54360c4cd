"""Shared pytest configuration of the unit tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Timing deadlines flake on a loaded 2-core machine; CI also fixes the examples drawn.
settings.register_profile("memo", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("memo")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(  # see the golden files block below
        "--update-golden",
        action="store_true",
        help="rewrite the expected renderings in tests/golden/ and list the files rewritten",
    )


# -- golden files ------------------------------------------------------------------------
# `pytest tests/test_table.py --update-golden` rewrites the expected renderings in
# tests/golden/ from the current code; the run then lists every file it rewrote.
UPDATE_GOLDEN = "--update-golden"
_golden_rewritten = pytest.StashKey[list[str]]()


def golden_rewritten(config: pytest.Config) -> list[str]:
    """The list the golden test appends the files it rewrote to."""
    return config.stash.setdefault(_golden_rewritten, [])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    rewritten = golden_rewritten(config)
    if rewritten:
        terminalreporter.section(f"{UPDATE_GOLDEN}: {len(rewritten)} golden file(s) rewritten")
        for path in rewritten:
            terminalreporter.line(path)


# -- long files first ----------------------------------------------------------------------
# `nox` runs the tests in parallel, a file per worker at a time, beside the other checks.
# A long file (processes to start, timeouts to wait for) collected last would run alone
# at the end; a file marked `pytestmark = pytest.mark.early` is handed out first instead.
EARLY = "early"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker(EARLY) is None)  # stable: else as found

"""Shared pytest configuration of the unit tests."""

from __future__ import annotations

import os

from hypothesis import settings

# Timing deadlines flake on a loaded 2-core machine; CI also fixes the examples drawn.
settings.register_profile("memo", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("memo")

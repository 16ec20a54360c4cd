"""The index of concepts (memobook.concepts): every term links to a section of its chapter
that exists and uses the term."""

from __future__ import annotations

import pytest

import memobook
from memobook.concepts import CONCEPTS, Concept, by_initial, section_anchor, sections


@pytest.mark.parametrize("concept", CONCEPTS, ids=lambda c: c.term)
def test_each_concept_links_a_section_that_uses_it(concept: Concept) -> None:
    chapter = memobook.chapter(concept.chapter)
    found = {s.anchor: s for s in sections(chapter.load())}
    assert concept.anchor in found, (
        f"{concept.term!r}: {chapter.path.name} has no section {concept.anchor!r}; "
        f"its sections: {sorted(found)}"
    )
    section = found[concept.anchor]
    word = (concept.used_as or concept.term).replace("`", "").lower()
    text = (section.heading + "\n" + section.text).replace("`", "").lower()
    assert word in text, f"{concept.term!r}: the section {section.heading!r} never says {word!r}"


def test_terms_are_listed_once_and_grouped_a_to_z() -> None:
    keys = [c.key for c in CONCEPTS]
    assert len(keys) == len(set(keys)), "a term is listed twice"
    assert len(CONCEPTS) >= 40
    grouped = by_initial()
    assert list(grouped) == sorted(grouped)
    assert sum(len(g) for g in grouped.values()) == len(CONCEPTS)
    for initial, concepts in grouped.items():
        assert [c.key for c in concepts] == sorted(c.key for c in concepts)
        assert all(c.key.startswith(initial.lower()) for c in concepts)


def test_the_anchor_is_the_sites_id_of_the_heading() -> None:
    assert section_anchor("`stride()` and `storage_offset()`") == "stride-and-storage-offset"
    assert section_anchor("`view(dtype)`: the same bytes") == "view-dtype-the-same-bytes"
    assert section_anchor("[Errors](errors.md) and **more**") == "errors-and-more"


def test_sections_end_at_the_next_heading_of_their_level() -> None:
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "# Title\n\nlead"},
            {"cell_type": "markdown", "source": "## One\n\nfirst\n\n### Sub\n\ninner"},
            {"cell_type": "code", "source": "x = 1"},
            {"cell_type": "markdown", "source": "## Two\n\nsecond"},
        ]
    }
    found = {s.anchor: s for s in sections(nb)}
    assert set(found) == {"one", "sub", "two"}
    assert "inner" in found["one"].text
    assert "second" not in found["one"].text
    assert found["sub"].text.strip() == "inner"

"""The README and docs/ (pure): the configuration page is the key table's, and neither the README nor the manual
carries history (commit hashes, benchmark run letters, issue numbers: git holds those)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mirrorflow.model import key_docs, keys

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
HISTORY = {
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"),
    "a benchmark run's letter": re.compile(r"\b[Rr]uns? [A-Z](?:[-\u2013, ][A-Z])*\b(?![\w.-])"),
    "an issue number": re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w/&])#\d+\b"),
}


def test_the_configuration_page_is_made_from_the_key_table() -> None:
    assert (REPO / "docs" / "configuration.md").read_text() == key_docs.markdown(), "run `make docs`"


def test_every_key_mirrorflow_does_not_act_on_says_so_and_every_other_key_says_what_it_does() -> None:
    for k in keys.FLOW_KEYS + keys.GLOBAL_KEYS:
        assert (k.doc == "Accepted, not used.") == (k.name in keys.NOT_USED), k.name
        assert k.doc.endswith("."), k.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_carries_no_history(page: Path) -> None:
    found = [f"{page.name}:{n}: {what}: {m.group(0)}" for n, line in enumerate(page.read_text().splitlines(), 1)
             for what, pattern in HISTORY.items() if (m := pattern.search(line))]
    assert not found, "\n".join(found[:20])


def test_the_readme_is_a_newcomer_s_page() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 300

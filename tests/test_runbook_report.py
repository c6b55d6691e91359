"""A runbook's report from given step results: a dry run cannot be read as a failover that happened."""

from __future__ import annotations

import time
from typing import Any

from mirrorflow.jobs import runbooks
from mirrorflow.jobs.runbooks import FAILOVER, Runbook


def _pre(dry_run: bool) -> dict[str, Any]:
    rb = Runbook(FAILOVER, "primary", "backup", dry_run=dry_run)
    return {"runbook": rb.as_dict(), "started": time.time() - 7.1, "stream_line": "flow primary->backup: running",
            "notices": [], "checkpoint_age_s": 3,
            "rpo": {"records": 4, "seconds": 0.8, "measured": True, "behind": ["orders-0: 4"]}}


def _moved() -> dict[str, Any]:
    parts = [{"source_topic": "orders", "target_topic": "primary.orders", "partition": 0, "source_offset": 122,
              "target_offset": 183, "exact": True, "note": ""},
             {"source_topic": "orders", "target_topic": "primary.orders", "partition": 1, "source_offset": 90,
              "target_offset": 88, "exact": False,
              "note": "the group is at 90, past what the flow has read (88); resuming at the newest mirrored record"}]
    return {"groups": [{"group": "orders-app", "partitions": parts, "outcome": "would commit 2 partition(s)"}]}


def test_a_dry_run_says_so_first_calls_its_time_its_own_and_reads_a_planned_rpo_as_what_the_drain_leaves() -> None:
    text = runbooks.report(_pre(True), {"drained": False}, _moved(), {"flows": ["would stop primary->backup"]})[
        "markdown"]
    lines = text.splitlines()
    assert lines[2] == "**DRY RUN: nothing was changed.** Each step below says what a real run would do."
    assert "the dry run took 7.1 s" in text and "this is not the runbook's RTO" in text
    assert "(the runbook's RTO" not in text
    assert "- RPO a real run would leave: 0 records, once the drain a real run waits for is over (not mirrored " \
           "now: 4 records, 0.8 s not mirrored)" in text


def test_a_real_run_reports_its_rto_and_the_table_explains_markers_and_a_group_ahead_of_the_flow() -> None:
    text = runbooks.report(_pre(False), {"drained": True, "waited_s": 1.2}, _moved(), {"flows": []})["markdown"]
    assert "DRY RUN" not in text and "(the runbook's RTO)" in text and "- RPO: 0 records (drained" in text
    assert "| exactly where it left off |" in text and "| not exactly: the group is at 90, past what" in text
    assert "each transaction the stream commits leaves a commit marker" in text  # 183 on backup for 122
    assert "It resumes at the newest mirrored record" in text and "A real planned run drains the flow first" in text

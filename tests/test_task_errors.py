"""What a task's log says first when a scheduled task fails for an expected reason."""

from __future__ import annotations

import logging

import pytest
from mirrorflow.entry import scheduled
from mirrorflow.errors import ConfigError


def test_an_expected_failure_is_logged_as_its_one_line_cause_before_the_exception_leaves_the_task(
        caplog: pytest.LogCaptureFixture) -> None:
    @scheduled.said_first
    def preflight() -> None:
        raise ConfigError("failover a->b: groups regex 'x-.*' matches none of a's groups (none)")

    with caplog.at_level(logging.ERROR, logger="mirrorflow"), pytest.raises(ConfigError):
        preflight()
    assert [r.getMessage() for r in caplog.records] == [
        "failover a->b: groups regex 'x-.*' matches none of a's groups (none)"]
    assert caplog.records[0].exc_info is None  # one line: the traceback is Airflow's, below it


def test_an_unexpected_failure_is_left_to_airflow_whole(caplog: pytest.LogCaptureFixture) -> None:
    @scheduled.said_first
    def broken() -> None:
        raise KeyError("a bug")

    with caplog.at_level(logging.DEBUG, logger="mirrorflow"), pytest.raises(KeyError):
        broken()
    assert caplog.records == []  # a bug is not dressed up as an expected failure: Airflow's traceback says it all


def test_a_runbook_dry_run_gets_the_dry_run_note_and_a_real_run_or_a_persons_note_does_not() -> None:
    assert scheduled.runbook_run_note("mirrorflow_failover", {"dry_run": True}, None) == scheduled.DRY_RUN_NOTE
    assert scheduled.runbook_run_note("mirrorflow_failback", {}, None) == scheduled.DRY_RUN_NOTE  # the form's default
    assert scheduled.runbook_run_note("mirrorflow_failover", {"dry_run": False}, None) is None
    assert scheduled.runbook_run_note("mirrorflow_failover", {"dry_run": True}, "drill at 3 pm") is None
    assert scheduled.runbook_run_note("mirrorflow_flow__a_to_b", {"dry_run": True}, None) is None

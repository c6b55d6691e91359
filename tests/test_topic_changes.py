"""The stream's topic housekeeping (jobs/topic_changes) with its source out of reach (a cut link, no broker there)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from mirrorflow.jobs.driver_writes import DriverWrites
from mirrorflow.jobs.topic_changes import TopicChanges
from mirrorflow.kafka import admin_sync
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.rules.flow_state import FlowState
from mirrorflow.status import metrics

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there


def _changes(tmp_path: Path) -> TopicChanges:
    cfg = tmp_path / "mm2.properties"
    cfg.write_text(f"clusters = away, home\naway.bootstrap.servers = {NOWHERE}\nhome.bootstrap.servers = {NOWHERE}\n"
                   "away->home.enabled = true\naway->home.topics = orders\n")
    link = FlowLink.of(config.load(cfg), "away->home")
    state = FlowState(anchor_limit=100, anchor_spacing=10)
    state.upstream_next[("orders", 0)] = 5
    flow_metrics = metrics.FlowMetrics("away->home", "away", "home")
    return TopicChanges(link, state, flow_metrics, DriverWrites(link, lambda: None), lambda _: None, lambda _: None)


def test_a_prune_while_the_source_is_out_of_reach_waits_for_its_next_turn_and_keeps_the_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(admin_sync, "TIMEOUT_S", 1.0)
    changes = _changes(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert changes.prune() == []
    assert "not pruned" in caplog.text and "tried again in 60 s" in caplog.text
    assert changes.state.upstream_next == {("orders", 0): 5}
    caplog.clear()
    assert changes.prune() == []  # not due again before the interval: no second look at the source
    assert caplog.text == ""

"""The flows view's policy and pages, from given figures: verdicts, the bounded history and its rates, the tables."""

from __future__ import annotations

import itertools
import json

from mirrorflow.entry import flows_view
from mirrorflow.entry.flows_view import FlowHistory, Sample
from mirrorflow.jobs import lifecycle
from mirrorflow.jobs.lifecycle import FlowHealth, PartitionLag, Requested


def _health(requested: str = "running", holders: tuple[str, ...] = ("host-1",), lag_s: float = 2.0,
            beat: float | None = 1.0, lags: bool = True) -> FlowHealth:
    now = 1_000_000.0
    parts = (PartitionLag("t", 0, 110, 100, int((now - lag_s) * 1000)), PartitionLag("t", 1, 50, 50, lost=7))
    return FlowHealth("a->b", Requested("a->b", requested, "planned failover", 1_700_000_000_000), holders, beat,
                      parts if lags else None, "" if lags else "cluster a: unreachable", measured_at=now)


def test_a_flow_is_healthy_behind_stopped_or_in_trouble_and_says_why() -> None:
    assert _health().verdict() == (lifecycle.HEALTHY, "10 records not mirrored, the oldest 2.0 s old")
    state, why = _health(lag_s=75).verdict()
    assert state == lifecycle.BEHIND and "the oldest 75 s old (behind after 60 s)" in why
    assert _health(beat=300).verdict()[0] == lifecycle.BEHIND
    assert _health("stopped", ()).verdict() == (lifecycle.STOPPED, "requested stopped (planned failover)")
    assert _health("running", ()).verdict() == (
        lifecycle.TROUBLE, "requested running (planned failover), but no stream holds the flow's lease")
    assert _health("stopped").verdict()[1].endswith("still running on host-1")
    assert _health(lags=False).verdict() == (lifecycle.TROUBLE, "lag unknown: cluster a: unreachable")


def test_the_history_keeps_an_hour_one_sample_per_spell_whatever_the_viewers() -> None:
    history = FlowHistory()
    for i in range(3 * flows_view.HISTORY_SAMPLES):  # three viewers, each refreshing every 10 s, for an hour
        history.add("a->b", Sample(i * flows_view.SAMPLE_EVERY_S / 3, 5, i))
    kept = history.samples("a->b")
    assert len(kept) <= flows_view.HISTORY_SAMPLES
    assert kept[-1].at - kept[0].at <= flows_view.HISTORY_S
    assert all(b.at - a.at >= flows_view.SAMPLE_EVERY_S - 1e-9 for a, b in itertools.pairwise(kept))


def test_a_rate_is_the_positions_growth_and_unknown_where_a_position_went_back() -> None:
    samples = [Sample(0, 0, 1000), Sample(10, 0, 1500), Sample(20, 0, 200), Sample(30, 0, None), Sample(40, 0, 300)]
    assert flows_view.rates(samples) == [(10, 50.0), (20, None), (30, None), (40, None)]


def test_the_flows_table_shows_each_state_with_why_and_none_of_a_stopped_flows_figures() -> None:
    running = {"flow": "a->b", "state": "behind", "why": "oldest 75 s old", "requested": "running", "reason": "",
               "requested_at_ms": 1_700_000_000_000, "running": True, "holders": ["host-1"], "lag_records": 1200,
               "lag_seconds": 75.0, "heartbeat_age_s": 1.0, "checkpoint_age_s": 4.0, "lost": 7,
               "samples": [(0.0, 10), (10.0, 20)], "rates": [(10.0, 5.0)], "records_per_s": 5.0, "mb_per_s": None,
               "rate_from": "the offset syncs"}
    stopped = {**running, "flow": "b->a", "state": "stopped", "why": "requested stopped (failover)",
               "requested": "stopped", "running": False, "holders": [], "checkpoint_age_s": None,
               "records_per_s": None}
    broken = {"flow": "c->a", "state": "trouble", "why": "cluster c: unreachable", "error": "cluster c: unreachable"}
    table = flows_view.flows_table([running, stopped, broken])
    assert "data-state='behind'" in table and "oldest 75 s old" in table and "1,200 records" in table
    assert "7 lost" in table and "5 records/s" in table and "from the offset syncs" in table and "<svg" in table
    assert "href='flows/a-%3Eb'" in table and "since 2023-11-14 22:13 UTC" in table
    [stopped_row] = [r for r in table.split("<tr") if "data-flow='b-&gt;a'" in r]
    assert stopped_row.count("not running") == 4 and "4 s" not in stopped_row  # no stale heartbeat or checkpoint
    assert "data-state='trouble'" in table and "cluster c: unreachable" in table
    page = flows_view.flows_html([running], "mirror.properties")
    assert "setInterval(refresh, every)" in page and "?part=table" in page


def test_the_partitions_table_puts_the_furthest_behind_first_and_names_lost_stuck_and_held() -> None:
    health = _health()
    rows = [{"topic": "t", "partition": 1, "source_end": 50, "mirrored": 50, "lag_records": 0, "lag_seconds": None,
             "lost": 7, "stuck": None, "held": None},
            {"topic": "t", "partition": 0, "source_end": 110, "mirrored": 100, "lag_records": 10, "lag_seconds": 2.0,
             "lost": 0, "stuck": "MESSAGE_TOO_LARGE on b", "held": "remote topic deleted on b",
             "inexact": ["group g: the group is at 120, past what the flow has read (100)"]}]
    table = flows_view.partitions_table(health, rows, driver_here=True)
    assert table.index("data-partition='t-0'") < table.index("data-partition='t-1'")
    assert "STUCK (paused)</span>: MESSAGE_TOO_LARGE on b" in table and "HELD</span>: remote topic deleted" in table
    assert "7 records deleted on the source before the flow read them" in table
    assert "checkpoint not exact</span>, group g: the group is at 120, past what the flow has read" in table
    assert "not on this host" in flows_view.partitions_table(health, rows, driver_here=False)


def test_viewers_share_one_measurement_per_spell_and_a_flow_keeps_one_offset_syncs_reader() -> None:
    from mirrorflow.model import config

    cfg = config.from_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:2\n"
                           "a->b.enabled = true\n")
    readers: list[object] = []

    def measure(link, syncs):  # type: ignore[no-untyped-def]
        readers.append(syncs)
        return _health()

    measurements = flows_view.Measurements(measure)
    first = measurements.health(cfg, cfg.flow("a->b"))
    assert measurements.health(cfg, cfg.flow("a->b")) is first and len(readers) == 1  # M1: one answer for all
    measurements._flows["a->b"].at -= flows_view.MEASURE_EVERY_S  # the spell is over
    measurements.health(cfg, cfg.flow("a->b"))
    assert len(readers) == 2 and readers[0] is readers[1]  # M2: the same reader, refreshed, not a new read
    gone = config.from_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:2\n"
                            "b->a.enabled = true\n")
    measurements.health(gone, gone.flow("b->a"))
    assert set(measurements._flows) == {"b->a"}  # a flow no longer enabled loses its reader


def test_an_inexact_checkpoint_row_keeps_a_group_with_a_slash_and_a_topic_with_dashes() -> None:
    """The checkpoint round writes typed rows the view reads back: no text to split, whatever the names hold."""
    from mirrorflow.status.metrics import InexactCheckpoint

    row = InexactCheckpoint("team/orders-app", "orders-eu-1", 3, "past what the flow has read: 7")
    assert InexactCheckpoint.of(json.loads(json.dumps(row.row()))) == row
    assert InexactCheckpoint.of("team/orders-app/orders-eu-1-3: a row of an older version") is None

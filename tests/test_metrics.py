"""Stream metrics: distributions, MM2 names, Prometheus text (pure)."""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.request
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules import source_reads
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.status import metrics
from mirrorflow.status.metrics import BOUNDS_MS, Distribution

values = st.lists(st.integers(0, 400_000), min_size=1, max_size=300)


def _report(**fields: Any) -> PartitionReport:
    """A task's report of partition t-0 (rules/partition_report), its records written a millisecond old."""
    base = PartitionReport("t", 0, 0, 0, 0, 0, 0, None, 0, None, None, None, None, False, 0, None, None, 0,
                           (0,) * (len(BOUNDS_MS) + 1), 1, 1, fields.get("records", 0), 1, None, False)
    return dataclasses.replace(base, **fields)


@given(values, values)
def test_a_merged_distribution_sums_its_parts(a: list[int], b: list[int]) -> None:
    left, right, merged = Distribution(), Distribution(), Distribution()
    for v in a:
        left.add(v)
    for v in b:
        right.add(v)
    for d in (left, right):
        merged.merge(d.count, d.total, d.minimum, d.maximum, d.buckets)
    assert (merged.count, merged.total) == (len(a) + len(b), sum(a) + sum(b))
    assert (merged.minimum, merged.maximum) == (min(a + b), max(a + b))


@given(values)
def test_p99_is_an_upper_bound_within_one_bucket(vs: list[int]) -> None:
    d = Distribution()
    for v in vs:
        d.add(v)
    true_p99 = sorted(vs)[max(math.ceil(0.99 * len(vs)) - 1, 0)]
    estimate = d.quantile(0.99)
    assert estimate >= true_p99
    above = [b for b in BOUNDS_MS if b >= true_p99]
    assert estimate <= (above[0] if above else max(vs))


def test_snapshot_and_prometheus_use_mm2_names_and_lag() -> None:
    fm = metrics.FlowMetrics("A->B", "A", "B")
    fm.observe([_report(records=3, bytes=30, refused=1, upstream_next=10, latency_sum=30, latency_min=5,
                        latency_max=15, latency_buckets=(0, 0, 0, 1, 1, 1) + (0,) * (len(BOUNDS_MS) - 5))])
    fm.observe_source_ends({("t", 0): 25})
    snap = fm.snapshot()
    part = snap["partitions"][0]
    assert part["record-count"] == 3 and part["replication-lag-records"] == 15
    assert part["replication-latency-ms-max"] == 15 and part["refused-count"] == 1
    text = metrics.prometheus_text([snap])
    assert 'mirrorflow_record_count_total{flow="A->B",source="A",target="B",topic="t",partition="0"} 3' in text
    assert "mirrorflow_replication_lag_records{" in text and "mirrorflow_replication_latency_ms_p99{" in text
    assert "lag 15 records" in metrics.progress_line(snap)


def test_the_metrics_endpoint_listens_on_the_address_it_is_given_and_no_other() -> None:
    server = metrics.serve(0, [metrics.FlowMetrics("A->B", "A", "B")], host="127.0.0.2")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics", timeout=5) as answer:
            assert 'mirrorflow_up{flow="A->B"}' in answer.read().decode()
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        server.shutdown()
        server.server_close()


def test_the_progress_line_names_three_stuck_partitions_and_counts_the_rest() -> None:
    fm = metrics.FlowMetrics("A->B", "A", "B")
    for p in range(5):
        fm.observe_stuck(("t", p), "no leader", 0)
    line = metrics.progress_line(fm.snapshot())
    assert line.count("STUCK (paused): no leader") == 3 and "and 2 more partition(s) STUCK (paused)" in line
    assert len(fm.snapshot()["stuck-partitions"]) == 5


def test_batch_timings_are_means_over_the_last_batches_only() -> None:
    m = metrics.FlowMetrics("a->b", "a", "b")
    for _ in range(metrics.BATCH_TIMES):
        m.observe_batch_time(10_000.0, 9_000.0)  # pushed out by the batches below
    for _ in range(metrics.BATCH_TIMES):
        m.observe_batch_time(300.0, 250.0)
        m.observe_trigger_overhead(120.0)
    s = m.snapshot()
    assert (s["batch-ms-avg"], s["batch-write-ms-avg"], s["batch-driver-ms-avg"]) == (300.0, 250.0, 50.0)
    assert s["trigger-overhead-ms-avg"] == 120.0
    assert len(m.batch_times) == metrics.BATCH_TIMES


@given(values, values)
def test_adding_many_values_at_once_equals_adding_them_one_by_one(a: list[int], b: list[int]) -> None:
    one_by_one, at_once = Distribution(), Distribution()
    for v in [*a, *(-v for v in b)]:
        one_by_one.add(v)
    at_once.add_many([*a, *(-v for v in b)])
    assert (at_once.count, at_once.total, at_once.minimum, at_once.maximum, at_once.buckets) == (
        one_by_one.count, one_by_one.total, one_by_one.minimum, one_by_one.maximum, one_by_one.buckets)


def test_a_progress_line_is_due_when_the_stream_changes_state_not_when_records_keep_flowing() -> None:
    fm = metrics.FlowMetrics("a->b", "a", "b")
    fm.set_state("running")
    quiet = metrics.progress_shape(fm.snapshot())
    fm.observe([_report(records=10, bytes=100, upstream_next=10, latency_sum=50, latency_min=5, latency_max=5)])
    assert metrics.progress_shape(fm.snapshot()) == quiet  # more records, same state: no line of its own
    fm.set_state("stopped")
    assert metrics.progress_shape(fm.snapshot()) != quiet


def test_mirrored_through_is_unknown_until_the_positions_reach_a_read_and_then_that_read_s_time() -> None:
    fm = metrics.FlowMetrics("A->B", "A", "B")
    tp = ("t", 0)
    fm.observe_read(source_reads.EndsRead(50.0, {tp: 7}))
    assert fm.snapshot()["mirrored-through"] is None and fm.snapshot()["partitions"][0]["source-end-offset"] == 7
    fm.observe_positions({tp: 7})
    assert fm.snapshot()["mirrored-through"] == 50.0


def test_a_batch_is_a_stall_after_its_linger_and_five_times_the_recent_mean_past_it_never_before_five_seconds(
) -> None:
    from mirrorflow.jobs.stream_progress import stall_after_s

    assert stall_after_s(0.0) == stall_after_s(400.0) == 5.0
    assert stall_after_s(3000.0) == 15.0
    assert stall_after_s(1700.0, 1500) == stall_after_s(900.0, 1500) == 6.5  # lingering is not stalling
    assert stall_after_s(4500.0, 1500) == 16.5
    flow = metrics.FlowMetrics("a->b", "a", "b")
    for ms in (1000.0, 3000.0):
        flow.observe_batch_time(ms, ms / 2)
    assert flow.batch_ms_mean() == 2000.0


def test_the_progress_line_shows_the_latency_of_the_last_minutes_not_of_the_drivers_life() -> None:
    import time

    fm = metrics.FlowMetrics("A->B", "A", "B")
    assert "no record in the last 5 min" in metrics.progress_line(fm.snapshot())
    slow = Distribution()
    slow.add(13_000)
    fm.recent.append((int(time.time() // 60) - metrics.RECENT_MINUTES, slow))  # a minute that has left the window
    fm.observe([_report(records=2, bytes=20, upstream_next=2, latency_sum=80, latency_min=40, latency_max=40,
                        latency_buckets=(0,) * 5 + (2,) + (0,) * (len(BOUNDS_MS) - 5))])
    snap = fm.snapshot()
    assert snap["recent-latency-ms-p99"] == 40 and "p99 40 ms over the last 5 min" in metrics.progress_line(snap)
    assert "lag " not in metrics.progress_line(snap, with_lag=False)


def test_a_partition_that_holds_still_keeps_its_status_entry_and_the_status_text_equals_the_snapshot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_000_000.0]
    monkeypatch.setattr(metrics.time, "time", lambda: clock[0])
    fm = metrics.FlowMetrics("A->B", "A", "B")
    moving, still = dataclasses.replace(_report(records=5, upstream_next=5), partition=1), _report(upstream_next=0)
    fm.observe([dataclasses.replace(moving, records=0, upstream_next=0), still])
    clock[0] += 1
    fm.observe([moving, still])
    fm.observe_source_ends({("t", 0): 0, ("t", 1): 5})
    first = fm.snapshot()
    assert first["partitions"][1]["record-rate"] > 0
    clock[0] += metrics.RATE_WINDOW_S + 1  # no batch within the window: no rate, every figure still
    second, texts = fm.snapshot(), fm.entry_texts()
    third = fm.snapshot()
    assert [p["record-rate"] for p in second["partitions"]] == [0, 0] and second["record-rate"] == 0
    assert all(a is b for a, b in zip(second["partitions"], third["partitions"], strict=True))
    assert json.loads(metrics.status_text(second, texts)) == json.loads(json.dumps(second))
    fm.observe([dataclasses.replace(moving, records=2, upstream_next=7)])  # it moves: a new entry, new figures
    fourth = fm.snapshot()
    assert fourth["partitions"][1] is not third["partitions"][1] and fourth["partitions"][1]["record-count"] == 7
    assert fourth["partitions"][0] is third["partitions"][0]
    assert json.loads(metrics.status_text(fourth, fm.entry_texts())) == json.loads(json.dumps(fourth))
    fm.observe_source_ends({("t", 0): 3})  # behind the source: its lag grows with the clock, made afresh each time
    assert fm.snapshot()["partitions"][0] is not fm.snapshot()["partitions"][0]

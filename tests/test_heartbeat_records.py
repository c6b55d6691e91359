"""Heartbeat records in MM2's wire format, and MM2's name-based reading of heartbeats topics."""

from __future__ import annotations

import pytest
from mirrorflow.jobs.topology import hops_in_name, sources_in_name
from mirrorflow.kafka import heartbeats
from mirrorflow.kafka.heartbeats import Heartbeat
from mirrorflow.rules.policy import DefaultReplicationPolicy

# What MM2 4.3's own Heartbeat class serializes for ("alpha", "beta", 1234).
MM2_KEY = bytes.fromhex("0005616c706861000462657461")
MM2_VALUE = bytes.fromhex("000000000000000004d2")


def test_a_heartbeat_is_byte_for_byte_what_mm2_writes() -> None:
    beat = Heartbeat("alpha", "beta", 1234)
    assert (beat.key(), beat.value()) == (MM2_KEY, MM2_VALUE)
    assert Heartbeat.decode(MM2_KEY, MM2_VALUE) == beat


@pytest.mark.parametrize(("topic", "sources"), [
    ("heartbeats", []), ("b.heartbeats", ["b"]), ("c.b.a.heartbeats", ["c", "b", "a"]),
    ("a.b.a.heartbeats", ["a", "b"]),
])
def test_a_heartbeats_topic_names_the_clusters_it_passed_through(topic: str, sources: list[str]) -> None:
    assert sources_in_name(DefaultReplicationPolicy(), topic) == sources


def test_hops_count_names_down_to_the_alias() -> None:
    policy = DefaultReplicationPolicy()
    assert hops_in_name(policy, "c.b.heartbeats", "c") == 1
    assert hops_in_name(policy, "c.b.heartbeats", "b") == 2
    assert hops_in_name(policy, "c.b.heartbeats", "a") == -1


def test_a_heartbeat_from_a_clock_that_runs_ahead_is_zero_seconds_old_never_negative() -> None:
    assert heartbeats.age_s(1_000_600, now_s=1_000.0) == 0.0
    assert heartbeats.age_s(998_500, now_s=1_000.0) == 1.5

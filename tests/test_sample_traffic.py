"""The demo's sample traffic: what its group subscribes to, and which process counts as it."""

from __future__ import annotations

import os
import re

from mirrorflow.dev import sample_traffic


def test_the_group_reads_the_topic_and_its_remote_copies_only() -> None:
    pattern = re.compile(sample_traffic.remote_copies_pattern("orders"))
    assert all(pattern.match(t) for t in ("orders", "primary.orders", "backup.primary.orders"))
    assert not any(pattern.match(t) for t in ("orders2", "xorders", "orders.retry", "primary.orders.retry"))


def test_a_pid_reused_by_another_process_is_not_the_traffic_running() -> None:
    mine = sample_traffic.Traffic("primary", "orders", "orders-app", 5.0, os.getpid())
    assert not mine.running  # pytest holds this pid, not mirrorflow.sample_traffic: `stop` must not signal it
    assert not sample_traffic.Traffic("primary", "orders", "orders-app", 5.0, None).running

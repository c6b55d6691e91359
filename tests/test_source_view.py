"""The stream's last view of its source, kept on the target (kafka/source_view): what a runbook counts from when
the source is gone."""

from __future__ import annotations

import time

import pytest
from mirrorflow.kafka import source_view
from mirrorflow.kafka.link import FlowLink
from mirrorflow.kafka.source_view import SourceView
from mirrorflow.model import config


def test_a_view_counts_what_lies_between_the_positions_and_its_ends_and_nothing_above_a_position() -> None:
    view = SourceView(1_700_000_000.5, {("t", 0): 100, ("t", 1): 50, ("u", 0): 7}, 1_699_999_990.0)
    assert view.not_mirrored({("t", 0): 90, ("t", 1): 60}) == 10 + 0 + 7  # u-0 never mirrored: all of it
    assert SourceView.parse(view.value()) == view
    assert SourceView.parse(SourceView(1.0, {}, None).value()) == SourceView(1.0, {}, None)


@pytest.mark.kafka
def test_the_target_keeps_the_newest_view_of_each_flow(local_clusters: config.MirrorConfig) -> None:
    link = FlowLink.of(local_clusters, "alpha->gamma")
    assert source_view.newest(link) is None  # never written
    writer = source_view.ViewWriter(link)
    try:
        writer.write(SourceView(100.0, {("a", 0): 5}))
        writer.write(SourceView(110.0, {("a", 0): 9, ("a", 1): 2}, 104.0))
    finally:
        writer.close()
    assert source_view.newest(link) == SourceView(110.0, {("a", 0): 9, ("a", 1): 2}, 104.0)


def test_offering_a_view_never_waits_on_a_target_that_does_not_answer() -> None:
    # Nothing listens on the target's port: creating the view's topic waits out the admin timeout, on its own thread.
    cfg = config.from_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:9\nb.bootstrap.servers = 127.0.0.1:9\n"
                           "a->b.enabled = true\n")
    writer = source_view.ViewWriter(FlowLink.of(cfg, "a->b"))
    began = time.monotonic()
    assert writer.offer(SourceView(100.0, {("a", 0): 5}))
    assert not writer.offer(SourceView(110.0, {("a", 0): 9}))  # the first is still being written: dropped
    writer.close(timeout_s=0.5)
    assert time.monotonic() - began < 5

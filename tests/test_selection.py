"""The flow's topic decision and the Java pattern Spark subscribes with (pure)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mirrorflow.model import config, selection
from mirrorflow.rules.filters import java_regex_to_python

CONFIGS = {
    "default": "",
    "filtered": "topics = orders.*, pay(ments)?, .*heartbeats\ntopics.exclude = .*\\\\.tmp, orders-old",
    "identity": "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
    "separator": "replication.policy.separator = _",
}
names = st.one_of(
    st.text("ab.-_xyz", min_size=1, max_size=14),
    st.builds(lambda *p: ".".join(p), st.sampled_from(["A", "B", "C", "x", ""]),
              st.sampled_from(["B", "orders", "x.tmp", "heartbeats"]), st.sampled_from(["", "y", "."])),
    st.sampled_from(["orders", "orders.tmp", "orders-old", "payments", "B.orders", "A.B.orders", "heartbeats",
                     "B.heartbeats", "__consumer_offsets", "mm2-offset-syncs.B.internal", "B.checkpoints.internal",
                     "mirrorflow-offset-syncs.A.internal", "x.internal", "B.", "B..", "a.B.c", "B_x"]),
)


def flow(kind: str) -> config.Flow:
    cfg = config.from_text(f"clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                           f"A->B.enabled = true\n{CONFIGS[kind]}\n")
    return cfg.flow("A->B")


@pytest.mark.parametrize("kind", sorted(CONFIGS))
@settings(max_examples=400, deadline=None)
@given(topic=names)
def test_the_pattern_covers_every_replicated_topic(kind: str, topic: str) -> None:
    f = flow(kind)
    pattern = re.compile(java_regex_to_python(selection.subscription_pattern(f)))
    if selection.replicates(f, topic):
        assert pattern.fullmatch(topic), topic


def test_the_pattern_keeps_out_what_is_cheap_to_keep_out() -> None:
    pattern = re.compile(java_regex_to_python(selection.subscription_pattern(flow("default"))))
    for topic in ["__consumer_offsets", "B.orders", "A.B.orders", "x.internal", "mirrorflow-offset-syncs.A.internal"]:
        assert not pattern.fullmatch(topic), topic
    assert pattern.fullmatch("orders") and pattern.fullmatch("heartbeats") and pattern.fullmatch("C.heartbeats")


def test_offset_syncs_topics_are_never_replicated_whatever_the_filter() -> None:
    f = config.from_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                         "A->B.enabled = true\ntopics.exclude = none\n").flow("A->B")
    assert selection.replicates(f, "orders")
    assert not selection.replicates(f, "mirrorflow-offset-syncs.C.internal")

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    PrefixReplicationPolicy,
    checkpoints_topic,
    is_cycle,
    is_internal_topic,
    offset_syncs_topic,
    original_topic,
    should_replicate,
)

DEFAULT = DefaultReplicationPolicy()
names = st.text(alphabet="abcAB._-01", min_size=1, max_size=12)
separators = st.sampled_from([".", "_", "__", "-"])


@given(alias=names, topic=names, sep=separators)
def test_default_remote_topic_reads_back_its_source_and_upstream(alias: str, topic: str, sep: str) -> None:
    policy = DefaultReplicationPolicy(sep)
    if not alias or set(alias) & set(sep):
        return  # an alias sharing characters with the separator is ambiguous (in MM2 too)
    remote = policy.remote_topic(alias, topic)
    if not topic.endswith(sep) and topic != "":
        assert policy.topic_source(remote) == alias
        assert policy.upstream_topic(remote) == topic


@given(topic=names, sep=separators)
def test_original_topic_is_a_fixed_point(topic: str, sep: str) -> None:
    policy = DefaultReplicationPolicy(sep)
    once = original_topic(policy, topic)
    assert original_topic(policy, once) == once


@given(alias=names, topic=names)
def test_identity_keeps_names_except_heartbeats(alias: str, topic: str) -> None:
    policy = IdentityReplicationPolicy()
    if topic.endswith("heartbeats"):
        assert policy.remote_topic(alias, topic) == f"{alias}.{topic}"
    else:
        assert policy.remote_topic(alias, topic) == topic


@given(hops=st.lists(st.sampled_from(["A", "B", "C", "D"]), min_size=1, max_size=5), topic=st.sampled_from(
    ["orders", "payments"]))
def test_a_topic_is_a_cycle_iff_some_hop_came_from_the_target(hops: list[str], topic: str) -> None:
    name = topic
    for alias in hops:
        name = DEFAULT.remote_topic(alias, name)
    for target in "ABCD":
        assert is_cycle(DEFAULT, name, target) is (target in hops)


def test_two_hop_chain_names() -> None:
    assert DEFAULT.remote_topic("B", DEFAULT.remote_topic("A", "orders")) == "B.A.orders"
    assert original_topic(DEFAULT, "B.A.orders") == "orders"
    assert is_cycle(DEFAULT, "B.A.orders", "A") and not is_cycle(DEFAULT, "B.A.orders", "C")


def test_internal_topic_names_follow_the_separator() -> None:
    assert checkpoints_topic(DEFAULT, "A") == "A.checkpoints.internal"
    assert offset_syncs_topic(DEFAULT, "A") == "mm2-offset-syncs.A.internal"
    under = DefaultReplicationPolicy("__")
    assert checkpoints_topic(under, "A") == "A__checkpoints__internal"
    assert is_internal_topic(under, "A__checkpoints__internal")


@pytest.mark.parametrize(("topic", "internal"), [
    ("__consumer_offsets", True), (".hidden", True), ("mm2-offsets.A.internal", True),
    ("mm2-offset-syncs.A.internal", True), ("A.checkpoints.internal", True),
    ("connect-configs-internal", False),   # MM2 4.x leaves Connect's topics to topics.exclude
    ("mm2-offsets_A_internal", False), ("orders", False),
])
def test_internal_topics(topic: str, internal: bool) -> None:
    assert is_internal_topic(DEFAULT, topic) is internal


def test_heartbeats_are_replicated_even_when_the_filter_does_not_select_them() -> None:
    assert should_replicate(DEFAULT, "heartbeats", "B", selected=False)
    assert should_replicate(DEFAULT, "A.heartbeats", "B", selected=False)
    assert not should_replicate(DEFAULT, "B.heartbeats", "B", selected=True)   # would loop
    assert not should_replicate(DEFAULT, "orders", "B", selected=False)


def test_identity_cannot_see_cycles_in_names() -> None:
    assert not is_cycle(IdentityReplicationPolicy(), "orders", "B")
    assert is_cycle(IdentityReplicationPolicy(source_alias="B"), "orders", "B")


def test_prefix_policy_as_mm1_prefix() -> None:
    p = PrefixReplicationPolicy("dc1_")
    assert p.remote_topic("any", "orders") == "dc1_orders"
    assert p.upstream_topic("dc1_orders") == "orders" and p.topic_source("dc1_orders") is None
    assert p.remote_topic("A", "heartbeats") == "A.heartbeats"

"""Replication policies: how a remote topic is named and how a name is read back.

Behaviour matches MM2's `DefaultReplicationPolicy` and `IdentityReplicationPolicy` (checked against
MM2's own classes in tests/test_policy_against_mm2.py). Invariants, each tested:
  A. default: topic_source(remote_topic(a, t)) == a and upstream_topic(remote_topic(a, t)) == t
     for every non-empty alias sharing no character with the separator and every non-empty topic
     not ending in the separator;
  B. original_topic is a fixed point: original_topic(original_topic(t)) == original_topic(t);
  C. identity: remote_topic(a, t) == t, except names ending in "heartbeats", named as by default;
  D. a topic is a cycle for target T iff some hop of its name (following upstream_topic) came from T.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

HEARTBEATS_TOPIC = "heartbeats"


class ReplicationPolicy(Protocol):
    @property
    def separator(self) -> str: ...

    def remote_topic(self, source_alias: str, topic: str) -> str: ...
    def topic_source(self, topic: str) -> str | None: ...
    def upstream_topic(self, topic: str) -> str | None: ...


def _java_split(text: str, sep: str) -> list[str]:
    # Java's String.split drops trailing empty strings; "a." has one part, not two.
    parts = text.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if parts == [""] and text:
        return []
    return parts


@dataclass(frozen=True)
class DefaultReplicationPolicy:
    """`{source}{separator}{topic}`: the source alias is written into the remote name."""

    separator: str = "."

    def remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = _java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator):]


@dataclass(frozen=True)
class IdentityReplicationPolicy:
    """Keeps topic names; only heartbeats are renamed so that the topology stays visible.

    `source_alias` mirrors MM2's `source.cluster.alias`: when set, every non-heartbeats topic is
    read as coming from it. Cycles cannot be seen in names; the stream's provenance header stops them.
    """

    separator: str = "."
    source_alias: str | None = None

    def _default(self) -> DefaultReplicationPolicy:
        return DefaultReplicationPolicy(self.separator)

    def remote_topic(self, source_alias: str, topic: str) -> str:
        if _looks_like_heartbeats(topic):
            return self._default().remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if _looks_like_heartbeats(topic):
            return self._default().topic_source(topic)
        return self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        if _looks_like_heartbeats(topic):
            return self._default().upstream_topic(topic)
        return topic


@dataclass(frozen=True)
class PrefixReplicationPolicy:
    """MirrorMaker 1 / Go mirror maker `--prefix`: a fixed string before every remote name.

    The prefix names no cluster, so `topic_source` is unknown (None), as with identity.
    """

    prefix: str
    separator: str = "."

    def remote_topic(self, source_alias: str, topic: str) -> str:
        if _looks_like_heartbeats(topic):
            return DefaultReplicationPolicy(self.separator).remote_topic(source_alias, topic)
        return f"{self.prefix}{topic}"

    def topic_source(self, topic: str) -> str | None:
        return None

    def upstream_topic(self, topic: str) -> str | None:
        return topic[len(self.prefix):] if self.prefix and topic.startswith(self.prefix) else None


def _looks_like_heartbeats(topic: str) -> bool:
    # MM2's identity policy treats any name ending in "heartbeats" as a heartbeats topic.
    return topic.endswith(HEARTBEATS_TOPIC)


def original_topic(policy: ReplicationPolicy, topic: str) -> str:
    """The name the topic had on the cluster where it was first produced."""
    seen = topic
    while True:
        upstream = policy.upstream_topic(seen)
        if upstream is None or upstream == seen:
            return seen
        seen = upstream


def is_heartbeats_topic(policy: ReplicationPolicy, topic: str) -> bool:
    return original_topic(policy, topic) == HEARTBEATS_TOPIC


def checkpoints_topic(policy: ReplicationPolicy, source_alias: str) -> str:
    sep = policy.separator
    return f"{source_alias}{sep}checkpoints{sep}internal"


def offset_syncs_topic(policy: ReplicationPolicy, alias: str) -> str:
    sep = policy.separator
    return f"mm2-offset-syncs{sep}{alias}{sep}internal"


def is_internal_topic(policy: ReplicationPolicy, topic: str) -> bool:
    """MM2 4.x's rule: Kafka-internal (`__*`, `.*`) or MM2's own (`mm2*{sep}internal`, checkpoints).

    Connect's `*.internal` and `*-internal` topics are kept out by the default `topics.exclude`, not here.
    """
    sep = policy.separator
    mm2_internal = (topic.startswith("mm2") and topic.endswith(f"{sep}internal")) or (
        topic.endswith(f"{sep}checkpoints{sep}internal"))
    return mm2_internal or topic.startswith(("__", "."))


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when some hop of the topic's name came from the flow's target (so it would loop)."""
    current = topic
    while True:
        source = policy.topic_source(current)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(current)
        if upstream is None or upstream == current:
            return False
        current = upstream


def should_replicate(policy: ReplicationPolicy, topic: str, target_alias: str, selected: bool) -> bool:
    """MM2's decision: (selected by the filter, or a heartbeats topic), not internal, not a cycle."""
    return ((selected or is_heartbeats_topic(policy, topic))
            and not is_internal_topic(policy, topic)
            and not is_cycle(policy, topic, target_alias))

"""Remote topics on the target: created with the source's partitions and configs, grown, never shrunk.

The stream calls `ensure_remote_topics` before it writes to a topic or partition it has not seen;
the metadata sync (plan/sync) builds on the same functions, so there is one implementation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic

from mirrorflow.config import Flow
from mirrorflow.errors import OperationalError

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TopicChange:
    """One change made on the target: a remote topic created or grown."""

    action: str
    topic: str
    partitions: int
    configs: Mapping[str, str]

    def __str__(self) -> str:
        if self.action == "create":
            extra = "".join(f", {k}={v}" for k, v in sorted(self.configs.items()))
            return f"created {self.topic} ({self.partitions} partitions{extra})"
        return f"grew {self.topic} to {self.partitions} partitions"


def wait(futures: Mapping[Any, Any], what: str, *, tolerate: tuple[int, ...] = ()) -> dict[Any, Any]:
    """Results of admin futures; a failure is one OperationalError naming `what` and the resource."""
    out = {}
    for resource, future in futures.items():
        try:
            out[resource] = future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() in tolerate:
                out[resource] = None
                continue
            raise OperationalError(f"{what} {_name(resource)}: {err.str()}") from None
        except TimeoutError:
            raise OperationalError(f"{what} {_name(resource)}: no answer within {TIMEOUT_S:.0f} s") from None
    return out


def partition_counts(admin: AdminClient, cluster: str) -> tuple[dict[str, int], int]:
    """(topic -> partition count, broker count) of a cluster."""
    try:
        md = admin.list_topics(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise OperationalError(f"cluster {cluster} unreachable: {exc.args[0].str()}") from None
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}, len(md.brokers)


def topic_configs(admin: AdminClient, cluster: str, topic: str) -> dict[str, str]:
    """The topic's own (non-default) config entries."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = wait(admin.describe_configs([resource]), f"cannot read the configs of {cluster}:")[resource]
    return {name: e.value for name, e in entries.items()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and not e.is_sensitive and not e.is_read_only}


def replication_factor(wanted: int, brokers: int, where: str) -> int:
    """The configured factor, capped at the target's broker count (a warning says so)."""
    if wanted > brokers:
        log.warning("%s: replication factor %d capped at the target's %d broker(s)", where, wanted, brokers)
        return max(brokers, 1)
    return wanted


def ensure_remote_topics(flow: Flow, source: AdminClient, target: AdminClient,
                         partitions: Mapping[str, int]) -> list[TopicChange]:
    """Make every remote topic of these source topics exist with at least the source's partitions."""
    remote_counts, brokers = partition_counts(target, flow.target)
    changes: list[TopicChange] = []
    creates: list[NewTopic] = []
    for topic, count in sorted(partitions.items()):
        remote = flow.policy.remote_topic(flow.source, topic)
        have = remote_counts.get(remote)
        if have is None:
            configs = {k: v for k, v in topic_configs(source, flow.source, topic).items()
                       if not flow.config_exclude.selects(k)}
            rf = replication_factor(flow.number("replication.factor"), brokers, f"{flow.name} {remote}")
            creates.append(NewTopic(remote, count, rf, config=configs))
            changes.append(TopicChange("create", remote, count, configs))
        elif have < count:
            grow = NewPartitions(remote, count)
            wait(target.create_partitions([grow]),
                 f"cannot grow remote topic on {flow.target} from {have} to {count} partitions:")
            changes.append(TopicChange("grow", remote, count, {}))
    if creates:
        wait(target.create_topics(creates), f"cannot create remote topic on {flow.target}:",
             tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,))
    for change in changes:
        log.info("%s: %s", flow.name, change)
    return changes


def ensure_internal_topic(admin: AdminClient, cluster: str, topic: str, wanted_rf: int,
                          configs: Mapping[str, str]) -> None:
    """Create a one-partition internal topic (offset syncs, heartbeats, checkpoints) unless it exists."""
    counts, brokers = partition_counts(admin, cluster)
    if topic in counts:
        return
    rf = replication_factor(wanted_rf, brokers, f"{cluster} {topic}")
    wait(admin.create_topics([NewTopic(topic, 1, rf, config=dict(configs))]),
         f"cannot create internal topic on {cluster}:", tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,))


def _name(resource: Any) -> str:
    return getattr(resource, "name", None) or getattr(resource, "topic", None) or str(resource)

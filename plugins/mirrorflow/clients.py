"""confluent-kafka clients for a configured cluster: the one place Java client settings become librdkafka ones."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.client_config import to_librdkafka
from mirrorflow.config import Cluster


def settings(cluster: Cluster, role: str, **overrides: Any) -> dict[str, Any]:
    """librdkafka settings for one role of a cluster (secrets included: never log them)."""
    out: dict[str, Any] = dict(to_librdkafka(cluster.client_config(role), cluster=cluster.alias)[0])
    # Java-client keys a consumer group of mirrorflow's own must not inherit from the user's consumers.
    if role == "consumer":
        out.pop("group.id", None)
        out.pop("group.instance.id", None)
    out.update(overrides)
    return out


def admin(cluster: Cluster, **overrides: Any) -> AdminClient:
    return AdminClient(settings(cluster, "admin", **overrides))


def producer(cluster: Cluster, **overrides: Any) -> Producer:
    return Producer(settings(cluster, "producer", **overrides))


def consumer(cluster: Cluster, **overrides: Any) -> Consumer:
    base = {"group.id": "mirrorflow", "enable.auto.commit": False, "enable.partition.eof": False}
    return Consumer(settings(cluster, "consumer", **{**base, **overrides}))

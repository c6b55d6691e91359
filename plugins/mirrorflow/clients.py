"""confluent-kafka clients for a configured cluster: the one place Java client settings become librdkafka ones."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirrorflow.client_config import to_librdkafka
from mirrorflow.config import Cluster
from mirrorflow.errors import OperationalError

_quiet = False


def quiet() -> None:
    """Keep librdkafka's own log lines (connection retries) off stderr: for commands whose errors end in one line."""
    global _quiet
    _quiet = True


def settings(cluster: Cluster, role: str, **overrides: Any) -> dict[str, Any]:
    """librdkafka settings for one role of a cluster (secrets included: never log them)."""
    out: dict[str, Any] = dict(to_librdkafka(cluster.client_config(role), cluster=cluster.alias)[0])
    if _quiet:
        out["log_level"] = 0
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


def read_to_end(consumer_settings: Mapping[str, Any], topic: str, what: str, *, partition: int = 0,
                timeout_s: float = 30.0) -> Iterator[Message]:
    """Every committed record of one partition, from its start to the end it had when reading began.

    For mirrorflow's and MM2's compacted internal topics (offset syncs, checkpoints, heartbeats). A topic
    that does not exist yet reads as empty.
    """
    consumer = Consumer({**consumer_settings, "group.id": "mirrorflow-internal-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                return
            raise
        if high <= low:
            return
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout_s
        done = False
        while not done:
            if time.monotonic() > deadline:
                raise OperationalError(f"{what} {topic}: not read to its end within {timeout_s:.0f} s")
            for msg in consumer.consume(10_000, 1.0):
                error = msg.error()
                if error is not None:
                    done = done or error.code() == KafkaError._PARTITION_EOF
                    continue
                yield msg
                done = done or (msg.offset() or 0) >= high - 1
    except KafkaException as exc:
        raise OperationalError(f"{what} {topic}: {exc.args[0].str()}") from None
    finally:
        consumer.close()

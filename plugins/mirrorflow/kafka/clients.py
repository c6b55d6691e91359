"""confluent-kafka clients for a configured cluster: the one place Java client settings become librdkafka ones."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.errors import ConfigError, OperationalError, RetryableError
from mirrorflow.kafka import stores
from mirrorflow.kafka.internal_log import InternalLog
from mirrorflow.model.client_config import to_librdkafka
from mirrorflow.model.config import Cluster, MirrorConfig
from mirrorflow.model.keys import CLIENT_ROLES

_quiet = False
# Errors a later attempt may not meet, whether or not librdkafka flagged them retriable.
_TRANSIENT = frozenset({
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._DESTROY_BROKER})


def quiet() -> None:
    """Keep librdkafka's own log lines (connection retries) off stderr: for commands whose errors end in one line."""
    global _quiet
    _quiet = True


def operational(exc: KafkaException) -> OperationalError:
    """A Kafka error nothing below handled, in mirrorflow's tree (the command line's boundary): RetryableError when
    Kafka flags it retriable or it is one a later attempt may not meet (_TRANSIENT), else OperationalError; one line
    naming it."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return OperationalError(f"Kafka: {exc}")
    line = f"Kafka: {err.name()}: {err.str()}"
    return RetryableError(line) if err.retriable() or err.code() in _TRANSIENT else OperationalError(line)


def settings(cluster: Cluster, role: str, **overrides: Any) -> dict[str, Any]:
    """librdkafka settings for one role of a cluster (secrets included: never log them)."""
    out: dict[str, Any] = dict(to_librdkafka(cluster.client_config(role), cluster=cluster.alias, stores=stores)[0])
    if _quiet:
        out["log_level"] = 0
    # Java-client keys a consumer group of mirrorflow's own must not inherit from the user's consumers.
    if role == "consumer":
        out.pop("group.id", None)
        out.pop("group.instance.id", None)
    out.update(overrides)
    return out


def check(config: MirrorConfig) -> None:
    """Build every role's settings of every cluster, opening the stores they name; the first failure is a
    ConfigError naming the file, line and key as written (for `validate`)."""
    for cluster in config.clusters.values():
        for role in CLIENT_ROLES:
            try:
                settings(cluster, role)
            except ConfigError as e:
                written = cluster.client_settings(role).get((e.key or "").removeprefix(f"{cluster.alias}."))
                if written is None:
                    raise
                raise ConfigError(e.reason, source=config.source, line=written.line, key=written.key) from None


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

    For a one-off read of mirrorflow's and MM2's compacted internal topics (checkpoints, heartbeats); a
    long-lived reader keeps an InternalLog instead. A topic that does not exist yet reads as empty;
    `timeout_s` is how long the read may make no progress.
    """
    log = InternalLog(consumer_settings, topic, what, partition=partition, idle_timeout_s=timeout_s)
    try:
        yield from log.catch_up()
    finally:
        log.close()

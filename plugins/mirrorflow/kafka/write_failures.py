"""Why the target did not take a writer's records: the Kafka errors the writer meets, told apart, and what the
target's metadata and configs say of the partition, for the line an operator reads.

  stuck    the target did not take the records within DELIVERY_TIMEOUT_MS (librdkafka retried until then), or the
           coordinator aborted a transaction that outlived transaction.timeout.ms: the partition is paused, the
           flow goes on (stream_writer)
  purged   a transaction that failed for another partition dropped what it still held: written again at once
  refused  anything else a broker answers for a record (too large, a policy, an authorisation): the flow stops
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

STUCK = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT, KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError._TRANSPORT, KafkaError._DESTROY_BROKER, KafkaError.THROTTLING_QUOTA_EXCEEDED})
PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# A record batch of one record: the batch header (61 bytes) and the record's own varint framing (at most ~40).
RECORD_FRAMING_BYTES = 128


def partition_state(producer: Producer, remote: str, partition: int) -> str:
    """The cause as the target's metadata shows it: no leader, or the leader and its in-sync replicas."""
    try:
        topic = producer.list_topics(remote, timeout=5).topics.get(remote)
    except KafkaException as exc:
        return f"metadata unavailable ({exc.args[0].str()})"
    part = topic.partitions.get(partition) if topic is not None and topic.error is None else None
    if part is None:
        return "the partition is unknown to the target"
    if part.leader < 0:
        return f"no leader ({part.error.str() if part.error else 'leader not available'})"
    return f"leader broker {part.leader}, in sync {len(part.isrs)} of {len(part.replicas)} replicas" + (
        f" ({part.error.str()})" if part.error else ": the leader is up, so a quota, a full disk or too few "
                                                     "in-sync replicas hold the writes (its log says which)")


def refused_message(where: str, err: KafkaError, size: int, framed: int, *, source: str, target: str, topic: str,
                    remote: str, provenance: bool, source_admin_settings: Mapping[str, Any],
                    target_admin_settings: Mapping[str, Any]) -> str:
    """The line for a record of `topic` the target refused as `remote`: `where` names it, `size` is its key and
    value, `framed` with its headers; a record too large says which setting to raise to what."""
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        source_limit = _max_message_bytes(source_admin_settings, topic)
        target_limit = _max_message_bytes(target_admin_settings, remote)
        headers = " and the provenance header" if provenance else ""
        with_headers = f" ({framed} with its headers{headers})" if framed > size else ""
        # The config sync copies the source's max.message.bytes: a remote topic raised by hand must be kept out.
        return (f"{where}: a record of {size} bytes{with_headers} is too large for "
                f"{target} topic {remote} (max.message.bytes {target_limit} on {target}, {source_limit} on "
                f"{source}): set {remote}'s max.message.bytes to at least {framed + RECORD_FRAMING_BYTES} and "
                "add max.message.bytes to config.properties.exclude, so that the config sync keeps it")
    return f"{where}: {target} topic {remote} refused the record: {err.str()}"


def _max_message_bytes(settings: Mapping[str, Any], topic: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        admin = AdminClient(dict(settings))  # kept referenced until the answer: a dropped client aborts it
        entries = admin.describe_configs([resource])[resource].result(timeout=10)
        return str(entries["max.message.bytes"].value)
    except Exception:  # the message is already an error report; an unknown limit must not hide it
        return "unknown"

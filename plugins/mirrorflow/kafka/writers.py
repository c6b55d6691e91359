"""The flow's writers on the target: their producer settings, transactional ids and fencing, in one place.

The executor's writer (spark/stream_writer) and the driver's writes (jobs/driver_writes, jobs/reset) take their
producers' settings from here, and the driver fences the writers' ids with `fence` (flow_lease, W4).

Ids (each stable, so any two writers of one id fence each other):
  mirrorflow-<source>-<target>.writer-<slot>   a stream task's writer seat or task slot (their number recorded in
                                               the offset syncs, `writers`)
  mirrorflow-<source>-<target>.driver          the stream driver's own writes (anchors, losses, releases), a reset's
  mirrorflow-<source>-<target>-<topic>-<p>     versions before task slots: one per source partition (fenced once,
                                               after an upgrade)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from confluent_kafka import KafkaException, Producer

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
TRANSACTION_TIMEOUT_MS = 600_000
FENCING_THREADS = 32
# Batching and compression: the target's `producer.*` settings win (a WAN link wants compression).
BATCH_SIZE = 1_048_576
QUEUE_KBYTES = 65_536  # librdkafka buffers up to 1 GiB by default; 64 MiB per worker bounds memory, produce() waits
_TUNING = {"linger.ms": 5, "batch.size": BATCH_SIZE, "compression.type": "none",
           "queue.buffering.max.kbytes": QUEUE_KBYTES}
# What every durable write rests on (nothing acknowledged before the in-sync replicas have it, no duplicate from a
# producer's own retry): never a cluster's setting.
DURABLE = {"acks": "all", "enable.idempotence": True}
# The writer's, beside DURABLE: the W2 bound, and the largest record a broker can be set to take.
_WRITER_FIXED = {**DURABLE, "message.max.bytes": 100_000_000, "message.timeout.ms": DELIVERY_TIMEOUT_MS}
# The writer's own, or another name for one of the above (delivery.timeout.ms is message.timeout.ms).
_DROPPED = {"delivery.timeout.ms", "transactional.id", "transaction.timeout.ms",
            "max.in.flight.requests.per.connection", "retries"}
# A transactional writer's batch leaves when full, or at the commit's flush (each Slice: at most SLICE_S apart at a
# trickle), so a long linger costs its records no latency. A short one cost CPU: librdkafka lets an idempotent
# partition have 5 messages (so one request) in flight, and while it is, a next batch past its linger made the broker
# thread poll without a timeout until the answer came (17,559 polls in 1 s in the plain benchmark; with 1 s, 259).
# 1 s was not enough: a backlog's queue (64 MiB a worker, about a second's copy) ages past it behind those requests.
_TRANSACTIONAL_LINGER_MS = 5000


def writer_config(target_settings: Mapping[str, Any], transactional_id: str | None = None) -> dict[str, Any]:
    """A writer producer's librdkafka settings: the target's producer settings over the writer's batching defaults,
    under what delivery rests on (DURABLE, the W2 timeout) and, given one, the transactional id (then lingering at
    least _TRANSACTIONAL_LINGER_MS)."""
    tuned = {k: v for k, v in target_settings.items() if k not in _DROPPED}
    transactional = {} if transactional_id is None else {
        "transactional.id": transactional_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        "linger.ms": max(float(tuned.get("linger.ms", 0)), _TRANSACTIONAL_LINGER_MS)}
    return {**_TUNING, **tuned, **_WRITER_FIXED, **transactional}


def driver_config(source: str, target: str) -> dict[str, Any]:
    """What the stream driver's (and a reset's) transactional producer adds to the target's producer settings:
    initialising its id fences a frozen driver of the flow (W4)."""
    return {**DURABLE, "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            "transactional.id": driver_transactional_id(source, target),
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}


def check_tuning(target_settings: Mapping[str, Any], target: str) -> None:
    """Raise ConfigError for a batching setting librdkafka would refuse in the writer (Java allows batch.size 0)."""
    for key, low, high in (("batch.size", 1, None), ("linger.ms", 0, DELIVERY_TIMEOUT_MS - 1)):
        if key not in target_settings:
            continue
        try:
            value = float(target_settings[key])
        except (TypeError, ValueError):
            value = float("nan")
        if not (value >= low and (high is None or value <= high)):  # NaN fails both
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{target_settings[key]!r}: the stream's writer needs {bound}",
                              key=f"{target}.producer.{key}")


def batch_size(target_settings: Mapping[str, Any]) -> int:
    """The writer's batch.size, as writer_config gives it."""
    return _whole(target_settings.get("batch.size", BATCH_SIZE), BATCH_SIZE)


def queue_kbytes(target_settings: Mapping[str, Any]) -> int:
    """The writer's queue.buffering.max.kbytes, as writer_config gives it."""
    return _whole(target_settings.get("queue.buffering.max.kbytes", QUEUE_KBYTES), QUEUE_KBYTES)


def _whole(value: Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def transactional_id(source: str, target: str, slot: int) -> str:
    return f"mirrorflow-{source}-{target}.writer-{slot}"


def driver_transactional_id(source: str, target: str) -> str:
    return f"mirrorflow-{source}-{target}.driver"


def partition_transactional_id(source: str, target: str, tp: TopicPartition) -> str:
    return f"mirrorflow-{source}-{target}-{tp[0]}-{tp[1]}"


def fence(flow: str, target: str, producer_settings: Mapping[str, Any], transactional_ids: list[str],
          keep_alive: Callable[[], object] = lambda: True, threads: int = FENCING_THREADS) -> None:
    """Abort every transaction a crashed instance of the flow left open, and fence its writers.

    Until then the target's last stable offset stays behind those transactions, and the offset syncs
    committed after them by other tasks would be invisible to a read_committed reader. The ids are
    initialised concurrently; `keep_alive` runs every half second meanwhile (the driver serves its lease).
    """
    def init(tid: str) -> None:
        producer = Producer(writer_config(producer_settings, tid))
        try:
            producer.init_transactions(60)
        except KafkaException as exc:
            raise OperationalError(f"flow {flow}: cannot fence writer {tid} on {target}: {exc.args[0].str()}") from None

    begun = time.monotonic()
    pool = ThreadPoolExecutor(threads, thread_name_prefix="mirrorflow-fence")
    try:
        pending = {pool.submit(init, tid) for tid in transactional_ids}
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()  # the first failure, as it is
            if keep_alive() is False:
                raise OperationalError(f"flow {flow}: the lease was lost while fencing; nothing more is fenced")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after a failure, the ids not yet begun are not tried
    log.info("flow %s: fenced %d transactional writers in %.1f s", flow, len(transactional_ids),
             time.monotonic() - begun)

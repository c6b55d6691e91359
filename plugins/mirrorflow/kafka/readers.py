"""The copier's source consumers (spark/copier): their librdkafka settings, in one place. C1 and C2 (spark/copier)
rest on the fixed ones; the source's `consumer.*` settings may change the tuning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorflow.errors import ConfigError

# A range ends where the batch does; what librdkafka prefetches past it stays queued while the partition stays with
# the worker (C4), up to `queued.min.messages` per partition (100,000 by default) and the queue's size in all.
# `fetch.min.bytes` with `fetch.wait.max.ms`: at a trickle a fetch waits up to 5 ms to fill (fetch_wait_ms), not one
# per produce request (the source broker took a core at 5,000 records/s with the minimum at 1 byte and the wait at
# 10 ms).
# `fetch.max.bytes` below glibc's largest mmap threshold (32 MiB): librdkafka reads each fetch response into a buffer of
# its size, and one at or past that is mapped afresh every time, its pages zero-filled at first touch. At librdkafka's
# 50 MiB, page faults in the receiving thread took 21-25 % of the workers' CPU on 1,200 partitions (perf).
# `fetch.queue.backoff.ms`: how soon a partition whose prefetch queue was full is looked at again (librdkafka's 1 s
# stalled a backlog's copy); each look goes over every assigned partition, so 1 ms cost a consumer of 600 partitions
# 2.4 s of its broker thread per million records copied, 10 ms 2.0 (one run each: the direction, not the size).
FETCH_MAX_BYTES = 16 << 20
_CONSUMER_TUNING = {"fetch.min.bytes": 262_144, "fetch.queue.backoff.ms": 10,
                    "queued.max.messages.kbytes": 65_536, "queued.min.messages": 10_000,
                    "fetch.message.max.bytes": 8_388_608, "fetch.max.bytes": FETCH_MAX_BYTES}
_CONSUMER_FIXED = {"enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "error",
                   "enable.partition.eof": True}
_CONSUMER_DROPPED = {"group.id", "group.instance.id", "isolation.level", "partition.assignment.strategy"}


# librdkafka has no incremental fetch sessions (KIP-227): every fetch names each assigned partition and the broker
# reads each one, so an idle consumer of 600 partitions fetching every 25 ms kept the source broker 0.47 core busy.
# The wait grows with the partitions so that an idle consumer asks for at most this many partition reads a second.
IDLE_PARTITION_READS_PER_S = 2_400
FETCH_WAIT_MS = (5, 500)  # the wait's bounds: at a trickle a fetch waits up to this long to fill


def fetch_wait_ms(partitions: int) -> int:
    """`fetch.wait.max.ms` for a consumer of `partitions` partitions: within FETCH_WAIT_MS, idle partition reads
    at most IDLE_PARTITION_READS_PER_S, rounded up to a power-of-two multiple of the lower bound (a worker's
    consumer is rebuilt only when its partitions move it a step up)."""
    low, high = FETCH_WAIT_MS
    wanted = 1000 * max(partitions, 1) / IDLE_PARTITION_READS_PER_S
    wait = low
    while wait < wanted and wait < high:
        wait *= 2
    return min(wait, high)


def check_tuning(source_settings: Mapping[str, Any], source: str) -> None:
    """Raise ConfigError for a source consumer setting the copier reads itself and cannot (reader_config)."""
    value = source_settings.get("message.max.bytes")
    if value is not None and _whole_number(value) is None:
        raise ConfigError(f"{value!r}: the copier needs a whole number of bytes",
                          key=f"{source}.consumer.message.max.bytes")


def _whole_number(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number >= 1 else None


def reader_config(source_settings: Mapping[str, Any], flow: str, read_committed: bool,
                    partitions: int = 1) -> dict[str, Any]:
    """The copier's librdkafka consumer settings for `partitions` partitions: the source's consumer settings over
    its fetch defaults, under what C1 and C2 rest on. The group id is only a name: the consumer assigns partitions,
    it never joins a group."""
    tuned = {k: v for k, v in source_settings.items() if k not in _CONSUMER_DROPPED}
    fetch_max = {}
    if "fetch.max.bytes" not in tuned and "message.max.bytes" in tuned:  # librdkafka wants fetch.max >= message.max
        fetch_max = {"fetch.max.bytes": max(FETCH_MAX_BYTES, _whole_number(tuned["message.max.bytes"]) or 0)}
    return {**_CONSUMER_TUNING, "fetch.wait.max.ms": fetch_wait_ms(partitions), **fetch_max, **tuned, **_CONSUMER_FIXED,
            "group.id": f"mirrorflow-copier-{flow}",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted"}

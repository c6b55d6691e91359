"""A Python worker's writer producers, kept across tasks.

Spark reuses a Python worker across tasks, so a worker keeps its producers (`_PRODUCERS`): one idempotent producer
per flow, and one transactional producer per transactional id it wrote from. A kept transactional producer is used
again only while it is still the id's last initialised one on this host (a mark file per id, below) and the driver
has not fenced the ids since (`WriterSpec.fenced`).

A kept producer is replaced, not used again, when most of the remote topics it has written to are not the task's
(`crowded`): librdkafka finds a record's topic by walking its client's list of every topic it has written to, first
to last, under a lock, for every record. Over 2,000 topics that walk was half of a copier's time (py-spy, a flow of
24,000 partitions whose batches moved a tenth of them each), and the task's own topics, the newest, come last.

Bound: `_PRODUCERS`, `_TOKENS` and `_WRITTEN` hold one entry per flow and per writer seat (or task slot) the worker
ran a task of, `_WRITTEN`'s sets the remote topics of the flow; `writer_seats.MARKS` one small file per transactional id
initialised on this host, and one folder per running batch.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from mirrorflow.kafka import writers
from mirrorflow.kafka.flow_lease import LeaseGuard
from mirrorflow.spark import writer_seats

if TYPE_CHECKING:
    from mirrorflow.spark.writer_spec import WriterSpec

_PRODUCERS: dict[str, Producer] = {}
_WRITTEN: dict[str, set[str]] = {}  # producer key -> the remote topics it has been handed
CROWD_FLOOR = 100  # a kept producer never counts as crowded while it knows at most this many topics the task lacks
# Which producer of this host last initialised a transactional id: "pid:token", one small file per id under
# writer_seats.MARKS. A worker
# keeps its producer for the next task of the same slot only while the mark is still its own (Spark may run that
# task in another worker, whose init fences this producer) and the driver has not fenced the ids since.
_TOKENS: dict[str, tuple[str, int]] = {}  # transactional id -> (this worker's mark, the driver's fencing it followed)


def confirm_lease(spec: WriterSpec) -> None:
    """flow_lease W1, before a write of the task is handed over."""
    if spec.lease_member is not None:
        LeaseGuard.confirm(spec.flow, spec.lease_member, spec.target_admin_settings, spec.lease_own_ids)


def crowded(written: AbstractSet[str], topics: AbstractSet[str]) -> bool:
    """Whether a producer handed `written` is crowded for a task writing to `topics`: more than CROWD_FLOOR of its
    topics, and at least as many as it shares with the task, are not the task's (each record's topic lookup walks
    them first)."""
    foreign = len(written - topics)
    return foreign > CROWD_FLOOR and foreign >= len(written & topics)


def idempotent_producer(spec: WriterSpec, topics: AbstractSet[str]) -> Producer:
    """The worker's idempotent producer of the flow for a task writing to `topics` (a new one if it was crowded)."""
    key = f"{spec.flow}/idempotent"
    producer = _PRODUCERS.get(key)
    if producer is None or crowded(_WRITTEN.get(key, set()), topics):
        producer = Producer(writers.writer_config(spec.producer_settings))
        _PRODUCERS[key], _WRITTEN[key] = producer, set()
    _WRITTEN[key].update(topics)
    return producer


def transactional_producer(spec: WriterSpec, topics: AbstractSet[str]) -> tuple[Producer, bool]:
    """The transactional producer of the task's writer seat (else its slot) for a task writing to `topics`, and
    whether an earlier task of this worker initialised it.

    A retried task (attempt > 0) always initialises afresh: that aborts what the failed attempt left open. So does
    a task for which the kept producer is crowded.
    """
    tid = writers.transactional_id(spec.source, spec.target, writer_seats.writer_index())
    mark = writer_seats.MARKS / hashlib.sha1(tid.encode()).hexdigest()
    kept = _PRODUCERS.get(tid)
    token, fenced = _TOKENS.get(tid, (None, None))
    if (kept is not None and spec.keep_producers and writer_seats.task_attempt() == 0 and fenced == spec.fenced
            and _read_mark(mark) == token and not crowded(_WRITTEN.get(tid, set()), topics)):
        _WRITTEN.setdefault(tid, set()).update(topics)
        return kept, True
    discard(spec, tid)
    confirm_lease(spec)  # W1 before an id is initialised: a zombie must never fence the lease's holder
    producer = Producer(writers.writer_config(spec.producer_settings, tid))
    producer.init_transactions(60)
    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    _PRODUCERS[tid], _WRITTEN[tid] = producer, set(topics)
    try:
        writer_seats.MARKS.mkdir(exist_ok=True)
        staged = mark.with_suffix(f".{os.getpid()}")
        staged.write_text(token)
        staged.replace(mark)
        _TOKENS[tid] = (token, spec.fenced)
    except OSError:
        pass  # no mark, so the producer is not kept: the slot's next task initialises a new one
    return producer, False


def _read_mark(mark: Path) -> str | None:
    try:
        return mark.read_text()
    except OSError:
        return None


def discard(spec: WriterSpec, tid: str | None = None) -> None:
    """Forget this worker's producer of the task slot (transactional): the slot's next task initialises a new one."""
    if spec.transactional or spec.fence_syncs:
        tid = tid or writers.transactional_id(spec.source, spec.target, writer_seats.writer_index())
        _PRODUCERS.pop(tid, None)
        _TOKENS.pop(tid, None)
        _WRITTEN.pop(tid, None)

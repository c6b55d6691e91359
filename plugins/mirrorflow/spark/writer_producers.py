"""A Python worker's writer producers, kept across tasks, and the writer seats a local master's tasks take.

Spark reuses a Python worker across tasks, so a worker keeps its producers (`_PRODUCERS`): one idempotent producer
per flow, and one transactional producer per transactional id it wrote from. A kept transactional producer is used
again only while it is still the id's last initialised one on this host (a mark file per id, below) and the driver
has not fenced the ids since (`WriterSpec.fenced`).

A kept producer is replaced, not used again, when most of the remote topics it has written to are not the task's
(`crowded`): librdkafka finds a record's topic by walking its client's list of every topic it has written to, first
to last, under a lock, for every record. Over 2,000 topics that walk was half of a copier's time (py-spy, a flow of
24,000 partitions whose batches moved a tenth of them each), and the task's own topics, the newest, come last.

Bound: `_PRODUCERS`, `_TOKENS` and `_WRITTEN` hold one entry per flow and per writer seat (or task slot) the worker
ran a task of, `_WRITTEN`'s sets the remote topics of the flow; `_MARKS` one small file per transactional id
initialised on this host, and one folder per running batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from mirrorflow.errors import RetryableError
from mirrorflow.kafka import writers
from mirrorflow.kafka.flow_lease import LeaseGuard

if TYPE_CHECKING:
    from mirrorflow.spark.writer_spec import WriterSpec

_PRODUCERS: dict[str, Producer] = {}
_WRITTEN: dict[str, set[str]] = {}  # producer key -> the remote topics it has been handed
CROWD_FLOOR = 100  # a kept producer never counts as crowded while it knows at most this many topics the task lacks
# Which producer of this host last initialised a transactional id: "pid:token", one small file per id. A worker
# keeps its producer for the next task of the same slot only while the mark is still its own (Spark may run that
# task in another worker, whose init fences this producer) and the driver has not fenced the ids since.
_MARKS = Path(tempfile.gettempdir()) / f"mirrorflow-writers-{os.getuid()}"
_LINGER_ENDED = "linger-ended"  # in a batch's claims: the driver ended its linger (end_linger)
_TOKENS: dict[str, tuple[str, int]] = {}  # transactional id -> (this worker's mark, the driver's fencing it followed)
_SEAT: list[int] = []  # the writer seat the worker's running task holds (writer_seat), if any
_PREFERRED_SEAT: dict[str, int] = {}  # flow -> the seat this worker wrote from last (its producer is kept)


def confirm_lease(spec: WriterSpec) -> None:
    """flow_lease W1, before a write of the task is handed over."""
    if spec.lease_member is not None:
        LeaseGuard.confirm(spec.flow, spec.lease_member, spec.target_admin_settings, spec.lease_own_ids)


def task_attempt() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


def _task_slot() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def claim_seat(claims: Path, seats: int, task: int, attempt: int, preferred: int | None) -> int:
    """The seat task `task` copies from in a batch whose claims are files in `claims`: one per seat, created once
    (O_EXCL) and holding the index of the task that took it. A first attempt takes `preferred` if still free, else
    the lowest free one; a retried attempt takes the seat its first attempt took (or, if that one died before
    claiming, a free one).
    Invariant: a batch runs one task per seat, each claiming one seat, so every seat is claimed by exactly one
    task and its ranges are copied exactly once, whichever worker runs which task."""
    claims.mkdir(parents=True, exist_ok=True)
    if attempt > 0:
        for claim in claims.glob("seat-*"):
            with contextlib.suppress(OSError, ValueError):
                if int(claim.read_text()) == task:
                    return int(claim.name.removeprefix("seat-"))
    order = [preferred] if preferred is not None and 0 <= preferred < seats else []
    for seat in order + [s for s in range(seats) if s != preferred]:
        try:
            fd = os.open(claims / f"seat-{seat}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(task))
        return seat
    raise RetryableError(f"every one of the batch's {seats} writer seats is taken: more tasks than seats")


def seat_claims(spec: WriterSpec) -> Path | None:
    """Where the batch's seat claims are (a local master's stream), or None: tasks copy their own slots."""
    return None if spec.batch_key is None else _MARKS / f"seats-{spec.batch_key}"


def end_linger(spec: WriterSpec) -> bool:
    """The driver, wanting the batch over soon (a stop, a new query): its lingering tasks end as if their deadline
    had passed (copier C6) at their next look. True if they can be told: a local master's workers see the driver's
    files; a cluster's tasks linger to their deadline."""
    claims = seat_claims(spec)
    if claims is None:
        return False
    with contextlib.suppress(FileNotFoundError):  # the batch ended meanwhile and its claims were dropped
        claims.mkdir(parents=True, exist_ok=True)
        (claims / _LINGER_ENDED).touch()
    return True


def lingers(spec: WriterSpec) -> bool:
    """Whether the batch's tasks still read on past their ranges' ends (copier C6): its deadline has not passed,
    and the driver has not ended its linger early (end_linger)."""
    if spec.linger_until is None or time.time() >= spec.linger_until:
        return False
    claims = seat_claims(spec)
    return claims is None or not (claims / _LINGER_ENDED).exists()


def drop_seat_claims(spec: WriterSpec) -> None:
    """The driver, once the batch's tasks returned (or failed): its claims and its linger's end."""
    claims = seat_claims(spec)
    if claims is not None:
        shutil.rmtree(claims, ignore_errors=True)


@contextlib.contextmanager
def writer_seat(spec: WriterSpec, seats: int, own: list[int]) -> Iterator[list[int]]:
    """The seat (`slots` index) the running task copies and writes from; the seat, not the task slot, names the
    transactional id. Spark hands a batch's task slots to whichever of its idle Python workers comes first, so
    slots changed workers every few batches: the worker re-initialised the slot's producer (about 450 ms, in a
    task of 100 ms at 5,000 records/s), fencing the other's, and re-assigned its consumer (the prefetch lost). A
    worker takes the seat it had, so it keeps both. Only a local master's stream (`spec.batch_key`; the claims
    are files every worker sees): elsewhere a task copies and writes from its `own` slots (one, in a stream)."""
    claims = seat_claims(spec)
    if claims is None:
        yield own
        return
    if len(own) != 1:
        raise RetryableError(f"flow {spec.flow}: a task of the batch holds {len(own)} slots, not one")
    seat = claim_seat(claims, seats, own[0], task_attempt(), _PREFERRED_SEAT.get(spec.flow))
    _SEAT[:] = [seat]
    _PREFERRED_SEAT[spec.flow] = seat
    try:
        yield [seat]
    finally:
        _SEAT.clear()


def _writer_index() -> int:
    """The index of the running task's transactional id: its writer seat, else its task slot."""
    return _SEAT[0] if _SEAT else _task_slot()


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
    tid = writers.transactional_id(spec.source, spec.target, _writer_index())
    mark = _MARKS / hashlib.sha1(tid.encode()).hexdigest()
    kept = _PRODUCERS.get(tid)
    token, fenced = _TOKENS.get(tid, (None, None))
    if (kept is not None and spec.keep_producers and task_attempt() == 0 and fenced == spec.fenced
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
        _MARKS.mkdir(exist_ok=True)
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
        tid = tid or writers.transactional_id(spec.source, spec.target, _writer_index())
        _PRODUCERS.pop(tid, None)
        _TOKENS.pop(tid, None)
        _WRITTEN.pop(tid, None)

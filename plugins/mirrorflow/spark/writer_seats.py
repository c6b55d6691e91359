"""A batch's writer seats and its linger's early end: small files a local master's driver and its Python workers
share.

Spark hands a batch's task slots to whichever of its idle Python workers comes first. On a local master every
worker sees the driver's files, so a batch's tasks claim writer seats there (one per slot, `writer_seat`): a worker
takes the seat it had, and keeps the producer and consumer of it. The driver ends a batch's linger early by a
file in the same folder (`end_linger`), and drops the folder once the batch's tasks returned.

Bound: one folder per running batch under MARKS (the driver drops it), one small file per seat in it; a worker
holds the seat of its running task and the seat it last wrote from, per flow.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mirrorflow.errors import RetryableError

if TYPE_CHECKING:
    from mirrorflow.spark.writer_spec import WriterSpec

# This host's marks: the seat claims of running batches, and (spark/writer_producers) one file per transactional id.
MARKS = Path(tempfile.gettempdir()) / f"mirrorflow-writers-{os.getuid()}"
_LINGER_ENDED = "linger-ended"  # in a batch's claims: the driver ended its linger (end_linger)
_SEAT: list[int] = []  # the writer seat the worker's running task holds (writer_seat), if any
_PREFERRED_SEAT: dict[str, int] = {}  # flow -> the seat this worker wrote from last (its producer is kept)


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
    return None if spec.batch_key is None else MARKS / f"seats-{spec.batch_key}"


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


def writer_index() -> int:
    """The index of the running task's transactional id: its writer seat, else its task slot."""
    return _SEAT[0] if _SEAT else _task_slot()

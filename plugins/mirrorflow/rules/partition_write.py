"""What a task writes of one source partition, and the position it then records: the writer's decisions, pure.

The writer (spark/stream_writer) is the mechanism: it produces, waits for the target's acknowledgements and
records offset syncs. Each decision it makes about a partition's records is one function here.

Invariants:
  PW1  `records_to_write` splits a run of ascending source offsets into skipped (below the partition's position,
       or inside a stretch the target already holds a copy of: batch_plan P5), refused (its provenance says it
       came from the target: a cycle) and written; the three are disjoint and cover the run, and the written
       indexes ascend.
  PW2  `next_position`: the upstream offset below which the target has every record never moves backwards past
       what the task read, and after a whole range it is the range's end (transaction markers and aborted records
       after the last visible record are read too); the next target offset is one past the last copy, or, with no
       copy, the previous one (None: none yet).
  PW3  A batch's first copy that lands below where the partition's next copy was to land means the remote topic
       was re-created or truncated: `copies_moved_back` says so before any offset sync could move backwards.
  PW4  `first_anchor` is a barrier (translation never reads across it) after a replay, and for idempotent writes
       where something landed between the previous next offset and the first copy (a writer that lost the lease:
       flow_lease, W4); the partition's first ever copy is its origin.
  PW5  Sparse delivery reports (`reported_records`) include the partition's first record of the task, the first
       copy of every digest cell the run enters and the run's last record.
  PW6  `unflushed_allowance` counts at most 10,000 records a partition (librdkafka's batch.num.messages default)
       and at least one; `queue_fills_unsent` holds from queue_kbytes * 1024 / batch_size partitions on.
  PW7  `write_failure`: a partition whose failed records all failed for a cause the target may get over (stuck:
       timed out, no leader, too few replicas; or purged: dropped by a transaction that failed for another
       partition) is stuck, named by its first stuck failure; any other failure is a refusal that stops the flow,
       named by its largest record when one was too large (the broker refuses a whole batch for it).
  PW8  `task_outcome`: a task's transaction commits only when no partition failed and nothing was purged or cut
       short; with no partition failed for a cause of its own it is retried (the query restarts and resumes from
       the committed positions); otherwise it aborts, its failed partitions stuck and every other one aborted
       (written again at once): stuck and aborted partitions are disjoint and cover the task.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from mirrorflow.rules import batch_plan, digests
from mirrorflow.rules.anchors import Anchor

Headers = list[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class RunPlan:
    """PW1: a run's records as indexes into it."""

    writes: list[int]
    skipped: int
    refused: list[int]


def records_to_write(offsets: Sequence[int], position: int | None, copied: Sequence[tuple[int, int]],
                     headers: Sequence[Headers], returns_to_target: Callable[[Headers], bool]) -> RunPlan:
    """PW1 for a run of one partition: `position` the upstream offset below which the target has every record
    (None: nothing yet), `copied` the [from, until) stretches a backfill found on the target (ascending),
    `returns_to_target` whether a record's headers say it came from the target."""
    lo = 0 if position is None else bisect.bisect_left(offsets, position)
    todo: Sequence[int] = range(lo, len(offsets)) if not copied else batch_plan.uncovered(offsets, lo, copied)
    refused = [i for i in todo if headers[i] and returns_to_target(headers[i])] if any(headers) else []
    if refused:
        skip = set(refused)
        writes = [i for i in todo if i not in skip]
    else:
        writes = list(todo)
    return RunPlan(writes, len(offsets) - len(todo), refused)


def next_position(read_through: int, range_end: int | None, whole: bool, last_copy: int | None,
                  previous: int | None) -> tuple[int, int | None]:
    """PW2: (upstream_next, downstream_next) once a task's copies of a partition are acknowledged. `read_through`:
    one past the last offset the task read; `range_end`: the batch's end offset of the partition, if known;
    `whole`: the task read its range to the end (not a Slice's point); `last_copy`: the target offset of its last
    copy, if it wrote any; `previous`: where the partition's next copy was to land (None: none yet)."""
    upstream = max(read_through, range_end) if whole and range_end is not None else read_through
    return upstream, last_copy + 1 if last_copy is not None else previous


def copies_moved_back(first_copy: int, previous: int | None) -> bool:
    """PW3."""
    return previous is not None and first_copy < previous


def first_anchor(first: tuple[int, int], previous: int | None, replay: bool, transactional: bool) -> Anchor:
    """PW4: the anchor of a batch's first copy (upstream, downstream) of a partition whose next copy was to land at
    `previous`. Transactional writes leave a commit marker at `previous`, so there a gap is normal."""
    landed_between = not transactional and previous is not None and previous < first[1]
    return Anchor(first[0], first[1], barrier=replay or landed_between, origin=previous is None)


def reported_records(offsets: list[int], writes: list[int], last_cell: int | None) -> tuple[dict[int, int], int]:
    """PW5: of a run's records to write (`writes`: indexes into its ascending `offsets`), those that report, as
    {index: position in `writes`}, and the digest cell of the run's last one: the run's last record and the first
    written of each digest cell the run enters (not `last_cell`, the cell the partition's previous run ended in)."""
    reported = {writes[-1]: len(writes) - 1}
    first_cell, end_cell = offsets[writes[0]] // digests.CELL, offsets[writes[-1]] // digests.CELL
    for cell in range(first_cell, end_cell + 1):
        k = bisect.bisect_left(writes, bisect.bisect_left(offsets, cell * digests.CELL))
        if cell != last_cell and k < len(writes) and offsets[writes[k]] // digests.CELL == cell:
            reported[writes[k]] = k
    return reported, end_cell


def unflushed_allowance(partitions: Sequence[tuple[int, int]], batch_size: int) -> int:
    """PW6: how many records a producer may still hold when a flush begins: a batch per partition written, each
    (records, bytes) so far giving its records per `batch_size` bytes.

    Why wait at all: a flush makes every queued batch due at once, and an idempotent producer sends one request per
    partition at a time (5 messages in flight), so while the rest of a partition's queue waits for that answer its
    broker thread polls without a timeout. Below the allowance what is queued is about one batch a partition, sent
    in one round trip."""
    return sum(min(10_000, max(1, batch_size * records // bytes_)) if bytes_ > 0 else 1
               for records, bytes_ in partitions)


def queue_fills_unsent(partitions: int, queue_kbytes: int, batch_size: int) -> bool:
    """PW6: whether a producer writing `partitions` partitions may find its queue (`queue_kbytes`) full while no
    batch in it is due: one batch filling (under `batch_size` bytes) per partition may take the whole queue.

    A backlog over many partitions copies each partition's range at once and leaves its last batch filling: 1,200
    partitions of 1,667 records of 1 KiB left 0.68 MiB a partition lingering, and a 64 MiB queue full of them."""
    return partitions * batch_size >= queue_kbytes * 1024


@dataclass(frozen=True)
class WriteFailure:
    """PW7: the failed record that names a partition's failure (an index into its failures), and whether the
    target refused it (the flow stops) or the partition is stuck."""

    index: int
    refused: bool


def write_failure(codes: Sequence[int], framed: Sequence[int], *, stuck: Collection[int], purged: Collection[int],
                  too_large: int) -> WriteFailure | None:
    """PW7 for a partition's failed records, each its error `codes[i]` and its size with headers `framed[i]`."""
    if not codes:
        return None
    if all(c in stuck or c in purged for c in codes):
        return WriteFailure(next((i for i, c in enumerate(codes) if c in stuck), 0), refused=False)
    if too_large in codes:
        return WriteFailure(max(range(len(codes)), key=lambda i: framed[i]), refused=True)
    return WriteFailure(0, refused=True)


P = TypeVar("P")


@dataclass(frozen=True)
class TaskOutcome(Generic[P]):
    """PW8: what a transactional task does once its writes are flushed."""

    action: Literal["commit", "retry", "abort"]
    stuck: frozenset[P] = frozenset()


def task_outcome(failures: Mapping[P, int | None], *, purged: Collection[int], halted: bool) -> TaskOutcome[P]:
    """PW8: `failures`, each partition's failure code (None: every record taken); `halted`: the transaction failed
    while the task was still producing."""
    failed = frozenset(p for p, code in failures.items() if code is not None and code not in purged)
    if failed:
        return TaskOutcome("abort", failed)
    if halted or any(code is not None for code in failures.values()):
        return TaskOutcome("retry")
    return TaskOutcome("commit")

"""Where a task's read of one partition's range stands: the copier's decisions about a partition, pure.

The copier (spark/copier) is the mechanism: it assigns, consumes and holds records. A range is source offsets
[from, until) of one partition (rules/batch_plan); a lingering range's `until` is OPEN until its deadline.

Invariants:
  RC1  `cut` splits a fetched chunk of ascending offsets into dropped (below the range's start), taken (inside
       the range) and held (at or past its end, for the next batch): the three are consecutive, disjoint and
       cover the chunk. The range closes when a record at or past its end came or its last offset was taken.
  RC2  `closes_at_end`: an end-of-partition event at or past the range's end closes it (every record below was
       dequeued); a lingering range of a full batch closes at the end it finds once past its range and its
       position, waiting for no record.
  RC3  `linger_end`: at the linger deadline a partition's range ends where the read got to, never before its
       planned end.
  RC4  `read_to`: a partition is read to `until` when its position or its last end-of-partition event is at or
       past it (None: none yet).
  RC5  `lost_inside`: records the source deleted inside a range before they were read are [reached, log start)
       cut at the range's end, and only when the read had moved past the range's start (a gap at the start shows
       in the driver's positions against the log start, and is not counted twice). `exhausted` says nothing of
       the range is left once the log start is at or past its end.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

OPEN = 2**63 - 1  # a lingering range's end before its deadline: none yet (an offset Kafka never reaches)


@dataclass(frozen=True)
class Cut:
    """RC1: chunk[:lo] dropped, chunk[lo:hi] taken, chunk[hi:] held."""

    lo: int
    hi: int
    closes: bool


def cut(offsets: Sequence[int], start: int, until: int) -> Cut:
    """RC1 for a non-empty chunk of one partition's ascending `offsets` against its range [start, until)."""
    lo = bisect.bisect_left(offsets, start)
    hi = bisect.bisect_left(offsets, until)
    return Cut(lo, hi, hi < len(offsets) or offsets[-1] == until - 1)


def closes_at_end(end: int, until: int, *, behind: bool, planned: int, position: int) -> bool:
    """RC2: whether an end-of-partition event at `end` closes a range read up to `until` (OPEN: lingering),
    planned to end at `planned`, whose read is at `position`; `behind`: the batch is full."""
    return end >= until or (behind and until == OPEN and end >= max(position, planned))


def linger_end(planned: int, position: int | None) -> int:
    """RC3: a lingering range's end at its deadline."""
    return planned if position is None else max(planned, position)


def read_to(until: int, position: int | None, end: int | None) -> bool:
    """RC4."""
    return (position is not None and position >= until) or (end is not None and end >= until)


def lost_inside(start: int, until: int, reached: int, log_start: int) -> tuple[int, int] | None:
    """RC5: the source offsets [begin, end) of the range [start, until) deleted before the read at `reached` got
    to them, the log now starting at `log_start`; None when nothing inside was lost."""
    return (reached, min(log_start, until)) if start < reached < log_start else None


def exhausted(until: int, log_start: int) -> bool:
    """RC5: nothing of a range ending at `until` is left to read."""
    return log_start >= until

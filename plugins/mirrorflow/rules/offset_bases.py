"""A micro-batch's end offsets as the stream's offset log holds them: a base, and what moved since it.

Spark writes whatever offsets the source returns into its offset log before each batch: every partition's, 279 KB a
batch at 24,000 partitions when 100 of them moved. The planner (spark/range_source) writes the offsets of every
partition into a numbered base file beside the checkpoint now and then (spark/offset_log); an entry names its base and
holds only the partitions whose offsets differ from it.

  B1  `expand(entry(base, moved(o, base)), base) == o` whenever `moved` gives an answer: a batch replayed after a
      crash is planned from exactly the ends it was planned with, and a restart resumes exactly.
  B2  An entry is a function of (offsets, base) alone, its JSON sorted (batch_plan P4): the same offsets against the
      same base read the same, so Spark, comparing a trigger's end with its start, sees no new data where none is.
  B3  A new base is due (`moved` is None) when the partitions differ from the base's (a topic or partition came or
      went) or more than MOVED_MAX of them moved since it: an entry holds at most MOVED_MAX partitions. The planner
      also makes one for every full batch (a backlog: batch_plan P6), whose records outweigh a base, so that the
      first quiet batches after a backlog name only what moved since it.
  B4  Bases are numbered in the order they are made, at most one a batch, so the newest `keep` bases hold every base
      that the last `keep - 1` batches' entries name (`expired`).
An entry without BASE_KEY is Kafka's full JSON ({topic: {partition: offset}}), as before: an older checkpoint's,
`initialOffset`'s, or a planner's without a folder for bases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mirrorflow.rules import batch_plan
from mirrorflow.rules.batch_plan import Offsets, TopicPartition

BASE_KEY = "mirrorflow/base"  # no topic is named so: Kafka's topic names have no "/"
MOVED_KEY = "mirrorflow/moved"
MOVED_MAX = 1_000  # B3: about 30 KB of entry at most


@dataclass(frozen=True)
class Base:
    number: int
    offsets: Mapping[TopicPartition, int]


def moved(offsets: Offsets, base: Base | None) -> dict[TopicPartition, int] | None:
    """The partitions whose offsets differ from `base`'s, or None when a new base is due (B3)."""
    if base is None or offsets.keys() != base.offsets.keys():
        return None
    out = {tp: o for tp, o in offsets.items() if base.offsets[tp] != o}
    return out if len(out) <= MOVED_MAX else None


def entry(base: Base, moved: Offsets) -> dict[str, Any]:
    """The offset-log form of `base` overlaid with `moved` (B2)."""
    return {BASE_KEY: base.number, MOVED_KEY: batch_plan.encode(moved)}


def base_number(offsets: Mapping[str, Any] | None) -> int | None:
    """The base an entry names; None for Kafka's full JSON."""
    if not offsets or BASE_KEY not in offsets:
        return None
    number = offsets[BASE_KEY]
    if not isinstance(number, int) or isinstance(number, bool):
        raise ValueError(f"an offset-log entry's {BASE_KEY} is {number!r}, not a base number")
    return number


def expand(offsets: Mapping[str, Any] | None, base: Base | None) -> dict[TopicPartition, int]:
    """Every partition's offset an entry stands for (B1); `base`: the one it names (ignored for full JSON)."""
    number = base_number(offsets)
    if number is None:
        return batch_plan.decode(offsets)
    if base is None or base.number != number:
        raise ValueError(f"an offset-log entry names base {number}, not {None if base is None else base.number}")
    assert offsets is not None
    return {**base.offsets, **batch_plan.decode(offsets.get(MOVED_KEY))}


def expired(numbers: Iterable[int], keep: int) -> list[int]:
    """The bases to delete: all but the newest `keep` (B4)."""
    return sorted(numbers)[:-keep] if keep > 0 else sorted(numbers)

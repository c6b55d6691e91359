"""An audit's result (jobs/audit): per partition what was found, and the report's verdict, line and table."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

EXAMPLES = 20  # ranges and differing records kept per partition; the counts are always complete


@dataclass(frozen=True)
class Difference:
    offset: int
    fields: tuple[str, ...]
    at: str  # where the differing copy is: remote topic-partition@offset


@dataclass(frozen=True)
class PartitionAudit:
    topic: str
    partition: int
    start: int
    end: int
    remote: str
    mirrored_to: int | None  # the flow's position; None: the flow has never read the partition
    source_records: int = 0
    mirrored_records: int = 0
    copies: int = 0
    unexpected: int = 0
    missing: int = 0
    missing_ranges: tuple[tuple[int, int], ...] = ()  # inclusive, the first EXAMPLES
    missing_range_count: int = 0
    duplicated: int = 0
    duplicated_ranges: tuple[tuple[int, int], ...] = ()
    duplicated_range_count: int = 0
    differing: int = 0
    differences: tuple[Difference, ...] = ()
    behind: int = 0
    refused: int = 0  # records that would return to the target topic they came from (never written)
    lost: int = 0  # deleted on the source before the flow read them (the flow's loss record; outside the range)
    lost_ranges: tuple[tuple[int, int], ...] = ()  # the newest, [first, end)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def behind_from(self) -> int | None:
        """The first offset of the range the flow has not read yet, if any."""
        first = self.start if self.mirrored_to is None else max(self.start, self.mirrored_to)
        return first if first < self.end else None


@dataclass(frozen=True)
class AuditReport:
    flow: str
    source: str
    target: str
    window: str
    exactly_once: bool
    partitions: tuple[PartitionAudit, ...]
    seconds: float
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    # "full": every record was read on both sides; "nothing": the flow had no partition to audit.
    mode: str = "full"

    def total(self, what: str) -> int:
        return sum(int(getattr(p, what)) for p in self.partitions)

    @property
    def complete(self) -> bool:
        failing = self.total("missing") + self.total("differing")
        return failing == 0 and not (self.exactly_once and self.total("duplicated"))

    @property
    def records_per_s(self) -> float:
        compared = self.total("source_records") + self.total("copies") + self.total("unexpected")
        return compared / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """One line: the verdict, the totals and the first examples of what is wrong."""
        head = f"audit {self.flow} ({self.window})"
        if not self.partitions:
            return (f"{head}: nothing to audit: no topic on {self.source} among the topics the flow replicates "
                    "(a standby flow, or nothing created yet)")
        records = self.total("source_records")
        behind, refused = self.total("behind"), self.total("refused")
        tail = f"; {behind} not yet mirrored (the stream is behind)" if behind else ""
        lost = self.total("lost")
        if lost:
            examples = [f"{p.name} {a}-{b - 1}" for p in self.partitions for a, b in p.lost_ranges][:3]
            tail += (f"; {lost} LOST on {self.source} before the flow read them (deleted by retention or "
                     f"deleteRecords; {', '.join(examples)})")
        if refused:
            tail += (f"; {refused} refused: they came from the {self.target} topic they would be written to "
                     f"({', '.join(self._examples('refused', 3))})")
        if self.complete:
            dup = self.total("duplicated")
            extra = f"; {dup} duplicated (at-least-once)" if dup else ""
            return (f"{head}: complete: {records} source records in {len(self.partitions)} partitions, every "
                    f"mirrored one on {self.target} with identical content{extra}{tail}")
        problems = []
        for what, label in (("missing", "missing"), ("differing", "differ"), ("duplicated", "duplicated")):
            n = self.total(what)
            if n:
                problems.append(f"{n} {label} ({', '.join(self._examples(what, 3))})")
        return f"{head}: INCOMPLETE: {'; '.join(problems)}{tail}"

    def _examples(self, what: str, limit: int) -> list[str]:
        out: list[str] = []
        for p in self.partitions:
            if what == "differing":
                out += [f"{p.name}@{d.offset} {'+'.join(d.fields)}" for d in p.differences]
            elif what == "refused":
                out += [f"{p.name} {p.refused}"] if p.refused else []
            else:
                out += [f"{p.name} {_span(r)}" for r in getattr(p, f"{what}_ranges")]
        return out[:limit] + (["…"] if len(out) > limit else [])

    def table(self) -> str:
        if not self.partitions:
            return self.summary()
        rows = [("partition", "range", "source", "mirrored", "missing", "duplicated", "differing", "behind",
                 "refused", "first examples")]
        for p in self.partitions:
            examples = ([f"missing {_span(r)}" for r in p.missing_ranges[:3]]
                        + [f"dup {_span(r)}" for r in p.duplicated_ranges[:3]]
                        + [f"@{d.offset} {'+'.join(d.fields)}" for d in p.differences[:3]])
            behind = f"{p.behind} from {p.behind_from}" if p.behind else "0"
            rows.append((p.name, f"{p.start}-{p.end}", str(p.source_records), str(p.mirrored_records),
                         str(p.missing), str(p.duplicated), str(p.differing), behind, str(p.refused),
                         ", ".join(examples)))
        lines = aligned(rows, left=(0, 1, 9))
        cost = (f"{self.total('source_records') + self.total('copies') + self.total('unexpected')} records compared "
                f"in {self.seconds:.1f} s ({self.records_per_s:,.0f} records/s), every one read on both sides")
        return "\n".join([*lines, "", self.summary(), cost])

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["complete"] = self.complete
        out["summary"] = self.summary()
        out["records_per_s"] = round(self.records_per_s, 1)
        for p, d in zip(self.partitions, out["partitions"], strict=True):
            d["behind_from"] = p.behind_from
        for name in ("source_records", "mirrored_records", "missing", "duplicated", "differing", "behind",
                     "unexpected", "refused", "lost"):
            out[name] = self.total(name)
        as_json: dict[str, Any] = json.loads(json.dumps(out))  # tuples as lists, as a JSON reader or XCom sees them
        return as_json


def aligned(rows: Sequence[Sequence[str]], left: Sequence[int]) -> list[str]:
    """A plain-text table: columns padded to their widest cell, the `left` ones left-aligned, numbers right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            .rstrip() for r in rows]


def _span(r: Sequence[int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"

"""A streaming query's offset log: where each micro-batch of a flow ends, per source partition.

Spark writes `offsets/<batch>` into the query's checkpoint before it runs a batch, and `commits/<batch>` once the
batch is done. An offset-log file is a version line ("v1"), the batch's metadata, then one line per source: ours is
Kafka's JSON `{topic: {partition: offset}}`, or a base and what moved since it (rules/offset_bases), the bases being
files in BASES beside the logs, written by the planner (`write_base`) and read here.
Bound: BASES holds the newest KEEP_BASES bases (offset_bases B4; Spark keeps the last 100 batches' entries).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mirrorflow.errors import OperationalError
from mirrorflow.rules import batch_plan, offset_bases
from mirrorflow.rules.offset_bases import Base

TopicPartition = tuple[str, int]
BASES = "mirrorflow-offset-bases"
KEEP_BASES = 102  # Spark's spark.sql.streaming.minBatchesToRetain (100), and two


def write_base(folder: Path, base: Base) -> None:
    """A new base, durable before the entry naming it is: written aside, synced, renamed; older ones past
    KEEP_BASES deleted (offset_bases B4)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{base.number}.json"
    staged = target.with_suffix(f".{os.getpid()}")
    with open(staged, "w", encoding="utf-8") as out:
        out.write(json.dumps(batch_plan.encode(base.offsets), separators=(",", ":")))  # dumps: C, dump: Python
        out.flush()
        os.fsync(out.fileno())
    staged.replace(target)
    for number in offset_bases.expired(base_numbers(folder), KEEP_BASES):
        (folder / f"{number}.json").unlink(missing_ok=True)


def base_numbers(folder: Path) -> list[int]:
    return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()) if folder.is_dir() else []


def read_base(folder: Path, number: int) -> Base:
    return _base(number, (folder / f"{number}.json").read_text(encoding="utf-8"))


def _base(number: int, text: str) -> Base:
    return Base(number, batch_plan.decode(json.loads(text)))


def flatten(offsets: Mapping[str, Mapping[str, int] | None]) -> dict[TopicPartition, int]:
    """Kafka's source offsets JSON as {(topic, partition): offset}."""
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() if isinstance(parts, Mapping)
            for p, o in parts.items()}


def parse_ends(lines: list[str], base: Callable[[int], Base] | None = None) -> dict[TopicPartition, int] | None:
    """The source's end offsets in an offset-log file; None if it is not one. `base`: reads the base an entry
    names (an entry naming one without it is no offset-log file this reader can read)."""
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    offsets = json.loads(lines[2])
    number = offset_bases.base_number(offsets)
    if number is None:
        return flatten(offsets)
    return offset_bases.expand(offsets, base(number)) if base is not None else None


def batch_ids(checkpoint: Path) -> list[int]:
    """The batches the offset log holds (a local checkpoint directory), oldest first."""
    logs = checkpoint / "offsets"
    return sorted(int(p.name) for p in logs.iterdir() if p.name.isdigit()) if logs.is_dir() else []


def uncommitted(checkpoint: Path) -> bool:
    """Whether the offset log's newest batch has no commit (a local checkpoint directory): Spark runs it again, the
    batch a query failed, was stopped or killed in."""
    ids = batch_ids(checkpoint)
    commits = checkpoint / "commits"
    return bool(ids) and not (commits / str(ids[-1])).exists()


def committed_ends(checkpoint: Path) -> dict[TopicPartition, int]:
    """The end offsets of the newest batch the checkpoint (a local directory) committed; {} if none."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return {}
    try:
        lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
        return parse_ends(lines, lambda number: read_base(checkpoint / BASES, number)) or {}
    except (OSError, ValueError):
        return {}


def batch_ends(spark: Any, checkpoint: Path, batch_id: int, flow: str) -> dict[TopicPartition, int]:
    """The batch's end offsets: from the local file when the checkpoint is a local directory, else through the
    session's Hadoop file system (a remote checkpoint). Through py4j the read took 80-95 ms a batch with the cores
    busy (a dozen round trips to the JVM; the many mode's driver spent most of its 92 ms a batch there)."""
    local = Path(checkpoint) / "offsets" / str(batch_id)
    try:
        lines, where = local.read_text(encoding="utf-8").splitlines(), str(local)
        remote = False
    except FileNotFoundError:
        lines, where = _hadoop_lines(spark, f"{checkpoint}/offsets/{batch_id}")
        remote = True

    def base(number: int) -> Base:
        if not remote:
            return read_base(Path(checkpoint) / BASES, number)
        return _base(number, "".join(_hadoop_lines(spark, f"{checkpoint}/{BASES}/{number}.json")[0]))

    try:
        ends = parse_ends(lines, base)
    except (OSError, ValueError) as exc:
        raise OperationalError(f"flow {flow}: the offset log {where} names a base that cannot be read ({exc}); "
                               "restore it, or move the checkpoint aside: a new one resumes where the offset syncs "
                               "say") from None
    if ends is None:
        raise OperationalError(f"flow {flow}: unexpected offset log {where}")
    return ends


def _hadoop_lines(spark: Any, location: str) -> tuple[list[str], str]:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(path), "UTF-8"))
    try:
        lines = []
        while (line := reader.readLine()) is not None:
            lines.append(line)
    finally:
        reader.close()
    return lines, str(path)

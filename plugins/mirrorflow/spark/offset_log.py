"""A streaming query's offset log: where each micro-batch of a flow ends, per source partition.

Spark writes `offsets/<batch>` into the query's checkpoint before it runs a batch, and `commits/<batch>` once the
batch is done. An offset-log file is a version line ("v1"), the batch's metadata, then one line per source: ours is
Kafka's JSON `{topic: {partition: offset}}`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mirrorflow.errors import OperationalError

TopicPartition = tuple[str, int]


def flatten(offsets: Mapping[str, Mapping[str, int] | None]) -> dict[TopicPartition, int]:
    """Kafka's source offsets JSON as {(topic, partition): offset}."""
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() if isinstance(parts, Mapping)
            for p, o in parts.items()}


def parse_ends(lines: list[str]) -> dict[TopicPartition, int] | None:
    """The source's end offsets in an offset-log file; None if it is not one."""
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    return flatten(json.loads(lines[2]))


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
        return parse_ends((checkpoint / "offsets" / str(max(commits))).read_text().splitlines()) or {}
    except (OSError, ValueError):
        return {}


def batch_ends(spark: Any, checkpoint: Path, batch_id: int, flow: str) -> dict[TopicPartition, int]:
    """The batch's end offsets: from the local file when the checkpoint is a local directory, else through the
    session's Hadoop file system (a remote checkpoint). Through py4j the read took 80-95 ms a batch with the cores
    busy (a dozen round trips to the JVM; the many mode's driver spent most of its 92 ms a batch there)."""
    local = Path(checkpoint) / "offsets" / str(batch_id)
    try:
        lines, where = local.read_text(encoding="utf-8").splitlines(), str(local)
    except FileNotFoundError:
        lines, where = _hadoop_lines(spark, f"{checkpoint}/offsets/{batch_id}")
    ends = parse_ends(lines)
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

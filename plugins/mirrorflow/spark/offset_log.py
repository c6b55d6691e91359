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
    """The batch's end offsets, read through the session's Hadoop file system (the checkpoint may be remote)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets/{batch_id}")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(path), "UTF-8"))
    try:
        lines = []
        while (line := reader.readLine()) is not None:
            lines.append(line)
    finally:
        reader.close()
    ends = parse_ends(lines)
    if ends is None:
        raise OperationalError(f"flow {flow}: unexpected offset log {path}")
    return ends

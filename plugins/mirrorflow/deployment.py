"""How the Airflow DAGs find the deployment's config and name what they generate from it."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

from mirrorflow import config
from mirrorflow.config import Flow

DEFAULT_CONFIG = Path("include") / "mirrorflow.properties"
CONFIG_VARIABLE = "mirrorflow_config"
SPARK_CONNECTION = "mirrorflow_spark"  # the Spark master the stream DAGs submit to (host local[*] locally)
# Scheduled DAGs start here and never catch up: only the current interval matters to a mirror.
START = datetime(2026, 1, 1, tzinfo=UTC)


def config_path(project: Path) -> Path:
    """`$MIRRORFLOW_CONFIG`, else the Airflow Variable `mirrorflow_config`, else `include/mirrorflow.properties`."""
    if os.environ.get("MIRRORFLOW_CONFIG"):
        return Path(os.environ["MIRRORFLOW_CONFIG"])
    from airflow.sdk import Variable

    return Path(Variable.get(CONFIG_VARIABLE, default=None) or project / DEFAULT_CONFIG)


def flows(path: Path, enabled_by: str | None = None) -> list[Flow]:
    """The config's enabled flows; with `enabled_by`, only those whose flag of that name is true."""
    cfg = config.load(path)
    return [f for f in cfg.enabled_flows if enabled_by is None or f.flag(enabled_by)]


def dag_id(kind: str, flow: Flow) -> str:
    """`mirrorflow_{kind}__{source}_to_{target}`, with characters Airflow refuses replaced by `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"mirrorflow_{kind}__{flow.source}_to_{flow.target}")


def sync_interval(flow: Flow) -> int:
    """The metadata sync DAG's period: the shortest interval among the enabled parts (topics always are)."""
    intervals = [flow.number("refresh.topics.interval.seconds")]
    for part in ("sync.topic.configs", "sync.topic.acls"):
        if flow.flag(f"{part}.enabled"):
            intervals.append(flow.number(f"{part}.interval.seconds"))
    return max(1, min(intervals))

"""How the Airflow DAGs find the deployment's config and name what they generate from it."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirrorflow.model import client_config, config, keys, properties
from mirrorflow.model.config import Flow, MirrorConfig

DEFAULT_CONFIG = Path("include") / "mirrorflow.properties"
CONFIG_VARIABLE = "mirrorflow_config"
# The Variable as Airflow itself reads it from the environment (`AIRFLOW_VAR_{KEY}`): DAG files look for the config
# at parse time, when a metadata-database round trip per file is what Airflow's best practices rule out.
CONFIG_VARIABLE_ENV = f"AIRFLOW_VAR_{CONFIG_VARIABLE.upper()}"
SPARK_CONNECTION = "mirrorflow_spark"  # the Spark master the stream DAGs submit to (host local[*] locally)
# Every task: owned by mirrorflow; no blind retries (scheduled DAGs run again at their next interval, runbook
# steps must not repeat by themselves).
TASK_DEFAULTS: dict[str, object] = {"owner": "mirrorflow", "retries": 0}
# For idempotent scheduled tasks: one retry covers a task that could not even start (at Airflow's start the scheduler
# may queue tasks before the API server answers them). A finding (an incomplete audit) fails without a retry.
RETRIED_ONCE: dict[str, object] = {**TASK_DEFAULTS, "retries": 1, "retry_delay": timedelta(seconds=30)}
# Scheduled DAGs start here and never catch up: only the current interval matters to a mirror.
START = datetime(2026, 1, 1, tzinfo=UTC)
# The DAGs a person on call watches (each flow's upkeep, whose health fails on trouble) and triggers (runbooks):
# the DAG list filtered by this tag, linked from the flows view.
ON_CALL_TAG = "on-call"


def config_path(project: Path) -> Path:
    """`$MIRRORFLOW_CONFIG`, else the Airflow Variable `mirrorflow_config` given in the environment
    (`$AIRFLOW_VAR_MIRRORFLOW_CONFIG`), else `include/mirrorflow.properties` under `project`. Environment only: no
    metadata-database round trip while a DAG file is parsed."""
    chosen = os.environ.get("MIRRORFLOW_CONFIG") or os.environ.get(CONFIG_VARIABLE_ENV)
    return Path(chosen) if chosen else project / DEFAULT_CONFIG


def connection_id(alias: str) -> str:
    """The Airflow connection (Kafka provider type) that may hold a cluster's client settings."""
    return f"mirrorflow_{alias}"


def load(path: Path) -> MirrorConfig:
    """The config, with each cluster's client settings from Airflow connection `mirrorflow_{alias}` if it exists.

    The connection's extra is a librdkafka config dict, as the Kafka provider keeps it; its keys replace the
    file's `{alias}.*` keys of the same name. Secret values are registered with Airflow's log masker.
    """
    entries = properties.load(path)
    cfg = config.from_entries(entries, source=str(path))
    added: list[properties.Entry] = []
    for alias in cfg.clusters:
        extra = _connection_extra(connection_id(alias))
        if extra is None:
            continue
        for key, value in client_config.from_librdkafka(extra, where=f"Airflow connection {connection_id(alias)}"
                                                       ).items():
            if keys.is_sensitive(key) or "password" in key:
                _mask(value)
            added.append(properties.Entry(f"{alias}.{key}", value, 0))
    if not added:
        return cfg
    replaced = {e.key for e in added}
    return config.from_entries([e for e in entries if e.key not in replaced] + added, source=str(path))


def _connection_extra(conn_id: str) -> dict[str, object] | None:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    extra = connection.extra_dejson
    if connection.password:
        _mask(connection.password)
    return dict(extra) if isinstance(extra, dict) else None


def _mask(secret: str) -> None:
    from airflow.sdk.log import mask_secret

    mask_secret(secret)
    if "password=\"" in secret:  # a JAAS line: mask the password inside it too
        mask_secret(secret.split('password="', 1)[1].split('"', 1)[0])


def flows(path: Path, enabled_by: str | None = None) -> list[Flow]:
    """The config's enabled flows; with `enabled_by`, only those whose flag of that name is true."""
    cfg = config.load(path)
    return [f for f in cfg.enabled_flows if enabled_by is None or f.flag(enabled_by)]


def dag_id(kind: str, flow: Flow) -> str:
    """`mirrorflow_{kind}__{source}_to_{target}`, with characters Airflow refuses replaced by `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"mirrorflow_{kind}__{flow.source}_to_{flow.target}")


def spark_master() -> str:
    """The Spark master batch tasks run their driver against: the host of `mirrorflow_spark`, else local."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException, AirflowRuntimeError

    try:
        return Connection.get(SPARK_CONNECTION).host or "local[*]"
    except (AirflowRuntimeError, AirflowNotFoundException):
        return "local[*]"


def stream_connection(flow: Flow) -> str:
    """The Airflow connection the flow's stream DAG submits through: `mirrorflow_spark`, or when the file names the
    flow's master (`mirrorflow.stream.spark.master`) one made from it, `mirrorflow_spark__{source}_to_{target}`,
    given to Airflow in this process's environment (`AIRFLOW_CONN_…`, read before the metadata database)."""
    if not flow.given("mirrorflow.stream.spark.master"):
        return SPARK_CONNECTION
    conn_id = re.sub(r"[^A-Za-z0-9_]", "_", f"{SPARK_CONNECTION}__{flow.source}_to_{flow.target}")
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
        {"conn_type": "spark", "host": flow.stream.spark_master})
    return conn_id


def flow_period(flow: Flow) -> int:
    """How often the flow DAG runs: the shortest interval among its metadata sync's enabled parts (topics always
    are) and its health check. Invariant: at least 1 s; with MM2's defaults, 600 s (one run per 10 minutes)."""
    intervals = [flow.number("refresh.topics.interval.seconds"), flow.number("mirrorflow.health.interval.seconds")]
    for part in ("sync.topic.configs", "sync.topic.acls"):
        if flow.flag(f"{part}.enabled"):
            intervals.append(flow.number(f"{part}.interval.seconds"))
    return max(1, min(intervals))


def checkpoint_window(flow: Flow) -> int:
    """How long a flow run's checkpoint task runs rounds: its period, at most `mirrorflow.checkpoints.task.seconds`
    (0: one round), so one run's rounds end before the next run's begin."""
    return min(flow_period(flow), flow.number("mirrorflow.checkpoints.task.seconds"))

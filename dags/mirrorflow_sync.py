"""Metadata sync: one DAG per enabled flow. It plans, then applies topics, configs and ACLs in that order.

Each run is idempotent: it changes only what differs and logs every change it makes. The DAG runs at the
shortest enabled interval among `refresh.topics.interval.seconds`, `sync.topic.configs.interval.seconds`
and `sync.topic.acls.interval.seconds`. A flow whose cluster is down fails only its own DAG run.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, task
from mirrorflow import deployment, scheduled
from mirrorflow.config import Flow

CONFIG = deployment.config_path(Path(__file__).resolve().parent.parent)


def sync_dag(flow: Flow) -> DAG:
    with DAG(dag_id=deployment.dag_id("sync", flow), schedule=timedelta(seconds=deployment.sync_interval(flow)),
             start_date=deployment.START, catchup=False, max_active_runs=1, doc_md=__doc__,
             default_args=deployment.TASK_DEFAULTS,
             tags=["mirrorflow", "sync", flow.source, flow.target]) as dag:

        @task(task_id="plan")
        def plan() -> dict[str, object]:
            return scheduled.plan(CONFIG, flow.name)

        @task(task_id="apply_topics")
        def apply_topics() -> dict[str, object]:
            return scheduled.sync(CONFIG, flow.name, "topics")

        @task(task_id="apply_configs")
        def apply_configs() -> dict[str, object]:
            return scheduled.sync(CONFIG, flow.name, "configs")

        @task(task_id="apply_acls")
        def apply_acls() -> dict[str, object]:
            return scheduled.sync(CONFIG, flow.name, "acls")

        plan() >> apply_topics() >> apply_configs() >> apply_acls()
    return dag


for _flow in deployment.flows(CONFIG):
    globals()[deployment.dag_id("sync", _flow)] = sync_dag(_flow)

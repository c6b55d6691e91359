"""Consumer-group checkpoints: one DAG per enabled flow.

Each run translates every selected group's offsets every `emit.checkpoints.interval.seconds` for
`mirrorflow.checkpoints.task.seconds`, and writes MM2 checkpoints (and, with `sync.group.offsets.enabled`,
commits them to idle groups on the target). Runs are idempotent.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, task
from mirrorflow import deployment, scheduled
from mirrorflow.config import Flow

CONFIG = deployment.config_path(Path(__file__).resolve().parent.parent)


def checkpoints_dag(flow: Flow) -> DAG:
    interval = flow.number("emit.checkpoints.interval.seconds")
    window = max(interval, flow.number("mirrorflow.checkpoints.task.seconds"))
    with DAG(dag_id=deployment.dag_id("checkpoints", flow), schedule=timedelta(seconds=window),
             start_date=deployment.START, catchup=False, max_active_runs=1, doc_md=__doc__,
             default_args=deployment.TASK_DEFAULTS,
             tags=["mirrorflow", "checkpoints", flow.source, flow.target]) as dag:

        @task(task_id="checkpoint_round", execution_timeout=timedelta(seconds=window + max(60, 3 * interval)))
        def checkpoint_round() -> dict[str, object]:
            return scheduled.checkpoint_round(CONFIG, flow.name)

        checkpoint_round()
    return dag


for _flow in deployment.flows(CONFIG, "emit.checkpoints.enabled"):
    globals()[deployment.dag_id("checkpoints", _flow)] = checkpoints_dag(_flow)

"""A flow's scheduled upkeep: one `mirrorflow_flow__A_to_B` DAG per enabled flow, one run per period.

Each run, in parallel:
- `health` fails, so Airflow's failure alerts fire, when the flow is requested running but has had no stream for
  `mirrorflow.health.grace.seconds` (120), or is more than `mirrorflow.health.lag.max.seconds` (300) behind;
- `plan`, then `apply_topics`, `apply_configs`, `apply_acls`: the metadata sync, which changes only what differs
  and logs every change;
- `checkpoints` (with `emit.checkpoints.enabled`): a checkpoint round every `emit.checkpoints.interval.seconds`
  until the period ends, with one reader of the offset syncs for all rounds.

The period is the shortest of `refresh.topics.interval.seconds`, the enabled `sync.topic.configs`/`acls`
intervals and `mirrorflow.health.interval.seconds`: 600 s with the defaults, so a quiet flow makes one run per
10 minutes. A failed task fails only its own flow's run; the other tasks of the run still do their work.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, task
from mirrorflow.entry import deployment, scheduled
from mirrorflow.model.config import Flow

CONFIG = deployment.config_path(Path(__file__).resolve().parent.parent)


def flow_dag(flow: Flow) -> DAG:
    period = deployment.flow_period(flow)
    with DAG(dag_id=deployment.dag_id("flow", flow), schedule=timedelta(seconds=period),
             start_date=deployment.START, catchup=False, max_active_runs=1, doc_md=__doc__,
             default_args=deployment.RETRIED_ONCE,
             tags=["mirrorflow", deployment.ON_CALL_TAG, "flow", flow.source, flow.target]) as dag:

        @task(task_id="health", execution_timeout=timedelta(minutes=10))
        def health() -> dict[str, object]:
            return scheduled.health_check(CONFIG, flow.name)

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

        health()
        plan() >> apply_topics() >> apply_configs() >> apply_acls()
        if flow.flag("emit.checkpoints.enabled"):
            window = deployment.checkpoint_window(flow)
            interval = flow.number("emit.checkpoints.interval.seconds")

            @task(task_id="checkpoints", execution_timeout=timedelta(seconds=window + max(60, 3 * interval)))
            def checkpoints() -> dict[str, object]:
                return scheduled.checkpoint_rounds(CONFIG, flow.name, window)

            checkpoints()
    return dag


for _flow in deployment.flows(CONFIG):
    globals()[deployment.dag_id("flow", _flow)] = flow_dag(_flow)

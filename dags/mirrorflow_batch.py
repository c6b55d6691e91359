"""The batch side: an audit of every flow each closed window, and a backfill the person on call triggers.

`mirrorflow_audit__A_to_B` runs on the cron schedule `mirrorflow.audit.schedule` (default
`0 * * * *`, hourly, UTC) over the window that just closed: a Spark job reads the flow's source records with
timestamps in the window and their copies on B, and compares them by content. The task's result (XCom
`report`, also its return value) is the report: per partition, source and mirrored records, missing offsets
as ranges, duplicated offsets, records whose key, value, headers or timestamp differ, and what the stream has
not mirrored yet (not counted as missing). The task fails when anything is missing or differs, so Airflow's
alerting reaches the person on call; the failure names the first examples and is not retried (a retry covers only
a task that could not start).

`mirrorflow_backfill` copies a bounded range of one flow with the stream's fidelity and skips what the target
holds, so running it twice writes nothing the second time. A running stream makes it refuse, unless `pause`
is set: then the stream is stopped cleanly for the backfill and asked to run again after. Below the stream's
position it repairs (e.g. the ranges an audit found missing); on partitions the flow has never read it seeds,
and the stream continues exactly where it ended. Same jobs as `mirrorflow audit` and `mirrorflow backfill`.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable
from mirrorflow.entry import deployment, scheduled
from mirrorflow.model.config import Flow

CONFIG = deployment.config_path(Path(__file__).resolve().parent.parent)
FLOWS = deployment.flows(CONFIG)


def audit_dag(flow: Flow) -> DAG:
    windows = CronDataIntervalTimetable(flow.value("mirrorflow.audit.schedule"), timezone="UTC")
    with DAG(dag_id=deployment.dag_id("audit", flow), schedule=windows,
             start_date=deployment.START, catchup=False, max_active_runs=1, doc_md=__doc__,
             default_args=deployment.RETRIED_ONCE, tags=["mirrorflow", "audit", flow.source, flow.target]) as dag:

        @task(task_id="audit", execution_timeout=timedelta(hours=2))
        def audit() -> dict[str, Any]:
            context = get_current_context()
            start, end = context.get("data_interval_start"), context.get("data_interval_end")
            if start is None or end is None:  # triggered without a logical date: the window that closed last
                window = windows.infer_manual_data_interval(run_after=pendulum.instance(context["dag_run"].run_after))
                start, end = window.start, window.end
            report = scheduled.audit_window(CONFIG, flow.name, start, end, deployment.spark_master())
            context["ti"].xcom_push(key="report", value=report)
            scheduled.require_complete(report)
            return report

        audit()
    return dag


with DAG(dag_id="mirrorflow_backfill", schedule=None, start_date=deployment.START, catchup=False,
         max_active_runs=1, doc_md=__doc__, default_args=deployment.TASK_DEFAULTS,
         tags=["mirrorflow", "backfill"],
         params={
             "flow": Param(FLOWS[0].name if FLOWS else "", type="string", title="Flow",
                           description="The flow to backfill, source->target", enum=[f.name for f in FLOWS] or [""]),
             "from_offsets": Param(None, type=["null", "string"], title="From offsets (JSON)",
                                   description='Where to start per partition, e.g. {"orders": {"0": 10, "1": -2}} '
                                               "(-2: the earliest). Give these or a from time"),
             "from_time": Param(None, type=["null", "string"], title="From time",
                                description="The first record's time, ISO 8601 (UTC if no zone) or epoch ms; "
                                            "used when no offsets are given"),
             "to_time": Param(None, type=["null", "string"], title="To time",
                              description="Stop before records at or after this time; empty: up to now"),
             "topics": Param(None, type=["null", "string"], title="Topics (regex)",
                             description="Only source topics this Java regex matches whole (as the config's topics); "
                                         "empty: every topic of the flow"),
             "pause": Param(False, type="boolean", title="Pause the stream",
                            description="Stop the flow's running stream for the backfill and ask it to run again "
                                        "after (without this, a running stream makes the backfill refuse)"),
         }) as backfill_dag:

    @task(task_id="backfill", execution_timeout=timedelta(hours=12))
    def backfill() -> dict[str, Any]:
        return scheduled.backfill(CONFIG, get_current_context()["params"], deployment.spark_master())

    backfill()


for _flow in FLOWS:
    globals()[deployment.dag_id("audit", _flow)] = audit_dag(_flow)

"""The mirror stream of each enabled flow: launched, watched and restarted by the scheduler; controlled from the UI.

`mirrorflow_stream__A_to_B` runs one run at a time, the next at most 30 seconds after the last. `check` reads the
flow's requested state and its lease on B; while the flow is stopped or runs elsewhere it waits, deferred (no
worker slot), looking every `mirrorflow.stream.watch.poll.seconds` (15), for up to `mirrorflow.stream.watch.seconds`
(a day) and then ends skipped: a stopped flow's stream DAG makes one run a day. When the flow should run and no
instance holds the lease, `mirror` submits `spark_jobs/mirror_stream.py` with the Spark provider through the
Airflow connection `mirrorflow_spark` (host `local[*]` for the embedded default; `yarn` with `deploy-mode=cluster`,
or `k8s://…`, in production, where the cluster restarts the driver and this run ends once the job is submitted),
or to the flow's `mirrorflow.stream.spark.master` when the file sets one, with its `mirrorflow.stream.*` settings
(driver memory, records per batch, trigger). In local mode the `mirror` task lasts as long as the stream: when
the stream dies, the run ends and the next one, at most 30 seconds later, starts it again at once. Two instances
can never write at once: the second finds the lease held and exits (exactly-once mode also fences the first's
producers).

The scheduled health check is the `health` task of the flow's `mirrorflow_flow__A_to_B` DAG.

`mirrorflow_control__A_to_B` is triggered by hand: `health` (fails if the flow should run and does not),
`stop` (the running micro-batch finishes and its progress is committed; supervisors leave the flow stopped),
`start`, or `restart`.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, get_current_context, task
from mirrorflow.entry import deployment, scheduled
from mirrorflow.entry.stream_watch import StreamLaunchCheck
from mirrorflow.model.config import Flow

PROJECT = Path(__file__).resolve().parent.parent
CONFIG = deployment.config_path(PROJECT)
APPLICATION = PROJECT / "spark_jobs" / "mirror_stream.py"
BIN = Path(sys.executable).parent  # spark-submit and the driver's Python come from this environment


def stream_dag(flow: Flow) -> DAG:
    with DAG(dag_id=deployment.dag_id("stream", flow), schedule=timedelta(seconds=30), start_date=deployment.START,
             catchup=False, max_active_runs=1, doc_md=__doc__, default_args=deployment.TASK_DEFAULTS,
             tags=["mirrorflow", "stream", flow.source, flow.target]) as dag:

        check = StreamLaunchCheck(task_id="check", config_path=CONFIG, flow_name=flow.name)
        jars: Any = check.output  # an XComArg: the jar list once the check has run
        mirror = SparkSubmitOperator(
            task_id="mirror", conn_id=deployment.stream_connection(flow), application=str(APPLICATION),
            name=f"mirrorflow {flow.name}", jars=jars, driver_memory=flow.stream.driver_memory,
            # In cluster mode, return once submitted: the cluster supervises the driver, the lease the rest.
            conf={"spark.yarn.submit.waitAppCompletion": "false",
                  "spark.kubernetes.submission.waitAppCompletion": "false"},
            application_args=["--config", str(CONFIG), "--flow", flow.name],
            env_vars={"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable,
                      "PYSPARK_DRIVER_PYTHON": sys.executable},
            execution_timeout=None)
        jars >> mirror
    return dag


def control_dag(flow: Flow) -> DAG:
    with DAG(dag_id=deployment.dag_id("control", flow), schedule=None, start_date=deployment.START, catchup=False,
             doc_md=__doc__, default_args=deployment.TASK_DEFAULTS,
             tags=["mirrorflow", "control", flow.source, flow.target],
             params={
                 "action": Param("health", enum=["health", "start", "stop", "restart"], title="Action",
                                 description="health: is it running, how far behind; stop: finish the running "
                                             "batch and stay stopped; start: run again; restart: stop, then start"),
                 "reason": Param(None, type=["null", "string"], title="Reason (optional)",
                                 description="Recorded with a start, stop or restart request on the flow's target "
                                             "cluster"),
             }) as dag:

        @task(task_id="act", execution_timeout=timedelta(minutes=5))
        def act() -> dict[str, object]:
            params = get_current_context()["params"]
            return scheduled.control(CONFIG, flow.name, params["action"], params.get("reason") or "")

        act()
    return dag


for _flow in deployment.flows(CONFIG):
    globals()[deployment.dag_id("stream", _flow)] = stream_dag(_flow)
    globals()[deployment.dag_id("control", _flow)] = control_dag(_flow)

"""The repo's DAGs as Airflow parses them for one deployment (Airflow imported only when used)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.clusters import REPO


@contextlib.contextmanager
def deployment(config_path: Path) -> Iterator[Any]:
    """The repo's DAGs as Airflow parses them for a deployment using `config_path`.

    The config stays selected for the block: `dag.test()` parses the DAG file again when it serializes it.
    """
    from airflow.dag_processing.dagbag import DagBag

    saved = os.environ.get("MIRRORFLOW_CONFIG")
    os.environ["MIRRORFLOW_CONFIG"] = str(config_path)
    try:
        yield DagBag(dag_folder=str(REPO / "dags"))
    finally:
        if saved is None:
            del os.environ["MIRRORFLOW_CONFIG"]
        else:
            os.environ["MIRRORFLOW_CONFIG"] = saved


def run_dag(config_path: Path, dag_id: str, conf: dict[str, Any], only: str | None = None
            ) -> tuple[str, dict[str, str], dict[str, Any]]:
    """dag.test() of a DAG of the deployment (`only` that task and its upstream): the run's state, each task's state,
    and the report task's result."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with deployment(config_path) as bag:
        assert bag.import_errors == {}
        dag = bag.dags[dag_id] if only is None else bag.dags[dag_id].partial_subset(only)
        run = dag.test(run_conf=conf)
    with create_session() as session:
        states = {ti.task_id: str(ti.state) for ti in
                  session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run.run_id)}
        rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run.run_id, task_id="report",
                                                  key="return_value").all()
        result = XComModel.deserialize_value(rows[0]) if rows else {}
    return str(run.state), states, result

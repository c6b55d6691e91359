"""Registers mirrorflow's parts with Airflow: its pages (mirrorflow.entry.airflow_views: Flows, and each run's
report tab), and a scheduler listener that notes a runbook's dry run as the run starts, so the run's page says
so. A task cannot write its own run's note (the Task SDK has no such call); the
scheduler's listener can, in the session that starts the run."""

from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin
from mirrorflow.entry import airflow_views, scheduled


class DryRunNotes:
    @hookimpl
    def on_dag_run_running(self, dag_run: Any, msg: str) -> None:
        note = scheduled.runbook_run_note(dag_run.dag_id, dag_run.conf, dag_run.note)
        if note is not None:
            dag_run.note = note  # committed with the scheduler's session that starts the run


class MirrorflowViews(AirflowPlugin):
    name = "mirrorflow"
    _parts = airflow_views.plugin_parts()
    fastapi_apps = _parts["fastapi_apps"]
    external_views = _parts["external_views"]
    listeners = (DryRunNotes(),)

"""Registers mirrorflow's pages with Airflow's UI (mirrorflow.entry.airflow_views): Flows, and each run's report tab;
and the listener that notes runbook dry runs (mirrorflow.entry.run_notes)."""

from airflow.plugins_manager import AirflowPlugin
from mirrorflow.entry import airflow_views, run_notes


class MirrorflowViews(AirflowPlugin):
    name = "mirrorflow"
    _parts = airflow_views.plugin_parts()
    fastapi_apps = _parts["fastapi_apps"]
    external_views = _parts["external_views"]
    listeners = (run_notes,)

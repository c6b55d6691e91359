"""Registers mirrorflow's pages with Airflow's UI (mirrorflow.entry.airflow_views): Flows, and each run's report tab."""

from airflow.plugins_manager import AirflowPlugin
from mirrorflow.entry import airflow_views


class MirrorflowViews(AirflowPlugin):
    name = "mirrorflow"
    _parts = airflow_views.plugin_parts()
    fastapi_apps = _parts["fastapi_apps"]
    external_views = _parts["external_views"]

"""mirrorflow inside Airflow's UI: a Flows page, and a report tab on every DAG run.

`plugins/mirrorflow_views.py` registers these with Airflow (an Airflow 3 plugin: a FastAPI app mounted at
`/mirrorflow`, shown through external views). Both pages need a logged-in user, as Airflow's own API does:
- **Flows** (`/mirrorflow/flows`): per enabled flow, read from its clusters as `mirrorflow health` does:
  requested state, running or not, lag in records and seconds, newest heartbeat and checkpoint age, and a
  link to the stream's Spark UI when the driver runs on this host;
- **mirrorflow report** (`/mirrorflow/runs/{dag_id}/{run_id}`, a tab on each run's page): the runbook's
  report (or its preflight summary when it stopped before the report), the audit's or the backfill's verdict,
  the control action's health line, read from the run's XComs.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mirrorflow.entry import deployment
from mirrorflow.errors import MirrorflowError
from mirrorflow.jobs import checkpoints, lifecycle
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.status import metrics

log = logging.getLogger(__name__)
PREFIX = "/mirrorflow"
PROJECT = Path(__file__).resolve().parents[3]
STATUS_FRESH_S = 60.0  # the driver rewrites its status file every 10 s
# The XComs each kind of DAG leaves, in the order a report page looks for them: (task, key).
REPORTS: Sequence[tuple[str, str]] = (("report", "return_value"), ("audit", "report"),
                                      ("backfill", "return_value"), ("act", "return_value"),
                                      ("preflight", "return_value"))
_STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:1.2rem;color:#1a202c}
table{border-collapse:collapse;margin:.6rem 0}th,td{border:1px solid #cbd5e0;padding:.3rem .6rem;text-align:left}
td.n{text-align:right}.bad{color:#c53030;font-weight:600}.ok{color:#276749}.muted{color:#718096}
pre{background:#f7fafc;padding:.6rem;overflow:auto}
</style>"""


def config_path() -> Path:
    """The deployment's config, found as the DAGs find it."""
    return deployment.config_path(PROJECT)


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{_STYLE}"
            f"</head><body>{body}</body></html>")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def flow_rows(cfg: config.MirrorConfig, names: set[str] | None = None) -> list[dict[str, Any]]:
    """What the Flows page shows, one dict per enabled flow (of `names`, if given); a flow whose clusters do not
    answer says why."""
    rows = []
    for flow in cfg.enabled_flows:
        if names is not None and flow.name not in names:
            continue
        row: dict[str, Any] = {"flow": flow.name}
        try:
            found = lifecycle.health(FlowLink.of(cfg, flow))
            row.update(requested=found.requested.state, running=found.alive, holders=list(found.holders),
                       lag_records=found.lag_records, lag_seconds=found.lag_seconds,
                       heartbeat_age_s=found.heartbeat_age_s, lag_error=found.source_error or found.lease_error,
                       checkpoint_age_s=checkpoints.newest_checkpoint_age_s(FlowLink.of(cfg, flow)))
        except MirrorflowError as exc:
            row["error"] = str(exc)
        status = metrics.read_status(metrics.status_file(flow)) or {}
        fresh = time.time() - float(status.get("updated", 0)) < STATUS_FRESH_S  # a killed driver leaves "running"
        if row.get("running") and fresh and status.get("state") in ("running", "stalled") and status.get("spark-ui"):
            row["spark_ui"] = status["spark-ui"]
        rows.append(row)
    return rows


def flows_html(rows: Sequence[Mapping[str, Any]], source: str) -> str:
    head = ("<tr><th>flow</th><th>requested</th><th>running</th><th>lag (records)</th><th>lag (seconds)</th>"
            "<th>newest heartbeat</th><th>newest checkpoint</th><th>Spark UI</th></tr>")
    lines = []
    for r in rows:
        name = html.escape(r["flow"])
        if "error" in r:
            lines.append(f"<tr><td>{name}</td><td colspan='7' class='bad'>{html.escape(r['error'])}</td></tr>")
            continue
        should_run = r["requested"] == lifecycle.RUNNING
        running = ("<span class='ok'>yes</span>" if r["running"] else
                   "<span class='bad'>no</span>" if should_run else "<span class='muted'>no</span>")
        lag = "?" if r["lag_records"] is None else f"{r['lag_records']:,}"
        seconds = "?" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f}"
        ui = (f"<a href='{html.escape(r['spark_ui'])}' target='_blank' rel='noopener'>open</a>"
              if r.get("spark_ui") else "<span class='muted'>not on this host</span>" if r["running"] else "")
        lines.append(f"<tr><td>{name}</td><td>{html.escape(r['requested'])}</td><td>{running}</td>"
                     f"<td class='n'>{lag}</td><td class='n'>{seconds}</td><td>{_age(r['heartbeat_age_s'])}</td>"
                     f"<td>{_age(r['checkpoint_age_s'])}</td><td>{ui}</td></tr>")
        if r.get("lag_error"):
            lines.append(f"<tr><td></td><td colspan='7' class='muted'>{html.escape(r['lag_error'])}</td></tr>")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    body = (f"<h2>mirrorflow flows</h2><p class='muted'>Read from the clusters at {stamp}; config "
            f"{html.escape(source)}. Reload for fresh figures.</p><table>{head}{''.join(lines)}</table>"
            if rows else f"<h2>mirrorflow flows</h2><p>No enabled flow in {html.escape(source)}.</p>")
    return _page("mirrorflow flows", body)


def markdown_html(text: str) -> str:
    from markdown_it import MarkdownIt

    return str(MarkdownIt("js-default").render(text))  # js-default: tables on, raw HTML off


def report_markdown(found: Mapping[tuple[str, str], Any], states: Mapping[str, str] | None = None) -> str | None:
    """The run's report as markdown, from its XComs keyed (task, key) and its task states; None when the run left
    none."""
    states = states or {}
    for task, key in REPORTS:
        value = found.get((task, key))
        if not isinstance(value, Mapping):
            continue
        if task == "preflight":
            return f"{_runbook_state(states)} Its preflight summary:\n\n" + str(value.get("markdown", ""))
        if "markdown" in value:
            return str(value["markdown"])
        if "summary" in value:
            return _batch_markdown(value)
        if "flow" in value and "requested" in value:
            return f"**flow {value['flow']}**: {value.get('line') or value}"
    return None


_ACTIVE = ("running", "queued", "scheduled", "deferred", "awaiting_input", "up_for_retry", "up_for_reschedule",
           "restarting")


def _runbook_state(states: Mapping[str, str]) -> str:
    """Why a runbook run has no report: in progress, rejected, or stopped (and whether groups already moved)."""
    failed = [t for t, state in states.items() if state in ("failed", "upstream_failed")]
    waiting = [f"{t} is {state.replace('_', ' ')}" for t, state in states.items() if state in _ACTIVE]
    if not failed and waiting:
        return f"**In progress: {', '.join(waiting)}.** Reload when it ends."
    if states.get("approval") == "success" and states.get("drain") == "skipped":
        return "**Rejected at the approval step: nothing changed.**"
    if states.get("move_groups") == "success":
        return ("**PARTIAL: the groups' offsets were committed on the target, then the runbook stopped** "
                f"({', '.join(failed)}: see its log); the flows may not be switched.")
    if failed:
        return f"**The runbook stopped before changing anything** ({', '.join(failed)}: see its log)."
    return "**The runbook stopped before its report** (see its task logs)."


def _batch_markdown(report: Mapping[str, Any]) -> str:
    lines = [f"**{report['summary']}**", ""]
    parts = report.get("partitions") or []
    if parts:
        lines += ["| partition | range | source | mirrored | missing | duplicated | differing | behind |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for p in parts[:200]:
            lines.append(f"| {p.get('topic')}-{p.get('partition')} | {p.get('start')}-{p.get('end')} | "
                         f"{p.get('source_records', '')} | {p.get('mirrored_records', '')} | {p.get('missing', '')} |"
                         f" {p.get('duplicated', '')} | {p.get('differing', '')} | {p.get('behind', '')} |")
        if len(parts) > 200:
            lines.append(f"\n{len(parts) - 200} more partitions: see the task's XCom")
    return "\n".join(lines)


def run_xcoms(dag_id: str, run_id: str) -> dict[tuple[str, str], Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    wanted = {task for task, _ in REPORTS}
    with create_session() as session:
        rows = (session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                                XComModel.task_id.in_(wanted), XComModel.map_index == -1).all())
        return {(r.task_id, r.key): XComModel.deserialize_value(r) for r in rows}


def run_states(dag_id: str, run_id: str) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance.task_id, TaskInstance.state).filter(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.map_index == -1).all()
        return {task: str(state) for task, state in rows}


def create_app() -> Any:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse

    app = FastAPI(title="mirrorflow", description="mirrorflow's flows and run reports in Airflow's UI")

    # `Any`, not Airflow's GetUserDep: annotations are strings here (PEP 563), and FastAPI resolves them in this
    # module's globals, where a name imported inside this function is not: it would read `user` from the query.
    @app.get("/flows", response_class=HTMLResponse)
    def flows(user: Any = Depends(get_user)) -> str:  # noqa: B008 - FastAPI's dependency idiom
        path = config_path()
        try:
            cfg = config.load(path)
        except MirrorflowError as exc:
            return _page("mirrorflow flows", f"<p class='bad'>{html.escape(str(exc))}</p>")
        manager = get_auth_manager()
        # A user sees the flows whose stream DAG they may read, as Airflow's own pages would show them.
        allowed = {f.name for f in cfg.enabled_flows if manager.is_authorized_dag(
            method="GET", details=DagDetails(id=deployment.dag_id("stream", f)), user=user)}
        return flows_html(flow_rows(cfg, allowed), str(path))

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse,
             dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))])
    def run_report(dag_id: str, run_id: str) -> str:
        text = report_markdown(run_xcoms(dag_id, run_id), run_states(dag_id, run_id))
        if text is None:
            body = ("<p class='muted'>No mirrorflow report for this run (yet): runbooks, audits, backfills and "
                    "control actions leave one when their last step ends.</p>")
        else:
            body = markdown_html(text)
        return _page(f"mirrorflow report {run_id}", body)

    return app


def plugin_parts() -> dict[str, list[dict[str, Any]]]:
    """The AirflowPlugin attributes that show the pages (href: relative, as Airflow's UI asks)."""
    return {
        "fastapi_apps": [{"app": create_app(), "url_prefix": PREFIX, "name": "mirrorflow"}],
        "external_views": [
            {"name": "mirrorflow flows", "href": f"{PREFIX.lstrip('/')}/flows", "destination": "nav",
             "url_route": "mirrorflow-flows", "category": "browse"},
            {"name": "mirrorflow report", "href": f"{PREFIX.lstrip('/')}/runs/{{DAG_ID}}/{{RUN_ID}}",
             "destination": "dag_run", "url_route": "mirrorflow-report"},
        ],
    }

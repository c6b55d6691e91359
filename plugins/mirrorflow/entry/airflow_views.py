"""mirrorflow inside Airflow's UI: a Flows page, and a report tab on every DAG run.

`plugins/mirrorflow_views.py` registers these with Airflow (an Airflow 3 plugin: a FastAPI app mounted at
`/mirrorflow`, shown through external views). Both pages need a logged-in user, as Airflow's own API does:
- **Flows** (`/mirrorflow/flows`, "Flows" at the top level of Airflow's navigation): per enabled flow, read from its
  clusters as `mirrorflow health` does, refreshing itself (`flows_view`); a flow's name opens its partitions
  (`/mirrorflow/flows/{flow}`);
- **mirrorflow report** (`/mirrorflow/runs/{dag_id}/{run_id}`, a tab on each run's page): the runbook's
  report (or its preflight summary when it stopped before the report), the audit's or the backfill's verdict,
  the control action's health line, read from the run's XComs.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mirrorflow.entry import deployment, flows_view
from mirrorflow.errors import MirrorflowError
from mirrorflow.model import config

log = logging.getLogger(__name__)
PREFIX = "/mirrorflow"
PROJECT = Path(__file__).resolve().parents[3]
# The XComs each kind of DAG leaves, in the order a report page looks for them: (task, key).
REPORTS: Sequence[tuple[str, str]] = (("report", "return_value"), ("audit", "report"),
                                      ("backfill", "return_value"), ("act", "return_value"),
                                      ("preflight", "return_value"))


def config_path() -> Path:
    """The deployment's config, found as the DAGs find it."""
    return deployment.config_path(PROJECT)


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{flows_view.STYLE}"
            f"</head><body>{body}</body></html>")


def markdown_html(text: str) -> str:
    from markdown_it import MarkdownIt

    return str(MarkdownIt("js-default").render(text))  # js-default: tables on, raw HTML off


def report_markdown(found: Mapping[tuple[str, str], Any], states: Mapping[str, str] | None = None) -> str | None:
    """The run's report as markdown, from its XComs keyed (task, key) and its task states; None when the run left
    none."""
    states = states or {}
    if "health" in states or ("health", "return_value") in found:
        return flow_run_markdown(found, states)
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


_SYNC_PARTS = ("apply_topics", "apply_configs", "apply_acls")


def flow_run_markdown(found: Mapping[tuple[str, str], Any], states: Mapping[str, str]) -> str:
    """A flow DAG run's report: its health verdict (or the cause it failed with), the metadata sync and the
    checkpoint rounds, each as far as its task got."""
    health = found.get(("health", "return_value"))
    error = found.get(("health", "error"))
    lines = []
    if isinstance(health, Mapping):
        lines += [f"**{health.get('line', '')}**", ""]
        behind = health.get("behind") or []
        lines += [f"- behind: {b['topic']}-{b['partition']}: {b['records']:,} records" for b in behind[:10]]
        if len(behind) > 10:
            lines.append(f"- and {len(behind) - 10} more partitions behind (the flows view lists them all)")
        lines += [f"- LOST on the source before mirrored: {x['topic']}-{x['partition']}: {x['records']:,} records"
                  for x in health.get("lost") or []]
    elif error:
        lines += [f"**TROUBLE: {error}**", ""]
    else:
        lines += [f"**health: {_task_state(states, 'health')}**", ""]
    planned = found.get(("plan", "return_value"))
    if isinstance(planned, Mapping):
        lines.append(f"- sync plan: {len(planned.get('planned') or [])} change(s) planned")
    for part in _SYNC_PARTS:
        done = found.get((part, "return_value"))
        what = part.removeprefix("apply_")
        if isinstance(done, Mapping):
            changed = done.get("changed") or []
            lines.append(f"- sync {what}: " + (", ".join(changed[:10]) + (" …" if len(changed) > 10 else "")
                                                if changed else "nothing to change"))
        elif part in states:
            cause = found.get((part, "error"))
            lines.append(f"- sync {what}: {cause or _task_state(states, part)}")
    rounds = found.get(("checkpoints", "return_value"))
    if isinstance(rounds, Mapping):
        lines.append(f"- checkpoints: {rounds.get('rounds', 0)} round(s), {rounds.get('groups', 0)} group(s), "
                     f"{rounds.get('partitions', 0)} partition(s), {rounds.get('inexact', 0)} not exact")
    elif "checkpoints" in states:
        cause = found.get(("checkpoints", "error"))
        lines.append(f"- checkpoints: {cause or _task_state(states, 'checkpoints')}")
    return "\n".join(lines)


def _task_state(states: Mapping[str, str], task: str) -> str:
    state = states.get(task, "not run")
    if state in _ACTIVE:
        return f"{state.replace('_', ' ')} (reload when it ends)"
    return "failed: see its log" if state in ("failed", "upstream_failed") else state.replace("_", " ")


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
    """The run's XComs a report reads: each task's result, the audit's report, and failed tasks' causes."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                                XComModel.key.in_(("return_value", "report", "error")),
                                                XComModel.map_index == -1).all())
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
    def readable(user: Any) -> tuple[config.MirrorConfig, set[str]] | str:
        """The config and the flows whose stream DAG `user` may read, as Airflow's own pages would show them; or
        the config's error."""
        try:
            cfg = config.load(config_path())
        except MirrorflowError as exc:
            return str(exc)
        manager = get_auth_manager()
        return cfg, {f.name for f in cfg.enabled_flows if manager.is_authorized_dag(
            method="GET", details=DagDetails(id=deployment.dag_id("stream", f)), user=user)}

    @app.get("/flows", response_class=HTMLResponse)
    def flows(part: str = "", user: Any = Depends(get_user)) -> str:  # noqa: B008 - FastAPI's dependency idiom
        found = readable(user)
        if isinstance(found, str):
            return _page("mirrorflow flows", f"<p class='bad'>{html.escape(found)}</p>")
        rows = flows_view.flow_rows(found[0], found[1])
        return flows_view.flows_table(rows) if part == "table" else flows_view.flows_html(rows, str(config_path()))

    @app.get("/flows/{flow}", response_class=HTMLResponse)
    def partitions(flow: str, part: str = "", user: Any = Depends(get_user)) -> str:  # noqa: B008
        found = readable(user)
        if isinstance(found, str):
            return _page("mirrorflow flows", f"<p class='bad'>{html.escape(found)}</p>")
        cfg, allowed = found
        if flow not in allowed:
            return _page("mirrorflow flows", f"<p class='bad'>No enabled flow {html.escape(flow)} you may read.</p>")
        try:
            table = flows_view.partitions_table(*flows_view.partition_rows(cfg, cfg.flow(flow)))
        except MirrorflowError as exc:
            table = f"<p class='bad'>{html.escape(str(exc))}</p>"
        return table if part == "table" else flows_view.partitions_html(flow, table)

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
            {"name": "Flows", "href": f"{PREFIX.lstrip('/')}/flows", "destination": "nav",
             "url_route": "mirrorflow-flows", "nav_top_level": True},
            {"name": "mirrorflow report", "href": f"{PREFIX.lstrip('/')}/runs/{{DAG_ID}}/{{RUN_ID}}",
             "destination": "dag_run", "url_route": "mirrorflow-report"},
        ],
    }

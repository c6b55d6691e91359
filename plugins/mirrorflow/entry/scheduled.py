"""The deployment's scheduled work, as the functions the Airflow tasks call.

Each loads the config, does one thing for one flow, logs one line per change or group, and returns a
JSON-able summary (the task's XCom). An expected failure raises a MirrorflowError whose message is logged as
one ERROR line before Airflow prints the exception and its traceback, so the cause is the first thing the
person on call reads.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from mirrorflow.entry import deployment
from mirrorflow.errors import MirrorflowError, OperationalError
from mirrorflow.jobs import checkpoints, runbooks, takeover
from mirrorflow.kafka import admin_sync, clients
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config

log = logging.getLogger("mirrorflow")
_Result = TypeVar("_Result")


def said_first(task: Callable[..., _Result]) -> Callable[..., _Result]:
    """Log an expected failure's one-line cause before the exception leaves the task, and leave it as the task's
    `error` XCom, where the run's report tab shows it."""
    @functools.wraps(task)
    def run(*args: Any, **kwargs: Any) -> _Result:
        try:
            return task(*args, **kwargs)
        except MirrorflowError as exc:
            _say_error(str(exc))
            raise
    return run


def _say_error(message: str) -> None:
    """A task's expected failure, in one line: logged, and left as its `error` XCom."""
    log.error("%s", message)
    try:
        from airflow.sdk import get_current_context

        context = get_current_context()
    except (ImportError, RuntimeError, KeyError):  # not inside an Airflow task: the command line, a test
        return
    context["ti"].xcom_push(key="error", value=message)


def _load(config_path: Path) -> config.MirrorConfig:
    clients.quiet()  # a task's log ends with the one-line cause, not librdkafka's retries
    return deployment.load(config_path)


@said_first
def checkpoint_rounds(config_path: Path, flow_name: str, seconds: float) -> dict[str, Any]:
    """Checkpoint rounds every `emit.checkpoints.interval.seconds` for `seconds` (at least one round): one reader
    of the offset syncs and checkpoints for all of them, reading only what is new."""
    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    interval = flow.number("emit.checkpoints.interval.seconds")
    until = time.monotonic() + seconds
    rounds = checkpoints.CheckpointRounds(FlowLink.of(cfg, flow))
    summary: dict[str, Any] = {"flow": flow.name, "rounds": 0}
    try:
        while True:
            begun = time.monotonic()
            results = rounds.run()
            inexact = [(r, p) for r in results for p in r.partitions if not p.exact]
            for r, p in inexact[:20]:
                log.info("flow %s group %s: %s-%d inexact: %s", flow.name, r.group, p.source_topic, p.partition,
                         p.note)
            log.info("flow %s: checkpoint round: %d group(s), %d partition(s), %d inexact, %d checkpoint(s) "
                     "written, %.1f s", flow.name, len(results), sum(len(r.partitions) for r in results),
                     len(inexact), rounds.written, time.monotonic() - begun)
            summary.update(rounds=summary["rounds"] + 1, groups=len(results),
                           partitions=sum(len(r.partitions) for r in results), inexact=len(inexact),
                           unread=len(rounds.offsets.unread))
            if time.monotonic() + interval > until:
                return summary
            time.sleep(max(0.0, interval - (time.monotonic() - begun)))
    finally:
        rounds.close()


@said_first
def plan(config_path: Path, flow_name: str) -> dict[str, Any]:
    """Log the flow's drift plan, one line per change or notice."""
    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    changes = admin_sync.flow_plan(cfg, flow)
    for change in changes:
        log.info("flow %s plan: %s", flow.name, change)
    if not changes:
        log.info("flow %s plan: in sync", flow.name)
    return {"flow": flow.name, "planned": [str(c) for c in changes]}


@said_first
def sync(config_path: Path, flow_name: str, part: str) -> dict[str, Any]:
    """Apply one part (topics, configs or acls) of the flow's metadata sync; log every change made."""
    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    done, notices = admin_sync.sync_flow(cfg, flow, (part,))
    for change in done:
        log.info("flow %s %s: %s", flow.name, part, change)
    for notice in notices:
        log.info("flow %s %s: %s", flow.name, part, notice)
    if not done:
        log.info("flow %s %s: nothing to change", flow.name, part)
    return {"flow": flow.name, "part": part, "changed": [str(c) for c in done]}


# -- stream lifecycle -------------------------------------------------------------------------------

@said_first
def control(config_path: Path, flow_name: str, action: str, reason: str) -> dict[str, Any]:
    """health, start, stop or restart a flow's stream; health fails when a flow that should run does not."""
    from mirrorflow.jobs import lifecycle

    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    reason = reason or f"{action} from Airflow"
    if action in ("stop", "restart"):
        lifecycle.stop(FlowLink.of(cfg, flow), reason)
        log.info("flow %s: stopped cleanly", flow.name)
    if action in ("start", "restart"):
        runs = lifecycle.start(FlowLink.of(cfg, flow), reason)
        log.info("flow %s: %s", flow.name, "running" if runs else
                 f"requested running: DAG {deployment.dag_id('stream', flow)} launches it within a minute")
    found = lifecycle.health(FlowLink.of(cfg, flow))
    log.info("%s", found.line())
    for behind in found.behind()[:20]:
        log.info("flow %s: %s-%d is %d records behind", flow.name, behind.topic, behind.partition, behind.records)
    if action == "health" and found.lease_error:
        raise OperationalError(f"flow {flow.name}: {found.lease_error}")
    if action == "health" and found.requested.state == lifecycle.RUNNING and not found.alive:
        raise OperationalError(f"flow {flow.name} should run but no stream holds its lease: "
                               f"see DAG {deployment.dag_id('stream', flow)}")
    return found.as_dict()


@said_first
def health_check(config_path: Path, flow_name: str) -> dict[str, Any]:
    """Fail when a flow requested running has no stream (after `mirrorflow.health.grace.seconds`) or is more than
    `mirrorflow.health.lag.max.seconds` behind, and whenever its lease cannot be read (the target does not answer);
    otherwise a stopped flow is healthy."""
    from mirrorflow.jobs import lifecycle

    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    found = lifecycle.health(FlowLink.of(cfg, flow))
    wanted = found.requested.state == lifecycle.RUNNING
    if wanted and not found.alive and not found.lease_error:
        log.info("%s; waiting up to %d s for its stream DAG to launch it", found.line(),
                 flow.number("mirrorflow.health.grace.seconds"))
        lifecycle.wait_until(lambda: lifecycle.health(FlowLink.of(cfg, flow), with_lag=False).alive,
                             flow.number("mirrorflow.health.grace.seconds"), 5.0)
        found = lifecycle.health(FlowLink.of(cfg, flow))
    log.info("%s", found.line())
    problems = []
    if found.lease_error:
        problems.append(found.lease_error)
    if wanted and not found.alive and not found.lease_error:
        problems.append(f"should run but no stream holds its lease (see DAG {deployment.dag_id('stream', flow)})")
    limit = flow.number("mirrorflow.health.lag.max.seconds")
    if wanted and found.lag_seconds is not None and found.lag_seconds > limit:
        problems.append(f"{found.lag_seconds:.0f} s behind, more than mirrorflow.health.lag.max.seconds = {limit}")
    if wanted and found.source_error:
        problems.append(f"lag unknown: {found.source_error}")
    if problems:
        raise OperationalError(f"flow {flow.name}: {'; '.join(problems)}")
    return found.as_dict()


# -- batch: audit and backfill ---------------------------------------------------------------------

@said_first
def audit_window(config_path: Path, flow_name: str, start: datetime, end: datetime, master: str) -> dict[str, Any]:
    """Audit the flow's records with timestamps in [start, end): the report, complete or not (`require_complete`)."""
    from mirrorflow.jobs import audit, ranges

    cfg = _load(config_path)
    window = ranges.Window(int(start.timestamp() * 1000), int(end.timestamp() * 1000))
    report = audit.run(FlowLink.of(cfg, flow_name), window=window, master=master)
    log.info("\n%s", report.table())
    return report.as_dict()


def require_complete(report: Mapping[str, Any]) -> None:
    """Fail the audit task when anything is missing or differs, without a retry: the audit found it, a second one
    would find it again (its retry covers a task that could not start)."""
    if not report["complete"]:
        from airflow.sdk.exceptions import AirflowFailException

        _say_error(str(report["summary"]))
        raise AirflowFailException(report["summary"])


@said_first
def backfill(config_path: Path, params: Mapping[str, Any], master: str) -> dict[str, Any]:
    """The backfill a trigger form asked for: flow, from_offsets (JSON) or from_time, to_time, topics, pause."""
    from mirrorflow.jobs import backfill as job
    from mirrorflow.jobs import ranges

    cfg = _load(config_path)
    offsets = str(params.get("from_offsets") or "").strip()
    start, end = str(params.get("from_time") or "").strip(), str(params.get("to_time") or "").strip()
    window = ranges.Window(ranges.parse_time(start, "from_time") if start else None,
                           ranges.parse_time(end, "to_time") if end else None)
    report = job.run(FlowLink.of(cfg, str(params["flow"])), topics=str(params.get("topics") or "").strip() or None,
                     window=window, from_offsets=ranges.parse_offsets(offsets) if offsets else None,
                     pause=bool(params.get("pause")), master=master)
    log.info("\n%s", report.table())
    return report.as_dict()


# -- DR runbooks ------------------------------------------------------------------------------------

def runbook_of(kind: str, params: Mapping[str, Any]) -> runbooks.Runbook:
    """The runbook a trigger form asked for (failover: source/target/mode; failback: original/backup)."""
    groups, dry_run = str(params.get("groups") or ".*"), bool(params.get("dry_run"))
    switch, timeout = bool(params.get("switch_flows", True)), float(params.get("drain_timeout_s") or 300)
    if kind == runbooks.FAILBACK:
        return runbooks.failback(str(params.get("original", "")).strip(), str(params.get("backup", "")).strip(),
                                 groups=groups, dry_run=dry_run, switch_flows=switch, drain_timeout_s=timeout)
    return runbooks.Runbook(runbooks.FAILOVER, str(params.get("source", "")).strip(),
                            str(params.get("target", "")).strip(), groups, str(params.get("mode", "planned")),
                            dry_run, switch, timeout)


def runbook_dry_run_marker(params: Mapping[str, Any]) -> str:
    """The runbook's DRY_RUN task: it succeeds in a dry run and is skipped in a real one, so the grid and graph
    tell the two apart at a glance."""
    from airflow.sdk.exceptions import AirflowSkipException

    if not params.get("dry_run"):
        raise AirflowSkipException("a real run: it changes what its steps say")
    log.info("DRY RUN: nothing is changed; each step says what a real run would do")
    return "dry run"


RUNBOOK_DAGS = ("mirrorflow_failover", "mirrorflow_failback", "mirrorflow_takeover")
DRY_RUN_BY_DEFAULT = True  # the runbook forms' default, and what a run triggered without `dry_run` in its conf does
DRY_RUN_NOTE = "DRY RUN: nothing is changed; the mirrorflow report tab says what a real run would do"


def runbook_run_note(dag_id: str, conf: Mapping[str, Any] | None, note: str | None) -> str | None:
    """The note a run gets as it starts (the scheduler's listener in `plugins/mirrorflow_views.py`): the dry-run
    note for a runbook's dry run, which is the forms' default. A note a person wrote is never replaced."""
    if dag_id not in RUNBOOK_DAGS or note or not (conf or {}).get("dry_run", DRY_RUN_BY_DEFAULT):
        return None
    return DRY_RUN_NOTE


def runbook_asks_approval(params: Mapping[str, Any]) -> bool:
    """A real run asks when approval is required; a dry run only when it rehearses the approval."""
    return bool(params.get("require_approval")) and (not params.get("dry_run") or bool(params.get("rehearse_approval")))


def runbook_approval_note(params: Mapping[str, Any]) -> str:
    if not runbook_asks_approval(params):
        return ""
    return "approved in Airflow" + (" (a rehearsal: the run was a dry run)" if params.get("dry_run") else "")


@said_first
def runbook_preflight(config_path: Path, kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    summary = runbooks.preflight(_load(config_path), runbook_of(kind, params))
    log.info("\n%s", summary["markdown"])
    rehearsal = ("**Rehearsal**: this is a dry run; approving or rejecting changes nothing.\n\n"
                 if params.get("dry_run") else "")
    summary["approval_markdown"] = rehearsal + summary["markdown"]
    return summary


@said_first
def runbook_drain(config_path: Path, pre: Mapping[str, Any]) -> dict[str, Any]:
    return runbooks.drain(_load(config_path), runbooks.Runbook.from_dict(pre["runbook"]))


@said_first
def runbook_move_groups(config_path: Path, pre: Mapping[str, Any]) -> dict[str, Any]:
    return runbooks.move_groups(_load(config_path), runbooks.Runbook.from_dict(pre["runbook"]), pre["groups"])


@said_first
def runbook_switch_flows(config_path: Path, pre: Mapping[str, Any]) -> dict[str, Any]:
    return runbooks.switch_flows(_load(config_path), runbooks.Runbook.from_dict(pre["runbook"]))


def runbook_report(pre: Mapping[str, Any], drained: Mapping[str, Any] | None, moved: Mapping[str, Any] | None,
                   switched: Mapping[str, Any] | None, approval: str) -> dict[str, Any]:
    result = runbooks.report(pre, drained, moved, switched, approval)
    log.info("\n%s", result["markdown"])
    return result


def _takeover_plan(config_path: Path, params: Mapping[str, Any]) -> tuple[FlowLink, takeover.Takeover]:
    link = FlowLink.of(_load(config_path), str(params.get("flow", "")).strip())
    group = str(params.get("group") or "").strip() or None
    return link, takeover.plan(link, str(params.get("mirror", "mm2")), group)


@said_first
def takeover_preflight(config_path: Path, params: Mapping[str, Any]) -> dict[str, Any]:
    """The takeover runbook's plan (reads only); fails naming why when the takeover is refused."""
    _, planned = _takeover_plan(config_path, params)
    log.info("\n%s", planned.markdown())
    if not planned.allowed:
        raise OperationalError(f"flow {planned.flow}: the takeover is refused: "
                               + (planned.running or "; ".join(p.line() for p in planned.refused)))
    rehearsal = ("**Rehearsal**: this is a dry run; approving or rejecting changes nothing.\n\n"
                 if params.get("dry_run") else "")
    return {"params": dict(params), "resumes": planned.resumes(), "markdown": planned.markdown(),
            "approval_markdown": rehearsal + planned.markdown()}


@said_first
def takeover_apply(config_path: Path, pre: Mapping[str, Any]) -> dict[str, Any]:
    """Plan again and apply, unless a dry run; refuses when the plan moved since it was approved (the old mirror ran
    meanwhile)."""
    params = pre["params"]
    if params.get("dry_run"):
        return {"applied": False, "markdown": "dry run: nothing was written"}
    link, planned = _takeover_plan(config_path, params)
    approved, now_planned = dict(pre["resumes"]), planned.resumes()
    moved = {k: (approved.get(k), now_planned.get(k)) for k in sorted(approved.keys() | now_planned.keys())
             if approved.get(k) != now_planned.get(k)}
    if moved:
        k, (was, now) = next(iter(moved.items()))
        raise OperationalError(f"flow {planned.flow}: the plan changed since it was approved ({k} resumed at {was}, "
                               f"now {now}: did the old mirror run again?); nothing was written, run the runbook "
                               "again")
    takeover.apply(link, planned)
    return {"applied": True, "markdown": f"taken over: the stream resumes there at its next start; do not start "
                                         f"{planned.mirror} on flow {planned.flow} again"}


def takeover_report(pre: Mapping[str, Any], applied: Mapping[str, Any], approval: str) -> dict[str, Any]:
    markdown = "\n\n".join([pre["markdown"], applied["markdown"], *([approval] if approval else [])])
    log.info("\n%s", markdown)
    return {"markdown": markdown, "applied": applied["applied"]}

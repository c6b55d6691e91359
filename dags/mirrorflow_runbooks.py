"""DR runbooks, triggered by the person on call from the UI: fail consumer groups over to a mirror, and back. (The
same file holds `mirrorflow_takeover`, which moves a flow from another mirror onto mirrorflow: its own doc.)

**Failover** (`mirrorflow_failover`): planned (the source is up: drain it, then move) or unplanned (the source
is down: move to the newest checkpoints). **Failback** (`mirrorflow_failback`): when the original cluster is
back, drain the reverse flow, move the groups back (remote topic names map back to the originals) and
restart the original flow.

1. `preflight` reads only: clusters, the flow's health, newest checkpoint age, lag and the RPO estimate. A
   wrong parameter or an unreachable target fails here, before anything changed.
2. `approval` shows the preflight summary and waits for Approve/Reject (Required Actions), if asked for. A dry
   run with `rehearse_approval` asks too, so the step can be practised; its answer changes nothing.
3. `drain` (planned): waits until every mirrored partition's lag is 0, at most the drain timeout.
4. `move_groups`: a final checkpoint round, then each group's translated offsets are committed on the target.
   Groups active there are refused.
5. `switch_flows`: stops the drained flow cleanly; starts (failover) or restarts (failback) the other direction.
6. `report`: a markdown report (groups, partitions, offsets, RPO, how long the runbook took), also the run's XCom.

`dry_run` (the default: untick it for the real run) runs the reading steps and says what the others would do;
its `DRY_RUN` task succeeds (a real run skips it) and the run gets a DRY RUN note as it starts, so the grid and
the run page show which runs were dry runs.
The report is on the run's page (tab "mirrorflow report") and in the `report` task's XCom. Same steps as
`mirrorflow failover|failback`.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, TriggerRule, get_current_context, task
from mirrorflow.entry import deployment, scheduled
from mirrorflow.model import config

CONFIG = deployment.config_path(Path(__file__).resolve().parent.parent)
_CFG = config.load(CONFIG)
ALIASES = list(_CFG.clusters)
# The forms start on the first enabled flow, so only the groups (or nothing, for a dry run) need typing.
_FIRST = _CFG.enabled_flows[0] if _CFG.enabled_flows else None
SOURCE = _FIRST.source if _FIRST else ALIASES[0]
TARGET = _FIRST.target if _FIRST else ALIASES[-1]


def _cluster(default: str, title: str, description: str) -> Param:
    return Param(default, type="string", enum=ALIASES, title=title, description=description)


COMMON = {
    "groups": Param(".*", type="string", title="Consumer groups (regex)",
                    description="Java regex of the consumer groups to move, e.g. orders-.* (default: every group "
                                "the flow replicates)"),
    "dry_run": Param(scheduled.DRY_RUN_BY_DEFAULT, type="boolean", title="Dry run",
                     description="Only read and report what would be done; change nothing. Untick for the real "
                                 "run"),
    "require_approval": Param(True, type="boolean", title="Require approval",
                              description="Wait for a person to approve the preflight summary (Required Actions) "
                                          "before changing anything"),
    "rehearse_approval": Param(False, type="boolean", title="Rehearse the approval",
                               description="With dry run: ask for the approval as a real run would, so the on-call "
                                           "person can practise it; approving or rejecting changes nothing"),
    "drain_timeout_s": Param(300, type="integer", minimum=0, title="Drain timeout (seconds)",
                             description="Planned: how long to wait for the flow to mirror everything"),
}
FORMS = {
    "failover": {
        "source": _cluster(SOURCE, "Failing cluster (source)", "The cluster the consumers leave"),
        "target": _cluster(TARGET, "Backup cluster (target)", "Its mirror, where the consumers resume"),
        "mode": Param("planned", enum=["planned", "unplanned"], title="Mode",
                      description="Is the source cluster still up?",
                      values_display={"planned": "planned: the source is up, drain it first",
                                      "unplanned": "unplanned: the source is down, use what was mirrored"}),
        **COMMON,
        "switch_flows": Param(True, type="boolean", title="Start the reverse flow",
                              description="Mirror what is produced on the backup back to the source"),
    },
    "failback": {
        "original": _cluster(SOURCE, "Original cluster", "The cluster the consumers return to"),
        "backup": _cluster(TARGET, "Backup cluster", "The cluster they run on now"),
        **COMMON,
        "switch_flows": Param(True, type="boolean", title="Restart the original flow",
                              description="Mirror the original cluster to the backup again"),
    },
}


def _dry_run_and_approval(subject: str, summary_task: str) -> ApprovalOperator:
    """A runbook's DRY_RUN marker and its approval step (shown the `summary_task`'s approval markdown)."""

    @task(task_id="DRY_RUN")
    def dry_run_marker() -> str:
        return scheduled.runbook_dry_run_marker(get_current_context()["params"])

    dry_run_marker()
    return ApprovalOperator(task_id="approval", subject=subject,
                            body=f"{{{{ ti.xcom_pull(task_ids='{summary_task}')['approval_markdown'] }}}}",
                            response_timeout=timedelta(hours=4))


def runbook_dag(kind: str) -> DAG:
    with DAG(dag_id=f"mirrorflow_{kind}", schedule=None, start_date=deployment.START, catchup=False,
             max_active_runs=1, doc_md=__doc__, params=FORMS[kind],
             tags=["mirrorflow", deployment.ON_CALL_TAG, "runbook", kind],
             default_args=deployment.TASK_DEFAULTS) as dag:

        approval = _dry_run_and_approval(f"mirrorflow {kind}: approve the preflight summary?", "preflight")

        @task(task_id="preflight", execution_timeout=timedelta(minutes=5))
        def preflight() -> dict[str, Any]:
            return scheduled.runbook_preflight(CONFIG, kind, get_current_context()["params"])

        @task.branch(task_id="needs_approval")
        def needs_approval() -> str:
            params = get_current_context()["params"]
            return "approval" if scheduled.runbook_asks_approval(params) else "drain"

        @task(task_id="drain", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        def drain(pre: dict[str, Any]) -> dict[str, Any]:
            return scheduled.runbook_drain(CONFIG, pre)

        @task(task_id="move_groups")
        def move_groups(pre: dict[str, Any], _drained: dict[str, Any]) -> dict[str, Any]:
            return scheduled.runbook_move_groups(CONFIG, pre)

        @task(task_id="switch_flows")
        def switch_flows(pre: dict[str, Any], _moved: dict[str, Any]) -> dict[str, Any]:
            return scheduled.runbook_switch_flows(CONFIG, pre)

        @task(task_id="report")
        def report(pre: dict[str, Any], drained: dict[str, Any], moved: dict[str, Any],
                   switched: dict[str, Any]) -> dict[str, Any]:
            params = get_current_context()["params"]
            approved = scheduled.runbook_approval_note(params)
            return scheduled.runbook_report(pre, drained, moved, switched, approved)

        # Each call gives the step's XComArg, which Airflow hands the next step as its result: typed Any here.
        pre: Any = preflight()
        gate = needs_approval()
        drained: Any = drain(pre)
        pre >> gate >> [approval, drained]
        approval >> drained
        moved: Any = move_groups(pre, drained)
        switched: Any = switch_flows(pre, moved)
        report(pre, drained, moved, switched)
    return dag


TAKEOVER_FORM = {
    "flow": Param(_FIRST.name if _FIRST else "", type="string",
                  enum=[f.name for f in _CFG.enabled_flows] or [""], title="Flow",
                  description="The flow the old mirror ran, as source->target"),
    "mirror": Param("mm2", enum=["mm2", "mm1"], title="Old mirror", description="What ran the flow until now",
                    values_display={"mm2": "MirrorMaker 2", "mm1": "MirrorMaker 1 or a Go mirror maker"}),
    "group": Param("", type="string", title="Its consumer group (MirrorMaker 1)",
                   description="MirrorMaker 1 or a Go mirror maker only: the consumer group it read the source with"),
    **{k: COMMON[k] for k in ("dry_run", "require_approval", "rehearse_approval")},
}


def takeover_dag() -> DAG:
    """`mirrorflow_takeover`: the plan, an approval, the takeover, the report (docs/migration.md)."""
    with DAG(dag_id="mirrorflow_takeover", schedule=None, start_date=deployment.START, catchup=False,
             max_active_runs=1, params=TAKEOVER_FORM, tags=["mirrorflow", "runbook", "takeover"],
             default_args=deployment.TASK_DEFAULTS,
             doc_md="Take a flow over from the MirrorMaker 2 (or MirrorMaker 1, Go mirror maker) that ran it, where "
                    "it stopped: no record copied again, none skipped. Stop the old mirror first.\n\n"
                    "1. `plan` reads only: how the old mirror is known to be stopped, and per partition its "
                    "committed offset, the remote partition's end and where the stream resumes. A takeover that "
                    "would be refused fails here.\n2. `approval` shows the plan and waits for Approve/Reject, if "
                    "asked for.\n3. `apply` plans again and writes the flow's positions, unless a dry run; it "
                    "refuses if a partition would resume elsewhere than approved.\n4. `report`: the plan and the "
                    "outcome.\n\n`dry_run` is the default. Same steps as `mirrorflow takeover`.") as dag:

        approval = _dry_run_and_approval("mirrorflow takeover: approve the plan?", "plan")

        @task(task_id="plan", execution_timeout=timedelta(minutes=10))
        def plan() -> dict[str, Any]:
            return scheduled.takeover_preflight(CONFIG, get_current_context()["params"])

        @task.branch(task_id="needs_approval")
        def needs_approval() -> str:
            return "approval" if scheduled.runbook_asks_approval(get_current_context()["params"]) else "apply"

        @task(task_id="apply", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        def apply(pre: dict[str, Any]) -> dict[str, Any]:
            return scheduled.takeover_apply(CONFIG, pre)

        @task(task_id="report")
        def report(pre: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
            return scheduled.takeover_report(pre, applied,
                                             scheduled.runbook_approval_note(get_current_context()["params"]))

        pre: Any = plan()
        gate = needs_approval()
        applied: Any = apply(pre)
        pre >> gate >> [approval, applied]
        approval >> applied
        report(pre, applied)
    return dag


failover = runbook_dag("failover")
failback = runbook_dag("failback")
takeover = takeover_dag()

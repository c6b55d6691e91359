"""A note on every runbook dry run, so Airflow's run list and run page mark it (an Airflow listener, run by the
scheduler as the run starts; registered by `plugins/mirrorflow_views.py`).

A task cannot write its own run's note (the Task SDK has no such call), and a trigger form cannot set a run id
prefix; the scheduler's listener can, in the session that starts the run. A note a person wrote is never
replaced.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
RUNBOOK_DAGS = ("mirrorflow_failover", "mirrorflow_failback")
DRY_RUN_NOTE = "DRY RUN: nothing is changed; the mirrorflow report tab says what a real run would do"


def dry_run_note(dag_id: str, conf: dict[str, Any] | None, note: str | None) -> str | None:
    """The note a run should get: the dry-run note for a runbook dry run (the forms' default) without a note."""
    if dag_id not in RUNBOOK_DAGS or note or not (conf or {}).get("dry_run", True):
        return None
    return DRY_RUN_NOTE


@hookimpl
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    note = dry_run_note(dag_run.dag_id, dag_run.conf, dag_run.note)
    if note is not None:
        dag_run.note = note  # committed with the scheduler's session that starts the run

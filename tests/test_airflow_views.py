"""The pages mirrorflow adds to Airflow's UI, as HTML from given figures (the embedded-Airflow test serves them)."""

from __future__ import annotations

from mirrorflow.entry import airflow_views


def test_a_runbook_run_shows_its_report_and_one_that_stopped_early_shows_its_preflight() -> None:
    report = {"markdown": "## mirrorflow failover a->b\n\n| group | offset |\n|---|---:|\n| g | 7 |"}
    pre = {"markdown": "### failover a->b: preflight\n- RPO: 0 records"}
    shown = airflow_views.markdown_html(airflow_views.report_markdown({("report", "return_value"): report,
                                                                        ("preflight", "return_value"): pre}) or "")
    assert "<table>" in shown and "<td>g</td>" in shown and "preflight" not in shown
    early = airflow_views.report_markdown({("preflight", "return_value"): pre}) or ""
    assert early.startswith("**The runbook stopped before its report**") and "RPO: 0 records" in early
    rejected = airflow_views.report_markdown({("preflight", "return_value"): pre},
                                             {"approval": "success", "drain": "skipped", "report": "skipped"}) or ""
    assert rejected.startswith("**Rejected at the approval step: nothing changed.**")
    waiting = airflow_views.report_markdown({("preflight", "return_value"): pre},
                                            {"preflight": "success", "approval": "awaiting_input", "drain": "None"})
    assert (waiting or "").startswith("**In progress: approval is awaiting input.**")
    partial = airflow_views.report_markdown({("preflight", "return_value"): pre},
                                            {"move_groups": "success", "switch_flows": "failed",
                                             "report": "upstream_failed"}) or ""
    assert partial.startswith("**PARTIAL: the groups' offsets were committed on the target")
    assert "switch_flows" in partial
    assert airflow_views.report_markdown({}) is None


def test_an_audit_report_shows_its_verdict_and_partitions_and_raw_html_is_never_rendered() -> None:
    audit = {"summary": "audit a->b: INCOMPLETE: 3 missing", "partitions": [
        {"topic": "orders", "partition": 0, "start": 0, "end": 10, "source_records": 10, "mirrored_records": 7,
         "missing": 3, "duplicated": 0, "differing": 0, "behind": 0}]}
    text = airflow_views.report_markdown({("audit", "report"): audit}) or ""
    shown = airflow_views.markdown_html(text)
    assert "INCOMPLETE: 3 missing" in shown and "<td>orders-0</td>" in shown
    assert "<script>" not in airflow_views.markdown_html("<script>alert(1)</script>")


def test_a_flow_dag_run_reports_its_health_sync_and_checkpoints_and_a_failed_health_check_its_cause() -> None:
    health = {"flow": "a->b", "requested": "running", "line": "flow a->b: running on h, lag 12 records / 0.4 s",
              "behind": [{"topic": "t", "partition": 0, "records": 12}], "lost": []}
    found = {("health", "return_value"): health, ("plan", "return_value"): {"planned": ["create topic a.t"]},
             ("apply_topics", "return_value"): {"changed": ["create topic a.t (3 partitions)"]},
             ("apply_configs", "return_value"): {"changed": []},
             ("checkpoints", "return_value"): {"rounds": 4, "groups": 2, "partitions": 6, "inexact": 1}}
    states = {"health": "success", "plan": "success", "apply_topics": "success", "apply_configs": "success",
              "apply_acls": "running", "checkpoints": "success"}
    text = airflow_views.report_markdown(found, states) or ""
    assert text.startswith("**flow a->b: running on h, lag 12 records / 0.4 s**")
    assert "- behind: t-0: 12 records" in text and "- sync topics: create topic a.t (3 partitions)" in text
    assert "- sync configs: nothing to change" in text and "- sync acls: running (reload when it ends)" in text
    assert "- checkpoints: 4 round(s), 2 group(s), 6 partition(s), 1 not exact" in text
    cause = "flow a->b: should run but no stream holds its lease (see DAG mirrorflow_stream__a_to_b)"
    failed = airflow_views.report_markdown({("health", "error"): cause}, {**states, "health": "failed"}) or ""
    assert failed.startswith(f"**TROUBLE: {cause}**")


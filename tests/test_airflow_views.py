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


def test_the_flows_page_marks_a_flow_that_should_run_and_does_not() -> None:
    rows = [{"flow": "a->b", "requested": "running", "running": False, "holders": [], "lag_records": 1200,
             "lag_seconds": 3.5, "heartbeat_age_s": 4.0, "checkpoint_age_s": None, "lag_error": ""},
            {"flow": "b->a", "requested": "stopped", "running": False, "holders": [], "lag_records": 0,
             "lag_seconds": 0.0, "heartbeat_age_s": None, "checkpoint_age_s": 30.0, "lag_error": ""},
            {"flow": "c->a", "error": "cluster c: unreachable"}]
    page = airflow_views.flows_html(rows, "mirror.properties")
    assert "<span class='bad'>no</span>" in page and "<span class='muted'>no</span>" in page
    assert "1,200" in page and "3.5" in page and "cluster c: unreachable" in page

"""The DAG files as Airflow parses them: no import errors, one DAG per enabled flow and job."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from mirrorflow.entry import scheduled
from support.airflow import deployment

pytestmark = pytest.mark.airflow


def test_every_dag_imports_and_each_enabled_flow_gets_one_flow_dag_per_period(airflow_home: Path,
                                                                              clusters_file: Path) -> None:
    with deployment(clusters_file) as bag:
        pass
    assert bag.import_errors == {}
    flow_dags = sorted(d for d in bag.dags if d.startswith("mirrorflow_flow__"))
    assert flow_dags == ["mirrorflow_flow__alpha_to_beta", "mirrorflow_flow__alpha_to_gamma",
                         "mirrorflow_flow__beta_to_alpha"]
    assert not [d for d in bag.dags if d.startswith(("mirrorflow_sync__", "mirrorflow_checkpoints__",
                                                     "mirrorflow_health__"))]
    dag = bag.dags["mirrorflow_flow__alpha_to_beta"]
    # one run per 10 minutes with MM2's defaults: health, the metadata sync and checkpoint rounds all inside it
    assert dag.schedule == timedelta(seconds=600) and not dag.catchup and dag.max_active_runs == 1
    assert set(dag.task_ids) == {"health", "plan", "apply_topics", "apply_configs", "apply_acls", "checkpoints"}
    assert dag.get_task("checkpoints").upstream_task_ids == dag.get_task("health").upstream_task_ids == set()
    assert dag.get_task("apply_acls").upstream_task_ids == {"apply_configs"}


def test_a_broken_config_is_one_import_error_naming_file_line_and_key(airflow_home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\na->b.enabled = true\n"
                   "emit.checkpoints.interval.seconds = soon\n")
    with deployment(bad) as bag:
        pass
    errors = list(bag.import_errors.values())
    assert errors and all(f"{bad}:5: emit.checkpoints.interval.seconds" in e for e in errors)


def test_a_stream_dag_submits_with_the_flows_stream_settings(airflow_home: Path, clusters_file: Path,
                                                             tmp_path: Path) -> None:
    tuned = tmp_path / "tuned.properties"
    tuned.write_text(clusters_file.read_text() + "\nalpha->beta.mirrorflow.stream.spark.master = local[2]\n"
                     "alpha->beta.mirrorflow.stream.driver.memory = 700m\n")
    submit = {}
    with deployment(tuned) as bag:
        for flow in ("alpha_to_beta", "beta_to_alpha"):
            mirror = bag.dags[f"mirrorflow_stream__{flow}"].get_task("mirror")
            mirror.jars = "kafka.jar"  # what the check task hands over at run time
            submit[flow] = mirror._get_hook()._build_spark_submit_command("mirror_stream.py")
    tuned_flow, plain_flow = submit["alpha_to_beta"], submit["beta_to_alpha"]
    assert tuned_flow[tuned_flow.index("--master") + 1] == "local[2]"
    assert tuned_flow[tuned_flow.index("--driver-memory") + 1] == "700m"
    assert plain_flow[plain_flow.index("--driver-memory") + 1] == "1g"  # the key's default; the master: the connection
    # the job itself reads the rest of its settings from the same file: only the file and the flow are passed
    assert tuned_flow[tuned_flow.index("mirror_stream.py") + 1:] == ["--config", str(tuned), "--flow", "alpha->beta"]


def test_every_dag_has_docs_tags_an_owner_and_sane_retries(airflow_home: Path, clusters_file: Path) -> None:
    with deployment(clusters_file) as bag:
        pass
    assert {"mirrorflow_failover", "mirrorflow_failback", "mirrorflow_stream__alpha_to_beta",
            "mirrorflow_control__alpha_to_beta", "mirrorflow_flow__alpha_to_beta"} <= set(bag.dags)
    for dag_id, dag in bag.dags.items():
        assert dag.doc_md and len(dag.doc_md) > 200, dag_id
        assert "mirrorflow" in dag.tags, dag_id
        # What a person on call watches or triggers carries the tag the flows view links to, and nothing else does.
        watched = dag_id.startswith(("mirrorflow_flow__", "mirrorflow_failover", "mirrorflow_failback"))
        assert ("on-call" in dag.tags) is watched, dag_id
        for t in dag.tasks:
            assert t.owner == "mirrorflow", dag_id
            assert t.retries <= 3, f"{dag_id}.{t.task_id}"


def test_the_runbook_forms_say_what_each_field_means(airflow_home: Path, clusters_file: Path) -> None:
    with deployment(clusters_file) as bag:
        pass
    failover = bag.dags["mirrorflow_failover"].params
    assert set(failover) == {"source", "target", "mode", "groups", "dry_run", "require_approval", "rehearse_approval",
                             "switch_flows", "drain_timeout_s"}
    assert set(bag.dags["mirrorflow_failback"].params) == set(failover) - {"source", "target", "mode"} | {
        "original", "backup"}
    for dag_id in ("mirrorflow_failover", "mirrorflow_failback", "mirrorflow_backfill", "mirrorflow_takeover",
                   "mirrorflow_control__alpha_to_beta"):
        form = bag.dags[dag_id].params
        for name in form:
            param = form.get_param(name)
            assert param.schema.get("title") and param.description, (dag_id, name)
            assert "`" not in param.description, (dag_id, name)  # the form shows descriptions as plain text
        form.validate()  # the defaults alone submit
    # Clusters are chosen from the config, and the defaults are the first enabled flow, as a dry run.
    assert failover.get_param("source").schema["enum"] == ["alpha", "beta", "gamma"]
    assert (failover["source"], failover["target"], failover["dry_run"]) == ("alpha", "beta", True)
    assert bag.dags["mirrorflow_control__alpha_to_beta"].params["reason"] is None
    assert {d for d in bag.dags if d.startswith(("mirrorflow_failover", "mirrorflow_failback", "mirrorflow_takeover"))
            } == set(scheduled.RUNBOOK_DAGS)  # the runbooks whose dry runs the scheduler's listener notes
    assert [t.task_id for t in bag.dags["mirrorflow_failover"].topological_sort()] == [
        "DRY_RUN", "preflight", "needs_approval", "approval", "drain", "move_groups", "switch_flows", "report"]
    takeover = bag.dags["mirrorflow_takeover"]
    assert (takeover.params["flow"], takeover.params["mirror"], takeover.params["dry_run"]) == ("alpha->beta", "mm2",
                                                                                                True)
    assert [t.task_id for t in takeover.topological_sort()] == [
        "DRY_RUN", "plan", "needs_approval", "approval", "apply", "report"]


def test_each_flow_is_audited_over_the_hour_that_just_closed_and_the_backfill_form_is_described(
        airflow_home: Path, clusters_file: Path) -> None:
    import pendulum

    with deployment(clusters_file) as bag:
        pass
    audits = sorted(d for d in bag.dags if d.startswith("mirrorflow_audit__"))
    assert audits == ["mirrorflow_audit__alpha_to_beta", "mirrorflow_audit__alpha_to_gamma",
                      "mirrorflow_audit__beta_to_alpha"]
    dag = bag.dags["mirrorflow_audit__alpha_to_beta"]
    interval = dag.timetable.infer_manual_data_interval(run_after=pendulum.datetime(2026, 11, 21, 10, 20))
    assert (interval.start, interval.end) == (pendulum.datetime(2026, 11, 21, 9), pendulum.datetime(2026, 11, 21, 10))
    assert not dag.catchup and dag.max_active_runs == 1
    form = bag.dags["mirrorflow_backfill"].params
    assert set(form) == {"flow", "from_offsets", "from_time", "to_time", "topics", "pause"}
    for name in form:
        assert form.get_param(name).schema.get("title") and form.get_param(name).description, name
    assert form.get_param("flow").schema["enum"] == ["alpha->beta", "beta->alpha", "alpha->gamma"]
    form["from_time"] = "2026-11-21T09:00"  # the rest is optional
    form.validate()


def test_a_mesh_of_six_clusters_and_thirty_flows_parses_into_each_flows_dags(airflow_home: Path,
                                                                            tmp_path: Path) -> None:
    aliases = [f"dc{i}" for i in range(1, 7)]
    mesh = tmp_path / "mesh.properties"
    mesh.write_text("\n".join([f"clusters = {', '.join(aliases)}",
                               *(f"{a}.bootstrap.servers = 127.0.0.1:{27000 + i}" for i, a in enumerate(aliases)),
                               *(f"{s}->{t}.enabled = true" for s in aliases for t in aliases if s != t)]) + "\n")
    with deployment(mesh) as bag:
        pass
    assert bag.import_errors == {}
    flows = [f"{s}_to_{t}" for s in aliases for t in aliases if s != t]
    for kind in ("flow", "stream", "audit"):
        assert sorted(d for d in bag.dags if d.startswith(f"mirrorflow_{kind}__")) == sorted(
            f"mirrorflow_{kind}__{f}" for f in flows), kind

"""The embedded Airflow (`mirrorflow airflow up`, what `make demo` runs) with its real scheduler: it comes up next
to the brokers and launches a flow's stream; a newcomer in a real browser (Debian's Chromium, driven by Playwright)
finds the flows page and a failover dry run's report; a rehearsal's approval is answered through the REST API;
the stream is launched again after it is killed. Tests run in file order on one Airflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from mirrorflow.dev import local_airflow
from mirrorflow.entry import scheduled
from mirrorflow.jobs import lifecycle
from mirrorflow.kafka import clients, flow_lease
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.status import metrics
from support import ports
from support.clusters import PORTS
from support.streams import create_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]
PORT = str(ports.AIRFLOW_API)
FLOW, REVERSE = "home->away", "away->home"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # no calls out of this closed network


@pytest.fixture(scope="module")
def embedded(stream_clusters: config.MirrorConfig, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, config.MirrorConfig, list[str]]]:
    work = tmp_path_factory.mktemp("embedded")
    path = work / "mirror.properties"
    path.write_text(f"clusters = home, away\nhome.bootstrap.servers = 127.0.0.1:{PORTS['alpha']}\n"
                    f"away.bootstrap.servers = 127.0.0.1:{PORTS['beta']}\nhome->away.enabled = true\n"
                    "away->home.enabled = true\n"
                    "topics = emb\\..*\nreplication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
                    "checkpoints.topic.replication.factor = 1\nrefresh.topics.interval.seconds = 120\n"
                    "emit.checkpoints.interval.seconds = 120\n")
    cli = [sys.executable, "-m", "mirrorflow", "--config", str(path)]
    os.environ["MIRRORFLOW_AIRFLOW_PORT"] = PORT
    try:
        yield path, config.load(path), cli
    finally:
        subprocess.run([*cli, "stop", "--flow", FLOW, "--timeout", "90"], capture_output=True, timeout=120)
        subprocess.run([*cli, "airflow", "down"], capture_output=True, timeout=120)
        del os.environ["MIRRORFLOW_AIRFLOW_PORT"]


def _get(path: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _run_state(dag_id: str) -> str:
    _, runs = local_airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1")
    return str(runs["dag_runs"][0]["state"]) if runs["dag_runs"] else ""


def _task_state(dag_id: str, task_id: str) -> str:
    """The task's state in the DAG's newest run ("" before any)."""
    _, runs = local_airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1")
    if not runs["dag_runs"]:
        return ""
    run = quote(runs["dag_runs"][0]["dag_run_id"], safe="")
    _, ti = local_airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/{task_id}")
    return str(ti.get("state") or "")


def _lease_members(cfg: config.MirrorConfig) -> set[str]:
    admin = clients.admin(cfg.cluster("away"))
    return {m.member_id for m in flow_lease.members(admin, FLOW) if m.assignment.topic_partitions}


def test_the_embedded_airflow_launches_the_flow_and_shows_it_on_the_flows_page_behind_its_login(
        embedded: tuple[Path, config.MirrorConfig, list[str]]) -> None:
    _, cfg, cli = embedded
    create_topic(f"127.0.0.1:{PORTS['alpha']}", "emb.orders", 2)
    for args in (["stop", "--flow", REVERSE, "--reason", "standby"], ["start", "--flow", FLOW]):
        done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    up = subprocess.run([*cli, "airflow", "up"], capture_output=True, text=True, timeout=420)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"UI and API at http://127.0.0.1:{PORT}" in up.stdout and "login: admin, password in " in up.stdout
    password = json.loads((local_airflow.home() / "passwords.json").read_text())["admin"]
    assert password not in up.stdout + up.stderr  # a secret is never printed
    assert "Traceback" not in up.stderr
    began = time.monotonic()
    wait_for(lambda: bool(_lease_members(cfg)), 240, "the scheduler to launch the stream")
    print(f"\nembedded Airflow up; the scheduler launched the stream {time.monotonic() - began:.0f} s later")
    # The Spark master is a connection in Airflow's database, where Admin -> Connections shows it.
    found, connection = local_airflow.api("GET", "/api/v2/connections/mirrorflow_spark")
    assert found == 200 and connection["host"] == "local[*]"

    # status and health agree on a stream Airflow launched, and status lists only partitions the flow mirrors.
    def views() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        status = subprocess.run([*cli, "status", "--flow", FLOW, "--json"], capture_output=True, text=True, timeout=60)
        health = subprocess.run([*cli, "health", "--flow", FLOW, "--json"], capture_output=True, text=True, timeout=60)
        assert status.returncode == health.returncode == 0, status.stderr + health.stderr
        return json.loads(status.stdout), json.loads(health.stdout)
    wait_for(lambda: views()[0][0].get("state") == "running" and len(views()[0][0].get("partitions", [])) >= 2,
             120, "the stream's status")
    [status], [health] = views()
    assert status["clusters"]["alive"] is health["alive"] is True
    topics = {p["topic"] for p in status["partitions"]}
    # the flow's topic and heartbeats topics (other tests' flows leave `{alias}.heartbeats` on these brokers),
    # never an internal topic
    assert "emb.orders" in topics and all(t.split(".")[-1] == "heartbeats" for t in topics - {"emb.orders"}), topics

    assert _get("/mirrorflow/flows")[0] == 401  # behind Airflow's login, like its own API
    code, page = _get("/mirrorflow/flows", local_airflow.token())
    assert code == 200 and "home-&gt;away" in page and "away-&gt;home" in page, page


def test_a_newcomer_in_a_browser_sees_no_failed_run_reads_the_lag_and_runs_the_failover_dry_run_from_its_form(
        embedded: tuple[Path, config.MirrorConfig, list[str]], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    password = json.loads((local_airflow.home() / "passwords.json").read_text())["admin"]
    base = f"http://127.0.0.1:{PORT}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(f"{base}/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{base}/")
        failed = page.locator("a[href='/dags?last_dag_run_state=failed']")
        assert failed.inner_text().split()[0] == "0", failed.inner_text()
        page.screenshot(path=tmp_path / "home.png")
        page.goto(f"{base}/dags?tags=mirrorflow")
        page.get_by_role("link", name="mirrorflow_failover").first.wait_for()

        page.goto(f"{base}/")
        page.get_by_role("link", name="Flows").click()  # one click from the home page
        flows = page.frame_locator("iframe")
        row = flows.locator("tr[data-flow='home->away']")
        row.wait_for()
        cells = row.locator("td").all_inner_texts()
        assert row.locator("[data-state]").get_attribute("data-state") in ("healthy", "behind"), cells
        assert cells[2].startswith("running") and cells[3] != "not running" and "records" in cells[4], cells
        standby = flows.locator("tr[data-flow='away->home']")
        assert standby.locator("[data-state]").get_attribute("data-state") == "stopped"
        assert "requested stopped (standby)" in standby.inner_text()
        assert standby.locator("td").all_inner_texts()[9] == "not running"  # no checkpoint age for a stopped flow
        page.screenshot(path=tmp_path / "flows.png")
        print(f"\nflows page, home->away: {cells}")
        # The view refreshes itself: its table is asked for again within REFRESH_S, without a reload.
        flows.locator("#refreshed", has_text="refreshed ").wait_for(timeout=30_000)
        print(f"flows page after its refresh: {flows.locator('#refreshed').inner_text()}")
        # A flow's name opens its partitions.
        flows.get_by_role("link", name="home->away").click()
        partition = flows.locator("tr[data-partition='emb.orders-0']")
        partition.wait_for()
        print(f"partitions of home->away, emb.orders-0: {partition.locator('td').all_inner_texts()}")
        assert flows.locator("tr[data-partition='emb.orders-1']").count() == 1
        page.screenshot(path=tmp_path / "partitions.png")

        page.goto(f"{base}/dags/mirrorflow_failover")
        page.get_by_role("button", name="Trigger").first.click()
        page.get_by_role("dialog").get_by_role("button", name="Trigger").click()  # the defaults: a dry run
        page.wait_for_url("**/runs/**")
        run_url = page.url.split("/runs/")[0] + "/runs/" + page.url.split("/runs/")[1].split("/")[0]
        wait_for(lambda: _run_state("mirrorflow_failover") in ("success", "failed"), 180, "the dry run to end")
        assert _run_state("mirrorflow_failover") == "success"
        page.goto(run_url)
        page.get_by_role("link", name="mirrorflow report").click()
        report = page.frame_locator("iframe").locator("body")
        report.get_by_text("dry run").first.wait_for()
        text = report.inner_text()
        assert "mirrorflow failover home->away (planned), dry run" in text and "RPO" in text, text
        said = [line for line in text.splitlines() if line.strip()]
        assert said[1] == "DRY RUN: nothing was changed. Each step below says what a real run would do.", text
        assert "the dry run took" in text and "not the runbook's RTO" in text, text
        assert "would stop home->away" in text and "would start away->home" in text, text
        page.get_by_text("DRY_RUN", exact=True).first.wait_for()  # the grid's row only a dry run runs
        run_id = quote(unquote(run_url.rsplit("/runs/", 1)[1]), safe="")
        _, run = local_airflow.api("GET", f"/api/v2/dags/mirrorflow_failover/dagRuns/{run_id}")
        assert run["note"] == scheduled.DRY_RUN_NOTE, run  # the scheduler's listener, as the run started
        page.get_by_text(scheduled.DRY_RUN_NOTE).first.wait_for()  # the note on the run's page
        page.screenshot(path=tmp_path / "report.png")
        print(f"failover dry run report on its run page:\n{text}")
        page.goto(f"{base}/dags/mirrorflow_failover/runs")  # the run list: its Conf column shows dry_run
        page.get_by_text("dry_run").first.wait_for()
        page.screenshot(path=tmp_path / "runs.png")

        # The flow DAG's run carries a report: the health line once its health task has run.
        flow_dag = "mirrorflow_flow__home_to_away"
        wait_for(lambda: _task_state(flow_dag, "health") == "success", 300, "the flow DAG's health check")
        _, runs = local_airflow.api("GET", f"/api/v2/dags/{flow_dag}/dagRuns?order_by=-run_after&limit=1")
        page.goto(f"{base}/dags/{flow_dag}/runs/{quote(runs['dag_runs'][0]['dag_run_id'], safe='')}")
        page.get_by_role("link", name="mirrorflow report").click()
        flow_report = page.frame_locator("iframe").locator("body")
        flow_report.get_by_text("flow home->away: running on").first.wait_for()
        print(f"flow DAG run report:\n{flow_report.inner_text()}")
        page.screenshot(path=tmp_path / "flow-report.png")

        page.goto(f"{base}/dags/mirrorflow_backfill")
        page.get_by_role("button", name="Trigger").first.click()
        form = page.get_by_role("dialog")
        form.locator("#element_from_time").fill("2026-11-21T09:00")
        form.get_by_role("button", name="Trigger").click()
        page.wait_for_url("**/runs/**")
        browser.close()
    _, runs = local_airflow.api("GET", "/api/v2/dags/mirrorflow_backfill/dagRuns?order_by=-run_after&limit=1")
    conf = runs["dag_runs"][0]["conf"]
    assert conf["from_time"] == "2026-11-21T09:00" and conf["flow"] == FLOW and conf["from_offsets"] is None, conf
    print(f"screenshots in {tmp_path}")


def _finished_run(dag_id: str) -> dict[str, object] | None:
    _, runs = local_airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=5")
    return next((r for r in runs["dag_runs"] if r["state"] in ("success", "failed")), None)


def _log_levels(dag_id: str, run_id: str) -> dict[str, list[str]]:
    """Each task's log lines at warning level or above, of every try (a task that retries once succeeds on its
    second try: its first one's failure counts), as `try N: level: event`."""
    run = quote(run_id, safe="")
    _, tis = local_airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances")
    found = {}
    for ti in tis["task_instances"]:
        found[ti["task_id"]] = []
        for attempt in range(1, max(1, ti["try_number"]) + 1):
            _, log = local_airflow.api(
                "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/{ti['task_id']}/logs/{attempt}")
            found[ti["task_id"]] += [f"try {attempt}: {e.get('level')}: {e.get('event')}"
                                     for e in log.get("content", [])
                                     if isinstance(e, dict) and e.get("level") in ("warning", "error", "critical")]
    return found


def test_a_quiet_flows_scheduled_runs_succeed_and_their_task_logs_carry_no_error_or_warning(
        embedded: tuple[Path, config.MirrorConfig, list[str]]) -> None:
    # The flow DAG (health, sync, checkpoint rounds) and the audit, whose Spark JVM's start-up notices are filtered.
    for dag_id in ("mirrorflow_flow__home_to_away", "mirrorflow_audit__home_to_away"):
        wait_for(lambda d=dag_id: _finished_run(d) is not None, 300, f"a finished run of {dag_id}")
        run = _finished_run(dag_id)
        assert run is not None
        levels = _log_levels(dag_id, str(run["dag_run_id"]))
        assert run["state"] == "success", (run, levels)  # a failed run says why: its tasks' errors
        print(f"{dag_id}: tasks {sorted(levels)}")
        assert levels and not any(levels.values()), levels


@pytest.mark.parametrize("answer", ["Approve", "Reject"])
def test_a_rehearsal_asks_for_approval_and_the_answer_given_through_the_rest_api_changes_nothing(
        embedded: tuple[Path, config.MirrorConfig, list[str]], answer: str) -> None:
    _, cfg, _ = embedded
    before = lifecycle.requested(FlowLink.of(cfg, cfg.flow(FLOW)))
    code, run = local_airflow.api("POST", "/api/v2/dags/mirrorflow_failover/dagRuns",
                                  {"logical_date": None, "conf": {"rehearse_approval": True}})
    assert code == 200, run
    path = f"/api/v2/dags/mirrorflow_failover/dagRuns/{quote(run['dag_run_id'], safe='')}"
    asked: dict[str, object] = {}

    def waiting() -> bool:
        code, detail = local_airflow.api("GET", f"{path}/taskInstances/approval/-1/hitlDetails")
        asked.update(detail or {})
        return code == 200
    wait_for(waiting, 180, "the approval step to wait for an answer")
    assert asked["options"] == ["Approve", "Reject"] and "Rehearsal" in str(asked["body"]), asked
    wait_for(lambda: local_airflow.api("GET", f"{path}/taskInstances/approval")[1]["state"] == "awaiting_input", 60,
             "the approval task to pause")
    # A person answers once the scheduler has taken in the pausing worker's exit. An answer that re-queues the task
    # before that (seconds, on a busy scheduler) makes Airflow 3.3.2 fail it ("finished with state success, but the
    # task instance's state attribute is queued"): seen twice here, 1 and 5 s after the pause.
    paused = (f"Received executor event with state success for task instance TaskInstanceKey(dag_id="
              f"'mirrorflow_failover', task_id='approval', run_id='{run['dag_run_id']}'")
    wait_for(lambda: paused in (local_airflow.home() / "standalone.log").read_text(errors="replace"), 120,
             "the scheduler to take in the paused approval")
    code, _ = local_airflow.api("PATCH", f"{path}/taskInstances/approval/-1/hitlDetails",
                                {"chosen_options": [answer]})
    assert code == 200
    wait_for(lambda: local_airflow.api("GET", path)[1]["state"] in ("success", "failed"), 180, "the run to end")
    _, tis = local_airflow.api("GET", f"{path}/taskInstances")
    states = {t["task_id"]: t["state"] for t in tis["task_instances"]}
    assert local_airflow.api("GET", path)[1]["state"] == "success", states
    code, page = _get(f"/mirrorflow/runs/mirrorflow_failover/{quote(run['dag_run_id'], safe='')}",
                      local_airflow.token())
    assert code == 200
    if answer == "Approve":
        assert states["report"] == "success" and "approved in Airflow (a rehearsal" in page, page
    else:
        assert states["drain"] == states["report"] == "skipped", states
        assert "Rejected at the approval step: nothing changed." in page, page
    assert lifecycle.requested(FlowLink.of(cfg, cfg.flow(FLOW))) == before
    assert lifecycle.requested(FlowLink.of(cfg, cfg.flow(REVERSE))).state == lifecycle.STOPPED


def test_the_scheduler_restarts_a_killed_stream_within_two_minutes(
        embedded: tuple[Path, config.MirrorConfig, list[str]]) -> None:
    _, cfg, cli = embedded
    password = json.loads((local_airflow.home() / "passwords.json").read_text())["admin"]
    status = metrics.status_file(cfg.flow(FLOW))
    wait_for(lambda: (metrics.read_status(status) or {}).get("state") == "running", 120, "the stream's status")
    dead = _lease_members(cfg)
    killed = time.monotonic()
    os.kill((metrics.read_status(status) or {})["pid"], signal.SIGKILL)
    wait_for(lambda: bool(_lease_members(cfg) - dead), 150, "the scheduler to launch the stream again")
    back = time.monotonic() - killed
    print(f"stream killed with SIGKILL: the scheduler had it running again {back:.0f} s later")
    assert back < 120
    again = subprocess.run([*cli, "airflow", "up"], capture_output=True, text=True, timeout=120)
    assert "password in" in again.stdout and password not in again.stdout + again.stderr


def test_airflow_down_leaves_no_process_of_the_standalone_session(
        embedded: tuple[Path, config.MirrorConfig, list[str]]) -> None:
    _, _, cli = embedded
    session = local_airflow.status().pid
    assert session is not None and local_airflow.session_processes(session)
    subprocess.run([*cli, "stop", "--flow", FLOW, "--timeout", "90"], capture_output=True, timeout=120)
    down = subprocess.run([*cli, "airflow", "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert local_airflow.session_processes(session) == []

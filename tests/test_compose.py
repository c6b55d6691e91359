"""docker-compose.yaml cannot run here (no Docker engine); its consistency with the repository can be checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from mirrorflow.model import config
from mirrorflow.spark import maven
from mirrorflow.status import metrics

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def test_the_stack_has_two_kafka_clusters_spark_and_airflow_on_postgres() -> None:
    kafka = [n for n, s in SERVICES.items() if str(s.get("image", "")).startswith("apache/kafka:")]
    assert len(kafka) == 2
    assert {"spark-master", "spark-worker", "postgres", "airflow-api-server", "airflow-scheduler",
            "airflow-dag-processor", "airflow-triggerer"} <= set(SERVICES)
    assert "postgresql" in SERVICES["airflow-scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]


def test_images_match_the_pinned_versions() -> None:
    images = {s["image"] for s in SERVICES.values() if "image" in s}
    assert f"apache/kafka:{maven.KAFKA_VERSION}" in images
    assert any(i.startswith(f"apache/spark:{maven.SPARK_VERSION}") for i in images)
    pyproject = (REPO / "pyproject.toml").read_text()
    airflow = next(i for i in images if i.startswith("apache/airflow:"))
    assert f'"apache-airflow=={airflow.split(":")[1].split("-")[0]}"' in pyproject


def test_every_mounted_path_exists_and_the_airflow_mounts_are_complete() -> None:
    mounts = {v.split(":")[0] for s in SERVICES.values() for v in s.get("volumes", [])}
    for m in mounts:
        assert (REPO / m).exists(), m
    assert {"./dags", "./plugins", "./include", "./spark_jobs"} <= mounts


def test_host_ports_are_unique_and_match_the_embedded_default() -> None:
    host_ports = [p.split(":")[0] for s in SERVICES.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))
    default = config.load(REPO / "include" / "mirrorflow.properties")
    for alias, c in default.clusters.items():
        assert c.bootstrap_servers.rsplit(":", 1)[1] in host_ports, alias


def test_the_config_it_points_at_exists_and_names_its_kafka_services() -> None:
    env = SERVICES["airflow-scheduler"]["environment"]
    path = env["MIRRORFLOW_CONFIG"].replace("/opt/airflow/include", str(REPO / "include"))
    cfg = config.load(path)
    for c in cfg.clusters.values():
        assert c.bootstrap_servers.split(":")[0] in SERVICES


def test_prometheus_scrapes_each_stream_where_the_docker_config_serves_its_metrics() -> None:
    cfg = config.load(REPO / "include" / "docker.properties")
    scrape = yaml.safe_load((REPO / "include" / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    executor = SERVICES["airflow-scheduler"]["environment"]["AIRFLOW__CORE__EXECUTOR"]
    assert executor == "LocalExecutor"  # tasks, and so the streams' drivers, run in the scheduler's container
    for flow in cfg.enabled_flows:
        assert flow.value("mirrorflow.metrics.host") == "0.0.0.0", flow.name
        assert f"airflow-scheduler:{flow.metrics_port}" in targets, flow.name
    assert {"prometheus", "grafana"} <= set(SERVICES)


def test_every_metric_the_grafana_dashboard_queries_is_one_the_stream_serves() -> None:
    flow = metrics.FlowMetrics("A->B", "A", "B")
    flow.observe_source_ends({("t", 0): 10})
    served = set(re.findall(r"^(mirrorflow_\w+)\{", metrics.prometheus_text([flow.snapshot()]), re.MULTILINE))
    dashboard = json.loads((REPO / "include" / "grafana" / "dashboards" / "mirrorflow.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {m for q in queries for m in re.findall(r"\bmirrorflow_\w+", q)}
    assert queried and queried <= served, queried - served
    sources = yaml.safe_load((REPO / "include" / "grafana" / "provisioning" / "datasources" / "prometheus.yaml")
                             .read_text())["datasources"]
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {s["uid"] for s in sources}
    assert all(s["url"] == "http://prometheus:9090" for s in sources)

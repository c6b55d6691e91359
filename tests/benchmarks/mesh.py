"""A mesh of three data centers in active/active, six flows: mirrorflow beside MirrorMaker 2, one run.

    make bench-mesh    # or: .venv/bin/python tests/benchmarks/mesh.py [--topics N] [--trickle R] [--idle S]

Three local single-broker clusters (a, b, c) under a temporary MIRRORFLOW_HOME, `--topics` topics of 12 partitions
on each (`orders-N`), and every flow between them enabled: a->b, b->a, a->c, c->a, b->c, c->b, each mirroring
`orders-.*` (a remote topic, `a.orders-0`, is not mirrored on). Each mirror in turn, on clusters made afresh with a
backlog of BACKLOG records in every topic before its launch:
  - MirrorMaker 2 (the brokers' version), dedicated mode: the six flows in one JVM, with the heap Kafka's
    connect-mirror-maker.sh gives it (-Xms256m -Xmx2g); its checkpoint connectors are off, since mirrorflow's
    checkpoints are Airflow tasks, not part of the stream; heartbeats on for both;
  - mirrorflow: `mirrorflow stream --flow X` for each flow, as the stream DAGs run them.
Per mirror:
  - first copy: seconds from the launch until each flow's remote topics hold a record (the slowest flow's in the
    JSON, every flow's printed);
  - once every flow copied its backlog: the PSS of all the mirror's processes (and per flow, for mirrorflow), and
    the cores they take over `--idle` seconds;
  - at a trickle of `--trickle` records/s into every topic of every cluster, after TRICKLE_WARMUP_S: the cores over
    `--trickle-s` seconds, and the PSS at its end.
Prints a Markdown table and writes bench-mesh.json:
{"mirrorflow": {"pss_mib_total", "pss_mib_per_flow", "cores_idle", "cores_trickle", "first_copy_s"},
 "mm2": {"pss_mib_total", "cores_idle", "cores_trickle", "first_copy_s"}, "executor_kill": null, "cache_reuse": null}
(the last two need flows on a Spark cluster, not built yet: null until they are measured).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support, benchmarks
from benchmarks.mirror import cpu_seconds, tree_memory_mb  # noqa: E402

QUIET = {"log_level": 3}
CLUSTERS = {"a": 26500, "b": 26510, "c": 26520}  # each broker's controller listens on port + 1
FLOWS = [(s, t) for s in CLUSTERS for t in CLUSTERS if s != t]
PARTITIONS = 12
BACKLOG = 1_200  # records in every topic before a mirror's launch
SIZE = 200
TRICKLE_WARMUP_S = 10.0
COPY_LIMIT_S = 600.0
SETTLE_S = 3.0  # a copy counts as done once its remote ends hold still this long


def servers(alias: str) -> str:
    return f"127.0.0.1:{CLUSTERS[alias]}"


def properties(mm2: bool) -> str:
    lines = [f"clusters = {', '.join(CLUSTERS)}", *(f"{a}.bootstrap.servers = {servers(a)}" for a in CLUSTERS),
             *(f"{s}->{t}.enabled = true" for s, t in FLOWS), "topics = orders-.*",
             *(f"{k}.replication.factor = 1" for k in (
                 "offset-syncs.topic", "checkpoints.topic", "heartbeats.topic", "offset.storage", "status.storage",
                 "config.storage")),
             "replication.factor = 1", "sync.topic.acls.enabled = false", "emit.checkpoints.enabled = false",
             "sync.group.offsets.enabled = false"]
    if mm2:
        lines.append("dedicated.mode.enable.internal.rest = false")
    return "\n".join(lines) + "\n"


def topics(count: int) -> list[str]:
    return [f"orders-{i}" for i in range(count)]


def prepare(home: Path, names: list[str]) -> None:
    """The three clusters made afresh, each with `names` and BACKLOG records in each."""
    from mirrorflow.dev import local
    from mirrorflow.model import config

    path = home / "mesh.properties"
    path.write_text(properties(mm2=False))
    cfg = config.load(path)
    local.down(cfg, purge=True)
    local.up(cfg)
    for alias in CLUSTERS:
        admin = AdminClient({"bootstrap.servers": servers(alias), **QUIET})
        for made in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
            made.result(60)
        producer = Producer({"bootstrap.servers": servers(alias), "linger.ms": 20, **QUIET})
        for t in names:
            for i in range(BACKLOG):
                producer.produce(t, b"x" * SIZE, partition=i % PARTITIONS)
        if producer.flush(120):
            raise RuntimeError(f"the backlog of {alias} was not all written")


def teardown(home: Path) -> None:
    from mirrorflow.dev import local
    from mirrorflow.model import config

    local.down(config.load(home / "mesh.properties"), purge=True)


class RemoteEnds:
    """Each flow's remote partitions' end offsets on its target, summed (commit markers count too); a remote topic
    not made yet counts 0."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.admins = {a: AdminClient({"bootstrap.servers": servers(a), **QUIET}) for a in CLUSTERS}

    def of(self, source: str, target: str) -> int:
        asked = {TopicPartition(f"{source}.{t}", p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                 for t in self.names for p in range(PARTITIONS)}
        total = 0
        for answer in self.admins[target].list_offsets(asked, request_timeout=10).values():
            with contextlib.suppress(KafkaException):
                total += answer.result().offset
        return total


def wait_copied(ends: RemoteEnds, launched: float, alive: Callable[[], bool]) -> dict[str, float]:
    """Each flow's first copy, seconds after `launched`, once every flow's remote topics hold at least its backlog
    (a transactional copy's markers count too) and have not moved for SETTLE_S."""
    want = len(ends.names) * BACKLOG
    first: dict[str, float] = {}
    last: dict[str, tuple[int, float]] = {}
    while True:
        if time.monotonic() - launched > COPY_LIMIT_S:
            raise RuntimeError(f"not every flow copied its backlog within {COPY_LIMIT_S:.0f} s: {last}")
        if not alive():
            raise RuntimeError("a mirror process exited")
        now = time.monotonic()
        for s, t in FLOWS:
            name = f"{s}->{t}"
            n = ends.of(s, t)
            if n and name not in first:
                first[name] = now - launched
            if name not in last or last[name][0] != n:
                last[name] = (n, now)
        if all(n >= want and now - at >= SETTLE_S for n, at in last.values()) and len(last) == len(FLOWS):
            return first
        time.sleep(0.5)


class Trickle:
    """`rate` records/s into every topic of every cluster, from a thread per cluster."""

    def __init__(self, names: list[str], rate: float) -> None:
        self.names, self.rate, self.stop_event = names, rate, threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(a,), daemon=True) for a in CLUSTERS]

    def __enter__(self) -> Trickle:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join()

    def _run(self, alias: str) -> None:
        producer = Producer({"bootstrap.servers": servers(alias), "linger.ms": 5, **QUIET})
        tick, sent = 0.1, 0
        begun = time.monotonic()
        while not self.stop_event.is_set():
            due = int((time.monotonic() - begun) * self.rate)
            for _ in range(due - sent):
                for t in self.names:
                    producer.produce(t, b"t" * SIZE)
            sent = due
            producer.poll(0)
            time.sleep(tick)
        producer.flush(30)


def cores(roots: dict[str, int], seconds: float) -> float:
    before = cpu_seconds(roots)
    time.sleep(seconds)
    after = cpu_seconds(roots)
    return float(sum(after.values()) - sum(before.values())) / seconds


def pss(roots: dict[str, int]) -> dict[str, float]:
    return {name: float(tree_memory_mb(pid)[1]) for name, pid in roots.items()}


Launch = Callable[[], dict[str, subprocess.Popen[bytes]]]
Stop = Callable[[dict[str, subprocess.Popen[bytes]]], None]


def measure(home: Path, name: str, launch: Launch, stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    names = topics(args.topics)
    prepare(home, names)
    try:
        launched = time.monotonic()
        procs = launch()
        roots = {flow: proc.pid for flow, proc in procs.items()}
        try:
            first = wait_copied(RemoteEnds(names), launched, lambda: all(p.poll() is None for p in procs.values()))
            print(f"{name}: first copy per flow, s after launch: "
                  f"{', '.join(f'{f} {s:.1f}' for f, s in sorted(first.items()))}", flush=True)
            time.sleep(10)
            idle = cores(roots, args.idle)
            idle_pss = pss(roots)
            print(f"{name}: idle {idle:.3f} cores, PSS {sum(idle_pss.values()):,.0f} MiB "
                  f"({', '.join(f'{k} {v:,.0f}' for k, v in idle_pss.items())})", flush=True)
            with Trickle(names, args.trickle):
                time.sleep(TRICKLE_WARMUP_S)
                trickle = cores(roots, args.trickle_s)
                trickle_pss = pss(roots)
            print(f"{name}: at {args.trickle:g} records/s per topic {trickle:.3f} cores, PSS "
                  f"{sum(trickle_pss.values()):,.0f} MiB", flush=True)
        finally:
            stop(procs)
    finally:
        teardown(home)
    peak = max(idle_pss, trickle_pss, key=lambda p: sum(p.values()))
    return {"pss_mib_total": sum(peak.values()), "pss_mib_per_flow": [peak[f"{s}->{t}"] for s, t in FLOWS]
            if name == "mirrorflow" else None, "pss_mib_idle": sum(idle_pss.values()),
            "pss_mib_trickle": sum(trickle_pss.values()), "cores_idle": idle, "cores_trickle": trickle,
            "first_copy_s": max(first.values()), "first_copy_s_by_flow": first}


def mm2(home: Path) -> tuple[Launch, Stop]:
    from mirrorflow.model import paths
    from mirrorflow.spark import maven

    jars = maven.fetch("mirror-maker", maven.MIRROR_MAKER, paths.jar_cache())
    props = home / "mm2.properties"
    props.write_text(properties(mm2=True))

    def launch() -> dict[str, subprocess.Popen[bytes]]:
        with open(home / "mm2.log", "wb") as log:
            proc = subprocess.Popen(["java", "-Xms256m", "-Xmx2g", "-cp", maven.classpath(jars),
                                     "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return {"mm2": proc}

    def stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
        _stop_groups(procs.values(), 60)

    return launch, stop


def mirrorflow(home: Path) -> tuple[Launch, Stop]:
    props = home / "mirrorflow.properties"
    props.write_text(properties(mm2=False))

    def launch() -> dict[str, subprocess.Popen[bytes]]:
        procs = {}
        for s, t in FLOWS:
            flow = f"{s}->{t}"
            with open(home / f"stream-{s}-{t}.log", "wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "mirrorflow", "--config", str(props), "stream",
                                         "--flow", flow, "--checkpoint", str(home / f"checkpoint-{s}-{t}")],
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            procs[flow] = proc
        return procs

    def stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
        _stop_groups(procs.values(), 120)

    return launch, stop


def _stop_groups(procs: Iterable[subprocess.Popen[bytes]], wait_s: float) -> None:
    """SIGTERM to each process (a stream stops its query and lease itself), then SIGKILL to the process group of
    any still running after `wait_s`, and to every group's leftovers."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + wait_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=4, help="topics of 12 partitions on each cluster")
    ap.add_argument("--trickle", type=float, default=50.0, help="records/s into each topic while trickling")
    ap.add_argument("--idle", type=float, default=30.0, help="seconds the idle cores are measured over")
    ap.add_argument("--trickle-s", type=float, default=60.0, help="seconds the trickle's cores are measured over")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-mesh-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    print(f"work in {home}; {len(FLOWS)} flows over {args.topics} topics x {PARTITIONS} partitions a cluster",
          flush=True)
    results: dict[str, Any] = {}
    for name, make in (("mm2", mm2), ("mirrorflow", mirrorflow)):
        launch, stop = make(home)
        results[name] = measure(home, name, launch, stop, args)
    results["executor_kill"] = None
    results["cache_reuse"] = None
    (REPO / "bench-mesh.json").write_text(json.dumps(results, indent=1))
    report(results, args)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    mf, mm = results["mirrorflow"], results["mm2"]
    print(f"\n### A mesh of 6 flows ({os.cpu_count()} cores; {args.topics} topics x {PARTITIONS} partitions a "
          f"cluster; trickle {args.trickle:g} records/s a topic)\n")
    print("| | MirrorMaker 2 | mirrorflow | mirrorflow / MM2 |")
    print("|---|---:|---:|---:|")
    for label, key, fmt in (("PSS, all processes, the higher of idle and trickle (MiB)", "pss_mib_total", "{:,.0f}"),
                            ("cores, idle", "cores_idle", "{:.3f}"), ("cores, trickle", "cores_trickle", "{:.3f}"),
                            ("first copy, slowest flow (s)", "first_copy_s", "{:.1f}")):
        print(f"| {label} | {fmt.format(mm[key])} | {fmt.format(mf[key])} | {mf[key] / mm[key]:.2f} |")
    print(f"\nmirrorflow PSS per flow (MiB): {', '.join(f'{v:,.0f}' for v in mf['pss_mib_per_flow'])}")
    print("Executor kill and client cache reuse: not measured (flows on a Spark cluster are not built yet).")


if __name__ == "__main__":
    main()

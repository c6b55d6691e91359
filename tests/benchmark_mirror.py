"""Side-by-side benchmark: Kafka's perf tools (the raw limit), MirrorMaker 2 and mirrorflow, one run.

    make bench                      # or: .venv/bin/python tests/benchmark_mirror.py [--records N] [--idle S]
                                    #     [--compression lz4,zstd]

Two local clusters (ports 26092, 26192) under a temporary MIRRORFLOW_HOME; a 12-partition topic of
1 KiB records; each mirror copies it from an empty target (throughput), then mirrors a fixed
5,000 records/s for 30 s (replication latency measured by a consumer on the target: arrival time
minus the record's CreateTime), then, after --idle seconds (330) without traffic, one record (its latency).
Peak RSS and PSS are summed over each mirror's whole process tree. --compression adds a mirrorflow run
per codec (throughput and latency) with `dst.producer.compression.type` set. Prints MM2's properties and a
Markdown table, and writes the table, with the raw figures, to bench-results.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
SRC, DST = 26092, 26192
PARTITIONS, SIZE, RATE, LATENCY_S = 12, 1024, 5000, 30
QUIET = {"log_level": 3}


def sh(*cmd: str, timeout: float = 1800) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout).stdout


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of a process and all its descendants, in MiB. RSS counts a page shared by several processes
    (forked Python workers) once per process; PSS splits it between them, so its sum is what the tree holds."""
    out = sh("ps", "-e", "-o", "pid=,ppid=,rss=")
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for line in out.splitlines():
        p, pp, r = (int(x) for x in line.split())
        children.setdefault(pp, []).append(p)
        rss[p] = r
    total_rss = total_pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        total_rss += rss.get(p, 0)
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_pss += int(line.split()[1])
        todo.extend(children.get(p, []))
    return total_rss / 1024, total_pss / 1024


class PeakMemory:
    def __init__(self, pid: int) -> None:
        self.pid, self.rss, self.pss, self._stop = pid, 0.0, 0.0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(subprocess.SubprocessError, ValueError):
                rss, pss = tree_memory_mb(self.pid)
                self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            time.sleep(0.5)

    def stop(self) -> tuple[float, float]:
        self._stop.set()
        self._t.join()
        return self.rss, self.pss


def ends(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends", **QUIET})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    except Exception:
        return 0
    finally:
        c.close()


def wait_copied(topic: str, want: int, proc: subprocess.Popen[bytes], limit_s: float) -> tuple[float, int]:
    """(seconds from the first mirrored record to the last, records) on the target."""
    first_t, first_n, deadline = 0.0, 0, time.monotonic() + limit_s
    last_n, last_change = 0, time.monotonic()
    while time.monotonic() < deadline:
        n = ends(f"127.0.0.1:{DST}", topic)
        if n and not first_t:
            first_t, first_n = time.monotonic(), n
        if n != last_n:
            last_n, last_change = n, time.monotonic()
        elif time.monotonic() - last_change > 180:
            raise SystemExit(f"{topic}: no progress for 180 s at {n} records (see the mirror's log)")
        if n >= want:
            return time.monotonic() - first_t, n - first_n
        if proc.poll() is not None:
            raise SystemExit(f"the mirror exited early ({proc.returncode})")
        time.sleep(0.25)
    raise SystemExit(f"{topic}: not copied within {limit_s} s")


def latency(src_topic: str, dst_topic: str) -> tuple[float, float]:
    """p50 and p99 (ms) of arrival minus CreateTime while producing RATE records/s for LATENCY_S."""
    seen: list[float] = []
    done = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{DST}", "group.id": f"bench-lat-{dst_topic}",
                      "auto.offset.reset": "latest", "fetch.wait.max.ms": 5, **QUIET})
        c.subscribe([dst_topic])
        while not done.is_set():
            for m in c.consume(1000, 0.2):
                if not m.error():
                    seen.append(time.time() * 1000 - m.timestamp()[1])
        c.close()

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(8)  # let the consumer join before measured records are produced
    p = Producer({"bootstrap.servers": f"127.0.0.1:{SRC}", "linger.ms": 1, **QUIET})
    payload = os.urandom(SIZE)
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < LATENCY_S:
        due = int((time.monotonic() - start) * RATE)
        while sent < due:
            p.produce(src_topic, payload, partition=sent % PARTITIONS)
            sent += 1
        p.poll(0)
        time.sleep(0.005)
    p.flush(30)
    deadline = time.monotonic() + 60
    while len(seen) < sent and time.monotonic() < deadline:
        time.sleep(0.5)
    done.set()
    reader.join()
    if len(seen) < sent * 0.99:
        raise SystemExit(f"latency phase: only {len(seen)} of {sent} records arrived")
    seen.sort()
    return seen[len(seen) // 2], seen[int(len(seen) * 0.99) - 1]


def after_idle(src_topic: str, dst_topic: str, idle_s: float) -> float:
    """Milliseconds from producing one record, after `idle_s` without traffic, until it is on the target."""
    # Assigned, not subscribed: a group member that does not poll for 5 minutes is dropped from its group.
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{DST}", "group.id": f"bench-idle-{dst_topic}",
                  "fetch.wait.max.ms": 5, **QUIET})
    c.assign([TopicPartition(dst_topic, 0, OFFSET_END)])
    try:
        c.consume(1000, 2)  # at the end
        time.sleep(idle_s)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{SRC}", "linger.ms": 0, **QUIET})
        p.produce(src_topic, b"after a quiet spell", partition=0)
        p.flush(30)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for m in c.consume(10, 0.05):
                if not m.error():
                    return time.time() * 1000 - m.timestamp()[1]
        raise SystemExit(f"idle phase: the record did not reach {dst_topic} within 120 s")
    finally:
        c.close()


def perf_tools(jars: Path, records: int) -> dict[str, float]:
    cp = f"{jars}/lib/*"
    out = sh("java", "-Xmx512m", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", "bench",
             "--num-records", str(records), "--record-size", str(SIZE), "--throughput", "-1",
             "--producer-props", f"bootstrap.servers=127.0.0.1:{SRC}", "acks=all", "linger.ms=5",
             "batch.size=262144")
    # Periodic lines come first; the summary of the whole run is the last match.
    m = list(re.finditer(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", out))[-1]
    cons = sh("java", "-Xmx512m", "-cp", cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
              f"127.0.0.1:{SRC}", "--topic", "bench", "--messages", str(records))
    row = cons.strip().splitlines()[-1].split(",")
    return {"producer_rps": float(m.group(2)), "producer_mbs": float(m.group(3)),
            "consumer_rps": float(row[5]), "consumer_mbs": float(row[3])}


def measure(proc: subprocess.Popen[bytes], alias: str, latency_topic: str, records: int,
            idle_s: float) -> dict[str, float]:
    """Throughput on the backlog, latency at a fixed rate, one record after `idle_s` of quiet, and the peak memory
    of the mirror's tree."""
    memory = PeakMemory(proc.pid)
    try:
        seconds, copied = wait_copied(f"{alias}.bench", records, proc, 3600)
        p50, p99 = latency(latency_topic, f"{alias}.{latency_topic}")
        idle_ms = after_idle(latency_topic, f"{alias}.{latency_topic}", idle_s) if idle_s > 0 else float("nan")
    finally:
        proc.terminate()
        proc.wait(120)
    rss, pss = memory.stop()
    return {"rps": copied / seconds, "seconds": seconds, "peak_rss_mb": rss, "peak_pss_mb": pss, "p50_ms": p50,
            "p99_ms": p99, "after_idle_ms": idle_ms}


def run_mm2(jars: Path, work: Path, records: int, idle_s: float) -> dict[str, float]:
    props = work / "mm2.properties"
    props.write_text(f"""clusters = mm2src, dst
mm2src.bootstrap.servers = 127.0.0.1:{SRC}
dst.bootstrap.servers = 127.0.0.1:{DST}
mm2src->dst.enabled = true
mm2src->dst.topics = bench, lat-mm2
tasks.max = {PARTITIONS}
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
sync.topic.acls.enabled = false
""")
    with open(work / "mm2.log", "wb") as log:
        # 12 tasks each with a consumer and a producer: 1 GiB of heap runs out of memory.
        proc = subprocess.Popen(["java", "-Xmx2g", "-cp", f"{jars}/lib/*",
                                 "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
                                stdout=log, stderr=subprocess.STDOUT)
    return measure(proc, "mm2src", "lat-mm2", records, idle_s)


def run_mirrorflow(work: Path, records: int, idle_s: float, alias: str = "src", extra: str = "") -> dict[str, float]:
    """One mirrorflow stream; `alias` names the source (a new remote topic per run), `extra` adds properties."""
    props = work / f"mirrorflow-{alias}.properties"
    props.write_text(f"""clusters = {alias}, dst
{alias}.bootstrap.servers = 127.0.0.1:{SRC}
dst.bootstrap.servers = 127.0.0.1:{DST}
{alias}->dst.enabled = true
{alias}->dst.topics = bench, lat-{alias}
replication.factor = 1
offset-syncs.topic.replication.factor = 1
{extra}""")
    with open(work / f"mirrorflow-{alias}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mirrorflow.cli", "--config", str(props), "stream",
                                 "--flow", f"{alias}->dst", "--checkpoint", str(work / f"checkpoint-{alias}")],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return measure(proc, alias, f"lat-{alias}", records, idle_s)


def _ms(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.0f}"


def table(limit: dict[str, float], runs: list[tuple[str, dict[str, float]]]) -> str:
    """`runs`: (name, figures), MirrorMaker 2 first, then mirrorflow's, the first of them its default."""
    mb = SIZE / 1e6
    rows = [
        "| run | records/s | MB/s | peak RSS (MiB) | peak PSS (MiB) | p50 latency @5k/s (ms) | "
        "p99 latency @5k/s (ms) | one record after an idle spell (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| Kafka ProducerPerformance (limit) | {limit['producer_rps']:,.0f} | {limit['producer_mbs']:.1f} "
        "| | | | | |",
        f"| Kafka ConsumerPerformance | {limit['consumer_rps']:,.0f} | {limit['consumer_mbs']:.1f} | | | | | |",
    ]
    for name, r in runs:
        rows.append(f"| {name} | {r['rps']:,.0f} | {r['rps'] * mb:.1f} | {r['peak_rss_mb']:,.0f} | "
                    f"{r['peak_pss_mb']:,.0f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {_ms(r['after_idle_ms'])} |")
    mm2, mf = runs[0][1], runs[1][1]
    rows.append(f"| **mirrorflow / MM2** | **{mf['rps'] / mm2['rps']:.2f}x** | | "
                f"{mf['peak_rss_mb'] / mm2['peak_rss_mb']:.2f}x | {mf['peak_pss_mb'] / mm2['peak_pss_mb']:.2f}x | "
                f"{mf['p50_ms'] / mm2['p50_ms']:.2f}x | {mf['p99_ms'] / mm2['p99_ms']:.2f}x | "
                f"{mf['after_idle_ms'] / mm2['after_idle_ms']:.2f}x |")
    rows.append(f"| **mirrorflow / limit** | **{mf['rps'] / limit['producer_rps']:.2f}x** | | | | | | |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    # Past 5 minutes: also past Spark's default 5-minute idle limit for its Kafka consumers.
    ap.add_argument("--idle", type=float, default=330.0, help="seconds of quiet before the one-record probe (0: none)")
    ap.add_argument("--compression", default="", help="also run mirrorflow with these target compressions (lz4,zstd)")
    ap.add_argument("--skip-mm2", action="store_true", help="no MM2 run (the ratios need one)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    from mirrorflow import config, local, maven

    cfg = config.from_text(f"clusters = src, dst\nsrc.bootstrap.servers = 127.0.0.1:{SRC}\n"
                           f"dst.bootstrap.servers = 127.0.0.1:{DST}\n", source="bench")
    local.up(cfg)
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{SRC}", **QUIET})
        codecs = [c for c in args.compression.split(",") if c]
        for t in ("bench", "lat-mm2", "lat-src", *(f"lat-src{c}" for c in codecs)):
            admin.create_topics([NewTopic(t, PARTITIONS, 1)])[t].result(30)
        cache = local.jar_cache()
        limit = perf_tools(maven.fetch("kafka-broker", maven.KAFKA_BROKER, cache), args.records)
        print("limit", limit, flush=True)
        runs: list[tuple[str, dict[str, float]]] = []
        if not args.skip_mm2:
            runs.append(("MirrorMaker 2 (dedicated, tasks.max=12)",
                         run_mm2(maven.fetch("mirror-maker", maven.MIRROR_MAKER, cache), home, args.records,
                                 args.idle)))
            print("mm2", runs[-1][1], "\nMM2's properties:\n" + (home / "mm2.properties").read_text(), flush=True)
        runs.append(("mirrorflow (local[*]; at-least-once, records fenced)", run_mirrorflow(home, args.records,
                                                                                              args.idle)))
        print("mirrorflow", runs[-1][1], flush=True)
        for codec in codecs:
            runs.append((f"mirrorflow, dst.producer.compression.type = {codec}", run_mirrorflow(
                home, args.records, 0, f"src{codec}", f"dst.producer.compression.type = {codec}\n")))
            print(codec, runs[-1][1], flush=True)
        result = json.dumps(runs) if args.skip_mm2 else table(limit, runs)
        machine = f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
        print(f"\n{args.records:,} records of {SIZE} B, {PARTITIONS} partitions, {machine}"
              f", idle spell {args.idle:.0f} s"
              f"\n\n{result}")
        Path("bench-results.json").write_text(json.dumps(
            {"records": args.records, "machine": machine, "idle_s": args.idle, "limit": limit, "runs": runs,
             "table": result}, indent=1))
    finally:
        local.down(cfg, purge=True)


if __name__ == "__main__":
    main()

"""Side-by-side benchmark: Kafka's perf tools (the raw limit), MirrorMaker 2 and mirrorflow, one run.

    make bench                      # or: .venv/bin/python tests/benchmarks/mirror.py [--records N] [--idle S]
                                    #     [--compression lz4,zstd] [--modes plain,transactional,exactly-once,many,wan]
                                    #     [--wan-sides target,source]

Two local clusters (ports 26092, 26192) under a temporary MIRRORFLOW_HOME; topics of 1 KiB records. Modes:
  plain          a 12-partition topic; each mirror copies it from an empty target (throughput), then mirrors a
                 fixed 5,000 records/s for 180 s (replication latency measured by a consumer on the target: arrival
                 time minus the record's CreateTime), then, after --idle seconds (330) without traffic, one record.
                 mirrorflow's batches linger 60 s (LINGER_MS), so the 180 s hold three batch boundaries.
                 Then mirrorflow's audit of the copy (source records compared per second).
  transactional  a 12-partition topic written in transactions of 4 records; both mirrors read_committed.
  exactly-once   the plain topic again, into an exactly-once target (MM2: exactly.once.source.support).
  many           100 topics x 12 partitions, the same total volume, with mirrorflow's per-batch times.
  wan            a WAN between the clusters: Toxiproxy in front of each, 25 ms each way (a 50 ms round trip); each
                 mirror runs beside the target (it reads across the WAN), then beside the source (it writes across
                 it). The same WAN tuning for both (WAN_TUNING: larger fetches and socket buffers,
                 `dst.producer.compression.type = lz4`), compressible records (1 KiB of order-like JSON each,
                 written with lz4); throughput, latency at 5,000 records/s, and the bytes each copy takes on the
                 target's disk per record.
Every mirrorflow flow lingers 60 s and takes batches of up to 2,400,000 records (FLOW_PROPERTIES: its latency and
catch-up tuning, against the defaults of 1,500 ms and 250,000).
Every MM2 run has the same tuning (MM2_TUNING, printed). Peak RSS and PSS are summed over each mirror's whole
process tree. --compression adds a mirrorflow run per codec (throughput and latency) with
`dst.producer.compression.type` set. Prints MM2's properties and a Markdown table, and writes the table, with the
raw figures, to bench-results.json.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from mirrorflow.rules import batch_plan

REPO = Path(__file__).resolve().parents[2]
SRC, DST = 26092, 26192
# mirrorflow's batches linger a minute (its latency tuning: a boundary between two batches, about 300 ms, then falls
# on a few records in a thousand), and latency is measured over three of them, for MM2 alike.
LINGER_MS = 60_000
PARTITIONS, SIZE, RATE, LATENCY_S, WARMUP_S = 12, 1024, 5000, 3 * LINGER_MS // 1000, 5
TXN_RECORDS, MANY_TOPICS = 4, 100  # records per source transaction; topics of the many-partitions mode
METRICS_PORT = 26095
# The WAN mode: each broker's second listener and the Toxiproxy port it advertises; Toxiproxy's API; the delay.
WAN_PORTS = {"src": (26096, 26097), "dst": (26196, 26197)}
WAN_API, WAN_ONE_WAY_MS = 26474, 25
QUIET = {"log_level": 3}
# MM2's documented tuning for high volume (Strimzi/Streams guide: producer batch 320 KiB, consumer fetch 50 MiB,
# 1 MiB per partition, 500 records per poll), linger 5 ms: mirrorflow's idempotent writer's. Its transactional one
# lingers 1 s but sends a full batch at once and the rest at each commit (at most 50 ms apart at a trickle).
MM2_TUNING = {
    "tasks.max": "12",
    "dst.producer.batch.size": "327680",
    "dst.producer.linger.ms": "5",
    "{source}.consumer.fetch.max.bytes": "52428800",
    "{source}.consumer.max.partition.fetch.bytes": "1048576",
    "{source}.consumer.max.poll.records": "500",
}
# Kafka's guidance for a high-latency link (its "Datacenters" section: larger socket buffers) and larger fetches, so
# that each round trip carries more, with compression on the target; the same block for both mirrors, on top of
# MM2_TUNING for MM2 (this block's fetch size replaces MM2_TUNING's).
WAN_TUNING = {
    "{source}.consumer.fetch.max.bytes": "52428800",
    "{source}.consumer.max.partition.fetch.bytes": "4194304",
    "{source}.consumer.receive.buffer.bytes": "4194304",
    "dst.producer.send.buffer.bytes": "4194304",
    "dst.producer.compression.type": "lz4",
}
# mirrorflow's own addition (its README, "Across a WAN"): Spark's Kafka reader pays two ListOffsets round trips after
# every poll, so a poll should return all that a fetch brought (the client's default is 500 records).
MIRRORFLOW_WAN = {"{source}.consumer.max.poll.records": "10000"}


def as_properties(tuning: dict[str, str], source: str) -> str:
    """Properties lines of a tuning block, its `{source}` placeholders naming the source alias."""
    return "".join(f"{k.format(source=source)} = {v}\n" for k, v in tuning.items())


def mm2_tuning(source: str, override: dict[str, str] | None = None) -> str:
    """MM2_TUNING for source `source`, with `override`'s keys (same `{source}` placeholders) replacing or adding."""
    return as_properties({**MM2_TUNING, **(override or {})}, source)


def wan_tuning(source: str, mirrorflow: bool = False) -> str:
    return as_properties({**WAN_TUNING, **(MIRRORFLOW_WAN if mirrorflow else {})}, source)


def compressible_payloads(count: int = 512, seed: int = 7) -> list[bytes]:
    """`count` distinct records of SIZE bytes that compress like business events do (JSON from a small vocabulary,
    random ids and amounts), not like the random bytes of the other modes."""
    import random

    rnd = random.Random(seed)
    words = ["pending", "shipped", "paid", "refunded", "express", "standard", "warehouse", "berlin", "lisbon",
             "oslo", "customer", "priority", "gift", "returned", "EUR", "USD", "card", "transfer"]
    out = []
    for _ in range(count):
        order = {"order_id": rnd.randrange(10**9), "customer": f"c-{rnd.randrange(10**6):06d}",
                 "status": rnd.choice(words), "currency": rnd.choice(words[-4:-2]),
                 "items": [{"sku": f"sku-{rnd.randrange(10**5):05d}", "qty": rnd.randrange(1, 9),
                            "price": round(rnd.uniform(1, 500), 2), "tag": rnd.choice(words)} for _ in range(8)],
                 "note": " ".join(rnd.choice(words) for _ in range(40))}
        out.append(json.dumps(order).encode()[:SIZE].ljust(SIZE, b" "))
    return out


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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


PLANNER_MODULE = b"pyspark.sql.streaming.python_streaming_source_runner"  # the process Spark runs a Python source in


def cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each named process tree; a mirror's tree is split into its JVM
    (`{name} JVM`), its root (`{name} Python driver`), the data source's planner (`{name} planner`, Spark's
    streaming source runner) and every other process (`{name} Python workers`: Spark's Python daemons and their
    forked workers)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            children.setdefault(int(fields[1]), []).append(pid)
            # utime + stime, and cutime + cstime: the CPU of children it reaped (a Spark worker that exited during a
            # measurement) stays counted, in the tree it belonged to
            ticks[pid] = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    used: dict[str, float] = {}
    for name, root in roots.items():
        todo = [root]
        while todo:
            pid = todo.pop()
            kind = name
            if name == "mirror":
                with contextlib.suppress(OSError):
                    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    kind = ("mirror JVM" if args[0].endswith(b"java") else
                            "mirror Python driver" if pid == root else
                            "mirror planner" if PLANNER_MODULE in args else "mirror Python workers")
            used[kind] = used.get(kind, 0.0) + ticks.get(pid, 0) / CLOCK_TICKS
            todo.extend(children.get(pid, []))
    return used


def machine_seconds() -> dict[str, float]:
    """CPU seconds of the whole machine so far (/proc/stat): busy (every process, the kernel's interrupts) and
    stolen by the hypervisor. Beside a copy's own trees they say whether something else took the cores."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    return {"busy": (user + nice + system + irq + softirq) / CLOCK_TICKS, "steal": steal / CLOCK_TICKS}


STREAM_ARGS: list[str] = []  # --stream-args: more arguments for every mirrorflow stream (experiments)
# mirrorflow's catch-up tuning: batches of up to MIN_SHARE records for each partition of the many mode (2,400,000),
# the least cap under which its backlog over 1,200 partitions takes no turns (P6: partitions take turns once the cap
# leaves each fewer than MIN_SHARE records), each turn a batch of its own: about 400 ms of trigger between two
# batches, and the tail of each batch's slower task. `--modes many` after MM2's, one run each: 142,848 records/s in
# 3 turns at 1,000,000 (the source's one-partition heartbeats topic took the backlog past two caps), 166,534 in one
# batch at 4,000,000. Before that, 250,000 -> 1,000,000: plain 139,255 / 131,981, many 93,053 in 8 batches / 100,618
# in 2.
MAX_RECORDS_PER_BATCH = batch_plan.MIN_SHARE * MANY_TOPICS * PARTITIONS
# The lines every mirrorflow properties file ends with: the latency and catch-up tuning, then --flow-properties
# (experiments).
FLOW_PROPERTIES: list[str] = [f"mirrorflow.stream.linger.ms = {LINGER_MS}",
                              f"mirrorflow.stream.max.records.per.batch = {MAX_RECORDS_PER_BATCH}"]
BROKERS: dict[str, int] = {}  # "source broker" / "target broker": pid, set once the clusters are up


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


def ends(admin: AdminClient, topics: list[str]) -> int:
    """The sum of the topics' end offsets (one request); raises KafkaException (a topic not there yet, too)."""
    from confluent_kafka.admin import OffsetSpec

    answers = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                                  for t in topics
                                  for p in range(PARTITIONS)}, request_timeout=10)
    return sum(f.result().offset for f in answers.values())


class MirrorFailed(Exception):
    """A mirror's run that could not finish its copy: recorded as failed with this cause; the other runs go on."""


def wait_copied(topics: list[str], want: int, proc: subprocess.Popen[bytes],
                limit_s: float) -> tuple[float, int, dict[str, float], dict[str, float]]:
    """(seconds from the first mirrored record to the last, records, CPU seconds per process tree in that time, the
    machine's in that time) on the target. An exactly-once target's end offsets also count transaction markers, so
    they reach `want` early: the copy is done when they have reached it and stop moving (2 s), and it ended at their
    last move."""
    first_t, first_n, deadline = 0.0, 0, time.monotonic() + limit_s
    last_n, last_change = 0, time.monotonic()
    roots = {"mirror": proc.pid, **BROKERS}
    first_cpu: dict[str, float] = {}
    last_cpu: dict[str, float] = {}
    first_machine: dict[str, float] = {}
    last_machine: dict[str, float] = {}
    # One client for the whole wait: a new one every poll took the bench 0.10-0.12 cores on 1,200 partitions.
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{DST}", **QUIET})
    failure = ""  # why the last look at the target's end offsets failed: named if the copy seems not to move
    while time.monotonic() < deadline:
        try:
            n = ends(admin, topics)
        except KafkaException as exc:
            # A client whose look failed looks again afresh: its metadata may still say the topic is not there.
            n, failure = last_n, f"; the last look at the target failed: {exc}"
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{DST}", **QUIET})
        else:
            failure = ""
        if n and not first_t:
            first_t, first_n, first_cpu, first_machine = time.monotonic(), n, cpu_seconds(roots), machine_seconds()
        if n != last_n:
            last_n, last_change, last_cpu, last_machine = n, time.monotonic(), cpu_seconds(roots), machine_seconds()
        elif n >= want and time.monotonic() - last_change >= 2:
            cpu = {k: v - first_cpu.get(k, 0.0) for k, v in last_cpu.items()}
            machine = {k: v - first_machine.get(k, 0.0) for k, v in last_machine.items()}
            return last_change - first_t, round(want * (n - first_n) / n), cpu, machine  # markers in proportion
        elif time.monotonic() - last_change > 180:
            raise MirrorFailed(f"{topics[0]}: no progress for 180 s at {n:,} of {want:,} records{failure}")
        if proc.poll() is not None:
            raise MirrorFailed(f"the mirror exited early ({proc.returncode})")
        time.sleep(0.25)
    raise MirrorFailed(f"{topics[0]}: not copied within {limit_s} s")


def latency(src_topic: str, dst_topic: str, payloads: list[bytes] | None = None,
            mirror_pid: int | None = None) -> tuple[float, float, float]:
    """p50 and p99 (ms) of arrival minus CreateTime while producing RATE records/s for LATENCY_S (random bytes, or
    `payloads` in turn), after WARMUP_S at that rate, not counted: a fresh topic's first second costs about 750 ms
    of p99 with no mirror at all (produced straight to the target: 757 ms in its first 5 s, 10-20 after); and the
    cores the mirror's process tree (`mirror_pid`) kept busy while they were measured (nan without it)."""
    seen: list[float] = []
    done = threading.Event()
    measured_from = [math.inf]  # CreateTime (ms) of the first measured record

    def consume() -> None:
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{DST}", "group.id": f"bench-lat-{dst_topic}",
                      "auto.offset.reset": "latest", "fetch.wait.max.ms": 5, **QUIET})
        c.subscribe([dst_topic])
        while not done.is_set():
            # A short wait: consume() returns once it has its count or the wait is over, and a record's arrival is
            # taken when it returns (with 1,000 and 0.2 s, records waited up to 200 ms in the call at this rate).
            for m in c.consume(1000, 0.005):
                if not m.error() and m.timestamp()[1] >= measured_from[0]:
                    seen.append(time.time() * 1000 - m.timestamp()[1])
        c.close()

    # The backlog's writes reach the disk first, so that the kernel's writeback of them (30 s after they were
    # written) does not fall into the measured phase.
    os.sync()
    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(8)  # let the consumer join before measured records are produced
    p = Producer({"bootstrap.servers": f"127.0.0.1:{SRC}", "linger.ms": 1, **QUIET})
    values = payloads or [os.urandom(SIZE)]
    print(f"latency {dst_topic}: {RATE:,} records/s from {time.time():.3f} (epoch s), measured after {WARMUP_S} s",
          flush=True)
    start, sent, warm = time.monotonic(), 0, 0
    roots = {"mirror": mirror_pid} if mirror_pid is not None else {}
    cpu_from = (0.0, 0.0)
    while time.monotonic() - start < WARMUP_S + LATENCY_S:
        if not warm and time.monotonic() - start >= WARMUP_S:
            measured_from[0], warm = time.time() * 1000, sent
            cpu_from = (time.monotonic(), sum(cpu_seconds(roots).values()))
        due = int((time.monotonic() - start) * RATE)
        while sent < due:
            p.produce(src_topic, values[sent % len(values)], partition=sent % PARTITIONS)
            sent += 1
        p.poll(0)
        time.sleep(0.005)
    cores = (sum(cpu_seconds(roots).values()) - cpu_from[1]) / (time.monotonic() - cpu_from[0]) if roots else math.nan
    p.flush(30)
    sent -= warm
    deadline = time.monotonic() + 60
    while len(seen) < sent and time.monotonic() < deadline:
        time.sleep(0.5)
    done.set()
    reader.join()
    if len(seen) < sent * 0.99:
        raise SystemExit(f"latency phase: only {len(seen)} of {sent} records arrived")
    # The p99 of each 5 s of arrivals: whether the tail is spread out or one spell (a start, a pause).
    spells = [sorted(seen[i:i + 5 * RATE]) for i in range(0, len(seen), 5 * RATE)]
    print(f"latency {dst_topic}: p99 per 5 s:", ", ".join(f"{s[int(len(s) * 0.99) - 1]:.0f}" for s in spells if s),
          flush=True)
    seen.sort()
    return seen[len(seen) // 2], seen[int(len(seen) * 0.99) - 1], cores


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


def measure(proc: subprocess.Popen[bytes], copies: list[str], records: int, latency_topic: str | None = None,
            idle_s: float = 0.0, alias: str = "", payloads: list[bytes] | None = None) -> dict[str, float]:
    """Throughput on the backlog (`copies`: the remote topics), then, given a `latency_topic`, latency at a fixed
    rate and one record after `idle_s` of quiet; the peak memory of the mirror's tree, and the stream's per-batch
    times when it serves metrics."""
    memory = PeakMemory(proc.pid)
    nan = float("nan")
    try:
        seconds, copied, cpu, machine = wait_copied(copies, records, proc, 3600)
        batch = stream_status()
        p50 = p99 = idle_ms = rate_cores = nan
        if latency_topic:
            p50, p99, rate_cores = latency(latency_topic, f"{alias}.{latency_topic}", payloads, proc.pid)
            idle_ms = after_idle(latency_topic, f"{alias}.{latency_topic}", idle_s) if idle_s > 0 else nan
    finally:
        proc.terminate()
        proc.wait(120)
        rss, pss = memory.stop()
    # CPU per 1,000 records copied, per process tree: where the 2 cores go, so what bounds the copy.
    per_k = {f"cpu_ms_per_k {k}": 1e6 * v / copied for k, v in cpu.items()}
    stored = sum(target_bytes(t) for t in copies)
    # Every record is on the target by now; `copied` counts only those after the first look (it misses a first
    # batch that landed before it).
    return {"rps": copied / seconds, "target_bytes_per_record": stored / records, "seconds": seconds,
            "peak_rss_mb": rss, "peak_pss_mb": pss, "p50_ms": p50,
            "p99_ms": p99, "mirror_cores_at_rate": rate_cores, "after_idle_ms": idle_ms,
            "cores_busy": sum(cpu.values()) / seconds, **per_k, **batch,
            # the rest of the machine in the copy's time: processes outside the mirror and the brokers, and steal
            "other_cores": (machine["busy"] - sum(cpu.values())) / seconds, "steal_cores": machine["steal"] / seconds}


def target_bytes(topic: str) -> int:
    """Bytes the target broker holds on disk for `topic` (its log segments): what a copy costs after compression."""
    home = Path(os.environ["MIRRORFLOW_HOME"]) / "local" / "dst"
    return sum(f.stat().st_size for f in home.glob(f"**/{topic}-[0-9]*/*.log"))


def stream_status() -> dict[str, float]:
    """A mirrorflow stream's mean per-batch times (ms) from its metrics endpoint; nothing for MM2."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/status", timeout=2) as answer:
            [s] = json.loads(answer.read())
    except OSError:
        return {}
    return {"batches": s["batches"], "batch_ms": s["batch-ms-avg"], "batch_write_ms": s["batch-write-ms-avg"],
            "batch_driver_ms": s["batch-driver-ms-avg"], "trigger_overhead_ms": s["trigger-overhead-ms-avg"],
            "source_consumer_inits": s["source-consumer-inits"], "reading_tasks": s["reading-tasks"]}


def mm2_properties(alias: str, topics: list[str], source: str = f"127.0.0.1:{SRC}",
                   target: str = f"127.0.0.1:{DST}") -> str:
    """A dedicated MirrorMaker 2 from `alias` to dst on single-broker clusters, without its tuning."""
    return f"""clusters = {alias}, dst
{alias}.bootstrap.servers = {source}
dst.bootstrap.servers = {target}
{alias}->dst.enabled = true
{alias}->dst.topics = {", ".join(topics)}
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
sync.topic.acls.enabled = false
"""


def run_mm2(jars: Path, work: Path, alias: str, topics: list[str], records: int, extra: str = "",
            latency_topic: str | None = None, idle_s: float = 0.0, source: str = f"127.0.0.1:{SRC}",
            target: str = f"127.0.0.1:{DST}", tuning: dict[str, str] | None = None,
            payloads: list[bytes] | None = None) -> dict[str, float]:
    """One dedicated MirrorMaker 2 from source `alias` (a new remote topic per run) to dst, MM2_TUNING (`tuning`
    replacing or adding keys) and `extra`."""
    props = work / f"mm2-{alias}.properties"
    props.write_text(mm2_properties(alias, topics, source, target) + mm2_tuning(alias, tuning) + extra)
    with open(work / f"mm2-{alias}.log", "wb") as log:
        # 12 tasks each with a consumer and a producer: 1 GiB of heap runs out of memory.
        proc = subprocess.Popen(["java", "-Xmx2g", "-cp", f"{jars}/lib/*",
                                 "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
                                stdout=log, stderr=subprocess.STDOUT)
    print(f"MM2's properties ({alias}):\n{props.read_text()}", flush=True)
    copies = [f"{alias}.{t}" for t in topics if t != latency_topic]
    return measure(proc, copies, records, latency_topic, idle_s, alias, payloads)


def run_mirrorflow(work: Path, alias: str, topics: str, copies: list[str], records: int, extra: str = "",
                   latency_topic: str | None = None, idle_s: float = 0.0, source: str = f"127.0.0.1:{SRC}",
                   target: str = f"127.0.0.1:{DST}", payloads: list[bytes] | None = None) -> dict[str, float]:
    """One mirrorflow stream from source `alias` (a new remote topic per run); `extra` adds properties."""
    props = work / f"mirrorflow-{alias}.properties"
    flow_properties = "".join(f"{line}\n" for line in FLOW_PROPERTIES)
    props.write_text(f"""clusters = {alias}, dst
{alias}.bootstrap.servers = {source}
dst.bootstrap.servers = {target}
{alias}->dst.enabled = true
{alias}->dst.topics = {topics}
replication.factor = 1
offset-syncs.topic.replication.factor = 1
{extra}{flow_properties}""")
    with open(work / f"mirrorflow-{alias}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mirrorflow", "--config", str(props), "stream",
                                 "--flow", f"{alias}->dst", "--checkpoint", str(work / f"checkpoint-{alias}"),
                                 "--metrics-port", str(METRICS_PORT), *STREAM_ARGS],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return measure(proc, [f"{alias}.{t}" for t in copies], records, latency_topic, idle_s, alias, payloads)


def produce_transactions(topic: str, records: int, producers: int = 8) -> float:
    """`records` records in transactions of TXN_RECORDS, each into one partition, from `producers` transactional
    producers at once (a commit waits for the coordinator: one producer alone manages a few hundred a second).
    Returns records/s."""
    payload = os.urandom(SIZE)
    per = records // producers

    def one(n: int) -> None:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{SRC}", "transactional.id": f"bench-txn-{n}", "linger.ms": 0,
                      **QUIET})
        p.init_transactions(30)
        for t in range(per // TXN_RECORDS):
            p.begin_transaction()
            for _ in range(TXN_RECORDS):
                p.produce(topic, payload, partition=(n + t) % PARTITIONS)
            p.commit_transaction(30)

    begun = time.monotonic()
    threads = [threading.Thread(target=one, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per * producers / (time.monotonic() - begun)


def produce(topics: list[str], records: int, payloads: list[bytes] | None = None, compression: str = "none") -> None:
    """`records` records spread evenly over the topics' partitions (random bytes, or `payloads` in turn)."""
    p = Producer({"bootstrap.servers": f"127.0.0.1:{SRC}", "linger.ms": 20, "batch.size": 1_000_000,
                  "compression.type": compression, **QUIET})
    values = payloads or [os.urandom(SIZE)]
    for i in range(records):
        while True:
            try:
                p.produce(topics[i % len(topics)], values[i % len(values)], partition=(i // len(topics)) % PARTITIONS)
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(120):
        raise SystemExit("producing the many-topics backlog did not finish")


def audit_speed(work: Path, stream_rps: float) -> dict[str, Any]:
    """mirrorflow's audit of the plain run's copy, twice in one Spark session (an hourly audit starts a new one; the
    second run shows the rate once the JVM is warm): source records compared per second, over the stream's rate."""
    from mirrorflow.jobs import audit
    from mirrorflow.kafka.link import FlowLink
    from mirrorflow.model import config
    from mirrorflow.spark import spark_session

    cfg = config.load(work / "mirrorflow-src.properties")
    spark = spark_session.build("bench audit")
    try:
        reports = [audit.run(FlowLink.of(cfg, "src->dst"), topics="bench", spark=spark) for _ in range(2)]
    finally:
        spark.stop()
    for report in reports:
        if not report.complete:
            raise SystemExit(f"the audit of the plain run failed: {report.summary()}")
    source = reports[0].total("source_records")
    cold, warm = (source / r.seconds for r in reports)
    return {"source_records": source, "seconds": reports[0].seconds, "source_rps": cold, "warm_source_rps": warm,
            "over_stream": cold / stream_rps, "warm_over_stream": warm / stream_rps}


def _ms(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.0f}"


Run = tuple[str, str, dict[str, float]]  # (what ran, mode, figures)


def _ratio(a: float, b: float) -> str:
    return "" if math.isnan(a) or math.isnan(b) or not b else f"{a / b:.2f}x"


def table(limit: dict[str, float], runs: list[Run], audit: dict[str, Any] | None) -> str:
    """`runs`: per mode, MirrorMaker 2's run (if any) before mirrorflow's, mirrorflow's default first."""
    mb = SIZE / 1e6
    rows = [
        "| run | mode | records/s | MB/s | peak RSS (MiB) | peak PSS (MiB) | p50 latency @5k/s (ms) | "
        "p99 latency @5k/s (ms) | one record after an idle spell (ms) | ms per batch (driver / Spark outside it) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| Kafka ProducerPerformance (limit) | | {limit['producer_rps']:,.0f} | {limit['producer_mbs']:.1f} "
        "| | | | | | |",
        f"| Kafka ConsumerPerformance | | {limit['consumer_rps']:,.0f} | {limit['consumer_mbs']:.1f} | | | | | | |",
    ]
    for name, mode, r in runs:
        if "failed" in r:
            rows.append(f"| {name} | {mode} | failed: {r['failed']} | | | | | | | |")
            continue
        batch = (f"{r['batch_ms']:,.0f} ({r['batch_driver_ms']:,.0f} / {r['trigger_overhead_ms']:,.0f})"
                 if "batch_ms" in r else "")
        rows.append(f"| {name} | {mode} | {r['rps']:,.0f} | {r['rps'] * mb:.1f} | {r['peak_rss_mb']:,.0f} | "
                    f"{r['peak_pss_mb']:,.0f} | {_ms(r['p50_ms'])} | {_ms(r['p99_ms'])} | {_ms(r['after_idle_ms'])} "
                    f"| {batch} |")
    first: dict[tuple[str, bool], dict[str, float]] = {}
    for name, mode, r in runs:
        if "failed" not in r:
            first.setdefault((mode, name.startswith("MirrorMaker")), r)
    for mode in dict.fromkeys(m for _, m, _ in runs):
        mm2, mf = first.get((mode, True)), first.get((mode, False))
        if mm2 and mf:
            rows.append(f"| **mirrorflow / MM2** | {mode} | **{_ratio(mf['rps'], mm2['rps'])}** | | "
                        f"{_ratio(mf['peak_rss_mb'], mm2['peak_rss_mb'])} | "
                        f"{_ratio(mf['peak_pss_mb'], mm2['peak_pss_mb'])} | {_ratio(mf['p50_ms'], mm2['p50_ms'])} | "
                        f"{_ratio(mf['p99_ms'], mm2['p99_ms'])} | "
                        f"{_ratio(mf['after_idle_ms'], mm2['after_idle_ms'])} | |")
    plain = first.get(("plain", False))
    if plain:
        rows.append(f"| **mirrorflow / limit** | plain | **{_ratio(plain['rps'], limit['producer_rps'])}** "
                    "| | | | | | | |")
    many = first.get(("many", False))
    if plain and many:
        rows.append(f"| **mirrorflow many / plain** | many | **{_ratio(many['rps'], plain['rps'])}** | | | | | | | |")
    if audit:
        rows.append(f"| mirrorflow audit of the plain copy (both sides read; new Spark session, then again) | audit | "
                    f"{audit['source_rps']:,.0f}, {audit['warm_source_rps']:,.0f} source records/s | | | | | | | |")
        rows.append(f"| **audit / stream** | audit | **{audit['over_stream']:.2f}x, {audit['warm_over_stream']:.2f}x** "
                    "| | | | | | | |")
    rows += ["", cpu_table(runs)]
    return "\n".join(rows)


def cpu_table(runs: list[Run]) -> str:
    """CPU milliseconds per 1,000 records copied, per process tree, while each mirror copied its backlog; all of it
    over the copy's seconds is how many of the machine's cores were busy, and beside it the cores the rest of the
    machine took meanwhile (other processes; the hypervisor's steal); and the mirror's cores at the latency phase's
    fixed rate."""
    kinds = ("mirror JVM", "mirror Python driver", "mirror planner", "mirror Python workers", "source broker",
             "target broker")
    rows = ["| run | mode | " + " | ".join(f"{k} (CPU ms / 1,000 records)" for k in kinds) + " | cores busy | "
            "other / steal cores | bytes on the target's disk per record | mirror's cores at 5,000 records/s |",
            "|---|---|" + "---:|" * (len(kinds) + 4)]
    for name, mode, r in (run for run in runs if "failed" not in run[2]):
        cells = [f"{r[f'cpu_ms_per_k {k}']:,.0f}" if f"cpu_ms_per_k {k}" in r else "" for k in kinds]
        rows.append(f"| {name} | {mode} | " + " | ".join(cells) + f" | {r.get('cores_busy', math.nan):.2f} | "
                    f"{r.get('other_cores', math.nan):.2f} / {r.get('steal_cores', math.nan):.2f} | "
                    f"{r.get('target_bytes_per_record', math.nan):,.0f} | "
                    f"{r.get('mirror_cores_at_rate', math.nan):.2f} |")
    return "\n".join(rows)


MODES = ("plain", "transactional", "exactly-once", "many", "wan")


def main() -> None:
    global LATENCY_S
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--txn-records", type=int, default=400_000, help="records of the transactional mode")
    # Past 5 minutes: also past Spark's default 5-minute idle limit for its Kafka consumers.
    ap.add_argument("--idle", type=float, default=330.0, help="seconds of quiet before the one-record probe (0: none)")
    ap.add_argument("--compression", default="", help="also run mirrorflow with these target compressions (lz4,zstd)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    ap.add_argument("--skip-mm2", action="store_true", help="no MM2 runs (the ratios need them)")
    ap.add_argument("--mirrorflow-first", action="store_true",
                    help="plain: mirrorflow before MM2 (the second copy runs on brokers holding the first's records)")
    ap.add_argument("--wan-sides", default="target,source", help="where the mirrors run in the wan mode: beside the "
                    "target (reads cross the WAN), beside the source (writes cross it), or both")
    ap.add_argument("--stream-args", default="", help="more arguments for `mirrorflow stream` (experiments)")
    ap.add_argument("--latency-s", type=float, default=LATENCY_S,
                    help=f"seconds the latency at {RATE:,} records/s is measured ({LATENCY_S})")
    ap.add_argument("--flow-properties", default="", help="more properties for every mirrorflow flow, `;` between "
                    "them (experiments)")
    args = ap.parse_args()
    LATENCY_S = args.latency_s
    STREAM_ARGS.extend(args.stream_args.split())
    FLOW_PROPERTIES.extend(line.strip() for line in args.flow_properties.split(";") if line.strip())
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        raise SystemExit(f"--modes: unknown {', '.join(sorted(set(modes) - set(MODES)))}")
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    os.environ.setdefault("MIRRORFLOW_TOXIPROXY", str(REPO / ".mirrorflow" / "bin" / "toxiproxy-server"))
    # Kafka's own heap (kafka-server-start's 1 GiB) for both clusters and both mirrors, not the tests' 384 MiB: the
    # target's collector took 1.2 s of a 2,000,000-record copy onto 1,200 partitions at 384 MiB (run I). One run
    # each of `--modes plain,many --skip-mm2 --idle 0 --latency-s 5`: many 145,216 / 152,503 records/s, target
    # 5.99 / 5.71 ms per 1,000 records at 384 MiB / 1 GiB.
    os.environ.setdefault("MIRRORFLOW_BROKER_HEAP", "1g")
    from mirrorflow.dev import local, netfaults
    from mirrorflow.model import config, paths
    from mirrorflow.spark import maven

    cfg = config.from_text(f"clusters = src, dst\nsrc.bootstrap.servers = 127.0.0.1:{SRC}\n"
                           f"dst.bootstrap.servers = 127.0.0.1:{DST}\n", source="bench")
    wan = "wan" in modes
    links = netfaults.Toxiproxy(WAN_API, home / "toxiproxy.log").start() if wan else None
    proxied = {alias: [ports] for alias, ports in WAN_PORTS.items()} if wan else None
    try:
        for broker in local.up(cfg, proxied=proxied):
            if broker.pid is not None:
                BROKERS[f"{'source' if broker.alias == 'src' else 'target'} broker"] = broker.pid
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{SRC}", **QUIET})
        codecs = [c for c in args.compression.split(",") if c]
        many = [f"many-{i:03d}" for i in range(MANY_TOPICS)]
        topics = ["bench", "txn", "lat-mm2", "lat-src", *(f"lat-src{c}" for c in codecs), *many, "wan",
                  "lat-wan-mm2", "lat-wan", "lat-wanw-mm2", "lat-wanw"]
        for created in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
            created.result(60)
        cache = paths.jar_cache()
        limit = perf_tools(maven.fetch("kafka-broker", maven.KAFKA_BROKER, cache), args.records)
        print("limit", limit, flush=True)
        mm2_jars = maven.fetch("mirror-maker", maven.MIRROR_MAKER, cache)
        runs: list[Run] = []
        audit: dict[str, Any] | None = None

        def ran(name: str, mode: str, run: Callable[[], dict[str, float]]) -> None:
            # Each mirror starts with nothing left to write back: the backlog just produced, or the copy before it
            # (2 GB), was otherwise written back by the kernel during this copy.
            os.sync()
            try:
                figures = run()
            except MirrorFailed as exc:  # the cause is in the mirror's log, beside the run's properties
                figures = {"failed": f"{exc} (see {home})"}  # type: ignore[dict-item]
            runs.append((name, mode, figures))
            print(mode, name, figures, flush=True)

        if "plain" in modes:
            pair = [("MirrorMaker 2 (dedicated, tasks.max=12)",
                     functools.partial(run_mm2, mm2_jars, home, "mm2src", ["bench", "lat-mm2"], args.records,
                                       latency_topic="lat-mm2", idle_s=args.idle)),
                    ("mirrorflow (local[*]; at-least-once, records fenced)",
                     functools.partial(run_mirrorflow, home, "src", "bench, lat-src", ["bench"], args.records,
                                       latency_topic="lat-src", idle_s=args.idle))]
            for name, run in pair[::-1] if args.mirrorflow_first else pair:
                if not (args.skip_mm2 and run.func is run_mm2):
                    ran(name, "plain", run)
            if "rps" in runs[-1][2]:
                audit = audit_speed(home, runs[-1][2]["rps"])
                print("audit", audit, flush=True)
            for codec in codecs:
                ran(f"mirrorflow, dst.producer.compression.type = {codec}", "plain",
                    functools.partial(run_mirrorflow, home, f"src{codec}", f"bench, lat-src{codec}", ["bench"],
                                      args.records, f"dst.producer.compression.type = {codec}\n",
                                      latency_topic=f"lat-src{codec}"))
        if "transactional" in modes:
            rate = produce_transactions("txn", args.txn_records)
            print(f"transactional source: {args.txn_records:,} records at {rate:,.0f}/s", flush=True)
            if not args.skip_mm2:
                ran("MirrorMaker 2, consumer isolation.level = read_committed", "transactional",
                    functools.partial(run_mm2, mm2_jars, home, "mm2txn", ["txn"], args.txn_records,
                            "mm2txn.consumer.isolation.level = read_committed\n"))
            ran("mirrorflow (reads committed: the source is transactional)", "transactional",
                functools.partial(run_mirrorflow, home, "srctxn", "txn", ["txn"], args.txn_records))
        if "exactly-once" in modes:
            if not args.skip_mm2:
                ran("MirrorMaker 2, dst.exactly.once.source.support = enabled", "exactly-once",
                    functools.partial(run_mm2, mm2_jars, home, "mm2eos", ["bench"], args.records,
                            "dst.exactly.once.source.support = enabled\ndedicated.mode.enable.internal.rest = true\n"
                            "listeners = http://127.0.0.1:26083\n"
                            "mm2eos.consumer.isolation.level = read_committed\n"))
            ran("mirrorflow, dst.exactly.once.source.support = enabled", "exactly-once",
                functools.partial(run_mirrorflow, home, "srceos", "bench", ["bench"], args.records,
                               "dst.exactly.once.source.support = enabled\n"))
        if "many" in modes:
            produce(many, args.records)
            if not args.skip_mm2:
                ran(f"MirrorMaker 2, {MANY_TOPICS} topics x {PARTITIONS} partitions", "many",
                    functools.partial(run_mm2, mm2_jars, home, "mm2many", many, args.records))
            ran(f"mirrorflow, {MANY_TOPICS} topics x {PARTITIONS} partitions", "many",
                functools.partial(run_mirrorflow, home, "srcmany", "many-.*", many, args.records))
        if wan:
            assert links is not None
            for alias, (listener, proxy) in WAN_PORTS.items():
                links.add(netfaults.Link(f"{alias}-wan", f"127.0.0.1:{proxy}", f"127.0.0.1:{listener}"))
                links.delay(f"{alias}-wan", WAN_ONE_WAY_MS)
            payloads = compressible_payloads()
            produce(["wan"], args.records, payloads, compression="lz4")
            print(f"WAN tuning (both mirrors):\n{wan_tuning('<source>')}mirrorflow's own:\n"
                  f"{as_properties(MIRRORFLOW_WAN, '<source>')}", flush=True)
            local_, remote = {"src": f"127.0.0.1:{SRC}", "dst": f"127.0.0.1:{DST}"}, {
                alias: f"127.0.0.1:{proxy}" for alias, (_, proxy) in WAN_PORTS.items()}
            sides = {"target": ("src", "the target: reads cross the WAN"),
                     "source": ("dst", "the source: writes cross it")}
            for far, beside in (sides[side] for side in args.wan_sides.split(",")):
                where = {**local_, far: remote[far]}
                mode = f"wan, mirror beside {beside.split(':')[0]}"
                tag = "wan" if far == "src" else "wanw"
                if not args.skip_mm2:
                    ran(f"MirrorMaker 2 beside {beside} ({2 * WAN_ONE_WAY_MS} ms round trip)", mode,
                        functools.partial(run_mm2, mm2_jars, home, f"mm2{tag}", ["wan", f"lat-{tag}-mm2"], args.records,
                                latency_topic=f"lat-{tag}-mm2", source=where["src"], target=where["dst"],
                                tuning=WAN_TUNING, payloads=payloads))
                ran(f"mirrorflow beside {beside} ({2 * WAN_ONE_WAY_MS} ms round trip)", mode,
                    functools.partial(run_mirrorflow, home, f"src{tag}", f"wan, lat-{tag}", ["wan"], args.records,
                                   wan_tuning(f"src{tag}", mirrorflow=True), latency_topic=f"lat-{tag}",
                                   source=where["src"], target=where["dst"], payloads=payloads))
        result = json.dumps(runs) if args.skip_mm2 else table(limit, runs, audit)
        machine = f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
        print(f"\n{args.records:,} records of {SIZE} B ({args.txn_records:,} in the transactional mode, "
              f"{TXN_RECORDS} per transaction), {PARTITIONS} partitions per topic, {machine}, idle spell "
              f"{args.idle:.0f} s\n\n{result}")
        Path("bench-results.json").write_text(json.dumps(
            {"records": args.records, "machine": machine, "idle_s": args.idle, "limit": limit, "runs": runs,
             "audit": audit, "table": result}, indent=1))
    finally:
        local.down(cfg, purge=True)
        if links is not None:
            links.stop()


if __name__ == "__main__":
    main()

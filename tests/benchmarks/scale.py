"""Production shape: one flow over thousands of partitions, its state, planning and checkpoint rounds by size.

    make bench-scale    # or: .venv/bin/python tests/benchmarks/scale.py [--sizes 2400,12000,24000]

Two local clusters of two brokers each (one broker's open-file limit here is 20,000), purged between sizes, under
a temporary MIRRORFLOW_HOME. First the 12-partition reference (one topic), then per size topics of 12 partitions
(200, 1,000, 2,000 topics: the shape of 2,000 topics x 12), each time the same records (`--records`, 100 B each)
spread over every partition before the flow starts. Per size it measures:
  - first copy: seconds from launching `mirrorflow stream` until the target holds a mirrored record;
  - throughput: records per second from the first mirrored record to the last, against the reference's;
  - peak PSS of the flow's process tree while it copies, against the reference's;
  - idle: the cores the flow's driver (Python and JVM) and planner take over IDLE_S once it has copied everything,
    and the whole tree's (the copy workers too), each process kind apart;
  - the offset-log entry Spark writes for a batch in which 100 partitions moved (bytes);
  - restart: seconds from launching the stream again (SIGTERM before) until a record produced then is mirrored;
  - the offset-sync state a restart reads: live records, seconds and MiB (peak RSS growth) of reading it whole in
    a process of its own (`offset_sync_log.read`);
  - a checkpoint round (`mirrorflow checkpoint --flow`, a process of its own) for `--groups` consumer groups, group
    i committed at random offsets on every partition of topic i mod topics: seconds, the process's peak RSS and
    the client requests both clusters' brokers counted meanwhile (benchmarks.broker_requests), on
    the LAN and with the target behind a link delayed WAN_ONE_WAY_MS each way (Toxiproxy; the task beside the
    source, the target across the WAN). A round still running after `--round-limit` seconds is stopped and
    recorded as that limit, marked `capped`. Then once more on the LAN holding a second copy of the flow's offset-sync
    state, standing in for the reverse flow's in active/active: its peak RSS is `checkpoint_task_peak_mib`;
  - the brokers' intake: records per second the bench's librdkafka producer wrote the backlog into the source at
    (round robin over the partitions), and Kafka's Java producer (SpreadProducer.java, javac) writing as many again
    over the same partitions, round robin too, once the flow has stopped.
Prints a Markdown table; writes bench-scale.json ({"sizes": [{...}, ...]}, one object per size).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support, benchmarks
from benchmarks.broker_requests import BrokerRequests, broker_pid_files  # noqa: E402
from benchmarks.mirror import PeakMemory, cpu_seconds  # noqa: E402

QUIET = {"log_level": 3}
SRC, DST = (26300, 26302), (26310, 26312)  # broker ports; each node's controller listens on port + 1
WAN = ((26320, 26330), (26322, 26332))  # the target's nodes: (second listener, Toxiproxy port advertised)
WAN_API = 26340
WAN_ONE_WAY_MS = 25
PARTITIONS_PER_TOPIC = 12
IDLE_S = 30.0
# The target's "driver + planner" at idle: the driver's processes (Python, and Spark's JVM: in local mode also the
# executor) and the data source's planner; the copy workers are beside them in the whole tree's figure.
DRIVER_AND_PLANNER = ("mirror Python driver", "mirror JVM", "mirror planner")
SAMPLE = 240  # partitions wait_target polls while a copy runs
FULL_POLL_S = 1.0
SIZE = 100
SEND_ROUNDS = 5  # produce: how often a record the source refused is sent


def servers(ports: tuple[int, ...]) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in ports)


def properties(prefix: str, target: str) -> str:
    return "\n".join([
        "clusters = src, dst", f"src.bootstrap.servers = {servers(SRC)}", f"dst.bootstrap.servers = {target}",
        "replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1", "heartbeats.topic.replication.factor = 1",
        "src->dst.enabled = true", f"src->dst.topics = {prefix}.*", "groups = scale-.*",
        "emit.heartbeats.enabled = false", "sync.group.offsets.enabled = false", ""])


def topic_names(prefix: str, partitions: int) -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(partitions // PARTITIONS_PER_TOPIC)]


def create(topics: list[str]) -> None:
    """The topics, created and known to every broker with a leader for each partition."""
    admin = AdminClient({"bootstrap.servers": servers(SRC), **QUIET})
    for at in range(0, len(topics), 250):
        for made in admin.create_topics([NewTopic(t, PARTITIONS_PER_TOPIC, 1) for t in topics[at:at + 250]],
                                        request_timeout=120).values():
            made.result(180)
    deadline = time.monotonic() + 600
    while True:
        known = admin.list_topics(timeout=60).topics
        if all(t in known and len(known[t].partitions) == PARTITIONS_PER_TOPIC
               and all(p.leader >= 0 for p in known[t].partitions.values()) for t in topics):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the topics created have no leader after 600 s")
        time.sleep(2)


def produce(topics: list[str], records: int, partitions: list[tuple[str, int]] | None = None,
            produced: Counter[tuple[str, int]] | None = None) -> None:
    """`records` of SIZE bytes, round robin over every partition of `topics` (or over `partitions`), each record
    counted into `produced` once the source acknowledged it.

    No record may time out in the producer's queue: at 24,000 partitions librdkafka sends a request per partition,
    and records queued longer than its default five minutes were dropped (63,736 of 2,400,000). A record refused
    because the producer did not know its partition yet (a topic just created) is sent again, up to SEND_ROUNDS
    times: the copy the bench waits for must hold every record it was given."""
    every = partitions or [(t, p) for t in topics for p in range(PARTITIONS_PER_TOPIC)]
    producer = Producer({"bootstrap.servers": servers(SRC), "linger.ms": 50, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 0, **QUIET})
    delivered: Counter[tuple[str, int]] = Counter()
    refused: list[tuple[tuple[str, int], KafkaError]] = []

    def acknowledged(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            delivered[(msg.topic(), msg.partition())] += 1
        else:
            refused.append(((msg.topic(), msg.partition()), err))

    payload = b"x" * SIZE
    todo: Iterable[tuple[str, int]] = (every[i % len(every)] for i in range(records))
    for attempt in range(1, SEND_ROUNDS + 1):
        for i, (topic, partition) in enumerate(todo):
            _send(producer, topic, partition, payload, acknowledged)
            if i % 20_000 == 0:
                producer.poll(0)
        if producer.flush(600):
            raise RuntimeError("records left unsent after 600 s")
        if not refused:
            break
        if attempt == SEND_ROUNDS:
            raise RuntimeError(f"{len(refused):,} of {records:,} records not acknowledged by the source after "
                               f"{SEND_ROUNDS} rounds (first: {refused[0][1].str()})")
        todo, refused = [tp for tp, _ in refused], []
        time.sleep(2)
    if produced is not None:
        produced.update(delivered)


def _send(producer: Producer, topic: str, partition: int, payload: bytes, acknowledged: Any) -> None:
    """One record into the producer's queue, waiting while the queue is full or the topic is not known yet."""
    while True:
        try:
            producer.produce(topic, payload, partition=partition, on_delivery=acknowledged)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:  # a topic just created that this producer's metadata lacks yet
            if exc.args[0].code() != KafkaError._UNKNOWN_TOPIC:
                raise
            producer.poll(0.5)


class TargetEnds:
    """Sums of the target's end offsets. An admin client that asked for partitions while their topics were being
    created went on failing for a share of them long after (6,060 of 24,240 in a sample of 240, minutes after the
    copy): after a read with a failed partition the next one uses a new client."""

    def __init__(self) -> None:
        self.admin: AdminClient | None = None

    def sum(self, partitions: Iterable[tuple[str, int]]) -> int:
        """The sum of the remote partitions' end offsets on the target (0 for one not there yet)."""
        if self.admin is None:
            self.admin = AdminClient({"bootstrap.servers": servers(DST), **QUIET})
        asked = [TopicPartition(f"src.{t}", p) for t, p in partitions]
        futures: list[Any] = []
        for at in range(0, len(asked), 250):  # calls of a few hundred partitions: one of 24,000 took a core
            futures += self.admin.list_offsets({tp: OffsetSpec.latest() for tp in asked[at:at + 250]},  # type: ignore[no-untyped-call]
                                               request_timeout=30).values()
        total, failed = 0, False
        for future in futures:
            try:
                total += future.result().offset
            except KafkaException:
                failed = True
        if failed:
            self.admin = None
        return total


def every_partition(topics: list[str]) -> list[tuple[str, int]]:
    return [(t, p) for t in topics for p in range(PARTITIONS_PER_TOPIC)]


class Flow:
    def __init__(self, config: Path, workdir: Path) -> None:
        from support.streams import StreamProcess

        self.stream = StreamProcess(config, "src->dst", workdir)

    def start(self) -> float:
        self.stream.start()
        return time.monotonic()

    def stop(self) -> None:
        if self.stream.alive():
            self.stream.stop()


def wait_target(target: TargetEnds, produced: Counter[tuple[str, int]], flow: Flow, limit_s: float,
                settle_s: float = 2.0) -> tuple[float, float, int]:
    """(monotonic time of the first record seen on the target, of the last change, the sum then) once the target's
    remote partitions hold what was `produced` (end offsets: commit markers count too) and have not moved for
    `settle_s`.

    Reading the ends of every partition costs the bench about 25 us of CPU a partition (0.6 s at 24,000, polled
    every half second: a core taken from the flow it measures). So it polls a sample of SAMPLE partitions, and the
    whole set only once the sample holds its share, then every FULL_POLL_S until the whole holds everything: the
    last change is known to within that interval plus one read."""
    sample = sorted(random.Random(11).sample(sorted(produced), min(SAMPLE, len(produced))))
    sample_want = sum(produced[tp] for tp in sample)
    want = sum(produced.values())
    first = last_change = 0.0
    last = -1
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        part = target.sum(sample)
        now = time.monotonic()
        if part and not first:
            first = now
        if part >= sample_want:
            n = target.sum(produced)
            now = time.monotonic()
            if n and not first:
                first = now
            if n != last:
                last, last_change = n, now
            if n >= want and now - last_change >= settle_s:
                return first, last_change, n
            time.sleep(FULL_POLL_S if n < want else settle_s)
        else:
            time.sleep(0.5)
        if not flow.stream.alive():
            raise RuntimeError(f"the stream exited ({flow.stream.log})")
    raise RuntimeError(f"{max(last, 0):,} of {want:,} records on the target after {limit_s:.0f} s ({flow.stream.log})")


def anchor_bound() -> int:
    from mirrorflow.model import keys

    return int(next(k.default for k in keys.FLOW_KEYS if k.name == "mirrorflow.offset-syncs.anchors.max"))


def newest_offset_log_entry(checkpoint: Path) -> tuple[int, int]:
    """(batch id, bytes) of the newest entry of Spark's offset log."""
    entries = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    newest = max(entries, key=lambda p: int(p.name))
    return int(newest.name), newest.stat().st_size


def base_written(checkpoint: Path, batch: int) -> int:
    """The bytes of the offset base (rules/offset_bases) batch `batch` made, if its entry names a base the entry
    before did not; 0 otherwise."""
    from mirrorflow.rules import offset_bases
    from mirrorflow.spark import offset_log

    def named(b: int) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return offset_bases.base_number(json.loads((checkpoint / "offsets" / str(b)).read_text().splitlines()[2]))
        return None

    number = named(batch)
    if number is None or named(batch - 1) == number:
        return 0
    return (checkpoint / offset_log.BASES / f"{number}.json").stat().st_size


def in_own_process(code: str, config: Path, limit_s: float, **env: str) -> tuple[float, float, str, bool]:
    """(seconds, peak RSS in MiB, stdout, capped) of `code` run by this Python in a process of its own."""
    begun = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "MIRRORFLOW_CONFIG": str(config), **env})
    capped = False
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        capped = True
    seconds = time.monotonic() - begun
    peak = _peak_rss_mib(out.decode(errors="replace"))
    if proc.returncode not in (0, None) and not capped:
        raise RuntimeError(f"`{code[:60]}...` failed ({proc.returncode}):\n{out.decode(errors='replace')[-3000:]}")
    return seconds, peak, out.decode(errors="replace"), capped


def _peak_rss_mib(out: str) -> float:
    for line in out.splitlines():
        if line.startswith("peak_rss_kib="):
            return int(line.split("=", 1)[1]) / 1024
    return float("nan")


# The peak of the measuring process's own address space. Not getrusage's ru_maxrss: Linux carries the peak of the
# address space a process had before its exec over, so a child of the bench reported the bench's own peak.
HWM_KIB = "next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:'))"
PEAK = f'print(f"peak_rss_kib={{{HWM_KIB}}}", flush=True)'

# The flow's whole offset-sync state, read once in the measuring process (`read_syncs()`).
READ_SYNCS = """
import os
from mirrorflow.kafka import offset_sync_log
from mirrorflow.model import config
from mirrorflow.rules import offset_syncs
def read_syncs():
    cfg = config.load(os.environ["MIRRORFLOW_CONFIG"])
    return offset_sync_log.read({"bootstrap.servers": cfg.cluster("dst").bootstrap_servers, "log_level": 3},
                                offset_syncs.topic_name("src"))
"""

SYNC_READ = f"""
import time
{READ_SYNCS}
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the high-water mark starts again at the RSS now, so its growth is the read's
before = {HWM_KIB}
begun = time.monotonic()
state = read_syncs()
print(f"read_s={{time.monotonic() - begun:.3f}}")
print(f"live={{state.live_records()}}")
print(f"grown_kib={{{HWM_KIB} - before}}")
{PEAK}
"""

ROUND = f"""
import cProfile, os, pstats, sys, time
from mirrorflow.entry.cli.main import main
{READ_SYNCS}
if os.environ.get("SCALE_BOTH_FLOWS"):  # active/active: the reverse flow's state, as large as this flow's, held too
    reverse = read_syncs()
profile = cProfile.Profile() if os.environ.get("SCALE_PROFILE") else None
begun = time.monotonic()
if profile is not None:
    profile.enable()
try:
    code = main(["checkpoint", "--flow", "src->dst"])
except SystemExit as exit:
    code = exit.code
seconds = time.monotonic() - begun
if profile is not None:
    profile.disable()
    pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
print(f"round_s={{seconds:.3f}} exit={{code}}")
{PEAK}
"""


def value(out: str, key: str) -> float:
    for line in out.splitlines():
        for word in line.split():
            if word.startswith(f"{key}="):
                return float(word.split("=", 1)[1])
    raise RuntimeError(f"no {key} in:\n{out[-3000:]}")


def commit_groups(topics: list[str], groups: int, rng: random.Random) -> int:
    """Group i commits a random offset on every partition of topic i mod len(topics); group-partitions committed."""
    admin = AdminClient({"bootstrap.servers": servers(SRC), **QUIET})
    ends = {(tp.topic, tp.partition): f.result().offset for tp, f in admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t in topics  # type: ignore[no-untyped-call]
         for p in range(PARTITIONS_PER_TOPIC)}, request_timeout=60).items()}
    committed = 0
    for at in range(0, groups, 200):
        futures = []
        for g in range(at, min(groups, at + 200)):
            topic = topics[g % len(topics)]
            offsets = [TopicPartition(topic, p, rng.randrange(0, ends[(topic, p)] + 1))
                       for p in range(PARTITIONS_PER_TOPIC)]
            futures.append(admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(f"scale-{g}", offsets)])[f"scale-{g}"])
            committed += len(offsets)
        for f in futures:
            f.result(120)
    return committed


def measure(home: Path, partitions: int, args: argparse.Namespace, reference: dict[str, Any] | None
            ) -> dict[str, Any]:
    from mirrorflow.dev import local, netfaults
    from mirrorflow.model import config

    prefix = f"s{partitions}-"
    work = home / f"p{partitions}"
    work.mkdir()
    lan, wan = work / "lan.properties", work / "wan.properties"
    lan.write_text(properties(prefix, servers(DST)))
    wan.write_text(properties(prefix, servers(tuple(proxy for _, proxy in WAN))))
    cfg = config.load(lan)
    links = netfaults.Toxiproxy(WAN_API, work / "toxiproxy.log").start()
    row: dict[str, Any] = {"partitions": partitions}
    flow = Flow(lan, work / "flow")
    try:
        local.up(cfg, proxied={"dst": list(WAN)})
        topics = topic_names(prefix, partitions)
        begun = time.monotonic()
        create(topics)
        created = time.monotonic()
        produced: Counter[tuple[str, int]] = Counter()
        produce(topics, args.records, produced=produced)
        row["produce_rps"] = args.records / (time.monotonic() - created)
        print(f"{partitions:,} partitions: {len(topics):,} topics created in {created - begun:.0f} s, "
              f"{args.records:,} records produced at {row['produce_rps']:,.0f} records/s (librdkafka)", flush=True)
        target = TargetEnds()
        os.sync()
        launched = flow.start()
        peak = PeakMemory(flow.stream.proc.pid)
        first, last, n = wait_target(target, produced, flow, args.copy_limit)
        _, row["peak_pss_mib"] = peak.stop()
        row["first_copy_s"] = first - launched
        row["rps"] = args.records / (last - first) if last > first else float("nan")
        print(f"  copied {n:,} records: first {row['first_copy_s']:.1f} s after launch, {row['rps']:,.0f} records/s, "
              f"peak PSS {row['peak_pss_mib']:,.0f} MiB", flush=True)

        time.sleep(10)
        roots = {"mirror": flow.stream.proc.pid}
        before = cpu_seconds(roots)
        time.sleep(IDLE_S)
        after = cpu_seconds(roots)
        row["idle_cores_by_process"] = {k: (after[k] - before.get(k, 0.0)) / IDLE_S for k in after}
        row["idle_cores"] = sum(v for k, v in row["idle_cores_by_process"].items() if k in DRIVER_AND_PLANNER)
        row["idle_cores_tree"] = sum(row["idle_cores_by_process"].values())
        print(f"  idle: driver and planner {row['idle_cores']:.3f} cores, the whole tree {row['idle_cores_tree']:.3f} "
              f"{row['idle_cores_by_process']}", flush=True)

        every = every_partition(topics)
        moved = every[:: max(1, partitions // 100)][:100]
        batch_before, _ = newest_offset_log_entry(flow.stream.checkpoint)
        produce(topics, 10 * len(moved), moved, produced)
        deadline = time.monotonic() + 300
        while (entry := newest_offset_log_entry(flow.stream.checkpoint))[0] <= batch_before:  # end offsets count
            if time.monotonic() > deadline:  # commit markers: the target's sum says nothing of this batch
                raise RuntimeError(f"no batch after {batch_before} within 300 s ({flow.stream.log})")
            time.sleep(0.5)
        batch, size = entry
        base = base_written(flow.stream.checkpoint, batch)
        row["offset_log_bytes_per_batch_100_moved"] = size + base
        print(f"  offset-log entry of batch {batch} (after {batch_before}, {len(moved)} partitions moved): "
              f"{size:,} bytes{f', and a new offset base of {base:,}' if base else ''}", flush=True)

        rounds = args.history if args.history is not None else anchor_bound() + 2
        begun = time.monotonic()
        for _ in range(rounds):  # a flow that has run a while: each round a batch at least, every partition moved
            produce(topics, len(every), every, produced)
            wait_target(target, produced, flow, 600, settle_s=0.0)
        print(f"  history: {rounds} rounds of a record to every partition in {time.monotonic() - begun:.0f} s",
              flush=True)
        row["history_rounds"] = rounds

        flow.stop()
        old = target.sum(moved)
        relaunched = flow.start()
        produce(topics, len(moved), moved, produced)
        while target.sum(moved) <= old:
            if time.monotonic() - relaunched > 600 or not flow.stream.alive():
                raise RuntimeError(f"nothing mirrored within 600 s of the restart ({flow.stream.log})")
            time.sleep(0.25)
        row["restart_first_copy_s"] = time.monotonic() - relaunched
        print(f"  restart: the first new record mirrored {row['restart_first_copy_s']:.1f} s after the launch",
              flush=True)
        wait_target(target, produced, flow, 600)
        flow.stop()

        seconds, peak_mib, out, _ = in_own_process(SYNC_READ, lan, 900)
        row["sync_read_s"] = value(out, "read_s")
        row["sync_read_mib"] = value(out, "grown_kib") / 1024
        row["sync_records_live"] = int(value(out, "live"))
        print(f"  offset syncs a restart reads: {row['sync_records_live']:,} live records in "
              f"{row['sync_read_s']:.1f} s, {row['sync_read_mib']:.0f} MiB", flush=True)

        row["group_partitions"] = commit_groups(topics, args.groups, random.Random(7))
        brokers = BrokerRequests(broker_pid_files(lan, ("src", "dst")))
        for where, path in (("lan", lan), ("wan", wan)):
            if where == "wan":
                for node, (listener, proxy) in enumerate(WAN):
                    name = f"dst-{node}"
                    links.add(netfaults.Link(name, f"127.0.0.1:{proxy}", f"127.0.0.1:{listener}"))
                    links.delay(name, WAN_ONE_WAY_MS)
            before = brokers.counts()
            seconds, peak_mib, out, capped = in_own_process(ROUND, path, args.round_limit)
            asked = brokers.counts() - before
            row[f"checkpoint_requests_{where}"] = sum(asked.values())
            row[f"checkpoint_requests_by_kind_{where}"] = dict(asked.most_common())
            if args.profile_rounds:
                (work / f"round-{where}.txt").write_text(out)
            row[f"checkpoint_round_s_{where}"] = seconds if capped else value(out, "round_s")
            if not capped and value(out, "exit") != 0:
                raise RuntimeError(f"the checkpoint round failed ({where}):\n{out[-3000:]}")
            row[f"checkpoint_round_capped_{where}"] = capped
            if where == "lan":
                row["checkpoint_task_peak_mib_one_flow"] = peak_mib
            print(f"  checkpoint round, {args.groups:,} groups ({row['group_partitions']:,} group-partitions), "
                  f"{where}: {row[f'checkpoint_round_s_{where}']:.1f} s{' (capped)' if capped else ''}, "
                  f"peak RSS {peak_mib:,.0f} MiB, {sum(asked.values()):,} requests "
                  f"({', '.join(f'{k} {n:,}' for k, n in asked.most_common(6))})", flush=True)
        row["checkpoint_requests"] = row["checkpoint_requests_lan"]
        seconds, peak_mib, out, capped = in_own_process(ROUND, lan, args.round_limit, SCALE_BOTH_FLOWS="1")
        if capped or value(out, "exit") != 0:
            raise RuntimeError(f"the active/active checkpoint round failed:\n{out[-3000:]}")
        row["checkpoint_task_peak_mib"] = peak_mib
        print(f"  checkpoint round holding both flows' state (active/active; the reverse flow's state stood in for by "
              f"a second read of this one's): {value(out, 'round_s'):.1f} s, peak RSS {peak_mib:,.0f} MiB", flush=True)

        row["java_produce_rps"] = java_produce_rps(home, prefix, len(topics), args.records)
        print(f"  Kafka's Java producer, the same records over the same partitions: {row['java_produce_rps']:,.0f} "
              f"records/s", flush=True)
    finally:
        flow.stop()
        links.stop()
        local.down(cfg, purge=True)
    row["rps_over_java_producer"] = row["rps"] / row["java_produce_rps"]
    row["java_produce_rps_over_12"] = row["java_produce_rps"] / (reference or row)["rps"]
    if reference is not None:
        row["rps_over_12"] = row["rps"] / reference["rps"]
        row["peak_pss_over_12"] = row["peak_pss_mib"] / reference["peak_pss_mib"]
    return row


def java_produce_rps(home: Path, prefix: str, topics: int, records: int) -> float:
    """Records per second Kafka's Java producer (the brokers' version) writes `records` of SIZE bytes round robin over
    every partition of the `topics` topics `prefix`NNNN: the brokers' intake at that size from a client that puts
    every partition of a broker in one request, where librdkafka sends a request per partition."""
    from mirrorflow.model import paths
    from mirrorflow.spark import maven

    jars = maven.classpath(maven.fetch("kafka-broker", maven.KAFKA_BROKER, paths.jar_cache()))
    classes = home / "java"
    if not (classes / "SpreadProducer.class").exists():
        subprocess.run(["javac", "-d", str(classes), "-cp", jars, str(Path(__file__).with_name("SpreadProducer.java"))],
                       check=True)
    out = subprocess.run(["java", "-Xmx2g", "-cp", f"{classes}:{jars}", "SpreadProducer", servers(SRC),
                          prefix, str(topics), str(PARTITIONS_PER_TOPIC), str(records), str(SIZE)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0 or value(out.stdout, "failed") != 0:
        raise RuntimeError(f"the Java producer failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return value(out.stdout, "java_produce_rps")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2400,12000,24000", help="partitions of the flow, one measurement each")
    ap.add_argument("--records", type=int, default=2_400_000, help="records each size copies (100 B each)")
    ap.add_argument("--groups", type=int, default=5_000)
    ap.add_argument("--history", type=int, default=None, help="rounds of a record to every partition before the "
                    "restart (default: the anchor bound + 2, so every partition holds as many anchors as it keeps)")
    ap.add_argument("--copy-limit", type=float, default=1800.0, help="seconds a copy may take")
    ap.add_argument("--round-limit", type=float, default=900.0, help="seconds a checkpoint round may take")
    ap.add_argument("--reference", type=Path, default=None, help="a bench-scale.json whose 12-partition reference "
                    "to compare against instead of measuring it again (same machine, same --records and --groups)")
    ap.add_argument("--profile-rounds", action="store_true", help="profile each checkpoint round (cProfile, the 30 "
                    "costliest calls by cumulative time, in round-lan.txt / round-wan.txt of the size's folder)")
    args = ap.parse_args()
    if shutil.which("javac") is None:
        sys.exit("bench-scale: no javac for its Java producer (`make bench-scale` installs openjdk-17-jdk-headless)")
    if args.profile_rounds:
        os.environ["SCALE_PROFILE"] = "1"
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-scale-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    os.environ.setdefault("MIRRORFLOW_TOXIPROXY", str(REPO / ".mirrorflow" / "bin" / "toxiproxy-server"))
    os.environ.setdefault("MIRRORFLOW_BROKER_HEAP", "1g")
    print(f"work in {home}", flush=True)
    reference = (json.loads(args.reference.read_text())["reference"] if args.reference is not None
                 else measure(home, PARTITIONS_PER_TOPIC, args, None))
    rows = []
    for size in (int(s) for s in args.sizes.split(",") if s):
        rows.append(measure(home, size, args, reference))
        (REPO / "bench-scale.json").write_text(json.dumps({"reference": reference, "sizes": rows}, indent=1))
    report(reference, rows, args)


def report(reference: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    machine = f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    print(f"\n### One flow by partitions ({machine}, one run, {args.records:,} records of {SIZE} B, "
          f"{args.groups:,} groups)\n")
    print("| partitions | records/s (x 12) | first copy | restart to first copy | idle cores, driver and planner "
          "(whole tree) | offset-log entry, "
          "100 moved "
          "| offset syncs read on restart | peak PSS (x 12) | checkpoint round LAN / WAN | round's requests LAN / WAN "
          "| round's peak RSS, one flow / both | producers into the source, librdkafka / Java (x 12) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in [reference, *rows]:
        def cap(where: str, r: dict[str, Any] = r) -> str:
            s = r.get(f"checkpoint_round_s_{where}", float("nan"))
            return f"{'>' if r.get(f'checkpoint_round_capped_{where}') else ''}{s:.1f} s"
        print(f"| {r['partitions']:,} | {r['rps']:,.0f} ({r.get('rps_over_12', 1.0):.2f}) | {r['first_copy_s']:.1f} s "
              f"| {r['restart_first_copy_s']:.1f} s | {r['idle_cores']:.3f} "
              f"({r.get('idle_cores_tree', math.nan):.3f}) | "
              f"{r['offset_log_bytes_per_batch_100_moved']:,} B | {r['sync_records_live']:,} in "
              f"{r['sync_read_s']:.1f} s, {r['sync_read_mib']:.0f} MiB | {r['peak_pss_mib']:,.0f} MiB "
              f"({r.get('peak_pss_over_12', 1.0):.2f}) | {cap('lan')} / {cap('wan')} | "
              f"{r.get('checkpoint_requests_lan', 0):,} / {r.get('checkpoint_requests_wan', 0):,} | "
              f"{r.get('checkpoint_task_peak_mib_one_flow', math.nan):,.0f} / "
              f"{r['checkpoint_task_peak_mib']:,.0f} MiB | {r.get('produce_rps', math.nan):,.0f} / "
              f"{r.get('java_produce_rps', math.nan):,.0f} ({r.get('java_produce_rps_over_12', math.nan):.2f}) |")


if __name__ == "__main__":
    main()

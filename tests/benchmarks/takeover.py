"""One takeover from MirrorMaker 2 and one hand-back to it, on a flow of 1,000,000 mirrored records, traffic on.

    make bench-takeover             # or: .venv/bin/python tests/benchmarks/takeover.py [--records N] [--rate R]
                                    #     [--clean]

Two local clusters (ports 26092, 26192). MirrorMaker 2 (4.3.1, dedicated, MM2_TUNING: 12 tasks) mirrors a
12-partition topic of `--records` records while `--rate` records/s keep arriving, and checkpoints a consumer group
committed at half the backlog. Then:
  takeover   MM2 is killed (SIGKILL; --clean: SIGTERM); `mirrorflow takeover --from mm2` is asked until it counts
             MM2 as stopped, and applies; mirrorflow's stream copies on; `mirrorflow audit` reads every record of
             the topic on both sides; the group's checkpoint is read before (MM2's) and after (mirrorflow's), beside
             the exact translation (one past the copy of the group's last consumed record, found by value).
  hand-back  the stream stops; `mirrorflow handback --to mm2`; MM2 starts again on the same properties; the same
             figures.
Time not copying: from the last growth of the remote topic before the next mirror starts to its first growth after
(sampled every 0.2 s). Prints a Markdown table and writes it, with the raw figures, to bench-takeover.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support, benchmarks
from benchmarks.mirror import DST, QUIET, SRC, mm2_properties, mm2_tuning
from support.streams import StreamProcess, end_offsets, read_partition

REPO = Path(__file__).resolve().parents[2]
TOPIC, REMOTE, PARTITIONS, GROUP, FLOW = "orders", "src.orders", 12, "orders-app", "src->dst"
SOURCE, TARGET = f"127.0.0.1:{SRC}", f"127.0.0.1:{DST}"


def _value(n: int) -> bytes:
    return f"order-{n:010d}-".encode().ljust(200, b"x")


class Traffic:
    """`rate` records/s, numbered on from `first`, until stopped."""

    def __init__(self, first: int, rate: int) -> None:
        self.first, self.sent, self.rate = first, first, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.sent

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": SOURCE, "linger.ms": 20, **QUIET})
        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            for _ in range(max(0, due - (self.sent - self.first))):
                p.produce(TOPIC, _value(self.sent), f"k{self.sent % 101}".encode(), partition=self.sent % PARTITIONS)
                self.sent += 1
            p.poll(0)
            time.sleep(0.02)
        p.flush(60)


class Growth:
    """The remote topic's total end, sampled every 0.2 s, with the times it grew."""

    def __init__(self) -> None:
        self.grew: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def total(self) -> int:
        return self.grew[-1][1] if self.grew else 0

    def gap(self, started: float) -> tuple[float, float]:
        """(last growth before `started`, first after it), both monotonic; waits for the first."""
        while not any(t > started for t, _ in self.grew):
            time.sleep(0.1)
        last = max((t for t, _ in self.grew if t <= started), default=started)
        return last, min(t for t, _ in self.grew if t > started)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        c = Consumer({"bootstrap.servers": TARGET, "group.id": "bench-growth", **QUIET})
        while not self._stop.is_set():
            try:
                total = sum(c.get_watermark_offsets(TopicPartition(REMOTE, p), timeout=5, cached=False)[1]
                            for p in range(PARTITIONS))
            except Exception:  # the remote topic not created yet
                total = 0
            if total > self.total():
                self.grew.append((time.monotonic(), total))
            time.sleep(0.2)
        c.close()


def _cli(props: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(props), *args], capture_output=True,
                          text=True, timeout=1800)


def _mm2(jars: Path, props: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(["java", "-Xmx2g", "-cp", f"{jars}/lib/*",
                                 "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
                                stdout=out, stderr=subprocess.STDOUT)


def _checkpoints() -> dict[int, int]:
    from mirrorflow.jobs.checkpoints import read_checkpoints

    found = read_checkpoints({"bootstrap.servers": TARGET, **QUIET}, "src.checkpoints.internal")
    return {p: c.downstream_offset for (g, t, p), c in found.items() if g == GROUP and t == REMOTE}


def _exact(committed: dict[int, int]) -> dict[int, int]:
    """One past the last copy of a record the group consumed (source offsets below its commit), by value."""
    out = {}
    for p, upstream in committed.items():
        last = read_partition(SOURCE, TOPIC, p)[upstream - 1].value()
        out[p] = 1 + max(m.offset() for m in read_partition(TARGET, REMOTE, p) if m.value() == last)
    return out


def _audit(props: Path) -> dict[str, Any]:
    done = _cli(props, "audit", "--flow", FLOW, "--topics", TOPIC, "--json")
    if done.returncode not in (0, 1):
        raise SystemExit(f"audit failed: {done.stderr.strip()[-2000:]}")
    report = json.loads(done.stdout)
    print("audit:", report["summary"], flush=True)
    return {k: report[k] for k in ("source_records", "mirrored_records", "missing", "duplicated", "differing",
                                   "behind", "seconds")}


def _caught_up(traffic_sent: int, extra: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while (copied := sum(end_offsets(TARGET, REMOTE))) < traffic_sent + extra:
        if time.monotonic() > deadline:
            raise SystemExit(f"the target did not catch up: {copied} < {traffic_sent + extra}")
        time.sleep(1)


def _pause(growth: Growth, started: float, start_to_copy: str) -> dict[str, float]:
    """The time not copying around a mirror started at `started`, and its start to its first copy."""
    last, first = growth.gap(started)
    return {"not_copying_s": round(first - last, 1), start_to_copy: round(first - started, 1)}


def _positions(before: dict[int, int], after: dict[int, int], exact: dict[int, int]) -> dict[str, Any]:
    return {"before": sum(before.values()), "after": sum(after.values()), "exact": sum(exact.values()),
            "after_exact_partitions": sum(after.get(p) == exact[p] for p in exact),
            "after_behind_before": sum(after.get(p, 0) < before.get(p, 0) for p in exact),
            "after_past_exact": sum(after.get(p, 0) > exact[p] for p in exact)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=2_000, help="records/s of traffic throughout")
    ap.add_argument("--clean", action="store_true", help="stop MM2 with SIGTERM (default: SIGKILL)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-takeover-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "plugins"), os.environ.get("PYTHONPATH", "")])
    from mirrorflow.dev import local
    from mirrorflow.model import config, paths
    from mirrorflow.spark import maven

    cfg = config.from_text(f"clusters = src, dst\nsrc.bootstrap.servers = {SOURCE}\ndst.bootstrap.servers = {TARGET}\n",
                           source="bench")
    props = home / "mm2.properties"
    props.write_text(mm2_properties("src", [TOPIC]) + f"groups = {GROUP}\nrefresh.groups.interval.seconds = 5\n"
                     "emit.checkpoints.interval.seconds = 5\n" + mm2_tuning("src"))
    jars = maven.fetch("mirror-maker", maven.MIRROR_MAKER, paths.jar_cache())
    local.up(cfg)
    mm2: subprocess.Popen[bytes] | None = None
    stream = StreamProcess(props, FLOW, home / "stream")
    growth: Growth | None = None
    traffic: Traffic | None = None
    out: dict[str, Any] = {"records": args.records, "rate": args.rate, "stop": "SIGTERM" if args.clean else "SIGKILL"}
    try:
        admin = AdminClient({"bootstrap.servers": SOURCE, **QUIET})  # kept until answered
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        p = Producer({"bootstrap.servers": SOURCE, "linger.ms": 50, "batch.size": 1_000_000, **QUIET})
        for n in range(args.records):
            while True:
                try:
                    p.produce(TOPIC, _value(n), f"k{n % 101}".encode(), partition=n % PARTITIONS)
                    break
                except BufferError:  # librdkafka's queue is full: let it send
                    p.poll(0.1)
        p.flush(120)
        half = args.records // PARTITIONS // 2
        committed = dict.fromkeys(range(PARTITIONS), half)
        c = Consumer({"bootstrap.servers": SOURCE, "group.id": GROUP, "enable.auto.commit": False, **QUIET})
        c.commit(offsets=[TopicPartition(TOPIC, q, half) for q in range(PARTITIONS)], asynchronous=False)
        c.close()
        traffic = Traffic(args.records, args.rate)
        growth = Growth()
        mm2 = _mm2(jars, props, home / "mm2.log")
        began = time.monotonic()
        while growth.total() < args.records:
            if mm2.poll() is not None:
                raise SystemExit(f"MirrorMaker 2 exited ({mm2.returncode}); see {home / 'mm2.log'}")
            time.sleep(1)
        out["mm2_copy_s"] = round(time.monotonic() - began, 1)
        deadline = time.monotonic() + 180
        while len(_checkpoints()) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(2)
        time.sleep(70)  # MM2 commits its offsets every 60 s (Connect's offset.flush.interval.ms), under traffic
        mm2_checkpoints = _checkpoints()

        # Takeover.
        mm2.send_signal(signal.SIGTERM if args.clean else signal.SIGKILL)
        mm2.wait(120)
        stopped = time.monotonic()
        while True:
            asked = time.monotonic()
            taken = _cli(props, "takeover", "--flow", FLOW, "--from", "mm2", "--json")
            if taken.returncode != 1 or not taken.stdout.startswith("{") or json.loads(taken.stdout)["running"] is None:
                break
            time.sleep(1)
        if taken.returncode != 0:
            raise SystemExit(f"takeover refused or failed: {taken.stdout}{taken.stderr}")
        plan = json.loads(taken.stdout)
        ours = [q for q in plan["partitions"] if q["topic"] == TOPIC]
        out["takeover"] = {
            "counted_stopped_after_s": round(asked - stopped, 1),
            "plan_and_apply_s": round(time.monotonic() - asked, 1),
            "stopped_because": plan["stopped"],
            "committed": sum(q["committed"] + 1 for q in ours if q["committed"] is not None),
            "target_end": sum(q["target_end"] for q in ours), "resume": sum(q["resume"] for q in ours),
            "since_commit": sum(q["since_commit"] for q in ours), "repeats": sum(q["repeats"] for q in ours),
            "refused": sum(q["refused"] is not None for q in ours)}
        print(taken.stdout[:3000], flush=True)
        started = time.monotonic()
        stream.start()
        out["takeover"] |= _pause(growth, started, "stream_start_to_first_copy_s")
        time.sleep(30)
        sent = traffic.stop()
        _caught_up(sent, out["takeover"]["repeats"])
        checked = _cli(props, "checkpoint", "--flow", FLOW)
        if checked.returncode != 0:
            raise SystemExit(f"checkpoint round failed: {checked.stdout}{checked.stderr}")
        ours_checkpoints = _checkpoints()
        exact = _exact(committed)
        out["takeover"]["group"] = _positions(mm2_checkpoints, ours_checkpoints, exact)
        out["takeover"]["audit"] = _audit(props)

        # Hand-back, under traffic again.
        traffic = Traffic(sent, args.rate)
        time.sleep(5)
        if stream.stop() != 0:
            raise SystemExit(f"the stream did not stop cleanly; see {stream.log}")
        began = time.monotonic()
        handed = _cli(props, "handback", "--flow", FLOW, "--to", "mm2", "--json")
        if handed.returncode != 0:
            raise SystemExit(f"handback failed: {handed.stdout}{handed.stderr}")
        out["handback"] = {"handback_s": round(time.monotonic() - began, 1)}
        started = time.monotonic()
        mm2 = _mm2(jars, props, home / "mm2.log")
        out["handback"] |= _pause(growth, started, "mm2_start_to_first_copy_s")
        time.sleep(30)
        sent = traffic.stop()
        _caught_up(sent, out["takeover"]["repeats"])
        time.sleep(15)  # MM2's checkpoints of the group after its restart
        out["handback"]["group"] = _positions(ours_checkpoints, _checkpoints(), exact)
        out["handback"]["audit"] = _audit(props)
        out["records_at_end"] = sent
    finally:
        for proc in (mm2,):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(60)
        if stream.proc is not None and stream.proc.poll() is None:
            stream.stop()
        if traffic is not None:
            traffic.stop()
        if growth is not None:
            growth.stop()
        local.down(cfg, purge=True)
    print(json.dumps(out, indent=2))
    (REPO / "bench-takeover.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

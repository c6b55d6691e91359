"""Requests local brokers received, by kind, as the brokers count them: Kafka's `RequestsPerSec` meters read over
JMX from outside (a bench counts what a command cost the cluster, whichever clients it used).

Each broker's JVM gets a local JMX agent (`jcmd <pid> ManagementAgent.start_local`: no port, this host's user only),
and Kafka's own JmxTool reads every `kafka.network:type=RequestMetrics,name=RequestsPerSec` meter's count. Kinds the
brokers send one another or their controllers (replication, the quorum, heartbeats) are left out: what is left is
what clients asked.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from mirrorflow.dev import local
from mirrorflow.model import config
from mirrorflow.model.paths import jar_cache
from mirrorflow.spark import maven

# Sent by brokers and controllers to one another, never by a client; and "Fetch", which counts every fetch again
# (FetchConsumer and FetchFollower apart).
CLUSTER_KINDS = frozenset({
    "Fetch", "FetchFollower", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum", "FetchSnapshot",
    "BrokerHeartbeat", "BrokerRegistration", "ControllerRegistration", "AlterPartition", "AllocateProducerIds",
    "AssignReplicasToDirs", "UpdateRaftVoter", "AddRaftVoter", "RemoveRaftVoter", "WriteTxnMarkers", "Envelope",
    "UpdateFeatures", "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown",
})
_METER = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"  # a meter per kind and version
_ADDRESS = re.compile(r"sun\.management\.JMXConnectorServer\.address=\"?([^\"\s]+)")
_COUNT = re.compile(r"request=([A-Za-z]+)[^:]*:Count=([0-9.E]+)")


def _agent_address(pid: int) -> str:
    subprocess.run(["jcmd", str(pid), "ManagementAgent.start_local"], check=True, capture_output=True, timeout=60)
    counters = subprocess.run(["jcmd", str(pid), "PerfCounter.print"], check=True, capture_output=True,
                              timeout=60, text=True).stdout
    found = _ADDRESS.search(counters)
    if found is None:
        raise RuntimeError(f"broker pid {pid}: no local JMX address after ManagementAgent.start_local")
    return found.group(1)


class BrokerRequests:
    """Counts of the client requests some local brokers received, read on demand (`counts`)."""

    def __init__(self, pid_files: Iterable[Path]) -> None:
        self.addresses = [_agent_address(int(p.read_text().strip())) for p in pid_files]
        self.classpath = maven.classpath(maven.fetch("kafka-broker", maven.KAFKA_BROKER, jar_cache()))

    def counts(self) -> Counter[str]:
        """Client requests received so far, by kind, summed over the brokers (every version of a kind)."""
        total: Counter[str] = Counter()
        for address in self.addresses:
            done = subprocess.run(
                ["java", "-Xmx64m", "-cp", self.classpath, "org.apache.kafka.tools.JmxTool", "--jmx-url", address,
                 "--object-name", _METER, "--attributes", "Count", "--one-time", "true", "--report-format",
                 "properties"], capture_output=True, timeout=120, text=True)
            if done.returncode != 0 and "No matched attributes" in done.stdout + done.stderr:
                continue  # a broker no request has reached yet: Kafka makes a kind's meter at its first request
            if done.returncode != 0:
                raise RuntimeError(f"JmxTool failed ({done.returncode}): {(done.stdout + done.stderr)[-1500:]}")
            out = done.stdout
            for kind, count in _COUNT.findall(out):
                if kind not in CLUSTER_KINDS:
                    total[kind] += int(float(count))
        return total


def broker_pid_files(config_path: Path, aliases: Iterable[str]) -> list[Path]:
    """The pid files of the local brokers of `aliases` in the config at `config_path`."""
    return [b.pid_file for b in local.local_brokers(config.load(config_path), aliases)]

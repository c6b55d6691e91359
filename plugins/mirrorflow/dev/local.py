"""Real local Kafka clusters: KRaft brokers for every alias bootstrapped on localhost.

One broker per bootstrap address, in order (node 1, 2, ...). A cluster of one or two addresses has one
controller, node 1; a cluster of three or more has a quorum of three, nodes 1 to 3, so it survives the loss of
any one node. A controller listens on its broker port + 1. With three or more brokers, the brokers' own topics
(group offsets, transactions) and topics created without a replication factor get three replicas and
`min.insync.replicas=2`: a production-like cluster. Everything node 1 owns lives under `{home}/local/{alias}/`
(its config, data, log and pid file), node N's under `{home}/local/{alias}/node-N/`. `up(..., proxied=...)` gives
each node of a plain cluster a second listener advertised at a proxy's port (`netfaults`: network faults).

Invariants:
  A. `up` is idempotent: an alias whose broker runs (pid alive, started from our config) is left alone;
  B. `down` stops only processes whose pid file we wrote and whose command line names our config;
  C. a stopped cluster keeps its data: `up` again resumes it (`down --purge` forgets it);
  D. a secure cluster accepts only SASL clients and authorizes with KRaft's StandardAuthorizer; the
     super user's password is the one the config gives that alias, else a generated one kept in a
     0600 file beside the broker, and never printed (secure clusters have one broker);
  E. every node of a cluster is formatted with node 1's cluster id; `down` of an alias stops every node
     found in its folder, also those a config that names fewer addresses left running;
  F. a cluster keeps the controller quorum it was formatted with: a config that would change it is refused
     with the command that recreates the cluster;
  G. an alias whose config says `security.protocol = SSL` gets one broker with a TLS listener, its certificate
     signed by the cluster's own authority (`tls/` in its folder, `dev.tls`); it requires client certificates
     (mutual TLS) when the config names a keystore; the truststore and keystore the config names are written
     (JKS by default, with the config's passwords) where no file exists, and `down --purge` removes them again.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mirrorflow.dev import daemons, tls
from mirrorflow.errors import LocalClusterError
from mirrorflow.model.client_config import jaas_credentials, java_store
from mirrorflow.model.config import Cluster, MirrorConfig
from mirrorflow.model.paths import home, jar_cache
from mirrorflow.spark import maven

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
HEAP = "384m"  # a broker's heap unless MIRRORFLOW_BROKER_HEAP says otherwise when it starts
START_TIMEOUT_S = float(os.environ.get("MIRRORFLOW_BROKER_START_TIMEOUT", "90"))
SUPER_USER = "admin"
QUORUM_SIZE = 3  # controllers of a cluster with at least this many brokers; below it, node 1 alone


@dataclass(frozen=True)
class LocalBroker:
    alias: str
    host: str
    port: int
    secure: bool
    folder: Path
    node_id: int = 1
    voters: tuple[tuple[int, str, int], ...] = ()  # the cluster's controllers: (node id, host, controller port)
    brokers: int = 1  # how many brokers the cluster has
    proxied: tuple[int, int] | None = None  # a second listener's (port, advertised port): a proxy's, for faults
    tls: bool = False  # G: the listener speaks TLS
    mutual_tls: bool = False  # G: and asks clients for their certificate

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def is_controller(self) -> bool:
        return any(node == self.node_id for node, _, _ in self.voters) or not self.voters

    @property
    def quorum(self) -> str:
        return ",".join(f"{node}@{host}:{port}" for node, host, port in self.voters or
                        ((1, self.host, self.controller_port),))

    @property
    def replicas(self) -> int:
        """Replicas of the brokers' own topics and of topics created without a replication factor."""
        return QUORUM_SIZE if self.brokers >= QUORUM_SIZE else 1

    @property
    def pid_file(self) -> Path:
        return self.folder / "broker.pid"

    @property
    def config_file(self) -> Path:
        return self.folder / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.folder / "broker.log"

    @property
    def credentials_file(self) -> Path:
        return self.folder / "super-user.json"

    @property
    def tls_folder(self) -> Path:
        return self.folder / "tls"


@dataclass(frozen=True)
class BrokerStatus:
    alias: str
    port: int
    running: bool
    pid: int | None
    secure: bool
    reachable: bool
    tls: str | None = None  # "TLS" or "mutual TLS"

    def as_dict(self) -> dict[str, object]:
        return {"alias": self.alias, "port": self.port, "running": self.running, "pid": self.pid,
                "secure": self.secure, "reachable": self.reachable, "tls": self.tls}


def local_brokers(config: MirrorConfig, aliases: Iterable[str] = (), *, secure: bool = False,
                  proxied: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> list[LocalBroker]:
    """The brokers this config asks for: aliases whose every bootstrap address is on localhost. `proxied` gives an
    alias's nodes, in order, a second listener (port, advertised port) for a proxy in front of it (netfaults)."""
    wanted = list(aliases)
    for a in wanted:
        config.cluster(a)
    out: list[LocalBroker] = []
    for alias, cluster in config.clusters.items():
        if wanted and alias not in wanted:
            continue
        addresses = _local_addresses(cluster)
        if not addresses:
            if wanted:
                raise LocalClusterError(f"cluster {alias!r}: bootstrap.servers "
                                        f"{cluster.bootstrap_servers!r} is not on localhost")
            continue
        client = cluster.client_config("admin")
        protocol = client.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL"):
            raise LocalClusterError(f"cluster {alias!r}: local clusters speak PLAINTEXT, SASL_PLAINTEXT or SSL, "
                                    f"not {protocol}")
        is_tls = protocol == "SSL"
        is_secure = (secure and not is_tls) or protocol.startswith("SASL")
        if (is_secure or is_tls) and len(addresses) > 1:
            raise LocalClusterError(f"cluster {alias!r}: a secure or TLS local cluster has one broker; give "
                                    "bootstrap.servers one address")
        if is_tls and not client.get("ssl.truststore.location"):
            raise LocalClusterError(f"cluster {alias!r}: an SSL local cluster needs {alias}.ssl.truststore.location "
                                    "and .password: local up writes the truststore there")
        folder = home() / "local" / alias
        voters = tuple((n, h, p + 1) for n, (h, p) in
                       enumerate(addresses[:QUORUM_SIZE if len(addresses) >= QUORUM_SIZE else 1], start=1))
        taken = {p for _, p in addresses}
        for node, _, controller_port in voters:
            if controller_port in taken:
                raise LocalClusterError(f"cluster {alias!r}: port {controller_port} is node {node}'s controller port "
                                        "(its broker port + 1); give the brokers other ports")
        second = list((proxied or {}).get(alias, ()))
        if second and (is_secure or is_tls or len(second) != len(addresses)):
            raise LocalClusterError(f"cluster {alias!r}: a proxied listener needs a plain cluster and one per broker")
        out.extend(LocalBroker(alias, h, p, is_secure, folder if n == 1 else folder / f"node-{n}", n, voters,
                               len(addresses), second[n - 1] if second else None, is_tls,
                               is_tls and bool(client.get("ssl.keystore.location")))
                   for n, (h, p) in enumerate(addresses, start=1))
    return out


def _local_addresses(cluster: Cluster) -> list[tuple[str, int]]:
    """Every bootstrap address, when all are on localhost; none otherwise."""
    addresses = [a.strip() for a in cluster.bootstrap_servers.split(",") if a.strip()]
    parsed = []
    for a in addresses:
        host, _, port = a.rpartition(":")
        if host not in LOCAL_HOSTS or not port.isdigit():
            return []
        parsed.append((host.strip("[]"), int(port)))
    return parsed


def up(config: MirrorConfig, aliases: Iterable[str] = (), *, secure: bool = False,
       proxied: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> list[BrokerStatus]:
    """Start every local broker that is not running yet and wait until each serves requests."""
    brokers = local_brokers(config, aliases, secure=secure, proxied=proxied)
    if not brokers:
        raise LocalClusterError("no cluster in the config has its bootstrap.servers on localhost")
    _require_java()
    jars = maven.fetch("kafka-broker", maven.KAFKA_BROKER, jar_cache())
    started: list[tuple[LocalBroker, subprocess.Popen[bytes], int]] = []
    try:
        for b in brokers:
            if _running_pid(b) is not None:
                continue
            _check_ports_free(b)
            _prepare(b, config.clusters[b.alias], jars)
            offset = b.log_file.stat().st_size if b.log_file.exists() else 0
            started.append((b, _spawn(b, jars), offset))
        for b, proc, offset in started:
            _wait_until_serving(b, proc, offset)
    except BaseException:
        # All or nothing: a failed `up` leaves no broker of its own running.
        for b, proc, _ in started:
            _terminate(proc.pid)
            b.pid_file.unlink(missing_ok=True)
        raise
    return [_status(b) for b in brokers]


def down(config: MirrorConfig, aliases: Iterable[str] = (), *, purge: bool = False) -> list[BrokerStatus]:
    """Stop the brokers this launcher started (SIGTERM, then SIGKILL after 30 s), broker-only nodes first.

    With `purge`, their data is deleted next, so a clean shutdown would keep nothing: every broker is killed at once
    (a KRaft cluster stopped one node at a time waits out each later node's lost quorum)."""
    brokers = local_brokers(config, aliases)
    named = {b.folder for b in brokers}
    extra = [LocalBroker(b.alias, b.host, 0, False, folder, int(folder.name[5:]))
             for b in brokers if b.node_id == 1
             for folder in sorted(b.folder.glob("node-*")) if folder.name[5:].isdigit() and folder not in named]
    for b in sorted([*brokers, *extra], key=lambda b: -b.node_id):
        stop(b, kill=purge)
    if purge:
        for b in brokers:
            tls.forget(b.tls_folder)
            shutil.rmtree(b.folder, ignore_errors=True)
    return [_status(b) for b in brokers]


def stop(broker: LocalBroker, *, kill: bool = False) -> None:
    """Stop one broker of a cluster (a broker failure, for a test or a drill); `up` starts it again. `kill`: SIGKILL
    at once, no clean shutdown."""
    pid = _running_pid(broker)
    if pid is not None:
        _terminate(pid, timeout=0.0 if kill else 30.0)
    broker.pid_file.unlink(missing_ok=True)


def quorum_leader(config: MirrorConfig, alias: str) -> int | None:
    """The node id of the cluster's active controller (KRaft quorum leader), as the newest `quorum-state` file
    among its controllers' metadata logs records it; None before any election. (A client's describe-cluster
    answer names a random broker in KRaft mode, not the active controller.)"""
    newest: tuple[int, int] | None = None
    for b in local_brokers(config, [alias]):
        if not b.is_controller:
            continue
        try:
            state = json.loads((b.folder / "data" / "__cluster_metadata-0" / "quorum-state").read_text())
        except (OSError, ValueError):
            continue
        epoch, leader = int(state.get("leaderEpoch", -1)), int(state.get("leaderId", -1))
        if leader >= 0 and (newest is None or epoch > newest[0]):
            newest = (epoch, leader)
    return newest[1] if newest is not None else None


def status(config: MirrorConfig, aliases: Iterable[str] = ()) -> list[BrokerStatus]:
    return [_status(b) for b in local_brokers(config, aliases)]


def super_user_credentials(broker: LocalBroker) -> tuple[str, str]:
    """The super user of a secure local broker (username, password)."""
    data = json.loads(broker.credentials_file.read_text())
    return data["username"], data["password"]


def _status(b: LocalBroker) -> BrokerStatus:
    pid = _running_pid(b)
    state = _read_state(b)
    return BrokerStatus(b.alias, b.port, pid is not None, pid, bool(state.get("secure", b.secure)),
                        _port_open(b.host, b.port), ("mutual TLS" if b.mutual_tls else "TLS") if b.tls else None)


def _require_java() -> None:
    if shutil.which("java") is None:
        raise LocalClusterError("Java is not installed: Kafka needs Java 17 "
                                "(apt-get install openjdk-17-jre-headless)")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _check_ports_free(b: LocalBroker) -> None:
    ports = [(b.port, "broker"), *([(b.controller_port, "controller")] if b.is_controller else []),
             *([(b.proxied[0], "proxied listener")] if b.proxied else [])]
    for port, role in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As the JVM does: TIME_WAIT leftovers of earlier clients do not make a port busy.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((b.host if b.host != "localhost" else "127.0.0.1", port))
            except OSError:
                raise LocalClusterError(f"cluster {b.alias!r}: {role} port {port} is already in use by "
                                        "another process") from None


def _read_state(b: LocalBroker) -> dict[str, object]:
    try:
        return dict(json.loads((b.folder / "state.json").read_text()))
    except (OSError, ValueError):
        return {}


def _running_pid(b: LocalBroker) -> int | None:
    try:
        pid = int(b.pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return None
    return pid if str(b.config_file) in cmdline else None


def _credentials(b: LocalBroker, cluster: Cluster) -> tuple[str, str]:
    jaas = cluster.client_config("admin").get("sasl.jaas.config")
    creds = jaas_credentials(jaas) if jaas else None
    if creds is None and b.credentials_file.exists():
        return super_user_credentials(b)
    if creds is None:
        creds = (SUPER_USER, secrets.token_urlsafe(18))
    b.credentials_file.write_text(json.dumps({"username": creds[0], "password": creds[1]}))
    b.credentials_file.chmod(0o600)
    return creds


def _jaas_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# A segment's offset and time indexes are sparse files of `log.index.size.max.bytes`, memory-mapped. The first
# touch of one reads around the fault as far as the disk's read-ahead allows, zero-filling the holes: with 10 MiB
# indexes (Kafka's default) and this machine's 8 MiB read-ahead (/sys/block/vda/queue/read_ahead_kb), the target
# broker's request thread spent a core in memset (perf: filemap_fault -> page_cache_ra_order -> zero_user_segments)
# while a producer wrote new partitions, and took 33,000-36,000 records/s where it takes 195,000-385,000 with 1 MiB
# indexes (or a 128 KiB read-ahead). At 1 MiB that memset was still 10 % of the machine's CPU while a mirror wrote
# 1,200 new partitions (2,400 index files; a first touch here costs about 2 ms a MiB); 256 KiB took the target from
# 9.6 to 5.7 ms of CPU per 1,000 records. 256 KiB holds 4/3 of the entries a segment of SEGMENT_BYTES needs at the
# default index interval (4 KiB of log an entry; a time index entry takes 12 bytes); a full index only rolls the
# segment early.
SEGMENT_BYTES = 64 << 20
INDEX_BYTES = 256 << 10


def index_bytes() -> int:
    """The brokers' index size: INDEX_BYTES, or MIRRORFLOW_BROKER_INDEX_BYTES (tests/benchmarks/broker_index.py)."""
    wanted = os.environ.get("MIRRORFLOW_BROKER_INDEX_BYTES", str(INDEX_BYTES))
    if not wanted.isdigit() or int(wanted) < 4096:
        raise LocalClusterError(f"MIRRORFLOW_BROKER_INDEX_BYTES = {wanted!r}: expected a number of bytes, "
                                "at least 4096")
    return int(wanted)


def _server_properties(b: LocalBroker, creds: tuple[str, str] | None, keystore_password: str | None = None) -> str:
    data = b.folder / "data"
    lines = [
        f"process.roles={'broker,controller' if b.is_controller else 'broker'}", f"node.id={b.node_id}",
        f"controller.quorum.voters={b.quorum}",
        "controller.listener.names=CONTROLLER",
        f"log.dirs={data}", "num.partitions=1", "auto.create.topics.enable=false",
        f"default.replication.factor={b.replicas}", f"min.insync.replicas={min(2, b.replicas)}",
        f"offsets.topic.replication.factor={b.replicas}", "offsets.topic.num.partitions=10",
        f"transaction.state.log.replication.factor={b.replicas}",
        f"transaction.state.log.min.isr={min(2, b.replicas)}", "transaction.state.log.num.partitions=4",
        f"share.coordinator.state.topic.replication.factor={b.replicas}",
        f"share.coordinator.state.topic.min.isr={min(2, b.replicas)}",
        "group.initial.rebalance.delay.ms=0", f"log.segment.bytes={SEGMENT_BYTES}",
        f"log.index.size.max.bytes={index_bytes()}",
        "log.cleaner.dedupe.buffer.size=8388608", "log.cleaner.backoff.ms=2000",
        "num.network.threads=2", "num.io.threads=4",
        "message.max.bytes=10485760", "replica.fetch.max.bytes=10485760",
    ]
    if b.tls:
        assert keystore_password is not None
        lines += [
            f"listeners=SSL://{b.host}:{b.port},CONTROLLER://{b.host}:{b.controller_port}",
            f"advertised.listeners=SSL://{b.host}:{b.port}",
            "listener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT", "inter.broker.listener.name=SSL",
            f"ssl.keystore.location={b.tls_folder / 'broker.p12'}", "ssl.keystore.type=PKCS12",
            f"ssl.keystore.password={keystore_password}", f"ssl.key.password={keystore_password}",
            f"ssl.truststore.location={b.tls_folder / 'ca.pem'}", "ssl.truststore.type=PEM",
            f"ssl.client.auth={'required' if b.mutual_tls else 'none'}",
        ]
        return "\n".join(lines) + "\n"
    if creds is None:
        controller = f",CONTROLLER://{b.host}:{b.controller_port}" if b.is_controller else ""
        proxied, advertised = (f",PROXIED://{b.host}:{b.proxied[0]}", f",PROXIED://{b.host}:{b.proxied[1]}"
                               ) if b.proxied else ("", "")
        lines += [
            f"listeners=PLAINTEXT://{b.host}:{b.port}{controller}{proxied}",
            f"advertised.listeners=PLAINTEXT://{b.host}:{b.port}{advertised}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
        ]
        return "\n".join(lines) + "\n"
    user, password = (_jaas_value(c) for c in creds)
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" '
             f'password="{password}" user_{user}="{password}";')
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    lines += [
        f"listeners=SASL_PLAINTEXT://{b.host}:{b.port},CONTROLLER://{b.host}:{b.controller_port}",
        f"advertised.listeners=SASL_PLAINTEXT://{b.host}:{b.port}",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name=SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol=PLAIN", "sasl.mechanism.controller.protocol=PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.controller.plain.sasl.jaas.config={plain}",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}",
        f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={scram}",
        f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={scram}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{creds[0]}", "allow.everyone.if.no.acl.found=false",
    ]
    return "\n".join(lines) + "\n"


_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: WARN
      - name: kafka.log.LogCleaner
        level: WARN
"""


def _prepare(b: LocalBroker, cluster: Cluster, jars: Path) -> None:
    b.folder.mkdir(parents=True, exist_ok=True)
    state = _read_state(b)
    if state and (bool(state.get("secure")) != b.secure or bool(state.get("tls")) != b.tls):
        was = "secure" if state.get("secure") else "with TLS" if state.get("tls") else "plain"
        raise LocalClusterError(f"cluster {b.alias!r} was created {was}; run `mirrorflow local down "
                                f"--purge {b.alias}` to recreate it")
    # The cluster's quorum is the one node 1 was formatted with (before it was recorded: node 1 alone).
    node_1 = _read_state(replace(b, folder=b.folder if b.node_id == 1 else b.folder.parent))
    formatted_with = node_1.get("quorum", b.quorum.split(",")[0]) if node_1 else b.quorum
    if formatted_with != b.quorum:
        raise LocalClusterError(f"cluster {b.alias!r} was created with the controller quorum {formatted_with}, "
                                f"this config gives {b.quorum}; run `mirrorflow local down --purge {b.alias}` "
                                "to recreate it")
    creds = _credentials(b, cluster) if b.secure else None
    keystore_password = _tls_material(b, cluster) if b.tls else None
    b.config_file.write_text(_server_properties(b, creds, keystore_password))
    b.config_file.chmod(0o600)
    (b.folder / "log4j2.yaml").write_text(_LOG4J2)
    if (b.folder / "data" / "meta.properties").exists():
        return
    cmd = ["java", "-Xmx256m", "-cp", maven.classpath(jars), "kafka.tools.StorageTool", "format",
           "-t", _cluster_id() if b.node_id == 1 else _formatted_cluster_id(b.folder.parent), "-c", str(b.config_file)]
    if creds is not None:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            cmd += ["--add-scram", f"{mech}=[name={creds[0]},password={creds[1]}]"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stdout.strip().splitlines()[-2:] + proc.stderr.strip().splitlines()[-2:])
        raise LocalClusterError(f"cluster {b.alias!r}: formatting the storage failed: {tail}")
    (b.folder / "state.json").write_text(json.dumps({"secure": b.secure, "tls": b.tls, "port": b.port,
                                                     "quorum": b.quorum}))


def _tls_material(b: LocalBroker, cluster: Cluster) -> str:
    """The broker's keystore (a fresh password each start, kept only in its 0600 config) and the client stores
    the config names where none exist (G); the keystore's password."""
    ca = tls.authority(b.tls_folder, b.alias)
    password = secrets.token_urlsafe(18)
    tls.write_pkcs12(b.tls_folder / "broker.p12", tls.issue(ca, f"{b.alias} broker", hosts=(b.host, "localhost")),
                     ca, password)
    client = cluster.client_config("admin")
    for use in ("truststore", "keystore"):
        location = client.get(f"ssl.{use}.location", "").strip()
        if not location or Path(location).exists():
            continue
        store = java_store(client, use)
        if store is None:
            raise LocalClusterError(f"{b.alias}.ssl.{use}.type: local up writes JKS or PKCS12 stores, not "
                                    f"{client.get(f'ssl.{use}.type')}")
        key = f"{b.alias}.ssl.{use}.location"
        if use == "truststore":
            tls.write_truststore(store, ca, key=key)
        else:
            tls.write_keystore(store, tls.issue(ca, f"{b.alias} client"), ca, key=key)
        tls.record_written(b.tls_folder, Path(location))
    return password


def _formatted_cluster_id(node_1: Path) -> str:
    """The cluster id node 1 was formatted with: every further node joins that cluster."""
    meta = node_1 / "data" / "meta.properties"
    for line in meta.read_text().splitlines() if meta.exists() else ():
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1].strip()
    raise LocalClusterError(f"{node_1}: node 1 is not formatted yet; start the cluster's first address first")


def _cluster_id() -> str:
    # As Kafka's Uuid.randomUuid: an id starting with "-" would be read as an option by kafka-storage.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _spawn(b: LocalBroker, jars: Path) -> subprocess.Popen[bytes]:
    log = b.log_file.open("ab")
    heap = os.environ.get("MIRRORFLOW_BROKER_HEAP", HEAP)
    cmd = ["java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
           "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
           f"-Dlog4j2.configurationFile={b.folder / 'log4j2.yaml'}",
           "-cp", maven.classpath(jars), "kafka.Kafka", str(b.config_file)]
    proc = daemons.keep(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True))
    log.close()
    b.pid_file.write_text(str(proc.pid))
    return proc


def _wait_until_serving(b: LocalBroker, proc: subprocess.Popen[bytes], offset: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalClusterError(f"cluster {b.alias!r}: the broker exited with code {proc.returncode}; "
                                    f"log tail: {_log_tail(b)}")
        text = b.log_file.read_bytes()[offset:].decode(errors="replace")
        if "Kafka Server started" in text and _port_open(b.host, b.port):
            return
        time.sleep(0.25)
    _terminate(proc.pid)
    raise LocalClusterError(f"cluster {b.alias!r}: the broker did not come up within {START_TIMEOUT_S:.0f} s; "
                            f"log tail: {_log_tail(b)}")


def _log_tail(b: LocalBroker, lines: int = 3) -> str:
    try:
        text = b.log_file.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line[:300] for line in text[-lines:]) or "(empty log)"


def _terminate(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM to the process group, SIGKILL after `timeout` s (at once for 0); returns once the process is gone."""
    steps = [(signal.SIGTERM, timeout)] if timeout > 0 else []
    for sig, wait in [*steps, (signal.SIGKILL, 10.0)]:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                _reap(pid)
                return
            time.sleep(0.05)
    _reap(pid)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)

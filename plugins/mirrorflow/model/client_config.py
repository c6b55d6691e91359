"""Java Kafka client properties (what MM2 files carry) as librdkafka settings (confluent-kafka).

Spark's Kafka connector takes the Java properties as they are; the Python-side clients (admin sync,
checkpoints, heartbeats, tests) need librdkafka's names. Keys with the same meaning in both are
passed through; renamed ones are renamed; Java-only ones (serializers, JKS stores, buffer sizes) are
dropped and reported, and what cannot be expressed at all is a ConfigError saying what to change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mirrorflow.errors import ConfigError

_SAME = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "ssl.endpoint.identification.algorithm",
    "ssl.cipher.suites", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "isolation.level",
    "auto.offset.reset", "enable.auto.commit", "group.id", "acks", "enable.idempotence",
    "compression.type", "linger.ms", "batch.size", "request.timeout.ms", "retries", "retry.backoff.ms",
    "retry.backoff.max.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "fetch.min.bytes", "fetch.max.bytes",
    "max.partition.fetch.bytes", "transactional.id", "transaction.timeout.ms", "delivery.timeout.ms",
    "metadata.max.age.ms", "socket.connection.setup.timeout.ms", "client.dns.lookup",
    "max.in.flight.requests.per.connection", "partition.assignment.strategy", "group.instance.id",
    "connections.max.idle.ms", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.scope", "message.max.bytes",
})
_RENAMED = {"max.request.size": "message.max.bytes", "fetch.max.wait.ms": "fetch.wait.max.ms",
            "socket.receive.buffer.bytes": "socket.receive.buffer.bytes",
            "socket.send.buffer.bytes": "socket.send.buffer.bytes"}
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SECURE_STORE_TYPES = {"PEM", "PKCS12"}


def jaas_credentials(jaas: str) -> tuple[str, str] | None:
    """(username, password) from a PLAIN or SCRAM `sasl.jaas.config`, or None for other modules."""
    if "PlainLoginModule" not in jaas and "ScramLoginModule" not in jaas:
        return None
    fields = dict(_JAAS.findall(jaas))
    if "username" not in fields or "password" not in fields:
        return None
    return fields["username"], fields["password"]


def to_librdkafka(java: Mapping[str, str], *, cluster: str = "?") -> tuple[dict[str, str], list[str]]:
    """(librdkafka settings, Java keys dropped). Raises ConfigError for settings it cannot express."""
    out: dict[str, str] = {}
    dropped: list[str] = []
    for key, value in java.items():
        if key in _SAME:
            out[key] = value
        elif key in _RENAMED:
            out[_RENAMED[key]] = value
        elif key == "sasl.jaas.config":
            creds = jaas_credentials(value)
            if creds is None:
                raise ConfigError("sasl.jaas.config: only PlainLoginModule and ScramLoginModule with "
                                  "username and password can be used by mirrorflow's Python clients",
                                  key=f"{cluster}.sasl.jaas.config")
            out["sasl.username"], out["sasl.password"] = creds
        elif key == "ssl.truststore.location":
            kind = java.get("ssl.truststore.type", "JKS").upper()
            if kind != "PEM":
                raise ConfigError(f"a {kind} truststore cannot be read by librdkafka; convert it to PEM "
                                  "(keytool -exportcert -rfc) and set ssl.truststore.type=PEM",
                                  key=f"{cluster}.ssl.truststore.location")
            out["ssl.ca.location"] = value
        elif key == "ssl.keystore.type" and value.upper() not in _SECURE_STORE_TYPES:
            raise ConfigError(f"a {value} keystore cannot be read by librdkafka; use PKCS12",
                              key=f"{cluster}.ssl.keystore.type")
        else:
            dropped.append(key)
    return out, sorted(dropped)


_LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def from_librdkafka(settings: Mapping[str, object], *, where: str) -> dict[str, str]:
    """Java client properties for a librdkafka config dict (an Airflow Kafka connection's extra).

    Inverse of `to_librdkafka` for what both sides can say: `sasl.username`/`sasl.password` become a PLAIN or
    SCRAM `sasl.jaas.config`, `ssl.ca.location` a PEM truststore; other keys pass through as they are.
    """
    out = {k: str(v) for k, v in settings.items() if k not in ("sasl.username", "sasl.password", "ssl.ca.location")}
    if "sasl.mechanisms" in out:
        out["sasl.mechanism"] = out.pop("sasl.mechanisms")
    if "sasl.username" in settings or "sasl.password" in settings:
        mechanism = out.get("sasl.mechanism", "").upper()
        if mechanism not in _LOGIN_MODULES:
            raise ConfigError(f"sasl.username/sasl.password need sasl.mechanism PLAIN, SCRAM-SHA-256 or "
                              f"SCRAM-SHA-512, not {mechanism or 'none'}", source=where)
        user, password = str(settings.get("sasl.username", "")), str(settings.get("sasl.password", ""))
        if any(c in user + password for c in '"\\'):
            raise ConfigError("sasl.username and sasl.password must not contain '\"' or '\\'", source=where)
        out["sasl.jaas.config"] = f'{_LOGIN_MODULES[mechanism]} required username="{user}" password="{password}";'
    if "ssl.ca.location" in settings:
        out["ssl.truststore.location"] = str(settings["ssl.ca.location"])
        out["ssl.truststore.type"] = "PEM"
    return out

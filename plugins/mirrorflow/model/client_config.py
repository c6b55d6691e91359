"""Java Kafka client properties (what MM2 files carry) as librdkafka settings (confluent-kafka).

Spark's Kafka connector takes the Java properties as they are; the Python-side clients (admin sync,
checkpoints, heartbeats, tests) need librdkafka's names. Keys with the same meaning in both are
passed through; renamed ones are renamed; Java-only ones (serializers, buffer sizes) are dropped and reported,
and what cannot be expressed at all is a ConfigError saying what to change.

Trust and key stores keep MM2's keys. A PEM store is named to librdkafka by its path (or inline, KIP-651's
`ssl.truststore.certificates`, `ssl.keystore.certificate.chain`, `ssl.keystore.key`); a JKS or PKCS12 store,
which librdkafka cannot read, is opened by the `StoreOpener` the caller passes (`kafka.stores`) and handed over
as inline PEM.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from mirrorflow.errors import ConfigError

_SAME = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "ssl.endpoint.identification.algorithm",
    "ssl.cipher.suites", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "isolation.level",
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
JAVA_STORE_TYPES = ("JKS", "PKCS12")
_STORE_KEYS = frozenset({
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key"})


@dataclass(frozen=True)
class JavaStore:
    """A JKS or PKCS12 store as a Java client config names it (`ssl.truststore.*` or `ssl.keystore.*`)."""

    location: str
    kind: str  # JKS or PKCS12, upper case
    password: str | None
    key_password: str | None = None  # a keystore's `ssl.key.password`; None: the store's password


def java_store(java: Mapping[str, str], use: str) -> JavaStore | None:
    """The JKS or PKCS12 store that `ssl.{use}.*` names (`use`: truststore or keystore), with its passwords; None
    when no location is given or the type is another one (PEM)."""
    kind = java.get(f"ssl.{use}.type", "JKS").strip().upper()
    location = java.get(f"ssl.{use}.location", "").strip()
    if not location or kind not in JAVA_STORE_TYPES:
        return None
    return JavaStore(location, kind, java.get(f"ssl.{use}.password") or None,
                     (java.get("ssl.key.password") or None) if use == "keystore" else None)


class ClientIdentityPem(Protocol):
    @property
    def certificate_chain(self) -> str: ...

    @property
    def private_key(self) -> str: ...


class StoreOpener(Protocol):
    """Opens Java stores for librdkafka; errors are ConfigErrors naming `key` (`kafka.stores`)."""

    def open_truststore(self, store: JavaStore, *, key: str) -> str: ...

    def open_keystore(self, store: JavaStore, *, key: str) -> ClientIdentityPem: ...


def jaas_credentials(jaas: str) -> tuple[str, str] | None:
    """(username, password) from a PLAIN or SCRAM `sasl.jaas.config`, or None for other modules."""
    if "PlainLoginModule" not in jaas and "ScramLoginModule" not in jaas:
        return None
    fields = dict(_JAAS.findall(jaas))
    if "username" not in fields or "password" not in fields:
        return None
    return fields["username"], fields["password"]


def to_librdkafka(java: Mapping[str, str], *, cluster: str = "?", stores: StoreOpener | None = None
                  ) -> tuple[dict[str, str], list[str]]:
    """(librdkafka settings, Java keys dropped). Raises ConfigError for settings it cannot express.

    A JKS or PKCS12 store needs `stores` to be opened; without one it is a ConfigError."""
    out: dict[str, str] = _stores(java, cluster, stores)
    dropped: list[str] = []
    for key, value in java.items():
        if key in _STORE_KEYS:
            continue
        if key == "ssl.endpoint.identification.algorithm":
            out[key] = value if value.strip() else "none"  # Java's "" (no host name check) is librdkafka's none
        elif key in _SAME:
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
        else:
            dropped.append(key)
    return out, sorted(dropped)


def _stores(java: Mapping[str, str], cluster: str, stores: StoreOpener | None) -> dict[str, str]:
    """librdkafka's `ssl.ca.*`, `ssl.certificate.*` and `ssl.key.*` for MM2's trust and key store keys."""
    out: dict[str, str] = {}
    for use in ("truststore", "keystore"):
        kind = java.get(f"ssl.{use}.type", "JKS").strip().upper()
        if kind not in (*JAVA_STORE_TYPES, "PEM"):
            raise ConfigError(f"a {kind} {use} cannot be opened: mirrorflow reads JKS, PKCS12 and PEM stores",
                              key=f"{cluster}.ssl.{use}.type")
        location = java.get(f"ssl.{use}.location", "").strip()
        if not location:
            continue
        key = f"{cluster}.ssl.{use}.location"
        if kind == "PEM" and use == "truststore":
            out["ssl.ca.location"] = location
        elif kind == "PEM":  # one file holding the key and its certificate chain (KIP-651)
            out["ssl.certificate.location"] = out["ssl.key.location"] = location
            if java.get("ssl.key.password"):
                out["ssl.key.password"] = java["ssl.key.password"]
        elif stores is None:
            raise ConfigError(f"a {kind} {use} needs Java's keytool to be opened, which this caller has not",
                              key=key)
        else:
            store = java_store(java, use)
            assert store is not None  # a location of a Java type
            if use == "truststore":
                out["ssl.ca.pem"] = stores.open_truststore(store, key=key)
            else:
                identity = stores.open_keystore(store, key=key)
                out["ssl.certificate.pem"], out["ssl.key.pem"] = identity.certificate_chain, identity.private_key
    if java.get("ssl.truststore.certificates"):
        out["ssl.ca.pem"] = java["ssl.truststore.certificates"]
    if java.get("ssl.keystore.certificate.chain") and java.get("ssl.keystore.key"):
        out["ssl.certificate.pem"] = java["ssl.keystore.certificate.chain"]
        out["ssl.key.pem"] = java["ssl.keystore.key"]
        if java.get("ssl.key.password"):
            out["ssl.key.password"] = java["ssl.key.password"]
    return out


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

"""TLS material for local clusters: a certificate authority, a broker's keystore and a client's Java stores.

The authority's key stays in the cluster's folder (0600); the broker gets a PKCS12 keystore and the authority as a
PEM truststore; a client gets the JKS or PKCS12 truststore and keystore its config names, with the passwords the
config gives, written by keytool as a Java client (MM2) would find them.

Invariants:
  T1. an authority is made once per cluster folder and reused by every later `up` (stores it signed stay valid);
  T2. a store is written only where none exists; the stores written are listed, with their digest, in the cluster's
      folder, and `forget` removes only files still holding what was written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mirrorflow.errors import ConfigError, LocalClusterError
from mirrorflow.kafka import stores
from mirrorflow.model.client_config import JavaStore

VALID_DAYS = 825
_KEY = ec.SECP256R1()


@dataclass(frozen=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Issued:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def authority(folder: Path, name: str) -> Authority:
    """The cluster's certificate authority, made at the first call (T1)."""
    key_file, cert_file = folder / "ca.key", folder / "ca.pem"
    if key_file.exists() and cert_file.exists():
        key = serialization.load_pem_private_key(key_file.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return Authority(key, x509.load_pem_x509_certificate(cert_file.read_bytes()))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(_KEY)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"mirrorflow local CA {name}")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(key, cert)


def issue(ca: Authority, common_name: str, *, hosts: Sequence[str] = (), valid_from: dt.datetime | None = None,
          valid_days: float = VALID_DAYS) -> Issued:
    """A key and a certificate signed by `ca`, for servers (`hosts` as its names) and clients alike."""
    key = ec.generate_private_key(_KEY)
    start = valid_from or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca.certificate.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start)
               .not_valid_after(start + dt.timedelta(days=valid_days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


def write_pkcs12(path: Path, issued: Issued, ca: Authority, password: str) -> None:
    """A PKCS12 keystore (what the broker reads), mode 0600."""
    data = pkcs12.serialize_key_and_certificates(b"mirrorflow", issued.key, issued.certificate, [ca.certificate],
                                                 serialization.BestAvailableEncryption(password.encode()))
    _write_private(path, data)


def write_truststore(store: JavaStore, ca: Authority, *, key: str) -> None:
    """A Java truststore (JKS or PKCS12) trusting `ca`, as keytool writes it."""
    if not store.password:
        raise ConfigError("a truststore local up writes needs a password (ssl.truststore.password)", key=key)
    Path(store.location).parent.mkdir(parents=True, exist_ok=True)
    with stores.private_folder() as folder:
        (folder / "ca.pem").write_text(ca.pem)
        _keytool(["-importcert", "-noprompt", "-alias", "mirrorflow-local-ca", "-file", str(folder / "ca.pem"),
                  "-keystore", store.location, "-storetype", store.kind, "-storepass:env", "MIRRORFLOW_STOREPASS"],
                 {"MIRRORFLOW_STOREPASS": store.password}, key)


def write_keystore(store: JavaStore, issued: Issued, ca: Authority, *, key: str) -> None:
    """A Java keystore (JKS or PKCS12) holding `issued` under the alias `client`, its key under the key password."""
    if not store.password:
        raise ConfigError("a keystore local up writes needs a password (ssl.keystore.password)", key=key)
    Path(store.location).parent.mkdir(parents=True, exist_ok=True)
    with stores.private_folder() as folder:
        transfer = os.urandom(18).hex()
        write_pkcs12(folder / "client.p12", issued, ca, transfer)
        _keytool(["-importkeystore", "-noprompt", "-srckeystore", str(folder / "client.p12"), "-srcstoretype",
                  "PKCS12", "-srcstorepass:env", "MIRRORFLOW_SRCPASS", "-srcalias", "mirrorflow",
                  "-destalias", "client", "-destkeystore", store.location, "-deststoretype", store.kind,
                  "-deststorepass:env", "MIRRORFLOW_STOREPASS", "-destkeypass:env", "MIRRORFLOW_KEYPASS"],
                 {"MIRRORFLOW_SRCPASS": transfer, "MIRRORFLOW_STOREPASS": store.password,
                  "MIRRORFLOW_KEYPASS": store.key_password or store.password}, key)


def record_written(folder: Path, path: Path) -> None:
    """Note a client store written for this cluster (T2)."""
    listing = folder / "client-stores.json"
    written = json.loads(listing.read_text()) if listing.exists() else {}
    written[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    listing.write_text(json.dumps(written, indent=1))


def forget(folder: Path) -> list[Path]:
    """Remove the client stores written for this cluster that still hold what was written (T2)."""
    listing = folder / "client-stores.json"
    removed = []
    for name, digest in (json.loads(listing.read_text()) if listing.exists() else {}).items():
        path = Path(name)
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest:
            path.unlink()
            removed.append(path)
    return removed


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    path.chmod(0o600)


def _keytool(args: Sequence[str], env: dict[str, str], key: str) -> None:
    try:
        stores.keytool(args, env, what=key)
    except ConfigError as e:
        raise LocalClusterError(f"{key}: keytool could not write the store: {e.reason}") from None

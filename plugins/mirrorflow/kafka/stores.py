"""Java key and trust stores (JKS, PKCS12), as MM2 files name them, opened for librdkafka, which reads neither.

The JDK's keytool (installed for Spark and the brokers) opens a store with the passwords the config gives; they
reach it through its environment (`-storepass:env`), never its arguments. A keystore's key entry is exported to a
PKCS12 file in a private folder and read back with `cryptography`; what librdkafka gets is PEM text, handed to
it inline (`ssl.ca.pem`, `ssl.certificate.pem`, `ssl.key.pem`), so the settings reach a Spark executor on another
host without a file, and nothing of a store is left on disk.

Invariants:
  S1. a store is opened once per process while its file is unchanged (path, size, mtime, type, passwords): the
      cache holds one entry per store path the config names, the newest, so a rotated store is read again;
  S2. every file made while opening a store lives in a folder of mode 0700 (files 0600) that is removed before
      `open_*` returns, also when it fails;
  S3. no password appears in a command line, a message or a log line; a failure is one ConfigError naming the
      config key, the store's path and the cause.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from mirrorflow.errors import ConfigError
from mirrorflow.model.client_config import JavaStore

KEYTOOL_TIMEOUT_S = 60.0
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_ALIAS = re.compile(r"^Alias name: (.*)$", re.M)
_ENTRY = re.compile(r"^Entry type: (\w+)$", re.M)
_CAUSES = (("password was incorrect", "the password is wrong (or the file is not a {kind} store)"),
           ("Cannot recover key", "the key password (ssl.key.password) is wrong"),
           ("Invalid keystore format", "the file is not a {kind} store"),
           ("toDerInputStream rejects tag", "the file is not a {kind} store"),
           ("Unrecognized keystore format", "the file is not a {kind} store"),
           ("keystore password must be at least", "the password is shorter than keytool accepts (6 characters)"))


@dataclass(frozen=True)
class ClientIdentity:
    """A keystore's key entry as PEM: the certificate chain (leaf first) and the unencrypted private key."""

    certificate_chain: str
    private_key: str


def open_truststore(store: JavaStore, *, key: str) -> str:
    """The certificates a truststore trusts, as PEM; `key` is the config key named in errors."""
    return _cached(store, key, _read_truststore)


def open_keystore(store: JavaStore, *, key: str) -> ClientIdentity:
    """A keystore's key entry, as PEM."""
    return _cached(store, key, _read_keystore)


Opened = TypeVar("Opened", str, ClientIdentity)
_lock = threading.Lock()
_cache: dict[tuple[str, str], tuple[tuple[object, ...], object]] = {}  # S1: one per (path, reader)


def _cached(store: JavaStore, key: str, read: Callable[[JavaStore, str], Opened]) -> Opened:
    path = Path(store.location)
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{store.location}: no such file", key=key) from None
    except OSError as e:
        raise ConfigError(f"{store.location}: cannot be read ({e.strerror})", key=key) from None
    if not path.is_file():
        raise ConfigError(f"{store.location}: not a file", key=key)
    version = (stat.st_size, stat.st_mtime_ns, store.kind, store.password, store.key_password)
    with _lock:
        hit = _cache.get((store.location, read.__name__))
        if hit is not None and hit[0] == version:
            return cast(Opened, hit[1])
        value = read(store, key)
        _cache[(store.location, read.__name__)] = (version, value)
        return value


def _read_truststore(store: JavaStore, key: str) -> str:
    env = {"MIRRORFLOW_STOREPASS": store.password} if store.password else {}
    args = ["-list", "-rfc", "-keystore", store.location, "-storetype", store.kind]
    if store.password:
        args += ["-storepass:env", "MIRRORFLOW_STOREPASS"]
    out = _keytool(args, env, store, key)
    certificates = [x509.load_pem_x509_certificate(m.encode()) for m in _PEM_CERT.findall(out)]
    if not certificates:
        raise ConfigError(f"{store.location}: the {store.kind} truststore holds no certificate", key=key)
    now = dt.datetime.now(dt.UTC)
    if all(c.not_valid_after_utc < now for c in certificates):
        newest = max(c.not_valid_after_utc for c in certificates)
        raise ConfigError(f"{store.location}: every certificate in the truststore has expired (the last on "
                          f"{newest:%Y-%m-%d})", key=key)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)


def _read_keystore(store: JavaStore, key: str) -> ClientIdentity:
    if not store.password:
        raise ConfigError(f"{store.location}: a keystore needs its password (ssl.keystore.password)", key=key)
    env = {"MIRRORFLOW_STOREPASS": store.password}
    listing = _keytool(["-list", "-v", "-keystore", store.location, "-storetype", store.kind,
                        "-storepass:env", "MIRRORFLOW_STOREPASS"], env, store, key)
    aliases = [a for a, kind in zip(_ALIAS.findall(listing), _ENTRY.findall(listing), strict=False)
               if kind == "PrivateKeyEntry"]
    if len(aliases) != 1:
        raise ConfigError(f"{store.location}: the keystore holds {len(aliases)} private keys; librdkafka takes "
                          "exactly one", key=key)
    with private_folder() as folder:
        export = folder / "key.p12"
        transfer = os.urandom(18).hex()
        env |= {"MIRRORFLOW_KEYPASS": store.key_password or store.password, "MIRRORFLOW_DESTPASS": transfer}
        _keytool(["-importkeystore", "-noprompt", "-srckeystore", store.location, "-srcstoretype", store.kind,
                  "-srcstorepass:env", "MIRRORFLOW_STOREPASS", "-srcalias", aliases[0],
                  "-srckeypass:env", "MIRRORFLOW_KEYPASS", "-destalias", aliases[0],
                  "-destkeystore", str(export), "-deststoretype", "PKCS12",
                  "-deststorepass:env", "MIRRORFLOW_DESTPASS", "-destkeypass:env", "MIRRORFLOW_DESTPASS"],
                 env, store, key)
        private_key, leaf, chain = pkcs12.load_key_and_certificates(export.read_bytes(), transfer.encode())
    if private_key is None or leaf is None:
        raise ConfigError(f"{store.location}: the keystore's entry {aliases[0]!r} has no key and certificate", key=key)
    now = dt.datetime.now(dt.UTC)
    if leaf.not_valid_after_utc < now:
        raise ConfigError(f"{store.location}: the certificate {leaf.subject.rfc4514_string()} expired on "
                          f"{leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC", key=key)
    if leaf.not_valid_before_utc > now:
        raise ConfigError(f"{store.location}: the certificate {leaf.subject.rfc4514_string()} is not valid "
                          f"before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC", key=key)
    pem = serialization.Encoding.PEM
    return ClientIdentity(
        "".join(c.public_bytes(pem).decode() for c in [leaf, *chain]),
        private_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())


@contextmanager
def private_folder() -> Iterator[Path]:
    """A folder only this user can enter, with a umask that makes its files 0600; removed on exit (S2)."""
    folder = Path(tempfile.mkdtemp(prefix="mirrorflow-stores-"))  # mkdtemp: mode 0700
    previous = os.umask(0o077)
    try:
        yield folder
    finally:
        os.umask(previous)
        shutil.rmtree(folder, ignore_errors=True)


def keytool(args: Sequence[str], env: dict[str, str], *, what: str) -> str:
    """keytool's output (English messages; passwords only through `env`); a ConfigError with keytool's own
    error line when it fails."""
    binary = shutil.which("keytool")
    if binary is None:
        raise ConfigError(f"{what}: Java's keytool is needed to open JKS and PKCS12 stores and is not on PATH "
                          "(install a JRE, as for Spark)")
    proc = subprocess.run([binary, "-J-Duser.language=en", "-J-Duser.country=US", *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=KEYTOOL_TIMEOUT_S, check=False,
                          env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/"),
                               "JAVA_HOME": os.environ.get("JAVA_HOME", ""), **env})
    if proc.returncode != 0:
        raise ConfigError(_keytool_error(proc.stdout + proc.stderr))
    return proc.stdout


def _keytool(args: Sequence[str], env: dict[str, str], store: JavaStore, key: str) -> str:
    try:
        return keytool(args, env, what=store.location)
    except ConfigError as e:
        text = e.reason
        for needle, cause in _CAUSES:
            if needle in text:
                text = cause.format(kind=store.kind)
                break
        raise ConfigError(f"{store.location}: cannot open the {store.kind} store: {text}", key=key) from None


def _keytool_error(output: str) -> str:
    """keytool's own error line without its exception class: `keytool error: java.io.IOException: X` -> `X`."""
    for line in output.splitlines():
        if line.startswith("keytool error:"):
            return re.sub(r"^keytool error:\s*(?:[\w.$]+(?:Exception|Error):\s*)?", "", line).strip() or line
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "keytool failed with no message"

"""The test session's local clusters (alpha, beta plain; gamma SASL + ACLs) and a broker of a module's own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from mirrorflow.dev import local
from mirrorflow.model import config

from support import ports

REPO = Path(__file__).resolve().parents[2]
PORTS = {"alpha": ports.ALPHA, "beta": ports.BETA, "gamma": ports.GAMMA}
SECURE_ALIAS = "gamma"


def clusters_text() -> str:
    return f"""
clusters = alpha, beta, gamma
alpha.bootstrap.servers = 127.0.0.1:{PORTS['alpha']}
beta.bootstrap.servers = 127.0.0.1:{PORTS['beta']}
gamma.bootstrap.servers = 127.0.0.1:{PORTS['gamma']}
gamma.security.protocol = SASL_PLAINTEXT
gamma.sasl.mechanism = SCRAM-SHA-512
gamma.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="admin" password="${{env:GAMMA_PASSWORD}}";
alpha->beta.enabled = true
beta->alpha.enabled = true
alpha->gamma.enabled = true
replication.factor = 1
"""


@contextlib.contextmanager
def own_broker(cfg: config.MirrorConfig, alias: str) -> Iterator[None]:
    """A broker for one test module (a cluster it may stop), removed with its data afterwards."""
    local.up(cfg, [alias])
    try:
        yield
    finally:
        local.down(cfg, [alias], purge=True)

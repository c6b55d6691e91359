"""MM2's own Java classes as the oracle: both policies must answer exactly as they do."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from mirrorflow.model import paths
from mirrorflow.rules.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    is_heartbeats_topic,
    is_internal_topic,
    original_topic,
)
from mirrorflow.spark import maven

pytestmark = pytest.mark.java


def generated_names(seed: int, sep: str) -> list[str]:
    rng = random.Random(seed)
    pieces = ["a", "b", "B", "orders", "heartbeats", "internal", "checkpoints", "mm2", "x-y", "_", "__",
              ".", "..", sep, "-internal", "replica"]
    names = {"", "heartbeats", "A.heartbeats", "B.A.heartbeats", ".hidden", "a.", ".a", "a..b", "."}
    while len(names) < 600:
        names.add("".join(rng.choice(pieces) for _ in range(rng.randint(1, 5))))
    return sorted(names)


def python_answers(p: ReplicationPolicy, topic: str) -> list[str]:
    def j(v: str | None) -> str:
        return "null" if v is None else v
    return [p.remote_topic("src", topic), j(p.topic_source(topic)), j(p.upstream_topic(topic)),
            original_topic(p, topic), str(is_internal_topic(p, topic)).lower(),
            str(is_heartbeats_topic(p, topic)).lower()]


@pytest.mark.parametrize("sep", [".", "_", "__"])
def test_policies_answer_as_mm2_does(sep: str, repo, cluster_env) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("java") is None:
        pytest.fail("java is required for this test")
    jars = maven.fetch("mirror-client", maven.MIRROR_CLIENT, paths.jar_cache())
    names = generated_names(len(sep), sep)
    out = subprocess.run(
        ["java", "-cp", maven.classpath(jars), str(repo / "tests" / "java" / "PolicyOracle.java"), sep],
        input="\n".join(names) + "\n", capture_output=True, text=True, timeout=120, check=True).stdout
    java_rows = out.splitlines()
    assert len(java_rows) == len(names)
    default, identity = DefaultReplicationPolicy(sep), IdentityReplicationPolicy(sep)
    mismatches = []
    for topic, row in zip(names, java_rows, strict=True):
        expected = row.split("\t")
        got = python_answers(default, topic) + python_answers(identity, topic)
        if got != expected:
            mismatches.append((topic, expected, got))
    assert not mismatches[:5], f"{len(mismatches)} names differ from MM2, e.g. {mismatches[:3]}"

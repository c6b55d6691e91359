from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mirrorflow.errors import ConfigError
from mirrorflow.model import config, legacy
from mirrorflow.rules.policy import IdentityReplicationPolicy, PrefixReplicationPolicy

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def mm1_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    c1, c2, p = tmp_path / "src1.config", tmp_path / "src2.config", tmp_path / "target.config"
    c1.write_text("bootstrap.servers = s1:9092\ngroup.id = mm1\nauto.offset.reset = earliest\n")
    c2.write_text("bootstrap.servers = s2:9092\nsasl.jaas.config = x password=\"pw\";\n")
    p.write_text("bootstrap.servers = t:9092\nacks = all\n")
    return c1, c2, p


def as_config(flags: legacy.LegacyFlags) -> config.MirrorConfig:
    return config.from_text(legacy.render(legacy.to_properties(flags), mask=False))


def test_two_sources_whitelist_identity_names(mm1_files: tuple[Path, Path, Path]) -> None:
    c1, c2, p = mm1_files
    cfg = as_config(legacy.LegacyFlags([str(c1), str(c2)], str(p), whitelist="orders|pay.*", num_streams=4))
    assert [f.name for f in cfg.enabled_flows] == ["source1->target", "source2->target"]
    flow = cfg.flow("source1->target")
    assert isinstance(flow.policy, IdentityReplicationPolicy)
    assert flow.topic_filter.selects("orders") and flow.topic_filter.selects("payments")
    assert not flow.topic_filter.selects("other") and flow.number("tasks.max") == 4
    assert cfg.clusters["source1"].client_config("consumer")["auto.offset.reset"] == "earliest"
    assert "group.id" not in cfg.clusters["source1"].client_config("consumer")
    assert cfg.clusters["target"].client_config("producer")["acks"] == "all"


def test_blacklist_and_prefix(mm1_files: tuple[Path, Path, Path]) -> None:
    c1, _, p = mm1_files
    cfg = as_config(legacy.LegacyFlags([str(c1)], str(p), blacklist="secret.*", prefix="dc1_"))
    flow = cfg.flow("source->target")
    assert flow.policy == PrefixReplicationPolicy("dc1_")
    assert flow.topic_filter.selects("orders") and not flow.topic_filter.selects("secret1")


def test_whitelist_and_blacklist_together_is_an_error(mm1_files: tuple[Path, Path, Path]) -> None:
    c1, _, p = mm1_files
    with pytest.raises(ConfigError, match="exclusive"):
        legacy.to_properties(legacy.LegacyFlags([str(c1)], str(p), whitelist="a", blacklist="b"))


def test_mm1_command_prints_masked_properties_and_rejects_both_lists(mm1_files: tuple[Path, Path, Path]) -> None:
    c1, c2, p = mm1_files
    base = [sys.executable, "-m", "mirrorflow", "mm1", "--consumer.config", str(c1),
            "--consumer.config", str(c2), "--producer.config", str(p)]
    ok = subprocess.run([*base, "--whitelist", ".*", "--preserve.partitions"], capture_output=True, text=True,
                        cwd=REPO, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "source2.sasl.jaas.config = [hidden]" in ok.stdout and "pw" not in ok.stdout.replace("password", "")
    bad = subprocess.run([*base, "--whitelist", "a", "--blacklist", "b"], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert bad.returncode == 2 and "--whitelist and --blacklist are exclusive" in bad.stderr

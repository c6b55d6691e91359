"""Where mirrorflow keeps what it runs with on this host: its home folder and the jar cache."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The git-ignored runtime folder (`MIRRORFLOW_HOME`, default `./.mirrorflow`)."""
    return Path(os.environ.get("MIRRORFLOW_HOME", ".mirrorflow")).resolve()


def jar_cache() -> Path:
    """Where jars fetched from Maven Central are kept (`MIRRORFLOW_JAR_CACHE`, default `{home}/jars`)."""
    return Path(os.environ.get("MIRRORFLOW_JAR_CACHE", str(home() / "jars"))).resolve()

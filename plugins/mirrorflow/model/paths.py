"""Where mirrorflow keeps what it runs with on this host: its home, the jar cache, a stream's checkpoint folder."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mirrorflow.errors import ConfigError


def home() -> Path:
    """The git-ignored runtime folder (`MIRRORFLOW_HOME`, default `./.mirrorflow`)."""
    return Path(os.environ.get("MIRRORFLOW_HOME", ".mirrorflow")).resolve()


def jar_cache() -> Path:
    """Where jars fetched from Maven Central are kept (`MIRRORFLOW_JAR_CACHE`, default `{home}/jars`)."""
    return Path(os.environ.get("MIRRORFLOW_JAR_CACHE", str(home() / "jars"))).resolve()


def checkpoint_folder(given: str) -> Path:
    """The stream's `--checkpoint` as a local folder: a path, or a `file:` URL of this host.

    mirrorflow's own files in the checkpoint (reset marker, first offsets, linger positions, offset bases) and its
    reads of Spark's logs are local file operations, so another file system's URL (hdfs:, s3a:) is refused rather
    than taken as a local path: pathlib would fold `hdfs://nn/x` into the folder `hdfs:/nn/x`."""
    scheme = _URL_SCHEME.match(given)
    if scheme is None:
        return Path(given)
    url = urlsplit(given)
    if scheme.group(1).lower() == "file" and url.netloc.lower() in ("", "localhost") and url.path.startswith("/"):
        return Path(unquote(url.path))
    raise ConfigError(f"{given}: a checkpoint on another file system than the local one is not supported yet; give a "
                      "local folder (the flow's positions are its offset syncs, so a driver on a new host starts a "
                      "new checkpoint at them: docs/deployment.md)", key="--checkpoint")


# A URL's scheme (RFC 3986), two characters or more so that a Windows drive letter (C:) stays a path.
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")

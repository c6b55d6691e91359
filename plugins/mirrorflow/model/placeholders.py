"""Kafka config-provider placeholders, so that secrets never have to sit in the config file.

`${env:VAR}` reads an environment variable; `${file:/path:key}` reads `key` from a properties
file; `${directory:/path:name}` reads the whole file `/path/name`. These are the syntaxes of Kafka's
EnvVarConfigProvider, FileConfigProvider and DirectoryConfigProvider, so one file serves MM2 and
mirrorflow. Resolved values are secrets until proven otherwise: callers print the raw text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from mirrorflow.errors import PlaceholderError
from mirrorflow.model import properties

_PLACEHOLDER = re.compile(r"\$\{(\w+):((?:[^}:]|:(?=[^}]*:))*?)(?::([^}]*))?\}")


def has_placeholder(value: str) -> bool:
    return _PLACEHOLDER.search(value) is not None


def resolve(value: str, env: Mapping[str, str] | None = None) -> str:
    """The value with every placeholder replaced; PlaceholderError names what is missing."""
    environ = os.environ if env is None else env

    def substitute(m: re.Match[str]) -> str:
        provider, path, key = m.group(1), m.group(2), m.group(3)
        if provider == "env":
            name = path if key is None else f"{path}:{key}"
            if name not in environ:
                raise PlaceholderError(f"environment variable {name} is not set")
            return environ[name]
        if provider == "file":
            if key is None:
                raise PlaceholderError(f"${{file:{path}}} needs a key: ${{file:{path}:KEY}}")
            try:
                entries = {e.key: e.value for e in properties.load(path)}
            except Exception:
                raise PlaceholderError(f"cannot read properties file {path}") from None
            if key not in entries:
                raise PlaceholderError(f"key {key} not found in {path}")
            return entries[key]
        if provider == "directory":
            target = Path(path) / (key or "")
            try:
                return target.read_text(encoding="utf-8")
            except OSError:
                raise PlaceholderError(f"cannot read {target}") from None
        raise PlaceholderError(f"unknown config provider {provider!r} (known: env, file, directory)")

    return _PLACEHOLDER.sub(substitute, value)

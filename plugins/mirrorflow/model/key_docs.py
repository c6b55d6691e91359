"""docs/configuration.md, made from the key table (model/keys) so that the page cannot drift from the code:
`make docs` writes it, and a test holds the file against `markdown()`."""

from __future__ import annotations

from mirrorflow.model import keys


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(key: keys.Key) -> str:
    return f"`{_cell(key.default)}`" if key.default else "(none)"


def _rows(table: tuple[keys.Key, ...]) -> list[str]:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for k in table:
        kind = k.kind + (f": {', '.join(k.choices)}" if k.choices else "")
        also = f" (also read as {', '.join(f'`{a}`' for a in k.aliases)})" if k.aliases else ""
        doc = f"Accepted, not used: {keys.NOT_USED[k.name]}." if k.name in keys.NOT_USED else k.doc
        rows.append(f"| `{k.name}`{also} | {kind} | {_default(k)} | {_cell(doc)} |")
    return rows


def markdown() -> str:
    lines = [
        "# Configuration",
        "",
        "<!-- Made by `make docs` from plugins/mirrorflow/model/keys.py; edit that table, not this page. -->",
        "",
        "mirrorflow reads MirrorMaker 2's `connect-mirror-maker.properties` unchanged: Java properties syntax, "
        "`clusters`, `{alias}.bootstrap.servers`, `{source}->{target}.enabled` and per-flow "
        "`{source}->{target}.{key}` overrides of any flow key below, and client settings per cluster "
        "(`{alias}.consumer.*`, `{alias}.producer.*`, `{alias}.admin.*`, and `{alias}.{client key}` for every "
        "client of the cluster). `mirrorflow validate` checks a file and names the file, line and key of each "
        "problem. Secrets can stay out of the file: `${env:VAR}`, `${file:/path:key}` and "
        "`${directory:/path:file}` placeholders are resolved, and output shows the placeholder or `[hidden]`.",
        "",
        "## Flow keys",
        "",
        "At top level (every flow) or as `A->B.{key}` (one flow). Defaults are MirrorMaker 2's; the "
        "`mirrorflow.*` keys are mirrorflow's own.",
        "",
        *_rows(keys.FLOW_KEYS),
        "",
        "## File and cluster keys",
        "",
        *_rows(keys.GLOBAL_KEYS),
        "",
        "## Client keys",
        "",
        "`{alias}.{key}` applies to every client of that cluster when the key is one of "
        + ", ".join(f"`{k}`" for k in sorted(keys.CLIENT_KEYS))
        + " or starts with " + ", ".join(f"`{p}`" for p in keys.CLIENT_KEY_PREFIXES)
        + ". `{alias}.{role}.{key}` applies to one role: " + ", ".join(f"`{r}`" for r in keys.CLIENT_ROLES)
        + ". The writer's producer takes the target's batching and compression settings but never those its "
        "guarantees rest on (`acks`, idempotence, `delivery.timeout.ms`, `transactional.id`, `retries`, the "
        "in-flight limit).",
        "",
        "## Kafka Connect keys",
        "",
        "An MM2 file's Kafka Connect and dedicated-mode keys validate unchanged; " + keys.CONNECT_NOT_USED + ": "
        + ", ".join(f"`{k}`" for k in sorted(keys.CONNECT_KEYS)) + ", and every key starting with "
        + ", ".join(f"`{p}`" for p in keys.CONNECT_PREFIXES) + ". Of them, `mirrorflow takeover --from mm2` "
        "reads " + "; ".join(f"`{k}`: {text}" for k, text in sorted(keys.TAKEOVER_ONLY.items())) + ".",
        "",
        "Any other key is a warning with the nearest known key (`did you mean`).",
        "",
    ]
    return "\n".join(lines)

"""The flows view in Airflow's UI: one row per flow an operator can leave open, and each flow's partitions.

Figures come from the clusters, as `mirrorflow health` reads them, wherever the stream runs; the driver's status
file adds its exact rates, stuck partitions and held topics when the driver runs on this host. The page asks for
its table again every REFRESH_S seconds, and each answer adds one sample per flow to the history its charts draw.

Invariants:
  M1. a flow is measured at most once per MEASURE_EVERY_S whatever the number of viewers: a page asks the
      clusters, the others in that spell get its answer;
  M2. each enabled flow's offset syncs are read by one long-lived reader, kept up to date with what is new (a
      compacted topic of up to 257 records per partition is not read again every 10 s); readers of flows no
      longer enabled are dropped, so there are at most as many as enabled flows;
  H1. the history keeps, per flow, at most HISTORY_SAMPLES samples, at least SAMPLE_EVERY_S apart, none older
      than HISTORY_S: bounded by the flows times HISTORY_SAMPLES, whatever the number of viewers;
  H2. a rate from the history is the mirrored positions' growth between two samples of one flow, never across a
      position that went back (a re-created topic): then it is unknown, not negative.
"""

from __future__ import annotations

import contextlib
import html
import itertools
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.entry import deployment
from mirrorflow.errors import MirrorflowError
from mirrorflow.jobs import checkpoints, lifecycle
from mirrorflow.kafka import offset_sync_log
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.status import metrics

REFRESH_S = 10
STATUS_FRESH_S = 60.0  # the driver rewrites its status file every 10 s
HISTORY_S = 3600.0
SAMPLE_EVERY_S = 10.0
HISTORY_SAMPLES = int(HISTORY_S // SAMPLE_EVERY_S)
STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:1.2rem;color:#1a202c}
table{border-collapse:collapse;margin:.6rem 0}th,td{border:1px solid #cbd5e0;padding:.3rem .6rem;text-align:left}
td.n{text-align:right}.bad{color:#c53030;font-weight:600}.ok{color:#276749}.muted{color:#718096}
.warn{color:#b7791f;font-weight:600}.state{font-weight:700;text-transform:uppercase;font-size:.85rem}
pre{background:#f7fafc;padding:.6rem;overflow:auto}svg{display:block}
</style>"""
_STATE_CLASS = {lifecycle.HEALTHY: "ok", lifecycle.BEHIND: "warn", lifecycle.STOPPED: "muted",
                lifecycle.TROUBLE: "bad"}
# Asks for the table again every REFRESH_S s and swaps it in; a failed answer leaves the last one, marked stale.
_REFRESH = """<script>
(function () {
  const every = %d * 1000;
  async function refresh() {
    const status = document.getElementById('refreshed');
    try {
      const answer = await fetch(location.pathname + '?part=table', {credentials: 'same-origin'});
      if (!answer.ok) { throw new Error('HTTP ' + answer.status); }
      document.getElementById('table').innerHTML = await answer.text();
      status.textContent = 'refreshed ' + new Date().toISOString().slice(11, 19) + ' UTC, every %d s';
      status.className = 'muted';
    } catch (e) {
      status.textContent = 'refresh failed (' + e.message + '): the figures below are from before';
      status.className = 'bad';
    }
  }
  setInterval(refresh, every);
})();
</script>"""


@dataclass(frozen=True)
class Sample:
    at: float
    lag_records: int | None
    mirrored: int | None  # the sum of the flow's mirrored positions


class FlowHistory:
    """Samples of each flow taken as the view answers (H1, H2)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flows: dict[str, deque[Sample]] = {}

    def add(self, flow: str, sample: Sample) -> None:
        with self._lock:
            kept = self._flows.setdefault(flow, deque(maxlen=HISTORY_SAMPLES))
            if kept and sample.at - kept[-1].at < SAMPLE_EVERY_S:
                kept[-1] = sample  # H1: the newest sample stands for its spell
            else:
                kept.append(sample)
            while kept and sample.at - kept[0].at > HISTORY_S:
                kept.popleft()

    def samples(self, flow: str) -> list[Sample]:
        with self._lock:
            return list(self._flows.get(flow, ()))


HISTORY = FlowHistory()
MEASURE_EVERY_S = REFRESH_S / 2


@dataclass
class _Measured:
    """One flow's reader and newest answer (M1, M2); `key` says which topic and cluster the reader reads."""

    key: tuple[str, ...] | None = None
    reader: offset_sync_log.SyncsState | None = None
    at: float = 0.0
    found: lifecycle.FlowHealth | None = None
    checkpoint_at: float = float("-inf")
    checkpoint_age_s: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def forget(self) -> None:
        reader, self.reader, self.found = self.reader, None, None
        if reader is not None:
            with contextlib.suppress(Exception):  # closing a reader whose cluster is gone may fail: it is dropped
                reader.close()


class Measurements:
    """Each flow's health, shared by the viewers (M1), with one offset-syncs reader per flow (M2)."""

    def __init__(self, measure: Callable[[FlowLink, offset_sync_log.SyncsState | None], lifecycle.FlowHealth]
                 | None = None, checkpoint_age: Callable[[FlowLink], float | None] | None = None) -> None:
        self._measure = measure or (lambda link, syncs: lifecycle.health(link, syncs=syncs))
        self._checkpoint_age = checkpoint_age or checkpoints.newest_checkpoint_age_s
        self._lock = threading.Lock()
        self._flows: dict[str, _Measured] = {}

    def health(self, cfg: config.MirrorConfig, flow: config.Flow) -> lifecycle.FlowHealth:
        link = FlowLink.of(cfg, flow)
        key = (link.syncs_topic, flow.target, cfg.cluster(flow.target).bootstrap_servers)
        with self._lock:
            for gone in set(self._flows) - {f.name for f in cfg.enabled_flows}:  # M2
                self._flows.pop(gone).forget()
            kept = self._flows.setdefault(flow.name, _Measured())
        with kept.lock:
            if kept.key != key:  # the config now names another topic or cluster: a new reader
                kept.forget()
                kept.key = key
            if kept.found is not None and time.monotonic() - kept.at < MEASURE_EVERY_S:  # M1
                return kept.found
            if kept.reader is None:
                kept.reader = offset_sync_log.SyncsState(link.settings("target", "consumer"), link.syncs_topic)
            try:
                found = self._measure(link, kept.reader)
            except MirrorflowError:
                kept.forget()  # a reader that failed starts afresh next time
                raise
            kept.at, kept.found = time.monotonic(), found
            return found

    def checkpoint_age_s(self, cfg: config.MirrorConfig, flow: config.Flow) -> float | None:
        """The age of the flow's newest checkpoint, read at most once per MEASURE_EVERY_S (M1)."""
        with self._lock:
            kept = self._flows.setdefault(flow.name, _Measured())
        with kept.lock:
            if time.monotonic() - kept.checkpoint_at >= MEASURE_EVERY_S:
                kept.checkpoint_age_s = self._checkpoint_age(FlowLink.of(cfg, flow))
                kept.checkpoint_at = time.monotonic()
            return kept.checkpoint_age_s


MEASUREMENTS = Measurements()


def rates(samples: Sequence[Sample]) -> list[tuple[float, float | None]]:
    """(time, records per second) between consecutive samples; None where it is unknown (H2)."""
    out: list[tuple[float, float | None]] = []
    for before, after in itertools.pairwise(samples):
        if before.mirrored is None or after.mirrored is None or after.mirrored < before.mirrored:
            out.append((after.at, None))
        else:
            out.append((after.at, (after.mirrored - before.mirrored) / max(after.at - before.at, 1e-3)))
    return out


def flow_rows(cfg: config.MirrorConfig, names: set[str] | None = None, history: FlowHistory = HISTORY,
              measurements: Measurements = MEASUREMENTS) -> list[dict[str, Any]]:
    """One dict per enabled flow (of `names`, if given): what its row shows; a flow whose clusters do not answer
    says why."""
    rows = []
    for flow in cfg.enabled_flows:
        if names is not None and flow.name not in names:
            continue
        row: dict[str, Any] = {"flow": flow.name}
        status = _fresh_status(flow)
        try:
            found = measurements.health(cfg, flow)
            state, why = found.verdict()
            lost = sum(x.lost for x in found.losing())
            row.update(state=state, why=why, requested=found.requested.state, reason=found.requested.reason,
                       requested_at_ms=found.requested.at_ms or None, running=found.alive,
                       holders=list(found.holders), lag_records=found.lag_records, lag_seconds=found.lag_seconds,
                       heartbeat_age_s=found.heartbeat_age_s, lost=lost,
                       checkpoint_age_s=measurements.checkpoint_age_s(cfg, flow) if found.alive else None)
            mirrored = None if found.lags is None else sum(x.mirrored for x in found.lags)
            history.add(flow.name, Sample(found.measured_at, found.lag_records, mirrored))
        except MirrorflowError as exc:
            row.update(state=lifecycle.TROUBLE, why=str(exc), error=str(exc))
        samples = history.samples(flow.name)
        row["samples"] = [(s.at, s.lag_records) for s in samples]
        row["rates"] = rates(samples)
        if status is not None and row.get("running"):
            row.update(records_per_s=status.get("record-rate"), mb_per_s=float(status.get("byte-rate", 0)) / 1e6,
                       rate_from="the driver", spark_ui=status.get("spark-ui"))
        elif row.get("running") and row["rates"] and row["rates"][-1][1] is not None:
            row.update(records_per_s=row["rates"][-1][1], mb_per_s=None, rate_from="the offset syncs")
        rows.append(row)
    return rows


def _fresh_status(flow: config.Flow) -> dict[str, Any] | None:
    """The driver's status when it runs on this host and wrote it lately (a killed driver leaves "running")."""
    status = metrics.read_status(metrics.status_file(flow)) or {}
    fresh = time.time() - float(status.get("updated", 0)) < STATUS_FRESH_S
    return status if fresh and status.get("state") in ("running", "stalled") else None


def age(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _utc(ms: int | None) -> str:
    return "" if not ms else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))


def sparkline(points: Sequence[tuple[float, float | None]], title: str, width: int = 160, height: int = 28) -> str:
    """A small SVG line of `points` (time, value) over the last hour; a gap where a value is unknown."""
    known = [v for _, v in points if v is not None]
    if len(known) < 2:
        return f"<span class='muted' title='{html.escape(title)}'>collecting</span>"
    now, top = points[-1][0], max(max(known), 1e-9)
    runs: list[list[str]] = [[]]
    for at, v in points:
        if v is None:
            runs.append([])
            continue
        x = width * (1 - min(now - at, HISTORY_S) / HISTORY_S)
        runs[-1].append(f"{x:.1f},{height - 2 - (height - 4) * v / top:.1f}")
    lines = "".join(f"<polyline fill='none' stroke='#2b6cb0' stroke-width='1.5' points='{' '.join(r)}'/>"
                    for r in runs if len(r) > 1)
    return (f"<svg width='{width}' height='{height}' role='img' aria-label='{html.escape(title)}'>"
            f"<title>{html.escape(title)}, the last hour (highest {top:,.0f})</title>"
            f"<rect width='{width}' height='{height}' fill='#f7fafc'/>{lines}</svg>")


def flows_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The table of flows (what the page swaps in at each refresh)."""
    if not rows:
        return "<p>No enabled flow.</p>"
    head = ("<tr><th>flow</th><th>state</th><th>requested</th><th>running on</th><th>lag</th><th>throughput</th>"
            "<th>lag, last hour</th><th>records/s, last hour</th><th>newest heartbeat</th>"
            "<th>newest checkpoint</th><th>Spark UI</th></tr>")
    lines = []
    for r in rows:
        name = html.escape(r["flow"])
        link = f"<a href='flows/{urllib.parse.quote(r['flow'], safe='')}'>{name}</a>"
        state = (f"<span class='state {_STATE_CLASS[r['state']]}' data-state='{r['state']}'>{r['state']}</span>"
                 f"<br><span class='why'>{html.escape(r['why'])}</span>")
        if "error" in r:
            lines.append(f"<tr data-flow='{name}'><td>{link}</td><td colspan='10'>{state}</td></tr>")
            continue
        since = _utc(r.get("requested_at_ms"))
        requested = (html.escape(r["requested"]) + (f"<br><span class='muted'>since {since}</span>" if since else "")
                     + (f"<br><span class='muted'>{html.escape(r['reason'])}</span>" if r.get("reason") else ""))
        hosts = html.escape(", ".join(r["holders"])) if r["running"] else "<span class='muted'>not running</span>"
        lag = ("?" if r["lag_records"] is None else f"{r['lag_records']:,} records<br>"
               + ("?" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f} s"))
        if r.get("lost"):
            lag += f"<br><span class='bad'>{r['lost']:,} lost</span>"
        if r.get("records_per_s") is not None:
            mb = f"<br>{r['mb_per_s']:.2f} MB/s" if r.get("mb_per_s") is not None else ""
            throughput = (f"{r['records_per_s']:,.0f} records/s{mb}<br><span class='muted'>from "
                          f"{html.escape(r['rate_from'])}</span>")
        else:
            throughput = "<span class='muted'>not running</span>" if not r["running"] else "<span class='muted'>" \
                "next refresh</span>"
        idle = "<span class='muted'>not running</span>"
        checkpoint = age(r["checkpoint_age_s"]) if r["running"] else idle
        heartbeat = age(r["heartbeat_age_s"]) if r["running"] else idle
        ui = (f"<a href='{html.escape(r['spark_ui'])}' target='_blank' rel='noopener'>open</a>"
              if r.get("spark_ui") else "<span class='muted'>not on this host</span>" if r["running"] else "")
        lines.append(
            f"<tr data-flow='{name}'><td>{link}</td><td>{state}</td><td>{requested}</td><td>{hosts}</td>"
            f"<td class='n'>{lag}</td><td class='n'>{throughput}</td>"
            f"<td>{sparkline(r['samples'], 'lag in records')}</td><td>{sparkline(r['rates'], 'records/s')}</td>"
            f"<td>{heartbeat}</td><td>{checkpoint}</td><td>{ui}</td></tr>")
    stamp = time.strftime("%H:%M:%S UTC", time.gmtime())
    return f"<table>{head}{''.join(lines)}</table><p class='muted'>Read from the clusters at {stamp}.</p>"


def page(title: str, heading: str, intro: str, table: str) -> str:
    """A page whose table refreshes itself every REFRESH_S seconds."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{STYLE}</head>"
            f"<body><h2>{heading}</h2><p class='muted'>{intro}</p>"
            f"<p id='refreshed' class='muted'>refreshes every {REFRESH_S} s</p><div id='table'>{table}</div>"
            f"{_REFRESH % (REFRESH_S, REFRESH_S)}</body></html>")


def flows_html(rows: Sequence[Mapping[str, Any]], source: str) -> str:
    return page("mirrorflow flows", "mirrorflow flows",
                f"Each enabled flow of {html.escape(source)} as its clusters show it; a flow's name opens its "
                f"partitions. Behind: the oldest record not mirrored is over {lifecycle.BEHIND_AFTER_S:.0f} s old. "
                "Charts: samples this page took while open. The DAGs to watch and the runbooks: "
                f"<a href='../dags?tags={deployment.ON_CALL_TAG}' target='_top'>tag {deployment.ON_CALL_TAG}</a>.",
                flows_table(rows))


def partition_rows(cfg: config.MirrorConfig, flow: config.Flow
                   ) -> tuple[lifecycle.FlowHealth, list[dict[str, Any]], bool]:
    """The flow's health and one dict per source partition: lag, lost, and, as known on this host, stuck or held
    (the driver's status) and groups whose checkpoint is not exact (the newest checkpoint round's status); and
    whether the driver runs on this host."""
    found = MEASUREMENTS.health(cfg, flow)
    fresh = _fresh_status(flow)
    status = fresh or {}
    stuck = {(x["topic"], x["partition"]): x["why"] for x in status.get("stuck-partitions", ())}
    held = {x["topic"]: x["why"] for x in status.get("held-topics", ())}
    inexact: dict[tuple[str, int], list[str]] = {}
    for row in (metrics.read_status(metrics.checkpoint_status_file(flow)) or {}).get("inexact", ()):
        found_inexact = metrics.InexactCheckpoint.of(row)
        if found_inexact is not None:
            inexact.setdefault((found_inexact.topic, found_inexact.partition), []).append(
                f"group {found_inexact.group}: {found_inexact.note}")
    rows = []
    for lag in found.lags or ():
        age_s = (None if not lag.records or not lag.oldest_unmirrored_ms
                 else max(found.measured_at - lag.oldest_unmirrored_ms / 1000, 0.0))
        rows.append({"topic": lag.topic, "partition": lag.partition, "source_end": lag.source_end,
                     "mirrored": lag.mirrored, "lag_records": lag.records, "lag_seconds": age_s, "lost": lag.lost,
                     "stuck": stuck.get((lag.topic, lag.partition)), "held": held.get(lag.topic),
                     "inexact": inexact.get((lag.topic, lag.partition), [])})
    return found, rows, fresh is not None


def partitions_table(found: lifecycle.FlowHealth, rows: Sequence[Mapping[str, Any]], driver_here: bool) -> str:
    state, why = found.verdict()
    head = ("<tr><th>partition</th><th>source end</th><th>mirrored up to</th><th>lag (records)</th>"
            "<th>oldest not mirrored</th><th>lost on the source</th><th>trouble</th></tr>")
    lines = []
    for r in sorted(rows, key=lambda r: (-r["lag_records"], r["topic"], r["partition"])):
        notes = []
        if r["held"]:
            notes.append(f"<span class='bad'>HELD</span>: {html.escape(r['held'])}")
        if r["stuck"]:
            notes.append(f"<span class='bad'>STUCK (paused)</span>: {html.escape(r['stuck'])}")
        if r["lost"]:
            notes.append(f"<span class='bad'>{r['lost']:,} records deleted on the source before the flow read "
                         "them</span>")
        notes += [f"<span class='warn'>checkpoint not exact</span>, {html.escape(n)}" for n in r.get("inexact", ())]
        seconds = "" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f} s"
        lines.append(f"<tr data-partition='{html.escape(r['topic'])}-{r['partition']}'>"
                     f"<td>{html.escape(r['topic'])}-{r['partition']}</td><td class='n'>{r['source_end']:,}</td>"
                     f"<td class='n'>{r['mirrored']:,}</td><td class='n'>{r['lag_records']:,}</td>"
                     f"<td class='n'>{seconds}</td><td class='n'>{r['lost']:,}</td>"
                     f"<td>{'<br>'.join(notes) or '<span class=ok>none</span>'}</td></tr>")
    where = ("" if driver_here else "<p class='muted'>Stuck partitions and held topics are known where the stream "
             "runs: its driver is not on this host.</p>")
    where += ("<p class='muted'>Trouble names a group whose checkpoint is not exact as the newest checkpoint round "
              "on this host found it.</p>")
    summary = (f"<p><span class='state {_STATE_CLASS[state]}' data-state='{state}'>{state}</span> "
               f"{html.escape(why)}</p>")
    if found.lags is None:
        return summary + "<p class='bad'>The source did not answer: no partition figures.</p>"
    stamp = time.strftime("%H:%M:%S UTC", time.gmtime())
    return (f"{summary}{where}<table>{head}{''.join(lines)}</table>"
            f"<p class='muted'>{len(rows)} partitions, the furthest behind first; read from the clusters at "
            f"{stamp}.</p>")


def partitions_html(flow: str, table: str) -> str:
    return page(f"mirrorflow {flow}", f"<a href='../flows'>flows</a> / {html.escape(flow)}: partitions",
                "Per source partition, as the clusters show it.", table)

"""The stream DAG's first step: launch the flow's stream now, or wait in Airflow's triggerer until it must be.

A run whose flow is stopped, or already running elsewhere, used to end at once, and the next one came 30 s later:
two task runs a minute per flow for nothing. `StreamLaunchCheck` instead defers to `FlowLaunchTrigger`, which
looks every `mirrorflow.stream.watch.poll.seconds` (no worker slot held meanwhile) and fires as soon as the flow is
requested running and no instance holds its lease, or after `mirrorflow.stream.watch.seconds` (the run then ends
skipped, with the reason in its log). The decision itself is `lifecycle.launch_decision`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from mirrorflow.entry import deployment
from mirrorflow.jobs import lifecycle
from mirrorflow.kafka import clients
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model.config import Flow

DECIDE_TIMEOUT_S = 120.0  # one launch decision: a few Kafka reads with their own timeouts
UNDECIDED_S = 300.0  # how long decisions may fail in a row before the watch ends failed


def launch_decision(config_path: Path, flow_name: str) -> tuple[bool, str, Flow]:
    """Whether to launch the flow's stream now, why, and the flow as configured (its watch settings)."""
    clients.quiet()
    cfg = deployment.load(config_path)
    flow = cfg.flow(flow_name)
    return (*lifecycle.launch_decision(FlowLink.of(cfg, flow)), flow)


def _event(payload: dict[str, Any]) -> TriggerEvent:
    return TriggerEvent(payload)  # type: ignore[no-untyped-call]


class FlowLaunchTrigger(BaseTrigger):
    """Fires {"launch": bool, "why": str} when the flow must be launched, or at `until` (epoch seconds: a triggerer
    that restarts or hands the trigger over keeps the same end)."""

    def __init__(self, config_path: str, flow_name: str, until: float, poll_s: float) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.config_path, self.flow_name, self.until, self.poll_s = config_path, flow_name, until, poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.FlowLaunchTrigger", {"config_path": self.config_path, "flow_name": self.flow_name,
                                                  "until": self.until, "poll_s": self.poll_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        failing_since: float | None = None
        while True:
            try:
                launch, why, _ = await asyncio.wait_for(
                    asyncio.to_thread(launch_decision, Path(self.config_path), self.flow_name), DECIDE_TIMEOUT_S)
                failing_since = None
            except Exception as exc:
                # A watch lasts a day: a cluster's brief unavailability must not fail it. The task, not the
                # triggerer, reports a lasting one.
                failing_since = failing_since or time.time()
                if time.time() - failing_since >= UNDECIDED_S:
                    yield _event({"launch": False, "why": f"cannot decide for {UNDECIDED_S:.0f} s: {exc!r}",
                                  "error": True})
                    return
                self.log.warning("flow %s: cannot decide yet: %r", self.flow_name, exc)
                await asyncio.sleep(self.poll_s)
                continue
            if launch or time.time() + self.poll_s > self.until:
                yield _event({"launch": launch, "why": why})
                return
            await asyncio.sleep(self.poll_s)


class StreamLaunchCheck(BaseOperator):
    """Returns the Spark Kafka connector's jars (comma separated) when the stream must be launched; else waits
    deferred, and ends skipped (so `mirror` is skipped) if it need not be."""

    def __init__(self, *, config_path: Path, flow_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path, self.flow_name = config_path, flow_name

    def execute(self, context: Any) -> str:
        launch, why, flow = launch_decision(self.config_path, self.flow_name)
        self.log.info("%s", why)
        if launch:
            return self._jars()
        wait_s = flow.number("mirrorflow.stream.watch.seconds")
        poll_s = flow.number("mirrorflow.stream.watch.poll.seconds")
        # Airflow's own timeout too: a triggerer that is down must not hold the DAG's one active run for ever.
        self.defer(trigger=FlowLaunchTrigger(str(self.config_path), self.flow_name, time.time() + wait_s, poll_s),
                   method_name="execute_complete",
                   timeout=timedelta(seconds=wait_s + 2 * poll_s + DECIDE_TIMEOUT_S + UNDECIDED_S + 60))
        raise AssertionError("defer raises")  # pragma: no cover

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        self.log.info("%s", event["why"])
        if event.get("error"):
            from mirrorflow.errors import OperationalError

            raise OperationalError(f"flow {self.flow_name}: {event['why']}")
        if not event["launch"]:
            raise AirflowSkipException(event["why"])
        return self._jars()

    @staticmethod
    def _jars() -> str:
        from mirrorflow.spark import spark_session

        return ",".join(str(j) for j in spark_session.kafka_jars())

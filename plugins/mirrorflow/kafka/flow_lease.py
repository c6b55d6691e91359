"""One running instance per flow, held as membership of a consumer group on the target.

The stream of flow A->B joins group `mirrorflow:A->B`, subscribed to the flow's one-partition
offset-syncs topic: only one member can be assigned that partition, so a second instance finds it
taken and stops with a clear error, and an instance that loses the partition (its session expired)
stops writing. Kafka's own fencing of transactional producers holds underneath (W4).
A crashed instance's membership expires after the session timeout, so a restart waits at most that, unless it
restarts on the same host: see L1.

Taking the lease over from an instance that is gone.
  L1  A member of the lease group joins under a static id (KIP-345 group.instance.id): the host's own id only while
      its process holds the host's lock for the flow (an exclusive flock the kernel lets go when the process dies,
      however it dies), its host and process id otherwise. So a member listed under the host's id that is not this
      process's own belongs to a process that is gone: the coordinator replaces it the moment this one joins, with
      no session timeout to wait for. A member of another host, or of a live process of this one (frozen, or a
      second instance: it holds the lock), is waited for until its session expires, as before.
  L2  An instance that stops (cleanly or not, while its process still runs) says so by committing, on the lease's
      partition, metadata naming its member id: a static member stays listed until its session expires, and a
      member that said it left holds nothing (`holders`), though a later instance of another host still waits
      for its session.

Fencing: at most one instance writes a flow's target at a time, enforced where the writes happen.
  W1  Every write to the target (records, offset syncs, anchors) is handed to a producer only while the
      writer's lease confirmation is younger than CONFIRMED_FOR_S: a confirmation is a describe of the
      group in which the writer's own member holds the partition (`LeaseGuard.confirm`). A task checks
      before producing, every 64 records, while waiting for queue space and before offset syncs; the
      driver before its writes and before it initialises transactional ids.
  W2  Every producer of the flow bounds delivery: a record not sent within DELIVERY_TIMEOUT_MS of being
      handed over fails instead (librdkafka expires it, before sending, on its first scan after a pause).
  W3  An instance that takes the lease over from one that did not stop cleanly waits before it initialises any
      id or writes anything: FENCED_TAKEOVER_WAIT_S > CONFIRMED_FOR_S where every write of the flow is
      transactional (the old holder's last confirmation has run out, so none of its processes initialises an id
      after the new holder's fencing, W4, which stands in for the rest of the wait), TAKEOVER_WAIT_S >
      CONFIRMED_FOR_S + DELIVERY_TIMEOUT_MS where records are idempotent (nothing fences them). A clean stop (no
      batch running, every write acknowledged) leaves a release record in the offset syncs.
  W4  Every offset sync and anchor (and every record, unless `mirrorflow.records.fenced = false`) is written
      in a transaction: of one transactional id per task slot (their number recorded in the offset syncs), or
      of the driver's id. The new holder initialises every one of them (after W3, before it reads the positions
      or writes records), which bumps each id's producer epoch: the broker refuses every later write of the old
      holder's transactional producers and aborts their open transactions. `reset` does the same (driver id:
      its own writes).
  => The old holder's last confirmation precedes its removal from the group, which precedes the takeover;
     by W1 it hands nothing over after that confirmation; by W4 none of its offset syncs, anchors or
     transactional records lands after the new holder's fencing. So the new holder sees every position the
     old one committed and no position moves backwards; by W1 a writer that lost the lease never initialises
     an id again, so the rightful owner is never fenced. This holds for a frozen process too (SIGSTOP, a long
     GC or swap pause): on resuming, its next confirmation fails (W1) and its transactions are refused (W4).
  Idempotent records (`mirrorflow.records.fenced = false`, at-least-once) are outside transactions, and no
  broker check fences them: W2 and W3 bound what librdkafka still has queued, but it sends a ProduceRequest
  it had already built (waiting for an in-flight slot, or half written to a full socket) on resuming,
  without checking message.timeout.ms, and a process frozen right after a check hands up to 63 more records
  over before the next one. So a frozen writer of idempotent records can land, after the takeover, up to two
  requests of batch.size and 63 records as duplicates. Hence the default: at-least-once records commit in
  the task's transaction too (W4). At-least-once backfill repairs (`backfill.py`) are written idempotently, under
  the lease, whatever the setting: a frozen backfill can land up to that much twice after a stream took over.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from mirrorflow.errors import OperationalError

log = logging.getLogger(__name__)
# A target broker that answers nothing for a few seconds (a disk stall under load: 6.6 s seen in the benchmark)
# must not cost the lease, whose loss pauses the flow for a take-over wait (W3); a crashed holder frees it
# after this long. Kafka Connect's workers use 10 s.
SESSION_TIMEOUT_MS = 15_000
CONFIRMED_FOR_S = 1.0  # W1: how long a confirmation of the lease lets a writer hand records over
DELIVERY_TIMEOUT_MS = 20_000  # W2: message.timeout.ms of every producer writing the flow's target
TAKEOVER_WAIT_S = CONFIRMED_FOR_S + DELIVERY_TIMEOUT_MS / 1000 + 4.0  # W3, with a margin for clocks and I/O
FENCED_TAKEOVER_WAIT_S = CONFIRMED_FOR_S + 2.0  # W3 where every write is transactional, with a margin
REJOIN_AFTER_S = 4 * SESSION_TIMEOUT_MS / 1000  # a lease consumer not joined again by then is replaced


class FlowLease:
    def __init__(self, flow: str, topic: str, consumer_settings: dict[str, Any],
                 admin_settings: dict[str, Any]) -> None:
        self.flow, self.topic = flow, topic
        self.group = group_of(flow)
        self._consumer_settings, self._admin_settings = consumer_settings, admin_settings
        self._consumer: Consumer | None = None
        self._host_lock: HostLock | None = None
        self._fatal: str | None = None  # L1: another process joined under this instance's id
        self._left_said = False  # L2: the commit saying this instance left was answered
        self.instance_id: str | None = None  # L1: the static id this instance joins under
        self.held = False
        self.lost = False
        # This instance's member ids so far (a new one after each lost session), newest last; bounded. After a
        # coordinator restart the group may list an earlier one of them, still assigned, until its session expires.
        self._own_ids: list[str] = []

    def acquire(self, wait_s: float = 2 * SESSION_TIMEOUT_MS / 1000) -> None:
        """Join the flow's group and hold its partition, or raise if another live instance holds it."""
        cluster = self._cluster_id()
        self._host_lock = HostLock.take(f"{cluster}|{self.group}") if cluster is not None else None
        self.instance_id = host_instance_id() if self._host_lock is not None else process_instance_id()
        try:
            lingering = self._wait_for_departed_members(wait_s)
        except BaseException:
            self.release()
            raise
        consumer = self._join()
        # A member of another host that said it left (L2) is listed until its session expires, and the group
        # assigns nothing before: the join waits that long at least.
        deadline = time.monotonic() + max(wait_s, SESSION_TIMEOUT_MS / 1000 + 5 if lingering else 0)
        while not self.held and time.monotonic() < deadline:
            consumer.poll(0.2)
        if not self.held:
            self.release()
            raise OperationalError(f"flow {self.flow} is already running elsewhere (consumer group "
                                   f"{self.group} holds its lease); stop that instance first")
        log.info("flow %s: lease held (group %s)", self.flow, self.group)

    def _join(self) -> Consumer:
        consumer = Consumer({**self._consumer_settings, "group.id": self.group, "enable.auto.commit": False,
                             "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
                             "group.instance.id": self.instance_id,  # L1
                             "client.id": process_client_id(),  # L1: which process of the host holds the id
                             "on_commit": self._committed,
                             # Sticky and incremental: a member that joins (an instance that lost its session and
                             # rejoins on resuming) never takes the partition from the member holding it.
                             "partition.assignment.strategy": "cooperative-sticky"})
        self._consumer = consumer
        consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                           on_lost=self._revoked)
        return consumer

    @property
    def own_ids(self) -> tuple[str, ...]:
        """The member ids this instance held the lease under (at most 8, newest last)."""
        return tuple(self._own_ids)

    @property
    def member_id(self) -> str | None:
        """This instance's member id in the lease group; a new one after the lease is regained."""
        return self._consumer.memberid() if self._consumer is not None else None

    def wait_out_previous_writer(self, clean: bool, fenced: bool = False) -> None:
        """W3: unless the previous holder stopped cleanly, wait until its last lease confirmation has run out (every
        write of the flow `fenced`, W4) or until every write it had under way has landed or expired, serving the
        lease meanwhile."""
        if clean:
            return
        if fenced:
            log.info("flow %s: the previous instance did not stop cleanly: its transactional ids are fenced after "
                     "%.0f s (its last lease confirmation has run out), so nothing it had under way lands after "
                     "that", self.flow, FENCED_TAKEOVER_WAIT_S)
        else:
            log.info("flow %s: the previous instance did not stop cleanly: waiting %.0f s until any write it had "
                     "under way has landed or expired", self.flow, TAKEOVER_WAIT_S)
        deadline = time.monotonic() + (FENCED_TAKEOVER_WAIT_S if fenced else TAKEOVER_WAIT_S)
        while time.monotonic() < deadline:
            self.keep()
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))

    def keep(self) -> bool:
        """Serve the group protocol; False once the lease is lost (until `regain`)."""
        if self._consumer is not None and not self.lost:
            fatal = _fatal_error(self._consumer.poll(0))
            if fatal is not None:
                # L1: another process joined under this instance's static id (a host whose lock does not hold)
                self.held, self.lost, self._fatal = False, True, fatal
                log.error("flow %s: lease lost (group %s): %s", self.flow, self.group, fatal)
        return self.held and not self.lost

    def regain(self) -> None:
        """After a loss (the target was unreachable for a session), wait to hold the lease again.

        Raises if another live instance holds it; waits as long as the group cannot tell.
        """
        consumer = self._consumer
        assert consumer is not None
        admin: AdminClient | None = None
        next_check = time.monotonic() + 5
        rejoin_at = time.monotonic() + REJOIN_AFTER_S
        while not self.held:
            self._fatal = self._fatal or _fatal_error(consumer.poll(0.5))
            if self._fatal is not None:  # this consumer never joins again
                raise LeaseTakenOver(f"flow {self.flow}: another process joined the lease group {self.group} under "
                                     f"this instance's id ({self._fatal}); this one stops")
            if self.held or time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 5
            if admin is None:  # not `or`: a client with nothing queued is falsy (its len)
                admin = AdminClient(self._admin_settings)
            try:
                members = self._members(admin)
            except OperationalError as exc:  # the target still cannot tell: keep waiting
                log.info("%s; waiting", exc)
                admin = None  # a client that had no answer may never have one (see describe)
                members = None
            if members is not None:
                other = taken_over_by([(m.member_id, m.group_instance_id, m.host,
                                        bool(m.assignment.topic_partitions)) for m in members],
                                      self.instance_id, (*self._own_ids, consumer.memberid() or ""))
                if other is not None:
                    raise LeaseTakenOver(f"flow {self.flow}: another instance on {other} took over "
                                         f"(consumer group {self.group}); this one stops")
                own = process_client_id()
                if any(m.group_instance_id == self.instance_id and m.client_id != own and process_alive(m.client_id)
                       for m in members):  # L1: a live process of this host joined under this id: never fence it
                    raise LeaseTakenOver(f"flow {self.flow}: another process of this host joined the lease group "
                                         f"{self.group} under this instance's id; this one stops")
            if time.monotonic() > rejoin_at:
                # A consumer that lost its partition across a coordinator's restart was seen not to join again
                # (the group's describe failing for minutes): a new one joins under the same static id (L1).
                log.warning("flow %s: the lease consumer has not joined again in %.0f s; joining with a new one",
                            self.flow, REJOIN_AFTER_S)
                self._consumer = None  # never closed twice, even if the join below fails
                self._close_consumer(consumer)
                consumer = self._join()
                rejoin_at = time.monotonic() + REJOIN_AFTER_S
        self.lost = False
        log.info("flow %s: lease held again", self.flow)

    def release(self) -> None:
        consumer, self._consumer = self._consumer, None
        say_left, self.held = self.held and not self.lost, False  # closing revokes: no "lease lost" then
        if consumer is not None:
            try:
                if say_left:  # L2: a static member stays listed after it closes
                    said = f"{LEFT}{consumer.memberid()}"
                    consumer.commit(offsets=[TopicPartition(self.topic, 0, 0, metadata=said)], asynchronous=True)
                    deadline = time.monotonic() + RELEASE_COMMIT_S  # bounded: a target down must not hold a stop
                    while not self._left_said and time.monotonic() < deadline:
                        consumer.poll(0.1)
            except KafkaException as exc:  # saying so is best effort; the session's expiry frees it too
                log.debug("flow %s: saying the lease is released: %s", self.flow, exc)
            finally:
                self._close_consumer(consumer)
        if self._host_lock is not None:
            self._host_lock.release()
            self._host_lock = None

    def _close_consumer(self, consumer: Consumer) -> None:
        try:
            consumer.close()
        except KafkaException as exc:
            log.debug("flow %s: closing the lease consumer: %s", self.flow, exc)

    def _committed(self, error: Any, _partitions: list[TopicPartition]) -> None:
        self._left_said = self._left_said or error is None

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            consumer.incremental_assign(partitions)
            consumer.pause(partitions)  # the partition is a token: nothing is read through this consumer
            self.held = True
            self._own_ids = [*self._own_ids[-7:], consumer.memberid()]

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.held and partitions:
            self.held = False
            self.lost = True
            log.error("flow %s: lease lost (group %s rebalanced)", self.flow, self.group)

    def _cluster_id(self) -> str | None:
        """The target's cluster id, so that however a host's instances name the target's brokers they take the same
        lock (L1); None if the target does not say (then no host lock: the session is waited for)."""
        try:
            admin = AdminClient(self._admin_settings)  # kept until answered: a client destroyed cancels its requests
            found = admin.describe_cluster(request_timeout=10).result(timeout=15)
            return str(found.cluster_id) if found.cluster_id else None
        except (KafkaException, TimeoutError) as exc:
            log.debug("flow %s: the target's cluster id: %s", self.flow, exc)
            return None

    def _wait_for_departed_members(self, wait_s: float) -> bool:
        """Until every member of the lease group has left, or said it left (L2), or is this host's gone holder
        (L1); raises after `wait_s`. Whether one that said it left, of another id, is still listed."""
        admin = AdminClient(self._admin_settings)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                listed, gone = listed_and_left(admin, self.flow)
            except OperationalError:
                # No answer: a target just started has no coordinator for the group yet, and a client left without
                # an answer may never get one (UNTIMED_S). Asked again with a new client until `wait_s`.
                if time.monotonic() > deadline:
                    raise
                admin = AdminClient(self._admin_settings)
                continue
            # Only a member assigned the partition holds the lease: an unassigned one (an instance refused, whose
            # static member stays listed) is no reason to wait. L1: a member under this instance's id is of a
            # process that is gone (this one joins in its place), unless its client id names a live one (best
            # effort: a coordinator that replaces a static member keeps the client id of its first join).
            members = [m for m in listed if m.assignment.topic_partitions and m.member_id != gone
                       and (m.group_instance_id != self.instance_id or process_alive(m.client_id))]
            if not members:
                return any(m.member_id == gone and m.group_instance_id != self.instance_id for m in listed)
            if time.monotonic() > deadline:
                hosts = ", ".join(sorted({m.host for m in members}))
                raise OperationalError(f"flow {self.flow} is already running on {hosts} (consumer group "
                                       f"{self.group}); stop that instance first")
            time.sleep(0.5)

    def _members(self, admin: AdminClient) -> list[Any]:
        return members(admin, self.flow)


def _fatal_error(event: Any) -> str | None:
    """What a polled event says if it is a fatal error of the lease consumer (it never joins again), else None."""
    error = event.error() if event is not None else None
    return error.str() if error is not None and error.fatal() else None


class LeaseTakenOver(OperationalError):
    """While this instance regained its lease, another took it: this one stops (never retried)."""


class LeaseSuperseded(OperationalError):
    """Another instance holds the flow's lease: this writer must not hand over another record."""


class LeaseGuard:
    """W1, on the executors and the driver: confirms, at most once per CONFIRMED_FOR_S, that `member_id` still
    holds the flow's lease. Bounded: one admin client and one confirmation time per flow in the process."""

    _admins: ClassVar[dict[str, AdminClient]] = {}
    _confirmed: ClassVar[dict[tuple[str, str], float]] = {}  # (flow, member id) -> monotonic time last confirmed

    @classmethod
    def confirm(cls, flow: str, member_id: str, admin_settings: Mapping[str, Any], own_ids: tuple[str, ...] = (),
                wait_s: float = 2 * SESSION_TIMEOUT_MS / 1000) -> None:
        """Return once the lease is confirmed (at once if it was within CONFIRMED_FOR_S); raise LeaseSuperseded
        if another instance holds it, OperationalError if the group cannot tell within `wait_s` (a rebalance,
        an unreachable coordinator, this instance's earlier member id still listed): the caller writes nothing
        meanwhile. `own_ids`: this instance's earlier member ids."""
        key = (flow, member_id)
        if time.monotonic() - cls._confirmed.get(key, float("-inf")) < CONFIRMED_FOR_S:
            return
        deadline = time.monotonic() + wait_s
        while True:
            admin = cls._admins.get(flow)
            if admin is None:
                if len(cls._admins) >= 64:
                    cls._admins.clear()
                admin = cls._admins[flow] = AdminClient(dict(admin_settings))
            asked = time.monotonic()  # a confirmation counts from before the question, never from the answer
            try:
                described = describe(admin, flow, timeout_s=min(max(deadline - asked, 1.0), 5.0))
                found = verdict(described.stable, [(m.member_id, bool(m.assignment.topic_partitions))
                                                   for m in described.members], member_id, own_ids)
            except OperationalError:
                # An admin client that knew the coordinator before it restarted may never answer again: a new one.
                cls._admins.pop(flow, None)
                found = "unknown"
            if found == "held":
                if len(cls._confirmed) >= 1024:
                    cls._confirmed.clear()
                cls._confirmed[key] = asked
                return
            if found == "superseded":
                cls._confirmed.pop(key, None)
                raise LeaseSuperseded(f"flow {flow}: another instance holds the lease (consumer group "
                                      f"{group_of(flow)}): this writer stopped before writing more")
            if time.monotonic() >= deadline:
                raise OperationalError(f"flow {flow}: cannot confirm this instance still holds the lease (consumer "
                                       f"group {group_of(flow)}): nothing written until it can")
            time.sleep(0.2)


def verdict(stable: bool, members: list[tuple[str, bool]], member_id: str, own_ids: tuple[str, ...] = ()) -> str:
    """What a description of the lease group says of `member_id`: "held" (it is assigned the partition in a
    stable group), "superseded" (another instance's member is assigned it), or "unknown" (a rebalance under
    way, no member assigned, or one of this instance's earlier ids `own_ids`, which a restarted coordinator
    lists until its session expires: wait). `members`: (member id, assigned anything)."""
    holders = [m for m, assigned in members if assigned]
    if any(m != member_id and m not in own_ids for m in holders):
        return "superseded"
    if stable and holders == [member_id]:
        return "held"
    return "unknown"


def taken_over_by(members: list[tuple[str, str | None, str, bool]], instance_id: str | None,
                  own_ids: tuple[str, ...]) -> str | None:
    """The host of another instance's member assigned the lease partition, if there is one. `members`: (member id,
    static id, host, assigned anything). A member under this instance's static id is its own consumer (L1: another
    process under that id would have fenced it), which may have joined again under a new member id and been
    assigned before this instance heard of it; one of its earlier member ids `own_ids` is its own too."""
    for member_id, static_id, host, assigned in members:
        if assigned and member_id not in own_ids and (static_id is None or static_id != instance_id):
            return host
    return None


@dataclass(frozen=True)
class GroupDescription:
    stable: bool
    members: list[Any]


LEASE_GROUP_PREFIX = "mirrorflow:"


def group_of(flow: str) -> str:
    return f"{LEASE_GROUP_PREFIX}{flow}"


def is_lease_group(group: str) -> bool:
    """mirrorflow's own lease groups: never checkpointed, translated or moved by a runbook."""
    return group.startswith(LEASE_GROUP_PREFIX)


LEFT = "left "  # L2: the lease partition's committed metadata, before the member id of an instance that stopped
RELEASE_COMMIT_S = 5.0  # L2: how long a release waits for the target to take that commit


def members(admin: AdminClient, flow: str, timeout_s: float = 15.0) -> list[Any]:
    """The members of the flow's lease group that did not say they left (L2; none while no instance runs: a group
    that never existed is described as empty). A group that cannot be described (a coordinator moving or loading, a
    target that does not answer) is asked again until `timeout_s`, then an OperationalError: never read as "nobody
    holds it"."""
    listed, gone = listed_and_left(admin, flow, timeout_s)
    return [m for m in listed if m.member_id != gone]


def listed_and_left(admin: AdminClient, flow: str, timeout_s: float = 15.0) -> tuple[list[Any], str | None]:
    """Every member the lease group lists, and the member id of the last one that said it left (L2), if one did
    (asked only when a member is listed)."""
    listed = describe(admin, flow, timeout_s).members
    return listed, left(admin, flow, timeout_s) if listed else None


def left(admin: AdminClient, flow: str, timeout_s: float = 15.0) -> str | None:
    """The member id of the last instance that said it left the lease (L2), if one did."""
    group = group_of(flow)
    try:
        answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                   request_timeout=UNTIMED_S)[group].result(timeout=timeout_s)
    except (KafkaException, TimeoutError):
        return None  # then every listed member counts: waiting longer is safe, never taking over early
    said = [tp.metadata for tp in answer.topic_partitions or [] if tp.metadata and tp.metadata.startswith(LEFT)]
    return said[0][len(LEFT):] if said else None


# librdkafka (2.16) frees a coordinator-bound admin request that times out while it waits for the coordinator, and
# reads it again once the coordinator answers: the process aborts (`rd_kafka_enq_once_del_source_return: Assertion
# eonce->refcnt > 0`, a target link cut and restored). So librdkafka never times such a request out (its longest
# timeout); the caller stops waiting instead, and drops the client: one that had no answer after a coordinator
# restart was seen to have none for good (its requests then stay pending, harmless, until it is destroyed).
UNTIMED_S = 3600.0


def describe(admin: AdminClient, flow: str, timeout_s: float = 15.0) -> GroupDescription:
    """The flow's lease group as its coordinator describes it; asked again until `timeout_s` (see `members`) while
    the coordinator answers with an error. No answer at all: an OperationalError at once (use another client)."""
    group = group_of(flow)
    deadline = time.monotonic() + timeout_s
    while True:
        wait = max(deadline - time.monotonic(), 1.0)
        try:
            # Asked only once the cluster answers at all, so that no request waits out an outage (see UNTIMED_S).
            admin.list_topics(topic="__consumer_offsets", timeout=min(wait, 5.0))  # one topic: a cheap answer
            future = admin.describe_consumer_groups([group], request_timeout=UNTIMED_S)[group]
            description = future.result(timeout=wait)
            return GroupDescription(description.state == ConsumerGroupState.STABLE, list(description.members))
        except (KafkaException, TimeoutError) as exc:
            why = f"{exc.args[0].name()}: {exc.args[0].str()}" if isinstance(exc, KafkaException) else "no answer"
            if time.monotonic() >= deadline or isinstance(exc, TimeoutError):
                raise OperationalError(f"flow {flow}: cannot tell who holds its lease (consumer group {group}): "
                                       f"{why}") from None
            log.debug("flow %s: describing group %s: %s; asking again", flow, group, why)
            time.sleep(0.5)


def holders(admin: AdminClient, flow: str) -> list[str]:
    """The hosts of the instances of the flow that hold its lease now (at most one, by construction)."""
    return sorted(m.host for m in members(admin, flow) if m.assignment.topic_partitions)


def host_instance_id() -> str:
    """L1: the static id of the lease holder of this host (whichever process holds the host lock)."""
    return f"mirrorflow@{socket.gethostname()}"


def process_client_id() -> str:
    """L1: the lease consumer's client id: this process's id and start time (clock ticks since boot)."""
    return f"mirrorflow-lease-{os.getpid()}-{_start_ticks(os.getpid())}"


def process_alive(client_id: str | None) -> bool:
    """L1: whether the process a lease member's client id names still runs on this host (same id, same start)."""
    parts = (client_id or "").rsplit("-", 2)
    if len(parts) != 3 or not parts[0].endswith("mirrorflow-lease") or not parts[1].isdigit():
        return False
    return _start_ticks(int(parts[1])) == parts[2]


def _start_ticks(pid: int) -> str | None:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError):
        return None


def process_instance_id() -> str:
    """L1: the static id of a process of this host that could not take the host lock."""
    return f"mirrorflow@{socket.gethostname()}/{os.getpid()}"


class HostLock:
    """L1: an exclusive flock, for as long as this process runs, on a file of the host's temporary directory named
    by the flow's target and group. Bounded: one open file per lease held."""

    DIRECTORY = Path(tempfile.gettempdir()) / "mirrorflow-leases"

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, key: str) -> HostLock | None:
        """The lock, or None while another live process of this host holds it."""
        path = cls.DIRECTORY / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.lock"
        try:
            if not cls.DIRECTORY.is_dir():
                cls.DIRECTORY.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    cls.DIRECTORY.chmod(0o1777)  # every user's streams lock here; the umask would narrow it
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            log.warning("lease lock %s cannot be opened (%s): a restart waits for the session to expire", path, exc)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(path).st_ino:  # removed (a cleaner) before it was locked
                raise OSError("lock file replaced")
        except OSError:
            os.close(fd)
            return None
        return cls(fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

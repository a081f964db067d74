"""ShareFetch (78) and ShareAcknowledge (79) (KIP-932; reference share-groups.md §3-§4): the
partition leader's side of share groups. Each share-partition's window is a sans-IO
broker/share_partition.SharePartition, its state read from and written to the share coordinator
(server/share_persister.py: this broker's, or in cluster mode the owner's) before an
acknowledgement is answered; sessions are broker/share_sessions.ShareSessionCache's. Records are
acquired whole batches at a time from the log, long polls wake on appends and on released
records, and a sweep runs out the locks.

Cluster mode: a partition another broker leads answers NOT_LEADER_OR_FOLLOWER with its leader
(KIP-951), and a window is read again from the share coordinator whenever this broker leads the
partition at a new epoch (it lost and regained it meanwhile), so acquisitions made under an older
leadership come back AVAILABLE with their persisted delivery counts, as after Kafka's leader change.

Not yet: ShareFetch/ShareAcknowledge v2 (acquire modes, renew requests).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Callable, Hashable

from ..broker.broker import Broker
from ..broker.group_configs import (
    SHARE_AUTO_OFFSET_RESET_KEY, SHARE_ISOLATION_LEVEL_KEY, SHARE_KEYS, SHARE_LOCK_DURATION_KEY,
    share_reset_duration_ms,
)
from ..broker.cluster_view import leader_hint, node_endpoints
from ..broker.share_partition import NONE, AckBatch, SharePartition, validate_ack_batches
from ..broker.share_sessions import ShareSession, ShareSessionCache
from ..coordinator.config import ShareGroupConfig
from ..protocol.errors import Error
from ..records.batch import BatchHeader, iter_batches
from ..security.authorization import Op, Res, access
from ..share.shard import FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST, SharePartitionKey
from ..storage.log_read import OffsetOutOfRange
from .share_persister import RETRIABLE, SharePersister

log = logging.getLogger("offsetd.share")

Body = dict[str, Any]
TopicIdPartition = tuple[uuid.UUID, int]

UNKNOWN_TOPIC_ID = 100
FETCH_MAX_BYTES = 57_671_680  # Kafka's broker fetch.max.bytes default: a ShareFetch's cap
EXPIRY_SWEEP_S = 0.1
# Kafka fills CurrentLeader only with NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH, never here.
_NO_LEADER: Body = {"leader_id": -1, "leader_epoch": -1}


class ShareFetchApi:
    """The share-partitions this broker leads, their sessions, long polls and lock sweep."""

    def __init__(self, broker: Broker, persister: SharePersister, clock: Callable[[], int],
                 settings: ShareGroupConfig | None = None) -> None:
        self.broker = broker
        self.settings = settings or ShareGroupConfig()
        # group.share.enable off: UNSUPPORTED_VERSION
        self.refusal = None if self.settings.enabled else "Share groups are not enabled (group.share.enable)."
        self.persister = persister
        self.clock = clock
        self.sessions = ShareSessionCache(self.settings.max_share_sessions)
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self._leader_epochs: dict[SharePartitionKey, int] = {}  # the epoch each window was read at
        self._state_epochs: dict[SharePartitionKey, int] = {}  # the state epoch each window was read at
        self._opening: dict[SharePartitionKey, asyncio.Future[SharePartition]] = {}
        # long polls -> the partitions of their session: an append or a release wakes only those
        self._waiters: dict[asyncio.Future[None], set[TopicIdPartition]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------ requests

    def share_fetch(self, ctx: Any, connection: Hashable, req: Any) -> Any:
        """ShareFetch v1: session, piggy-backed acknowledgements, then acquisition (long poll)."""
        return self._share_fetch(ctx, connection, req)

    def share_acknowledge(self, ctx: Any, connection: Hashable, req: Any) -> Any:
        """ShareAcknowledge v1: the session's epoch, then each partition's acknowledgements."""
        return self._share_acknowledge(ctx, req)

    async def _share_fetch(self, ctx: Any, connection: Hashable, req: Any) -> Body:
        if self.refusal:
            return _fetch_failure(Error.UNSUPPORTED_VERSION, self.refusal)
        refused = self._refused(ctx, req.group_id, req.member_id)
        if refused is not None:
            return _fetch_failure(*refused)
        group, member = req.group_id, req.member_id
        acks: dict[TopicIdPartition, list[AckBatch]] = {}
        added: list[TopicIdPartition] = []
        for topic in req.topics:
            for p in topic.partitions:
                key = (topic.topic_id, p.partition_index)
                added.append(key)
                if p.acknowledgement_batches:
                    acks.setdefault(key, []).extend(AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                                                    for b in p.acknowledgement_batches)
        forgotten = [(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions]
        answer = self.sessions.fetch(group, member, req.share_session_epoch, connection, added, forgotten, bool(acks))
        if answer.error:
            return _fetch_failure(answer.error)
        session = answer.session
        assert session is not None
        entries: dict[TopicIdPartition, Body] = {}
        for key, batches in acks.items():
            entries[key] = _entry(key[1], acknowledge_error=await self._acknowledge(ctx, group, member, key, batches))
        if answer.closed:
            await self._release(session)
            return self._fetch_body(group, entries)
        max_wait_ms = int(req.max_wait.total_seconds() * 1000)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_ms, 0) / 1000
        while True:
            got = await self._acquire(ctx, session, req, entries)
            remaining = deadline - loop.time()
            if got or remaining <= 0:
                break
            await self._wait(session.partitions, remaining)
        return self._fetch_body(group, entries)

    async def _share_acknowledge(self, ctx: Any, req: Any) -> Body:
        refused = (Error.UNSUPPORTED_VERSION, self.refusal) if self.refusal else \
            self._refused(ctx, req.group_id, req.member_id)
        if refused is not None:
            return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1],
                    "acquisition_lock_timeout": 0, "responses": (), "node_endpoints": ()}
        answer = self.sessions.acknowledge(req.group_id, req.member_id, req.share_session_epoch)
        if answer.error:
            return {"throttle_time": 0, "error_code": answer.error, "error_message": None,
                    "acquisition_lock_timeout": 0, "responses": (), "node_endpoints": ()}
        by_topic: dict[uuid.UUID, list[Body]] = {}
        for topic in req.topics:
            for p in topic.partitions:
                batches = [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                           for b in p.acknowledgement_batches]
                key = (topic.topic_id, p.partition_index)
                code = await self._acknowledge(ctx, req.group_id, req.member_id, key, batches,
                                               getattr(req, "is_renew_ack", False))
                by_topic.setdefault(topic.topic_id, []).append(
                    {"partition_index": p.partition_index, "error_code": code, "error_message": None,
                     "current_leader": self._leader(key) if code == Error.NOT_LEADER_OR_FOLLOWER else _NO_LEADER})
        if answer.closed and answer.session is not None:
            await self._release(answer.session)
        return {"throttle_time": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout": self._lock_duration(req.group_id),
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": self._endpoints(p for ps in by_topic.values() for p in ps)}

    def _refused(self, ctx: Any, group_id: str | None, member_id: str | None) -> tuple[int, str | None] | None:
        """The request-level checks, in Kafka's order: READ on the group, then a member id the
        client generated (non-empty, at most 36 characters)."""
        acc = access(self.broker, ctx)
        if acc is not None and not acc.allows(Op.READ, Res.GROUP, group_id or ""):
            return Error.GROUP_AUTHORIZATION_FAILED, None
        if not group_id or not member_id or len(member_id) > 36:
            return Error.INVALID_REQUEST, "A share request needs a group id and a member id of 1-36 characters."
        return None

    # ------------------------------------------------------------------------ partitions

    def _partition_log(self, ctx: Any, key: TopicIdPartition) -> tuple[int, Any]:
        """(error, partition log): the topic by id, READ on it, the partition, led here."""
        topic = self.broker.topics.by_id(key[0])
        if topic is None:
            return UNKNOWN_TOPIC_ID, None
        acc = access(self.broker, ctx)
        if acc is not None and not acc.allows(Op.READ, Res.TOPIC, topic.name):
            return Error.TOPIC_AUTHORIZATION_FAILED, None
        if not 0 <= key[1] < len(topic.partitions):
            return Error.UNKNOWN_TOPIC_OR_PARTITION, None
        plog = topic.partitions[key[1]]
        if not plog.leader:  # cluster mode: another broker leads it (or nobody, for a moment)
            return Error.NOT_LEADER_OR_FOLLOWER, None
        return NONE, plog

    def _leader(self, key: TopicIdPartition) -> Body:
        """KIP-951's current_leader of a partition this broker does not lead."""
        return leader_hint(self.broker.cluster, self.broker.topics.by_id(key[0]), key[1])

    def _endpoints(self, entries: Any) -> list[Body]:
        """node_endpoints: where the leaders named in the entries' current_leader listen."""
        nodes = {e["current_leader"]["leader_id"] for e in entries}
        return node_endpoints(self.broker.cluster, nodes) if any(n >= 0 for n in nodes) else []

    async def _share_partition(self, group: str, key: TopicIdPartition, plog: Any) -> SharePartition:
        """The share-partition's window, read from the share coordinator on first use and at each
        new leadership of the partition (and initialized there by share.auto.offset.reset when
        the group never read it)."""
        sp_key = (group, key[0], key[1])
        sp = self.partitions.get(sp_key)
        if sp is not None and self._leader_epochs.get(sp_key) == max(plog.leader_epoch, 0):
            return sp
        if sp is not None:  # led at another epoch since it was read: what it holds may be stale
            self._drop(sp_key)
        opening = self._opening.get(sp_key)
        if opening is not None:
            return await asyncio.shield(opening)
        opening = self._opening[sp_key] = asyncio.get_running_loop().create_future()
        try:
            leader_epoch = max(plog.leader_epoch, 0)
            error, state = await self.persister.read(sp_key, leader_epoch)
            if error == INVALID_REQUEST:  # never initialized: the group's first read of it
                error = await self.persister.initialize(sp_key, 0, self._reset_offset(group, plog))
                if not error:
                    error, state = await self.persister.read(sp_key, leader_epoch)
            if error or state is None:
                raise ShareStateUnreadable(persister_error(error or Error.UNKNOWN_SERVER_ERROR),
                                           f"share state of {sp_key} could not be read (error {error})")
            s = self.settings
            sp = SharePartition(state.start_offset, delivery_count_limit=s.delivery_count_limit,
                                max_in_flight=s.partition_max_record_locks, lock_duration_ms=s.record_lock_duration_ms,
                                state=state.state_batches)
            if sp.start_offset < plog.log_start_offset:
                sp.move_log_start(plog.log_start_offset)
            self.partitions[sp_key] = sp
            self._leader_epochs[sp_key] = leader_epoch
            self._state_epochs[sp_key] = state.state_epoch
            opening.set_result(sp)
            self._start_sweeper()
            return sp
        except asyncio.CancelledError:
            opening.cancel()
            raise
        except Exception as exc:
            opening.set_exception(exc)
            opening.exception()  # retrieved: there may be no other waiter
            raise
        finally:
            del self._opening[sp_key]

    def _reset_offset(self, group: str, plog: Any) -> int:
        """share.auto.offset.reset, applied when a share-partition is first read: latest (the
        default), earliest, or the first offset at or after now - duration."""
        reset = self.broker.group_configs.get(group).get(SHARE_AUTO_OFFSET_RESET_KEY,
                                                         SHARE_KEYS[SHARE_AUTO_OFFSET_RESET_KEY])
        if reset == "earliest":
            return plog.log_start_offset
        duration = share_reset_duration_ms(reset)
        if duration is not None:
            found = plog.offset_for_timestamp(self.clock() - duration)
            return plog.log_end_offset if found is None else found[0]
        return plog.log_end_offset

    def _lock_duration(self, group: str) -> int:
        """share.record.lock.duration.ms: the group's own, else the broker's."""
        own = self.broker.group_configs.get(group).get(SHARE_LOCK_DURATION_KEY)
        return self.settings.record_lock_duration_ms if own is None else int(own)

    def _read_committed(self, group: str) -> bool:
        """share.isolation.level: read_committed reads below the last stable offset and never
        delivers an aborted transaction's records."""
        level = self.broker.group_configs.get(group).get(SHARE_ISOLATION_LEVEL_KEY, "read_uncommitted")
        return level == "read_committed"

    async def _acquire(self, ctx: Any, session: ShareSession, req: Any, entries: dict[TopicIdPartition, Body]) -> int:
        """One pass over the session's partitions: records acquired for the member (their count)."""
        keys = sorted(session.partitions, key=lambda k: (str(k[0]), k[1]))
        budget = max(min(req.max_bytes, FETCH_MAX_BYTES), 1)
        per_partition = max(budget // max(len(keys), 1), 1)
        left = getattr(req, "max_records", 0) or 500
        total = 0
        for key in keys:
            error, plog = self._partition_log(ctx, key)
            entry = entries.setdefault(key, _entry(key[1]))
            if error:
                entry["error_code"] = error
                if error == Error.NOT_LEADER_OR_FOLLOWER:
                    entry["current_leader"] = self._leader(key)
                continue
            if left <= 0:
                continue
            try:
                sp = await self._share_partition(session.group_id, key, plog)
            except Exception as exc:  # the share coordinator could not read or write its state
                log.warning("share-partition %s/%s/%d not opened: %s", session.group_id, key[0], key[1], exc)
                entry["error_code"] = getattr(exc, "error_code", Error.UNKNOWN_SERVER_ERROR)
                continue
            sp.lock_duration_ms = self._lock_duration(session.group_id)  # read at use, as Kafka does
            offset = sp.next_fetch_offset()
            committed = self._read_committed(session.group_id)
            txns: list[tuple[int, int]] = []
            try:
                if offset >= (plog.last_stable_offset if committed else plog.log_end_offset):
                    data = b""
                elif committed:
                    data, txns = plog.read_committed(offset, per_partition)
                else:
                    data = plog.read(offset, per_partition)
            except OffsetOutOfRange:  # retention passed the window: it starts at the log start
                sp.move_log_start(plog.log_start_offset)
                continue
            headers = [(pos, h) for pos, h in iter_batches(data)]
            ranges = [(h.base_offset, h.last_offset) for _, h in headers]
            aborted = aborted_batches([h for _, h in headers], txns) if txns else set()
            acquired = sp.acquire(session.member_id, ranges, left, self.clock(), aborted)
            if not acquired:
                continue
            last = acquired[-1].last_offset
            end = max(pos + h.size for pos, h in headers if h.base_offset <= last)
            entry["records"] = bytes(data[:end])
            entry["acquired_records"] = [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                          "delivery_count": a.delivery_count} for a in acquired]
            count = sum(a.last_offset - a.first_offset + 1 for a in acquired)
            left -= count
            total += count
        return total

    async def _acknowledge(self, ctx: Any, group: str, member: str, key: TopicIdPartition,
                           batches: list[AckBatch], renew: bool = False) -> int:
        """One partition's acknowledgements, persisted before the answer (all or nothing)."""
        error = validate_ack_batches(batches, renew)
        if error:
            return error
        error, plog = self._partition_log(ctx, key)
        if error:
            return error
        try:
            sp = await self._share_partition(group, key, plog)
        except Exception as exc:  # the share coordinator could not read or write its state
            log.warning("share-partition %s/%s/%d not opened: %s", group, key[0], key[1], exc)
            return getattr(exc, "error_code", Error.UNKNOWN_SERVER_ERROR)
        error, changed = sp.acknowledge(member, batches, self.clock())
        if error:
            return error
        return await self._persist((group, key[0], key[1]), sp, changed)

    async def _persist(self, sp_key: SharePartitionKey, sp: SharePartition, changed: list[Any]) -> int:
        """Write what changed. On a failure the window is dropped, to be read again from what the
        coordinator holds (acquisitions come back AVAILABLE, as after a leader change), and the
        error is persister_error's. A window dropped while this was under way (an admin changed
        the group's state) writes nothing and is answered as fenced."""
        if not changed:
            return NONE
        if self.partitions.get(sp_key) is not sp:
            return Error.NOT_LEADER_OR_FOLLOWER
        self._wake((sp_key[1], sp_key[2]))
        try:
            error = await self.persister.write(sp_key, self._state_epochs.get(sp_key, 0),
                                               self._leader_epochs.get(sp_key, 0), sp.start_offset,
                                               changed, sp.delivery_complete_count())
        except Exception as exc:
            log.warning("share state of %s/%s/%d not written: %s", sp_key[0], sp_key[1], sp_key[2], exc)
            error = Error.UNKNOWN_SERVER_ERROR
        if error:
            self._drop(sp_key)
            return persister_error(error)
        return NONE

    def _drop(self, sp_key: SharePartitionKey) -> None:
        """Forget a window: the next use reads it again from the share coordinator."""
        self.partitions.pop(sp_key, None)
        self._leader_epochs.pop(sp_key, None)
        self._state_epochs.pop(sp_key, None)

    def leadership_lost(self, topic_id: uuid.UUID, partition: int) -> None:
        """Cluster mode: another broker leads the partition now; its windows are forgotten (their
        late writes are fenced by the new leader's epoch at the share coordinator anyway)."""
        for sp_key in [k for k in self.partitions if k[1] == topic_id and k[2] == partition]:
            self._drop(sp_key)

    def forget_group(self, group_id: str) -> None:
        """Drop every window of a group whose state an admin changed (AlterShareGroupOffsets
        starts a new state epoch, DeleteShareGroupOffsets and DeleteGroups delete it): the next
        fetch reads what the share coordinator holds now."""
        for sp_key in [k for k in self.partitions if k[0] == group_id]:
            self._drop(sp_key)

    async def _release(self, session: ShareSession) -> None:
        """A closed session gives back everything its member holds here."""
        for tid, index in session.partitions:
            sp_key = (session.group_id, tid, index)
            sp = self.partitions.get(sp_key)
            if sp is not None:
                await self._persist(sp_key, sp, sp.release_member(session.member_id))

    def connection_closed(self, connection: Hashable) -> None:
        """The sessions opened on a dropped connection close, and their records go back."""
        for session in self.sessions.connection_closed(connection):
            asyncio.ensure_future(self._release(session))

    # ------------------------------------------------------------------------ waiting and locks

    async def _wait(self, partitions: set[TopicIdPartition], timeout_s: float) -> None:
        """Until something happens on one of `partitions` (the session's, as it is then), or the timeout."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = partitions
        try:
            await asyncio.wait([waiter], timeout=timeout_s)
        finally:
            self._waiters.pop(waiter, None)

    def _wake(self, key: TopicIdPartition) -> None:
        """Records were appended to, or released in, `key`: the long polls on it look again."""
        for waiter, partitions in list(self._waiters.items()):
            if key in partitions and not waiter.done():
                waiter.set_result(None)

    def appended(self, topic: str, partition: int) -> None:
        """Records were appended: waiting share fetches on that partition look again."""
        if self._waiters:
            found = self.broker.topics.get(topic)
            if found is not None:
                self._wake((found.topic_id, partition))

    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep_locks())

    async def _sweep_locks(self) -> None:
        """Run out the acquisition locks whose time has come, persist, and wake long polls."""
        while self.partitions:
            await asyncio.sleep(EXPIRY_SWEEP_S)
            now = self.clock()
            for sp_key, sp in list(self.partitions.items()):
                deadline = sp.next_lock_deadline()
                if deadline is not None and deadline <= now:
                    await self._persist(sp_key, sp, sp.expire_locks(now))

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    # ------------------------------------------------------------------------ bodies

    def _fetch_body(self, group: str, entries: dict[TopicIdPartition, Body]) -> Body:
        by_topic: dict[uuid.UUID, list[Body]] = {}
        for (tid, _), entry in entries.items():
            by_topic.setdefault(tid, []).append(entry)
        return {"throttle_time": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout": self._lock_duration(group),
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": self._endpoints(entries.values())}


class ShareStateUnreadable(Exception):
    """A share-partition's window could not be read from the share coordinator; `error_code` is
    what its fetches and acknowledgements answer."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def persister_error(error: int) -> int:
    """Kafka's mapping of a share coordinator's error to the partition's: fenced ->
    NOT_LEADER_OR_FOLLOWER, the coordinator moving or away -> COORDINATOR_NOT_AVAILABLE (both
    retriable), anything else -> UNKNOWN_SERVER_ERROR."""
    if error in (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH):
        return Error.NOT_LEADER_OR_FOLLOWER
    return Error.COORDINATOR_NOT_AVAILABLE if error in RETRIABLE else Error.UNKNOWN_SERVER_ERROR


def aborted_batches(headers: list[BatchHeader], aborted: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """read_committed: (base, last offset) of the batches aborted transactions wrote, from the
    (producer id, first offset) pairs a read_committed read reports, as a consumer works them out
    (a transaction is aborting from its first offset until its producer's next control batch)."""
    pending = sorted(aborted, key=lambda txn: txn[1])
    aborting: set[int] = set()
    found: set[tuple[int, int]] = set()
    i = 0
    for h in headers:
        while i < len(pending) and pending[i][1] <= h.last_offset:
            aborting.add(pending[i][0])
            i += 1
        if h.is_control:
            aborting.discard(h.producer_id)
        elif h.is_transactional and h.producer_id in aborting:
            found.add((h.base_offset, h.last_offset))
    return found


def _entry(partition: int, acknowledge_error: int = NONE) -> Body:
    """A ShareFetch partition entry: no error, empty records (never null in v1+), nothing acquired."""
    return {"partition_index": partition, "error_code": NONE, "error_message": None,
            "acknowledge_error_code": acknowledge_error, "acknowledge_error_message": None,
            "current_leader": _NO_LEADER, "records": b"", "acquired_records": []}


def _fetch_failure(code: int, message: str | None = None) -> Body:
    """A ShareFetch answered with a top-level error only."""
    return {"throttle_time": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout": 0,
            "responses": (), "node_endpoints": ()}

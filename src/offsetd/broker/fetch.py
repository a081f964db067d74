"""Fetch: stored batch bytes are returned as they are; nothing is decoded.

Sessionless fetches (session id 0, epoch -1; every request before v7) read the request's
partitions and nothing else. Fetch sessions (KIP-227, fetch_sessions.py) go through
`open_fetch` (once per request), `read_fetch` (once per pass of a long poll) and `finish_fetch`
(once, when the response is sent: only then does the session remember what it was told).

Zero-copy: for v4+ a partition's records of at least ZERO_COPY_MIN_BYTES are FileRecords (file
ranges held open), which the encoder frames by length and the connection sends with sendfile.
Older versions get bytes (their records may be down-converted, which needs them).

Isolation (v4+, reference A9): every partition answers its last stable offset (LSO). Under
read_committed the records stop before the first batch at or after the LSO (the zero-copy
ranges too) and AbortedTransactions lists the aborted transactions overlapping the data;
under read_uncommitted that list is null.

Leader epochs (KIP-320): a partition's `current_leader_epoch` (v9+, -1: no check) is checked
against the leader's (FENCED_LEADER_EPOCH with KIP-951's `current_leader`, UNKNOWN_LEADER_EPOCH);
a `last_fetched_epoch` (v12+) whose epoch ended before the fetch offset answers no records and
`diverging_epoch`, the end of that epoch as OffsetForLeaderEpoch tells it, as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..protocol.errors import Error
from ..storage.log_read import OffsetOutOfRange
from ..security.authorization import Op, Res, access
from ..storage.leader_epoch_cache import UNDEFINED_EPOCH_OFFSET
from .broker import NO_LEADER_EPOCH, Broker
from .cluster_view import leader_hint, node_endpoints
from .fetch_sessions import (
    CachedPartition,
    FetchContext,
    FetchRequestPartition,
    FetchSessionCache,
    PartitionKey,
    new_context,
    session_sent,
)
from .request_context import current_context

READ_COMMITTED = 1
ZERO_COPY_MIN_VERSION = 4  # v0-3 answer in message formats v0/v1: their records are rewritten
# Below this a partition's records are pread into the response: a dup'd descriptor, a sendfile
# and the bookkeeping (~10-15 us) cost as much as copying them. bench/zero_copy_threshold.py (a
# response's sender CPU over TCP loopback): up to 256 KiB the two ways are within this machine's
# noise (about +-30%), at 1 MiB the copy costs 2.4-2.7 ms and sendfile 0.2-0.26 ms.
ZERO_COPY_MIN_BYTES = 64 * 1024


@dataclass(slots=True)
class FetchRead:
    """One pass over a Fetch request: the response body, the bytes it holds, the partitions read
    (to wait on); for a session, its context and the partition entries the body holds."""

    body: dict[str, Any]
    total_bytes: int
    partitions: list[tuple[str, int]]
    context: FetchContext | None = None
    responded: list[tuple[PartitionKey, dict[str, Any]]] = field(default_factory=list)


def open_fetch(cache: FetchSessionCache, req: Any, version: int, clock: Callable[[], int]) -> FetchContext | None:
    """The request's fetch session context; None (no further work, not even the clock) for a
    sessionless fetch."""
    session_id = getattr(req, "session_id", 0)
    epoch = getattr(req, "session_epoch", -1)
    if session_id == 0 and epoch == -1:
        return None
    by_id = version >= 13
    fetch_data = (((t.topic_id if by_id else t.topic, p.partition),
                   FetchRequestPartition(p.fetch_offset, p.partition_max_bytes, getattr(p, "log_start_offset", -1),
                                         getattr(p, "current_leader_epoch", NO_LEADER_EPOCH),
                                         getattr(p, "last_fetched_epoch", NO_LEADER_EPOCH)))
                  for t in req.topics for p in t.partitions)
    forgotten = ((f.topic_id if by_id else f.topic, index)
                 for f in getattr(req, "forgotten_topics_data", ()) for index in f.partitions)
    return new_context(cache, session_id, epoch, by_id, fetch_data, forgotten, clock())


class _Reader:
    """One pass over a Fetch request's partitions: the byte budget (the first batch always whole),
    the partitions read (to wait on) and the leaders named in NOT_LEADER_OR_FOLLOWER entries (their
    endpoints go into the body, KIP-951), shared by sessionless and incremental fetches."""

    __slots__ = ("broker", "by_id", "committed", "zero_copy", "budget", "total", "read_keys", "led_elsewhere",
                 "access")

    def __init__(self, broker: Broker, req: Any, version: int, by_id: bool) -> None:
        self.broker = broker
        self.by_id = by_id
        self.committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
        self.zero_copy = version >= ZERO_COPY_MIN_VERSION
        self.budget: int = req.max_bytes
        self.total = 0
        self.read_keys: list[tuple[str, int]] = []
        self.led_elsewhere: set[int] = set()
        self.access = access(broker, current_context())

    def read(self, topic: Any, index: int, fetch_offset: int, max_bytes: int, name: str | None = None,
             current_leader_epoch: int = NO_LEADER_EPOCH, last_fetched_epoch: int = NO_LEADER_EPOCH) -> dict[str, Any]:
        """One partition's response entry: watermarks and records, or its error. `topic` is
        None when unknown (`name`: the name asked for, by-name fetches). With zero_copy the records
        may be FileRecords (module docstring). Without READ on the topic: 29, before its existence
        is told, but after an unknown topic id (v13+: 100 first, reference security.md §4). The
        leader epochs: module docstring."""
        entry: dict[str, Any] = {"partition_index": index, "error_code": Error.NONE, "high_watermark": -1,
                                 "records": b"", "aborted_transactions": () if self.committed else None}
        acc = self.access
        if acc is not None and (topic is not None or not self.by_id) and not acc.allows(
                Op.READ, Res.TOPIC, topic.name if topic is not None else name):
            entry["error_code"] = Error.TOPIC_AUTHORIZATION_FAILED
            return entry
        if topic is None:
            entry["error_code"] = Error.UNKNOWN_TOPIC_ID if self.by_id else Error.UNKNOWN_TOPIC_OR_PARTITION
            return entry
        plog, error = self.broker.serving_partition(topic.name, index, current_leader_epoch)
        if error:
            entry["error_code"] = error
            if error in (Error.NOT_LEADER_OR_FOLLOWER, Error.FENCED_LEADER_EPOCH):
                hint = entry["current_leader"] = leader_hint(self.broker.cluster, topic, index)
                self.led_elsewhere.add(hint["leader_id"])
            return entry
        entry.update(high_watermark=plog.log_end_offset, last_stable_offset=plog.last_stable_offset,
                     log_start_offset=plog.log_start_offset)
        if last_fetched_epoch >= 0 and self._diverged(entry, plog, fetch_offset, last_fetched_epoch):
            return entry
        limit, first = min(max_bytes, self.budget), self.total == 0
        try:
            if not (limit > 0 or first):
                data = b""
            elif self.committed:
                data, aborted = plog.read_committed(
                    fetch_offset, limit, min_one_batch=first,
                    min_file_bytes=ZERO_COPY_MIN_BYTES if self.zero_copy else None)
                entry["aborted_transactions"] = [{"producer_id": pid, "first_offset": first_offset}
                                                 for pid, first_offset in aborted]
            elif self.zero_copy:
                data = plog.read_file(fetch_offset, limit, min_one_batch=first, min_file_bytes=ZERO_COPY_MIN_BYTES)
            else:
                data = plog.read(fetch_offset, limit, min_one_batch=first)
        except OffsetOutOfRange:
            entry["error_code"] = Error.OFFSET_OUT_OF_RANGE
            data = b""
        except OSError as exc:  # the device failed under a read: its directory goes offline
            plog.log_dir.failed(exc, f"read of {topic.name}-{index}", undone=False)
            entry["error_code"] = Error.KAFKA_STORAGE_ERROR
            data = b""
        entry["records"] = data
        size = len(data)
        self.total += size
        self.budget -= size
        self.read_keys.append((topic.name, index))
        return entry

    @staticmethod
    def _diverged(entry: dict[str, Any], plog: Any, fetch_offset: int, last_fetched_epoch: int) -> bool:
        """True when `entry` is answered without records: the epoch the client last fetched from
        ended before its fetch offset (`diverging_epoch`: where), or cannot be told, or the offset
        is below the log start (OFFSET_OUT_OF_RANGE)."""
        epoch, end = plog.epochs.end_offset_for(last_fetched_epoch, plog.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET or fetch_offset < plog.log_start_offset:
            entry["error_code"] = Error.OFFSET_OUT_OF_RANGE
            return True
        if epoch < last_fetched_epoch or end < fetch_offset:
            entry["diverging_epoch"] = {"epoch": epoch, "end_offset": end}
            return True
        return False

    def result(self, session_id: int, responses: list[dict[str, Any]], context: FetchContext | None,
               responded: list[tuple[PartitionKey, dict[str, Any]]] | None = None) -> FetchRead:
        body = {"error_code": Error.NONE, "session_id": session_id, "responses": responses}
        if self.led_elsewhere:  # v16+: where those leaders listen (KIP-951)
            body["node_endpoints"] = node_endpoints(self.broker.cluster, self.led_elsewhere)
        return FetchRead(body, self.total, self.read_keys, context, responded if responded is not None else [])


def read_fetch(broker: Broker, req: Any, version: int, context: FetchContext | None = None) -> FetchRead:
    """Read every requested partition within the request's byte limits (first batch always whole)."""
    if context is not None:
        if context.kind == "incremental":
            return _read_session(broker, req, version, context)
        if context.kind == "error":
            return FetchRead({"error_code": context.error_code, "session_id": 0, "responses": ()}, 0, [], context)
    by_id = version >= 13
    reader = _Reader(broker, req, version, by_id)
    key = "topic_id" if by_id else "topic"
    topics = broker.topics
    responses = []
    for topic_req in req.topics:
        topic = topics.by_id(topic_req.topic_id) if by_id else topics.get(topic_req.topic)
        responses.append({key: topic_req.topic_id if by_id else topic_req.topic, "partitions": [
            reader.read(topic, p.partition, p.fetch_offset, p.partition_max_bytes, None if by_id else topic_req.topic,
                        getattr(p, "current_leader_epoch", NO_LEADER_EPOCH),
                        getattr(p, "last_fetched_epoch", NO_LEADER_EPOCH))
            for p in topic_req.partitions]})
    return reader.result(0, responses, context)


def _read_session(broker: Broker, req: Any, version: int, context: FetchContext) -> FetchRead:
    """An incremental fetch: read every partition of the session (in its order), answer with
    those that have records, an error or changed watermarks since the last response."""
    session = context.session
    assert session is not None
    by_id = session.uses_topic_ids
    reader = _Reader(broker, req, version, by_id)
    key_name = "topic_id" if by_id else "topic"
    responses: list[dict[str, Any]] = []
    responded: list[tuple[PartitionKey, dict[str, Any]]] = []
    current: Any = None  # the topic key of responses[-1]
    topics = broker.topics
    for key, cached in session.partitions.items():
        topic_key, index = key
        topic = topics.by_id(topic_key) if by_id else topics.get(topic_key)  # type: ignore[arg-type]
        name = None if by_id else topic_key
        entry = reader.read(topic, index, cached.fetch_offset, cached.max_bytes, name,  # type: ignore[arg-type]
                            cached.current_leader_epoch, cached.last_fetched_epoch)
        if not cached.must_respond(entry):
            continue
        responded.append((key, entry))
        if current != topic_key or not responses:
            responses.append({key_name: topic_key, "partitions": []})
            current = topic_key
        responses[-1]["partitions"].append(entry)
    return reader.result(session.id, responses, context, responded)


def finish_fetch(cache: FetchSessionCache, req: Any, result: FetchRead, now: int) -> dict[str, Any]:
    """The body to send; a full fetch asking for a session gets one here (if a slot is free), an
    incremental one's session remembers what this response told the client."""
    context = result.context
    if context is None:
        return result.body
    if context.kind == "incremental":
        session_sent(context.session, result.responded)  # type: ignore[arg-type]
    elif context.kind == "full":
        by_id = context.uses_topic_ids
        partitions: dict[PartitionKey, CachedPartition] = {}
        for topic_req, topic_resp in zip(req.topics, result.body["responses"]):
            topic_key = topic_req.topic_id if by_id else topic_req.topic
            for p, entry in zip(topic_req.partitions, topic_resp["partitions"]):
                cached = CachedPartition(p.fetch_offset, p.partition_max_bytes, getattr(p, "log_start_offset", -1),
                                         current_leader_epoch=getattr(p, "current_leader_epoch", NO_LEADER_EPOCH),
                                         last_fetched_epoch=getattr(p, "last_fetched_epoch", NO_LEADER_EPOCH))
                cached.sent(entry)
                partitions[(topic_key, p.partition)] = cached
        result.body["session_id"] = cache.maybe_create(now, partitions, by_id)
    return result.body

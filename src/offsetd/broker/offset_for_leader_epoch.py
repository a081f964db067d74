"""OffsetForLeaderEpoch (API 23, KIP-101/KIP-320): where a leader epoch ended in a partition's log,
so a consumer that fetched at that epoch can tell whether the log it read was truncated since
(a leader change, an unclean recovery) and where to continue.

Per partition, as Kafka: the leader answers from its leader-epoch history
(storage/leader_epoch_cache.py `end_offset_for`) after the same checks as Fetch
(broker.serving_partition: UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR,
NOT_LEADER_OR_FOLLOWER, then `current_leader_epoch` v2+: FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH); an epoch it cannot place answers NONE with epoch and end offset -1.
`replica_id` (v3+) changes nothing: offsetd has no followers, every caller is answered as a
consumer (-1) is, by the leader only.

Authorization as Kafka's: CLUSTER_ACTION on the cluster allows every topic (the inter-broker use),
else DESCRIBE on each topic (29 on each of its partitions when denied)."""

from __future__ import annotations

from typing import Any

from ..protocol.errors import Error
from ..security.authorization import Op, Res, access
from ..storage.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from .broker import NO_LEADER_EPOCH, Broker
from .request_context import current_context


def handle_offset_for_leader_epoch(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any]:
    """The end offset of each requested (partition, leader epoch)."""
    acc = access(broker, current_context())
    every_topic = acc is None or acc.cluster(Op.CLUSTER_ACTION)
    topics = []
    for topic_req in req.topics:
        denied = not every_topic and not acc.allows(Op.DESCRIBE, Res.TOPIC, topic_req.topic)  # type: ignore[union-attr]
        partitions = []
        for p in topic_req.partitions:
            entry: dict[str, Any] = {"partition": p.partition, "error_code": Error.NONE,
                                     "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
            if denied:
                entry["error_code"] = Error.TOPIC_AUTHORIZATION_FAILED
            else:
                plog, error = broker.serving_partition(topic_req.topic, p.partition,
                                                       getattr(p, "current_leader_epoch", NO_LEADER_EPOCH))
                if error:
                    entry["error_code"] = error
                else:
                    epoch, end = plog.epochs.end_offset_for(p.leader_epoch, plog.log_end_offset)
                    if end != UNDEFINED_EPOCH_OFFSET:
                        entry["leader_epoch"], entry["end_offset"] = epoch, end
            partitions.append(entry)
        topics.append({"topic": topic_req.topic, "partitions": partitions})
    return {"topics": topics}

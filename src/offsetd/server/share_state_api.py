"""The share coordinator's internal APIs on the wire (reference share-groups.md §0, §5):
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87), which partition leaders and the
group coordinator of other brokers send (server/share_persister.py). Each partition is answered
by the local share coordinator (server/share_state.py): NOT_COORDINATOR when this broker does not
own its `__share_group_state` partition (the caller looks the owner up again and retries). They
need CLUSTER_ACTION on the cluster, as Kafka's do."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from ..broker.broker import Broker
from ..protocol.errors import Error
from ..records.share_state_records import StateBatch
from ..security.authorization import Op, access
from .share_state import ShareStatePersister

Body = dict[str, Any]
SharePartitionKey = tuple[str, Any, int]


class ShareStateApi:
    """APIs 83-87, answered partition by partition by this broker's share coordinator."""

    def __init__(self, broker: Broker, coordinator: ShareStatePersister) -> None:
        self.broker = broker
        self.coordinator = coordinator

    async def _each(self, ctx: Any, req: Any, answer: Callable[[SharePartitionKey, Any], Awaitable[Body]],
                    refused: Callable[[int], Body]) -> Body:
        """Per partition, `answer`'s fields (partition and error code added); CLUSTER_AUTHORIZATION_FAILED
        for each without CLUSTER_ACTION."""
        acc = access(self.broker, ctx)
        allowed = acc is None or acc.cluster(Op.CLUSTER_ACTION)
        results = []
        for topic in req.topics:
            partitions = []
            for p in topic.partitions:
                body = (await answer((req.group_id, topic.topic_id, p.partition), p) if allowed
                        else refused(Error.CLUSTER_AUTHORIZATION_FAILED))
                partitions.append({"partition": p.partition, "error_message": None, **body})
            results.append({"topic_id": topic.topic_id, "partitions": partitions})
        return {"results": results}

    def initialize(self, ctx: Any, req: Any) -> Awaitable[Body]:
        """InitializeShareGroupState v0: a fresh snapshot at the partition's start offset and state epoch."""
        async def answer(sp: SharePartitionKey, p: Any) -> Body:
            return {"error_code": await self.coordinator.initialize(sp, p.state_epoch, p.start_offset)}
        return self._each(ctx, req, answer, _code)

    def read(self, ctx: Any, req: Any) -> Awaitable[Body]:
        """ReadShareGroupState v0: the state for a leader at its leader epoch."""
        async def answer(sp: SharePartitionKey, p: Any) -> Body:
            error, state = await self.coordinator.read(sp, p.leader_epoch)
            if state is None:
                return _read_failure(error)
            return {"error_code": Error.NONE, "state_epoch": state.state_epoch, "start_offset": state.start_offset,
                    "state_batches": [_batch(b) for b in state.state_batches]}
        return self._each(ctx, req, answer, _read_failure)

    def write(self, ctx: Any, req: Any) -> Awaitable[Body]:
        """WriteShareGroupState v0-1: the leader's changed batches."""
        async def answer(sp: SharePartitionKey, p: Any) -> Body:
            batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in p.state_batches]
            return {"error_code": await self.coordinator.write(
                sp, p.state_epoch, p.leader_epoch, p.start_offset, batches,
                getattr(p, "delivery_complete_count", -1))}
        return self._each(ctx, req, answer, _code)

    def delete(self, ctx: Any, req: Any) -> Awaitable[Body]:
        """DeleteShareGroupState v0: a tombstone of the share-partition's state."""
        async def answer(sp: SharePartitionKey, p: Any) -> Body:
            return {"error_code": await self.coordinator.delete(sp)}
        return self._each(ctx, req, answer, _code)

    def read_summary(self, ctx: Any, req: Any) -> Awaitable[Body]:
        """ReadShareGroupStateSummary v0-1: start offset, epochs and records done, nothing written;
        UNKNOWN_TOPIC_OR_PARTITION for a share-partition never initialized."""
        async def answer(sp: SharePartitionKey, p: Any) -> Body:
            error, state = await self.coordinator.summary(sp)
            if error or state is None:
                return _summary_failure(error or Error.UNKNOWN_TOPIC_OR_PARTITION)
            return {"error_code": Error.NONE, "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                    "start_offset": state.start_offset, "delivery_complete_count": state.delivery_complete_count}
        return self._each(ctx, req, answer, _summary_failure)


def _code(error: int) -> Body:
    return {"error_code": error}


def _batch(b: StateBatch) -> Body:
    return {"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.delivery_state,
            "delivery_count": b.delivery_count}


def _read_failure(error: int) -> Body:
    return {"error_code": error, "state_epoch": 0, "start_offset": -1, "state_batches": ()}


def _summary_failure(error: int) -> Body:
    return {"error_code": error, "state_epoch": 0, "leader_epoch": -1, "start_offset": -1,
            "delivery_complete_count": -1}

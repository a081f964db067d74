"""The share-group calls of `offsetd share-groups` (KIP-932, reference share-groups.md §6), sent
raw through kafka-python since confluent-kafka has no share-group admin calls: ListGroups v5 with
the types filter "share", ShareGroupDescribe (77), DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92) and DeleteGroups (kafka-python's own
message, sent raw for its error codes), each to the group's
coordinator over kafka-python's connections (TLS, SASL). The request and response messages are
built from the schema files beside this module, as admin/consumer_group_describe.py does."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from kafka import errors as kafka_errors
from kafka.protocol.admin.groups import DeleteGroupsRequest
from kafka.protocol.api_message import ApiMessage

from .client_config import kafka_python_config
from .errors import ToolError, kafka_error_name, kafka_error_text
from .kafka_python_admin import ToolAdminClient
from .model import TP

SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS = 77, 90


class ShareGroupDescribeRequest(ApiMessage, load_json=sys.modules[__name__]):
    """ShareGroupDescribe request v1: GroupIds, IncludeAuthorizedOperations."""


class ShareGroupDescribeResponse(ApiMessage, load_json=sys.modules[__name__]):
    """ShareGroupDescribe response v1: per group its state, epochs and members."""


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=sys.modules[__name__]):
    """DescribeShareGroupOffsets request v0-1: per group the topics (null: all)."""


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=sys.modules[__name__]):
    """DescribeShareGroupOffsets response v0-1: start offset, leader epoch, lag (v1)."""


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=sys.modules[__name__]):
    """AlterShareGroupOffsets request v0: the group's new start offsets."""


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=sys.modules[__name__]):
    """AlterShareGroupOffsets response v0: a top-level error and one per partition."""


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=sys.modules[__name__]):
    """DeleteShareGroupOffsets request v0: the topics whose state goes."""


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=sys.modules[__name__]):
    """DeleteShareGroupOffsets response v0: a top-level error and one per topic."""


def error_string(code: int, message: str | None = None) -> str:
    """`NAME: text` for a Kafka error code (Kafka's wording where the tools know it)."""
    kind = kafka_errors.for_code(code)
    return f"{kafka_error_name(code, kind.__name__)}: {kafka_error_text(code, message or kind.description)}"


@dataclass(frozen=True)
class ShareMember:
    """A share group's member as ShareGroupDescribe reports it."""

    member_id: str
    client_id: str
    host: str
    member_epoch: int
    assignment: tuple[TP, ...]


@dataclass(frozen=True)
class ShareGroupDescription:
    """A share group: state, epochs, coordinator and members."""

    group: str
    state: str
    group_epoch: int
    assignment_epoch: int
    coordinator: tuple[int, str, int]  # (node id, host, port)
    members: tuple[ShareMember, ...]


@dataclass(frozen=True)
class ShareOffset:
    """One share-partition's start offset (-1: none), leader epoch and lag (-1: unknown)."""

    tp: TP
    start_offset: int
    leader_epoch: int
    lag: int


class ShareGroupsClient:
    """One kafka-python admin connection for a command run; `close()` releases it."""

    def __init__(self, client_config: dict[str, str], timeout_s: float) -> None:
        timeout_ms = int(timeout_s * 1000)
        try:
            self.admin = ToolAdminClient(**kafka_python_config(client_config), request_timeout_ms=timeout_ms,
                                         bootstrap_timeout_ms=timeout_ms)
        except Exception as exc:  # kafka-python raises a family of errors on connect
            raise ToolError(f"Connecting failed: {exc}") from None

    def close(self) -> None:
        self.admin.close()

    def _run(self, what: str, call: Any, *args: Any) -> Any:
        """admin's event loop runs `call(*args)`; kafka-python's errors become ToolError."""
        try:
            return self.admin._manager.run(call, *args)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"{what} failed: {exc}") from None

    async def _coordinator(self, group: str) -> int:
        return (await self.admin._find_coordinator_ids([group]))[group]

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, sorted (ListGroups v5, types filter "share")."""
        try:
            found = self.admin.list_groups(types_filter=["share"])
        except Exception as exc:
            raise ToolError(f"ListGroups failed: {exc}") from None
        return sorted((g["group_id"], g.get("group_state") or "") for g in found
                      if (g.get("group_type") or g.get("protocol_type") or "").lower() == "share")

    def describe(self, groups: list[str]) -> dict[str, ShareGroupDescription | str]:
        """ShareGroupDescribe of each group at its coordinator; an error string for a group
        that could not be described (missing, another kind, denied)."""
        return self._run("ShareGroupDescribe", self._describe, groups)

    async def _describe(self, groups: list[str]) -> dict[str, ShareGroupDescription | str]:
        result: dict[str, ShareGroupDescription | str] = {}
        for group in groups:
            node = await self._coordinator(group)
            broker = self.admin._manager.cluster.broker_metadata(node)
            response = await self.admin._manager.send(
                ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), node_id=node)
            for g in response.groups:
                if g.error_code:
                    result[g.group_id] = error_string(g.error_code, g.error_message)
                    continue
                members = tuple(ShareMember(m.member_id, m.client_id, m.client_host, m.member_epoch, tuple(sorted(
                    TP(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions)))
                    for m in g.members)
                result[g.group_id] = ShareGroupDescription(
                    g.group_id, g.group_state, g.group_epoch, g.assignment_epoch,
                    (node, broker.host if broker else "", broker.port if broker else -1), members)
        return result

    def offsets(self, group: str) -> list[ShareOffset]:
        """DescribeShareGroupOffsets of every topic the group has state for."""
        return self._run("DescribeShareGroupOffsets", self._offsets, group)

    async def _offsets(self, group: str) -> list[ShareOffset]:
        node = await self._coordinator(group)
        request = DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)])
        response = await self.admin._manager.send(request, node_id=node)
        rows = []
        for g in response.groups:
            if g.error_code:
                raise ToolError(f"DescribeShareGroupOffsets failed: {error_string(g.error_code, g.error_message)}")
            for t in g.topics:
                for p in t.partitions:
                    rows.append(ShareOffset(TP(t.topic_name, p.partition_index), p.start_offset, p.leader_epoch,
                                            getattr(p, "lag", -1)))
        return sorted(rows, key=lambda r: r.tp)

    def alter(self, group: str, offsets: dict[TP, int]) -> dict[TP, str | None]:
        """AlterShareGroupOffsets: per partition None or its error; a top-level error raises."""
        return self._run("AlterShareGroupOffsets", self._alter, group, offsets)

    async def _alter(self, group: str, offsets: dict[TP, int]) -> dict[TP, str | None]:
        node = await self._coordinator(group)
        topic_type = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
        partition_type = topic_type.AlterShareGroupOffsetsRequestPartition
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(partition_type(partition_index=tp.partition, start_offset=offset))
        request = AlterShareGroupOffsetsRequest(group_id=group, topics=[
            topic_type(topic_name=t, partitions=ps) for t, ps in by_topic.items()])
        response = await self.admin._manager.send(request, node_id=node)
        if response.error_code:
            raise ToolError(f"AlterShareGroupOffsets failed: {error_string(response.error_code, response.error_message)}")
        return {TP(t.topic_name, p.partition_index): error_string(p.error_code, p.error_message) if p.error_code
                else None for t in response.responses for p in t.partitions}

    def delete_offsets(self, group: str, topics: list[str]) -> dict[str, str | None]:
        """DeleteShareGroupOffsets: per topic None or its error; a top-level error raises."""
        return self._run("DeleteShareGroupOffsets", self._delete_offsets, group, topics)

    async def _delete_offsets(self, group: str, topics: list[str]) -> dict[str, str | None]:
        node = await self._coordinator(group)
        topic_type = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
        request = DeleteShareGroupOffsetsRequest(group_id=group, topics=[topic_type(topic_name=t) for t in topics])
        response = await self.admin._manager.send(request, node_id=node)
        if response.error_code:
            raise ToolError(f"DeleteShareGroupOffsets failed: "
                            f"{error_string(response.error_code, response.error_message)}")
        return {t.topic_name: error_string(t.error_code, t.error_message) if t.error_code else None
                for t in response.responses}

    def delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        """DeleteGroups at each group's coordinator: per group None or its error."""
        return self._run("DeleteGroups", self._delete_groups, groups)

    async def _delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        result: dict[str, str | None] = {}
        for group in groups:
            node = await self._coordinator(group)
            response = await self.admin._manager.send(DeleteGroupsRequest(groups_names=[group]), node_id=node)
            for entry in response.results:
                result[entry.group_id] = error_string(entry.error_code) if entry.error_code else None
        return result

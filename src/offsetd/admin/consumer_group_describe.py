"""ConsumerGroupDescribe (API 69, KIP-848) through kafka-python, for what confluent-kafka's
describe leaves out: the group epoch, the target assignment epoch and each member's epoch
(`kafka-consumer-groups --describe --members/--state --verbose`).

kafka-python 3.0 has no class for API 69, so its request and response are kafka-python messages
built from the two schema files beside this module (the wire format of reference B8), sent over
kafka-python's own connections (TLS, SASL) to each group's coordinator. A cluster that does not
serve API 69 has no consumer-protocol groups: `describe_epochs` then answers nothing and the tool
shows `-`, as for classic groups."""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass

from kafka.protocol.api_message import ApiMessage

from .kafka_python_admin import ToolAdminClient
from .model import TP

CONSUMER_GROUP_DESCRIBE = 69


class ConsumerGroupDescribeRequest(ApiMessage, load_json=sys.modules[__name__]):
    """ConsumerGroupDescribe request v0-1: GroupIds, IncludeAuthorizedOperations."""


class ConsumerGroupDescribeResponse(ApiMessage, load_json=sys.modules[__name__]):
    """ConsumerGroupDescribe response v0-1: per group its epochs and members."""


@dataclass(frozen=True)
class MemberEpochs:
    """One member's epoch and target assignment; `member_type` -1 unknown (v0), 0 a classic-protocol
    member, 1 a consumer-protocol member."""

    member_epoch: int
    target_assignment: tuple[TP, ...]
    member_type: int


@dataclass(frozen=True)
class GroupEpochs:
    """A consumer group's epochs, and its members' by member id."""

    group_epoch: int
    assignment_epoch: int
    members: dict[str, MemberEpochs]


def _partitions(assignment: object) -> tuple[TP, ...]:
    """An Assignment struct's partitions, by topic name."""
    return tuple(sorted(TP(tp.topic_name, p) for tp in assignment.topic_partitions  # type: ignore[attr-defined]
                        for p in tp.partitions))


def describe_epochs(admin: ToolAdminClient, groups: list[str]) -> dict[str, GroupEpochs]:
    """The epochs of those groups that are consumer groups (others answer an error and are left
    out); empty when the cluster does not serve API 69. Raises kafka-python's errors otherwise."""
    versions = admin.api_versions()
    if CONSUMER_GROUP_DESCRIBE not in {int(key) for key in versions} or not groups:
        return {}
    return admin._manager.run(_describe, admin, groups)


async def _describe(admin: ToolAdminClient, groups: list[str]) -> dict[str, GroupEpochs]:
    """One request per coordinator for its groups."""
    by_node: dict[int, list[str]] = defaultdict(list)
    for group, node in (await admin._find_coordinator_ids(groups)).items():
        by_node[node].append(group)
    result = {}
    for node, ids in by_node.items():
        request = ConsumerGroupDescribeRequest(group_ids=ids, include_authorized_operations=False)
        response = await admin._manager.send(request, node_id=node)
        for g in response.groups:
            if g.error_code == 0:
                members = {m.member_id: MemberEpochs(m.member_epoch, _partitions(m.target_assignment),
                                                     getattr(m, "member_type", -1))
                           for m in g.members}
                result[g.group_id] = GroupEpochs(g.group_epoch, g.assignment_epoch, members)
    return result

"""The value of a GroupMetadata record (key version 2): a classic group's protocol, generation and
members, in value versions 0..4 (reference §4.7)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from offsetd.records.coordinator_serde import (
    INT16,
    INT32,
    INT64,
    NO_TAGGED_FIELDS,
    RecordDecodeError,
    as_bytes,
    check_end,
    read_length,
    read_required_bytes,
    read_required_string,
    read_string,
    skip_tagged_fields,
    write_bytes,
    write_compact_bytes,
    write_compact_string,
    write_string,
)
from offsetd.records.varint import encode_uvarint

__all__ = ["MemberMetadata", "GroupMetadataValue", "encode_group_metadata_value", "decode_group_metadata_value"]

_h_unpack = INT16.unpack_from
_i_unpack = INT32.unpack_from
_q_unpack = INT64.unpack_from


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One classic-group member as stored in a GroupMetadata value."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """Value of a GroupMetadata record: a classic group's generation and members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]



# ---------------------------------------------------------------------------------------------
# GroupMetadata values (§4.7)
#
#   int16 ver | string protocolType | int32 generation | nullable-string protocol |
#   nullable-string leader | [int64 currentStateTimestamp, v2+] | array members |
#   [tagged fields, v4]
#   member: string memberId | [nullable-string groupInstanceId, v3+] | string clientId |
#           string clientHost | [int32 rebalanceTimeout, v1+] | int32 sessionTimeout |
#           bytes subscription | bytes assignment | [tagged fields, v4]
# ---------------------------------------------------------------------------------------------


def encode_group_metadata_value(v: GroupMetadataValue, version: int | None = None) -> bytes:
    """Serialize at `version` (default 3); fields the version lacks are dropped."""
    if version is None:
        version = 3
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue version {version} is not one of 0..4")
    flex = version >= 4
    s = write_compact_string if flex else write_string
    b = write_compact_bytes if flex else write_bytes
    out = [INT16.pack(version), s(v.protocol_type if v.protocol_type is not None else ""),
           INT32.pack(v.generation), s(v.protocol), s(v.leader)]
    if version >= 2:
        out.append(INT64.pack(v.current_state_timestamp))
    out.append(encode_uvarint(len(v.members) + 1) if flex else INT32.pack(len(v.members)))
    for m in v.members:
        out.append(s(m.member_id))
        if version >= 3:
            out.append(s(m.group_instance_id))
        out.append(s(m.client_id))
        out.append(s(m.client_host))
        if version >= 1:
            out.append(INT32.pack(m.rebalance_timeout))
        out.append(INT32.pack(m.session_timeout))
        out.append(b(m.subscription))
        out.append(b(m.assignment))
        if flex:
            out.append(NO_TAGGED_FIELDS)
    if flex:
        out.append(NO_TAGGED_FIELDS)
    return b"".join(out)


def decode_group_metadata_value(data: bytes | bytearray | memoryview) -> GroupMetadataValue:
    """Decode a GroupMetadata value of version 0..4 (rebalance timeout -1 -> session timeout)."""
    d = as_bytes(data)
    try:
        (version,) = _h_unpack(d, 0)
        if not 0 <= version <= 4:
            raise RecordDecodeError(f"unknown GroupMetadata value version {version}")
        flex = version >= 4
        protocol_type, p = read_string(d, 2, flex)
        if protocol_type is None:  # tolerated: "" and null both mean "no protocol type"
            protocol_type = ""
        (generation,) = _i_unpack(d, p)
        protocol, p = read_string(d, p + 4, flex)
        leader, p = read_string(d, p, flex)
        current_state_timestamp = -1
        if version >= 2:
            (current_state_timestamp,) = _q_unpack(d, p)
            p += 8
        count, p = read_length(d, p, flex, INT32)
        if count < 0:
            raise RecordDecodeError(f"non-nullable array members has count {count}")
        if count > len(d):  # every member takes well over one byte: garbage count
            raise RecordDecodeError(f"members count {count} exceeds the buffer")
        members = []
        for _ in range(count):
            member_id, p = read_required_string(d, p, flex, "memberId")
            instance_id = None
            if version >= 3:
                instance_id, p = read_string(d, p, flex)
            client_id, p = read_required_string(d, p, flex, "clientId")
            client_host, p = read_required_string(d, p, flex, "clientHost")
            rebalance_timeout = -1
            if version >= 1:
                (rebalance_timeout,) = _i_unpack(d, p)
                p += 4
            (session_timeout,) = _i_unpack(d, p)
            subscription, p = read_required_bytes(d, p + 4, flex, "subscription")
            assignment, p = read_required_bytes(d, p, flex, "assignment")
            if flex:
                p = skip_tagged_fields(d, p)
            if rebalance_timeout == -1:
                rebalance_timeout = session_timeout
            members.append(
                MemberMetadata(
                    member_id, instance_id, client_id, client_host,
                    rebalance_timeout, session_timeout, subscription, assignment,
                )
            )
        if flex:
            p = skip_tagged_fields(d, p)
        check_end(d, p, f"GroupMetadata value v{version}")
    except (struct.error, IndexError) as exc:
        raise RecordDecodeError(f"truncated GroupMetadata value: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in GroupMetadata value: {exc}") from exc
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )

"""The few Kafka requests the soak's simulated group members send, written and read by hand in
their non-flexible versions (request header v1, response header v0) over asyncio streams: a
thousand connections and hundreds of members in one process cost too much with a client library
thread per member. Only the fields the load looks at are decoded."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

API_VERSIONS, FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT = 18, 10, 11, 14, 12, 13, 8
CLIENT_ID = b"soak"


def _str(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _nullable_str(value: str | None) -> bytes:
    return b"\xff\xff" if value is None else _str(value)


def _bytes(value: bytes) -> bytes:
    return struct.pack(">i", len(value)) + value


class Reader:
    """Reads big-endian fields from a response body in order."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def int16(self) -> int:
        (value,) = struct.unpack_from(">h", self.data, self.pos)
        self.pos += 2
        return value

    def int32(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        value = self.data[self.pos:self.pos + size].decode()
        self.pos += size
        return value

    def blob(self) -> bytes:
        size = self.int32()
        value = self.data[self.pos:self.pos + max(size, 0)]
        self.pos += max(size, 0)
        return value


# ConsumerProtocolSubscription v0 / ConsumerProtocolAssignment v0 for one topic (reference §4.8)
def subscription(topic: str) -> bytes:
    """The `consumer` protocol's subscription metadata naming `topic`."""
    return struct.pack(">hi", 0, 1) + _str(topic) + _bytes(b"")


def assignment(topic: str, partitions: list[int]) -> bytes:
    """The `consumer` protocol's assignment of `partitions` of `topic`."""
    body = struct.pack(">hi", 0, 1) + _str(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    return body + _bytes(b"")


def assigned_partitions(data: bytes) -> list[int]:
    """The partitions (of any topic) in a `consumer` protocol assignment."""
    r = Reader(data)
    if len(data) < 6:
        return []
    r.int16()
    partitions: list[int] = []
    for _ in range(r.int32()):
        r.string()
        partitions.extend(r.int32() for _ in range(r.int32()))
    return partitions


@dataclass
class JoinResult:
    """What a member needs from JoinGroup: the leader also gets every member's id."""
    error: int
    generation: int
    leader: str
    member_id: str
    members: list[str]


class Connection:
    """One Kafka connection with one request in flight at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    @classmethod
    async def open(cls, address: str) -> "Connection":
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    async def call(self, api_key: int, version: int, body: bytes, timeout: float = 30.0) -> Reader:
        """Send one request and return a reader over its response body."""
        self.correlation_id += 1
        head = struct.pack(">hhi", api_key, version, self.correlation_id) + _str(CLIENT_ID.decode())
        payload = head + body
        self.writer.write(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))
        frame = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        (correlation,) = struct.unpack_from(">i", frame)
        if correlation != self.correlation_id:
            raise ConnectionError(f"response {correlation} to request {self.correlation_id}")
        return Reader(frame[4:])

    def close(self) -> None:
        self.writer.close()

    async def api_versions(self) -> int:
        """ApiVersions v0's error code."""
        return (await self.call(API_VERSIONS, 0, b"")).int16()

    async def find_coordinator(self, group: str) -> tuple[int, str]:
        """FindCoordinator v1: (error, "host:port")."""
        r = await self.call(FIND_COORDINATOR, 1, _str(group) + b"\x00")
        r.int32()
        error = r.int16()
        r.string()
        r.int32()
        host = r.string()
        return error, f"{host}:{r.int32()}"

    async def join_group(self, group: str, member_id: str, topic: str, session_ms: int) -> JoinResult:
        """JoinGroup v5 with the `consumer` protocol type and one `range` protocol."""
        body = (_str(group) + struct.pack(">ii", session_ms, session_ms) + _str(member_id) + _nullable_str(None)
                + _str("consumer") + struct.pack(">i", 1) + _str("range") + _bytes(subscription(topic)))
        r = await self.call(JOIN_GROUP, 5, body, timeout=session_ms / 1000 + 30)
        r.int32()
        error, generation = r.int16(), r.int32()
        r.string()
        leader, member = r.string() or "", r.string() or ""
        members = []
        for _ in range(max(r.int32(), 0)):
            members.append(r.string() or "")
            r.string()
            r.blob()
        return JoinResult(error, generation, leader, member, members)

    async def sync_group(self, group: str, generation: int, member_id: str,
                         assignments: dict[str, bytes]) -> tuple[int, bytes]:
        """SyncGroup v3: (error, this member's assignment)."""
        body = _str(group) + struct.pack(">i", generation) + _str(member_id) + _nullable_str(None)
        body += struct.pack(">i", len(assignments)) + b"".join(_str(m) + _bytes(a) for m, a in assignments.items())
        r = await self.call(SYNC_GROUP, 3, body, timeout=60)
        r.int32()
        return r.int16(), r.blob()

    async def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        """Heartbeat v3's error code."""
        r = await self.call(HEARTBEAT, 3, _str(group) + struct.pack(">i", generation) + _str(member_id)
                            + _nullable_str(None))
        r.int32()
        return r.int16()

    async def offset_commit(self, group: str, generation: int, member_id: str, topic: str,
                            offsets: dict[int, int]) -> list[int]:
        """OffsetCommit v7: the error code of each partition."""
        body = _str(group) + struct.pack(">i", generation) + _str(member_id) + _nullable_str(None)
        body += struct.pack(">i", 1) + _str(topic) + struct.pack(">i", len(offsets))
        body += b"".join(struct.pack(">iqi", p, o, -1) + _nullable_str(None) for p, o in offsets.items())
        r = await self.call(OFFSET_COMMIT, 7, body)
        r.int32()
        errors = []
        for _ in range(r.int32()):
            r.string()
            for _ in range(r.int32()):
                r.int32()
                errors.append(r.int16())
        return errors

    async def leave_group(self, group: str, member_id: str) -> int:
        """LeaveGroup v3's top-level error code."""
        r = await self.call(LEAVE_GROUP, 3, _str(group) + struct.pack(">i", 1) + _str(member_id) + _nullable_str(None))
        r.int32()
        return r.int16()

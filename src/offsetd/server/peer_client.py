"""Requests from this broker to another broker of the cluster: WriteTxnMarkers v1, which a
transaction coordinator sends to the leaders of the partitions it does not lead (reference A7).

One connection per node, one request in flight on it at a time (markers are few); a failed
connection is dropped and the caller retries.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Callable

from ..protocol.codec import decode_body, entity_writer, request_class, response_class, skip_tagged_fields

WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1
CLIENT_ID = b"offsetd-broker"
TIMEOUT_S = 10.0


class PeerClient:
    """Sends requests to the other brokers, found through `endpoint(node_id)`."""

    def __init__(self, endpoint: Callable[[int], tuple[str, int] | None]) -> None:
        self.endpoint = endpoint
        self._connections: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._correlation = 0

    async def write_txn_markers(self, node: int, body: dict[str, Any]) -> dict[tuple[str, int], int]:
        """Send WriteTxnMarkers to `node`; the error code of each (topic, partition)."""
        response = await self.request(node, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
        return {(topic.name, p.partition_index): int(p.error_code)
                for marker in response.markers for topic in marker.topics for p in topic.partitions}

    async def request(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            try:
                return await asyncio.wait_for(self._exchange(node, api_key, version, body), TIMEOUT_S)
            except BaseException:
                self._drop(node)
                raise

    async def _exchange(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
        reader, writer = await self._connect(node)
        self._correlation += 1
        cls = request_class(api_key, version)
        frame = bytearray(struct.pack(">hhih", api_key, version, self._correlation, len(CLIENT_ID)) + CLIENT_ID)
        if cls.__flexible__:
            frame.append(0)  # header v2: no tagged fields
        entity_writer(cls)(frame, body)
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        reply = memoryview(await reader.readexactly(size))
        if struct.unpack_from(">i", reply, 0)[0] != self._correlation:
            raise ConnectionError("a response out of order from a peer broker")
        pos = skip_tagged_fields(reply, 4) if cls.__flexible__ else 4
        return decode_body(response_class(api_key, version), reply, pos)

    async def _connect(self, node: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        connection = self._connections.get(node)
        if connection is not None and not connection[1].is_closing():
            return connection
        endpoint = self.endpoint(node)
        if endpoint is None:
            raise ConnectionError(f"no address known for broker {node}")
        connection = self._connections[node] = await asyncio.open_connection(*endpoint)
        return connection

    def _drop(self, node: int) -> None:
        connection = self._connections.pop(node, None)
        if connection is not None:
            connection[1].close()

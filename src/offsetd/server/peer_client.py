"""Requests from this broker to another broker of the cluster: WriteTxnMarkers v1, which a
transaction coordinator sends to the leaders of the partitions it does not lead (reference A7).

One connection per node, one request in flight on it at a time (markers are few); a failed
connection is dropped and the caller retries. On a TLS or SASL listener the connection is opened
with TLS and authenticated before its first request (SASL PLAIN or SCRAM with the JAAS
`username`/`password` of the inter-broker mechanism, Kafka's broker identity).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Callable

from scramp import ScramClient, ScramException

from ..protocol.codec import decode_body, request_class, response_class
from ..protocol.encoder import entity_writer
from ..protocol.primitives import skip_tagged_fields

WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1
CLIENT_ID = b"offsetd-broker"
TIMEOUT_S = 10.0
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass(frozen=True)
class PeerSecurity:
    """How this broker connects to its peers' inter-broker listener."""

    tls: ssl.SSLContext | None = None  # TLS to the peers, None: plaintext
    login: tuple[str, str, str] | None = None  # SASL (mechanism, username, password), None: no SASL


class PeerAuthenticationError(ConnectionError):
    """A peer refused this broker's SASL credentials."""


class PeerClient:
    """Sends requests to the other brokers, found through `endpoint(node_id)`."""

    def __init__(self, endpoint: Callable[[int], tuple[str, int] | None],
                 security: PeerSecurity = PeerSecurity()) -> None:
        self.endpoint = endpoint
        self.security = security
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
        return await self._call(reader, writer, api_key, version, body)

    async def _call(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: int, version: int,
                    body: dict[str, Any]) -> Any:
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
        reader, writer = await asyncio.open_connection(*endpoint, ssl=self.security.tls)
        try:
            if self.security.login is not None:
                await self._authenticate(reader, writer, *self.security.login)
        except BaseException:
            writer.close()
            raise
        connection = self._connections[node] = (reader, writer)
        return connection

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mechanism: str,
                            user: str, password: str) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 exchanges: one PLAIN token (RFC 4616: NUL user
        NUL password), or SCRAM's two rounds (RFC 5802, the server's signature checked)."""
        handshake = await self._call(reader, writer, SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if handshake.error_code != 0:
            raise PeerAuthenticationError(f"peer refused SASL {mechanism} (error {int(handshake.error_code)})")

        async def send(token: bytes) -> bytes:
            reply = await self._call(reader, writer, SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if reply.error_code != 0:
                raise PeerAuthenticationError(f"peer refused this broker's credentials: {reply.error_message}")
            return bytes(reply.auth_bytes)

        if mechanism == "PLAIN":
            await send(b"\0" + user.encode() + b"\0" + password.encode())
            return
        scram = ScramClient([mechanism], user, password)
        try:
            scram.set_server_first((await send(scram.get_client_first().encode())).decode())
            scram.set_server_final((await send(scram.get_client_final().encode())).decode())
        except (ScramException, UnicodeDecodeError) as exc:
            raise PeerAuthenticationError(f"SCRAM with a peer failed: {exc}") from None

    def _drop(self, node: int) -> None:
        connection = self._connections.pop(node, None)
        if connection is not None:
            connection[1].close()

"""Blocking raw Kafka requests for the workloads' setup and probes, written and read with kio
(the schema library the protocol tests use), not offsetd's codec: requests a client library
does not offer (ConsumerGroupHeartbeat at scale) or cannot take (a million-group ListGroups)."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any


def encode_request(api_key: int, version: int, body: Any, correlation_id: int) -> bytes:
    """A framed request (header v2, client id "bench") with kio's writer."""
    from kio.index import load_request_schema
    from kio.serial import entity_writer

    cls = load_request_schema(api_key, version)
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    payload = struct.pack(">hhih", api_key, version, correlation_id, 5) + b"bench" + b"\x00" + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """A response body (header v1: correlation id and no tagged fields) with kio's reader."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    return entity_reader(load_response_schema(api_key, version))(frame, 5)[0]


class RawConnection:
    """One blocking connection for request/response calls (setup and probes)."""

    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: Any) -> Any:
        return decode_response(api_key, version, self.call_raw(api_key, version, body))

    def call_raw(self, api_key: int, version: int, body: Any) -> bytes:
        """The response frame, undecoded (a bench timing the broker, not kio's reader)."""
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, body, self.correlation_id))
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        if struct.unpack_from(">i", frame)[0] != self.correlation_id:
            raise RuntimeError("response out of order")
        return frame

    def _read(self, n: int) -> bytes:
        data = bytearray(n)
        view, got = memoryview(data), 0
        while got < n:
            read = self.sock.recv_into(view[got:])
            if not read:
                raise ConnectionError("broker closed the connection")
            got += read
        return bytes(data)

    def close(self) -> None:
        self.sock.close()

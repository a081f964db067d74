"""A minimal Kafka protocol client for tests that need exact requests or deliberately bad bytes.
Requests are written with kio's own writer, responses read with kio's reader, so offsetd's codec
is checked against an independent implementation."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any, get_args

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


def build(cls: type, data: dict[str, Any]) -> Any:
    """A kio request entity from plain data (lists of dicts become tuples of the nested entity)."""
    kwargs = {}
    for name, f in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        if name not in data:
            continue
        value = data[name]
        if isinstance(value, list):
            kind = f.type
            if type(None) in get_args(kind):  # nullable array: `tuple[X, ...] | None`
                kind = next(a for a in get_args(kind) if a is not type(None))
            elem = get_args(kind)[0]
            value = tuple(build(elem, v) if isinstance(v, dict) else v for v in value)
        kwargs[name] = value
    return cls(**kwargs)


class RawClient:
    """One TCP connection speaking framed Kafka requests."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def encode_request(self, api_key: int, version: int, body: Any, client_id: str = "raw-test") -> bytes:
        cls = load_request_schema(api_key, version)
        self.correlation_id += 1
        head = struct.pack(">hhi", api_key, version, self.correlation_id)
        cid = client_id.encode()
        head += struct.pack(">h", len(cid)) + cid
        if cls.__flexible__:
            head += b"\x00"
        buf = io.BytesIO()
        entity_writer(cls)(buf, body)
        return head + buf.getvalue()

    def read_frame(self) -> bytes | None:
        """The next response frame, or None when the broker closed the connection."""
        size_bytes = self._read_exact(4)
        if size_bytes is None:
            return None
        (size,) = struct.unpack(">i", size_bytes)
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, api_key: int, version: int, body: Any, response_version: int | None = None) -> Any:
        """Send a request and decode its response (response_version: for ApiVersions fallback)."""
        self.send_frame(self.encode_request(api_key, version, body))
        frame = self.read_frame()
        assert frame is not None, "broker closed the connection"
        return decode_response(api_key, response_version if response_version is not None else version,
                               frame, self.correlation_id)

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True once the broker has closed this connection (reads hit EOF)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


def decode_response(api_key: int, version: int, frame: bytes, correlation_id: int) -> Any:
    cls = load_response_schema(api_key, version)
    (corr,) = struct.unpack_from(">i", frame, 0)
    assert corr == correlation_id, (corr, correlation_id)
    pos = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
    body, _ = entity_reader(cls)(frame, pos)
    return body

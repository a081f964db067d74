"""A handler that meets an OSError is answered as Kafka answers an unexpected error (top-level
UNKNOWN_SERVER_ERROR with the reason) instead of closing the connection, where the response has a
top-level error code (server/app.py `_failure_body`)."""

from __future__ import annotations

import errno

from offsetd.protocol.api_versions import ApiKey
from offsetd.protocol.encoder import encode_response
from offsetd.protocol.errors import Error
from offsetd.server.app import _failure_body

DISK_FULL = OSError(errno.ENOSPC, "No space left on device")


def test_an_os_error_gets_unknown_server_error_with_the_reason() -> None:
    body = _failure_body(ApiKey.INIT_PRODUCER_ID, 4, DISK_FULL)
    assert body == {"error_code": Error.UNKNOWN_SERVER_ERROR}
    encode_response(ApiKey.INIT_PRODUCER_ID, 4, 7, body)  # every other field takes its default
    body = _failure_body(ApiKey.DESCRIBE_ACLS, 1, DISK_FULL)
    assert body == {"error_code": Error.UNKNOWN_SERVER_ERROR, "error_message": "No space left on device"}
    encode_response(ApiKey.DESCRIBE_ACLS, 1, 7, body)


def test_other_failures_and_per_partition_responses_still_close() -> None:
    assert _failure_body(ApiKey.INIT_PRODUCER_ID, 4, ValueError("bug")) is None
    assert _failure_body(ApiKey.PRODUCE, 9, DISK_FULL) is None  # no top-level code: answered per partition

"""The metrics listener's Guard for this broker: open while no authorizer is configured (stub)."""

from __future__ import annotations

from typing import Any

from ..metrics.guard import Guard, OpenGuard


def http_guard(server: Any) -> Guard:
    """The Guard for `server` (a server.app.KafkaServer)."""
    return OpenGuard()

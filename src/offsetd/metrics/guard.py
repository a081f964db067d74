"""Who is asking the HTTP endpoint, and what they may see (stub: everyone sees everything)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..lag.model import LagSnapshot


class Unauthorized(Exception):
    """No or wrong credentials: answered 401 with `WWW-Authenticate: Basic realm="offsetd"`."""


@dataclass(frozen=True)
class Caller:
    """The authenticated principal (`User:alice`), or None when security is off."""

    principal: str | None
    host: str


class Guard(Protocol):
    def authenticate(self, headers: dict[str, str], host: str) -> Caller: ...

    def visible(self, caller: Caller, snapshot: LagSnapshot) -> LagSnapshot: ...

    def may_describe_group(self, caller: Caller, group: str) -> bool: ...


class OpenGuard:
    """Security off (no authorizer): anyone who reaches the listener reads everything, as before."""

    def authenticate(self, headers: dict[str, str], host: str) -> Caller:
        return Caller(None, host)

    def visible(self, caller: Caller, snapshot: LagSnapshot) -> LagSnapshot:
        return snapshot

    def may_describe_group(self, caller: Caller, group: str) -> bool:
        return True

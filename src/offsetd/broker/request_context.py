"""The request being handled: who sent it, from where, on which listener.

The server's dispatch sets it once per request. It is a ContextVar so that a Fetch long poll's
task, which copied the context, still answers for its own request. Handlers below the server read
it for the listener (Metadata and FindCoordinator answer with that listener's endpoints,
reference security.md §1) and for authorization (security/authorization.py's Access)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

REQUEST_CONTEXT: ContextVar[Any] = ContextVar("request_context", default=None)


class _Anonymous:
    """What current_context() answers before any request set one (tests driving handlers)."""

    client_id = ""
    principal = "User:ANONYMOUS"
    host = ""


ANONYMOUS = _Anonymous()


def current_context() -> Any:
    """The context of the request being handled."""
    ctx = REQUEST_CONTEXT.get()
    return ANONYMOUS if ctx is None else ctx


def request_listener(listener: str | None = None) -> str:
    """`listener` if given, else the current request's; "" (no request, e.g. a background task)
    means the first listener."""
    if listener is not None:
        return listener
    ctx = REQUEST_CONTEXT.get()
    return "" if ctx is None else ctx.listener

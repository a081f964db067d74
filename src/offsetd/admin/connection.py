"""The tools' admin connection (confluent-kafka's AdminClient): futures awaited against a
deadline, and a failed login or TLS handshake failing the call at once. librdkafka reports those
only through its error callback and otherwise retries them until the request times out, so a
wrong password would look like a slow cluster."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any, Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from .errors import ToolError, UsageError

# librdkafka logs connection trouble itself; the tools report failures once (errors via error_cb).
QUIET = logging.getLogger("offsetd.admin.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False

# librdkafka errors after which retrying cannot help: wrong credentials, a TLS failure.
FATAL_CODES = (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)


def error_text(exc: KafkaException) -> str:
    """`NAME: message` of a KafkaException."""
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return str(exc)


class AdminConnection:
    """One AdminClient for one command run."""

    def __init__(self, client_config: dict[str, str], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._fatal: str | None = None
        try:
            self.admin = AdminClient({**client_config, "error_cb": self._on_error, "logger": QUIET})
        except KafkaException as exc:  # an unknown or malformed key in --command-config: bad input
            err = exc.args[0] if exc.args else None
            raise UsageError(f"Invalid client configuration: {err.str() if isinstance(err, KafkaError) else exc}") from None

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in FATAL_CODES:
            self._fatal = f"{err.name()}: {err.str()}"

    def result(self, future: Future, timeout_s: float | None = None) -> Any:
        """`future.result(timeout_s)` (KafkaException on a refusal, TimeoutError at the deadline;
        default: the connection's timeout), but ToolError as soon as the login or TLS fails."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            self.admin.poll(0)  # serves error_cb
            if self._fatal:
                raise ToolError(self._fatal)
            try:
                return future.result(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise

    def check_login(self) -> None:
        """ToolError if logging in fails, found within a round trip (DescribeCluster): for tools
        whose own client (kafka-python) retries a failed login silently until its timeout. Any
        other outcome is left to that client to meet and report."""
        try:
            self.result(self.admin.describe_cluster(request_timeout=self.timeout_s))
        except (KafkaException, TimeoutError):
            pass

    def wait(self, futures: Iterable[Future]) -> list[Any]:
        """The futures' results within the timeout; ToolError on a refusal (the first failed
        future), a fatal connection error, or the deadline."""
        deadline = time.monotonic() + self.timeout_s
        results = []
        for future in list(futures):
            try:
                results.append(self.result(future, max(0.0, deadline - time.monotonic())))
            except KafkaException as exc:
                raise ToolError(error_text(exc)) from None
            except TimeoutError:
                raise ToolError(f"no answer within {self.timeout_s:g} s") from None
        return results

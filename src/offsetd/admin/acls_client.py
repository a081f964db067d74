"""The admin connection of `offsetd acls` and `offsetd configs` (confluent-kafka's AdminClient):
futures awaited against one deadline, and an authentication or TLS failure, which librdkafka
reports through its error callback and otherwise retries until the timeout, failing the call at
once. Also the conversions between offsetd's ACL model and confluent-kafka's AclBinding."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any, Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient

from .acls import AccessEntry, Acl, AclOperation, AclPermission, PatternType, ResourcePattern, ResourceType
from .errors import ToolError, UsageError

# librdkafka logs connection trouble itself; the tools report failures once (errors via error_cb).
_QUIET = logging.getLogger("offsetd.admin.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

# librdkafka errors after which retrying cannot help: wrong credentials, a TLS failure.
_FATAL_CODES = (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)


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
            self.admin = AdminClient({**client_config, "error_cb": self._on_error, "logger": _QUIET})
        except KafkaException as exc:  # an unknown or malformed key in --command-config: bad input
            raise UsageError(f"Invalid client configuration: {error_text(exc)}") from None

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in _FATAL_CODES:
            self._fatal = f"{err.name()}: {err.str()}"

    def wait(self, futures: Iterable[Future]) -> list[Any]:
        """The futures' results within the timeout; ToolError on a refusal (the first failed
        future), a fatal connection error, or the deadline."""
        deadline = time.monotonic() + self.timeout_s
        results = []
        for future in list(futures):
            while True:
                if self._fatal:
                    raise ToolError(self._fatal)
                try:
                    results.append(future.result(timeout=min(0.1, max(0.0, deadline - time.monotonic()))))
                    break
                except KafkaException as exc:
                    raise ToolError(error_text(exc)) from None
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise ToolError(f"no answer within {self.timeout_s:g} s") from None
        return results


def to_binding(resource: ResourcePattern, entry: AccessEntry) -> AclBinding:
    """Our ACL as confluent-kafka's (the wire codes are the same; CLUSTER is its BROKER)."""
    return AclBinding(int(resource.resource_type), resource.name, int(resource.pattern_type), entry.principal,
                      entry.host, int(entry.operation), int(entry.permission))


def to_filter(resource: ResourcePattern, entry: AccessEntry | None) -> AclBindingFilter:
    """A filter on `resource` (with `entry`: that ACL only; without: all of the resource's)."""
    if entry is None:
        entry = AccessEntry(None, None, AclOperation.ANY, AclPermission.ANY)
    return AclBindingFilter(int(resource.resource_type), resource.name, int(resource.pattern_type), entry.principal,
                            entry.host, int(entry.operation), int(entry.permission))


def from_binding(binding: Any) -> Acl:
    """confluent-kafka's AclBinding as ours."""
    return Acl(ResourcePattern(ResourceType(binding.restype.value), binding.name,
                               PatternType(binding.resource_pattern_type.value)),
               AccessEntry(binding.principal, binding.host, AclOperation(binding.operation.value),
                           AclPermission(binding.permission_type.value)))


class AclAdmin(AdminConnection):
    """CreateAcls, DeleteAcls and DescribeAcls."""

    def create(self, acls: list[AclBinding]) -> None:
        self.wait(self.admin.create_acls(acls, request_timeout=self.timeout_s).values())

    def delete(self, filters: list[AclBindingFilter]) -> list[Acl]:
        results = self.wait(self.admin.delete_acls(filters, request_timeout=self.timeout_s).values())
        return [from_binding(b) for deleted in results for b in deleted]

    def describe(self, flt: AclBindingFilter) -> list[Acl]:
        return [from_binding(b) for b in self.wait([self.admin.describe_acls(flt, request_timeout=self.timeout_s)])[0]]

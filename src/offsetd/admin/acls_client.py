"""`offsetd acls`' admin calls (CreateAcls, DeleteAcls, DescribeAcls) and the conversions
between offsetd's ACL model and confluent-kafka's AclBinding."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AclBinding, AclBindingFilter

from .acls import AccessEntry, Acl, AclOperation, AclPermission, PatternType, ResourcePattern, ResourceType
from .connection import AdminConnection
from .errors import ToolError


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

    def __init__(self, client_config: dict[str, str], timeout_s: float) -> None:
        super().__init__(client_config, timeout_s)
        self.client_config = client_config

    def create(self, acls: list[AclBinding]) -> None:
        self.wait(self.admin.create_acls(acls, request_timeout=self.timeout_s).values())

    def delete(self, filters: list[AclBindingFilter]) -> list[Acl]:
        results = self.wait(self.admin.delete_acls(filters, request_timeout=self.timeout_s).values())
        return [from_binding(b) for deleted in results for b in deleted]

    def describe(self, flt: AclBindingFilter) -> list[Acl]:
        """DescribeAcls. librdkafka drops the response's top-level error (SECURITY_DISABLED,
        CLUSTER_AUTHORIZATION_FAILED arrive as an empty list), so an empty answer is asked again
        through kafka-python, which raises it; librdkafka went first because it reports a failed
        login at once where kafka-python retries until its timeout."""
        found = [from_binding(b) for b in self.wait([self.admin.describe_acls(flt, request_timeout=self.timeout_s)])[0]]
        if not found:
            self._confirm_empty(flt)
        return found

    def _confirm_empty(self, flt: AclBindingFilter) -> None:
        """ToolError with the broker's error if DescribeAcls failed (see `describe`)."""
        from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                                 ResourcePatternFilter)
        from kafka.admin import ResourceType as KpResourceType
        from kafka.errors import KafkaError as KpKafkaError

        from .client_config import kafka_python_config
        from .kafka_python_admin import ToolAdminClient

        timeout_ms = int(self.timeout_s * 1000)
        try:
            admin = ToolAdminClient(**kafka_python_config(self.client_config), request_timeout_ms=timeout_ms,
                                    bootstrap_timeout_ms=timeout_ms)
        except KpKafkaError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from None
        try:
            pattern = ResourcePatternFilter(KpResourceType(flt.restype.value), flt.name,
                                            ACLResourcePatternType(flt.resource_pattern_type.value))
            admin.describe_acls(ACLFilter(flt.principal, flt.host, ACLOperation(flt.operation.value),
                                          ACLPermissionType(flt.permission_type.value), pattern))
        except KpKafkaError as exc:
            name = getattr(exc, "message", type(exc).__name__)
            raise ToolError(f"{name}: {exc.description if hasattr(exc, 'description') else exc}") from None
        finally:
            admin.close()

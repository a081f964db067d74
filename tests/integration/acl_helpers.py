"""A broker with ACLs on and a SASL_PLAINTEXT listener with PLAIN users (admin is a super user),
and the confluent-kafka client configs of each user, for the ACL integration tests."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
        "password=\"admin-secret\" " + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")

# confluent-kafka names the CLUSTER resource type BROKER (wire code 4)
CLUSTER = ResourceType.BROKER
TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def secured_overrides(**extra: str) -> dict[str, str]:
    """Broker settings: ACLs enforced, one SASL_PLAINTEXT listener, PLAIN users, super user admin."""
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, "authorizer.class.name": AUTHORIZER,
            "super.users": "User:admin", **extra}


def conf(bootstrap: str, user: str, **extra: Any) -> dict[str, Any]:
    """confluent-kafka settings of `user` on that broker."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def kafka_python_conf(bootstrap: str, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": USERS[user]}


def binding(user: str, rtype: ResourceType, name: str, op: AclOperation,
            permission: AclPermissionType = AclPermissionType.ALLOW, pattern: ResourcePatternType = LITERAL,
            host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}" if ":" not in user else user, host, op, permission)


def grant(bootstrap: str, *bindings: AclBinding) -> None:
    """Create ACLs as the admin (CreateAcls), failing on any error."""
    admin = AdminClient(conf(bootstrap, "admin"))
    for future in admin.create_acls(list(bindings), request_timeout=10).values():
        future.result()


def revoke(bootstrap: str, *bindings: AclBinding) -> list[AclBinding]:
    """Delete exactly these ACLs as the admin (DeleteAcls); the ones deleted."""
    admin = AdminClient(conf(bootstrap, "admin"))
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    return [acl for future in admin.delete_acls(filters, request_timeout=10).values() for acl in future.result()]


def all_acls(bootstrap: str, user: str = "admin") -> list[AclBinding]:
    admin = AdminClient(conf(bootstrap, user))
    acls = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY), request_timeout=10)
    return acls.result()


__all__ = ["AUTHORIZER", "USERS", "JAAS", "CLUSTER", "TOPIC", "GROUP", "TXN", "LITERAL", "PREFIXED",
           "AclOperation", "AclPermissionType", "secured_overrides", "conf", "kafka_python_conf", "binding",
           "grant", "revoke", "all_acls"]

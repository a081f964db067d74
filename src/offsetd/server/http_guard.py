"""The metrics listener's Guard for this broker. With no authorizer (`authorizer.class.name`
unset, Kafka's default) anyone who reaches the listener reads everything, as before. With one, the
listener wants HTTP Basic credentials of a user the broker knows - a PLAIN user of a SASL
listener's JAAS entry or a SCRAM user (either mechanism) - and shows that principal exactly what
Kafka's ACLs let it DESCRIBE: its groups, and of those the partitions of topics it may describe
(super users see all). The console is read-only, so DESCRIBE is all it ever needs."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from typing import Any

from ..lag.model import GroupLag, LagSnapshot
from ..metrics.guard import Caller, Guard, OpenGuard, Unauthorized
from ..security.acl import AclOperation, ResourceType
from ..security.credentials import credential_from_salted_password, salted_password
from ..security.jaas import parse_jaas_config
from ..security.plain import plain_users

VERIFIED_FOR_S = 60.0  # a checked password is not checked again (PBKDF2) for this long
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


class AclGuard:
    """HTTP Basic against the broker's SASL users, views filtered by its Authorizer."""

    def __init__(self, server: Any) -> None:
        self.server = server  # server.app.KafkaServer: its config, security runtime and authorizer
        self._verified: dict[bytes, tuple[str, float]] = {}  # digest of the header -> (user, until)

    def authenticate(self, headers: dict[str, str], host: str) -> Caller:
        header = headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            raise Unauthorized("authentication required: HTTP Basic with a user of the broker's SASL listeners")
        digest = hashlib.sha256(encoded.strip().encode()).digest()
        known = self._verified.get(digest)
        if known is not None and known[1] > time.monotonic():
            return Caller(f"User:{known[0]}", host)
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthorized("malformed Basic credentials") from None
        if not sep or not self._check(user, password):
            raise Unauthorized("authentication failed: invalid credentials")
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[digest] = (user, time.monotonic() + VERIFIED_FOR_S)
        return Caller(f"User:{user}", host)

    def _check(self, user: str, password: str) -> bool:
        """Any password the user could log in to a SASL listener with: its PLAIN password, or one
        matching the stored key of any of its SCRAM credentials (each mechanism has its own)."""
        expected = self._plain_users().get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return True
        for mechanism in SCRAM_MECHANISMS:
            credential = self.server.security.scram_lookup(mechanism, user)
            if credential is not None:
                salted = salted_password(mechanism, password, credential.salt, credential.iterations)
                mine = credential_from_salted_password(mechanism, credential.salt, salted, credential.iterations)
                if hmac.compare_digest(mine.stored_key, credential.stored_key):
                    return True
        return False

    def _plain_users(self) -> dict[str, str]:
        users: dict[str, str] = {}
        for listener in self.server.listeners:
            if listener.sasl and "PLAIN" in listener.mechanisms:
                jaas = self.server.config.jaas_config(listener.name, "PLAIN")
                if jaas:
                    users.update(plain_users(parse_jaas_config(jaas)[1]))
        return users

    def _may(self, caller: Caller, resource: ResourceType, name: str) -> bool:
        authorizer = self.server.broker.authorizer
        return authorizer is None or authorizer.authorize(caller.principal or "User:ANONYMOUS", caller.host,
                                                          AclOperation.DESCRIBE, resource, name)

    def may_describe_group(self, caller: Caller, group: str) -> bool:
        return self._may(caller, ResourceType.GROUP, group)

    def visible(self, caller: Caller, snapshot: LagSnapshot) -> LagSnapshot:
        """The groups the caller may describe, each with the partitions of topics it may describe
        (as OffsetFetch leaves unauthorized topics out), and those topics' log offsets."""
        topics: dict[str, bool] = {}

        def topic_ok(name: str) -> bool:
            if name not in topics:
                topics[name] = self._may(caller, ResourceType.TOPIC, name)
            return topics[name]

        groups = [GroupLag(g.group, g.state, g.protocol_type, g.members,
                           [p for p in g.partitions if topic_ok(p.topic)], g.earliest_expiry_ms, g.retention_ms,
                           g.coordinator, g.member_list)
                  for g in snapshot.groups if self.may_describe_group(caller, g.group)]
        return LagSnapshot(snapshot.taken_at_ms, groups, [p for p in snapshot.partitions if topic_ok(p.topic)],
                           snapshot.seconds, snapshot.cluster)


def http_guard(server: Any) -> Guard:
    """The Guard for `server` (a server.app.KafkaServer): AclGuard when its authorizer is on."""
    return AclGuard(server) if server.security.enabled else OpenGuard()

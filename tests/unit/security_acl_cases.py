"""The ACL decision rules of reference security.md §3 as data, shared by the unit tests and the ACL
integration tests: each case is one authorize() call and its expected answer.

An ACL is written `PERMISSION PRINCIPAL HOST OPERATION RESOURCE_TYPE PATTERN NAME`, e.g.
`ALLOW User:alice * READ TOPIC LITERAL orders`."""

from __future__ import annotations

from dataclasses import dataclass

from offsetd.security.acl import AclBinding, AclFilter, AclOperation, AclPermission, PatternType, ResourceType


def acl(spec: str) -> AclBinding:
    """`ALLOW User:alice * READ TOPIC LITERAL orders` -> AclBinding."""
    permission, principal, host, op, rtype, pattern, name = spec.split(" ")
    return AclBinding(ResourceType[rtype], name, PatternType[pattern], principal, host, AclOperation[op],
                      AclPermission[permission])


@dataclass(frozen=True)
class AclCase:
    """authorize(principal, host, op, rtype, name) over `acls` must return `expected`."""

    id: str
    acls: tuple[str, ...]
    principal: str
    host: str
    op: str
    rtype: str
    name: str
    expected: bool
    super_users: tuple[str, ...] = ()
    allow_if_no_acl: bool = False

    def bindings(self) -> list[AclBinding]:
        return [acl(s) for s in self.acls]


ALICE, BOB = "User:alice", "User:bob"
IP = "10.0.0.1"


def case(id: str, acls: list[str], expected: bool, op: str = "READ", rtype: str = "TOPIC", name: str = "orders",
         principal: str = ALICE, host: str = IP, **kw: object) -> AclCase:
    return AclCase(id, tuple(acls), principal, host, op, rtype, name, expected, **kw)  # type: ignore[arg-type]


AUTHORIZE_CASES: list[AclCase] = [
    # no ACLs at all: allow.everyone.if.no.acl.found decides
    case("no-acl-default-deny", [], False),
    case("no-acl-allow-everyone", [], True, allow_if_no_acl=True),
    case("acl-for-other-principal-exists-so-deny", ["ALLOW User:bob * READ TOPIC LITERAL orders"], False,
         allow_if_no_acl=True),
    case("acl-on-other-resource-only-allow-everyone", ["ALLOW User:bob * READ TOPIC LITERAL other"], True,
         allow_if_no_acl=True),
    case("acl-on-other-type-same-name-allow-everyone", ["ALLOW User:bob * READ GROUP LITERAL orders"], True,
         allow_if_no_acl=True),
    case("deny-for-principal-with-allow-everyone", ["DENY User:alice * READ TOPIC LITERAL orders"], False,
         allow_if_no_acl=True),
    # literal, wildcard and prefixed resources
    case("literal-allow", ["ALLOW User:alice * READ TOPIC LITERAL orders"], True),
    case("literal-other-name", ["ALLOW User:alice * READ TOPIC LITERAL orders2"], False),
    case("literal-is-not-prefix", ["ALLOW User:alice * READ TOPIC LITERAL ord"], False),
    case("literal-case-sensitive", ["ALLOW User:alice * READ TOPIC LITERAL Orders"], False),
    case("literal-star-resource", ["ALLOW User:alice * READ TOPIC LITERAL *"], True),
    case("prefixed-allow", ["ALLOW User:alice * READ TOPIC PREFIXED ord"], True),
    case("prefixed-whole-name", ["ALLOW User:alice * READ TOPIC PREFIXED orders"], True),
    case("prefixed-longer-than-name", ["ALLOW User:alice * READ TOPIC PREFIXED orders-x"], False),
    case("prefixed-not-prefix", ["ALLOW User:alice * READ TOPIC PREFIXED rders"], False),
    case("prefixed-star-is-literal-char", ["ALLOW User:alice * READ TOPIC PREFIXED *"], False),
    case("other-resource-type", ["ALLOW User:alice * READ GROUP LITERAL orders"], False),
    case("group-prefixed", ["ALLOW User:alice * READ GROUP PREFIXED app-"], True, rtype="GROUP", name="app-1"),
    case("cluster-literal", ["ALLOW User:alice * CREATE CLUSTER LITERAL kafka-cluster"], True, op="CREATE",
         rtype="CLUSTER", name="kafka-cluster"),
    case("txn-id", ["ALLOW User:alice * WRITE TRANSACTIONAL_ID LITERAL tx"], True, op="WRITE",
         rtype="TRANSACTIONAL_ID", name="tx"),
    # principals
    case("other-principal", ["ALLOW User:bob * READ TOPIC LITERAL orders"], False),
    case("principal-wildcard", ["ALLOW User:* * READ TOPIC LITERAL orders"], True),
    case("principal-wildcard-any-type", ["ALLOW User:* * READ TOPIC LITERAL orders"], True, principal="Group:client"),
    case("principal-case-sensitive", ["ALLOW User:Alice * READ TOPIC LITERAL orders"], False),
    case("principal-type-kept", ["ALLOW User:client * READ TOPIC LITERAL orders"], False, principal="Group:client"),
    case("principal-non-user-type", ["ALLOW Group:client * READ TOPIC LITERAL orders"], True,
         principal="Group:client"),
    case("anonymous", ["ALLOW User:ANONYMOUS * READ TOPIC LITERAL orders"], True, principal="User:ANONYMOUS"),
    case("dn-principal", ["ALLOW User:CN=alice,OU=B,O=A * READ TOPIC LITERAL orders"], True,
         principal="User:CN=alice,OU=B,O=A"),
    # hosts
    case("host-match", ["ALLOW User:alice 10.0.0.1 READ TOPIC LITERAL orders"], True),
    case("host-mismatch", ["ALLOW User:alice 10.0.0.2 READ TOPIC LITERAL orders"], False),
    case("host-ipv6-java-form", ["ALLOW User:alice 0:0:0:0:0:0:0:1 READ TOPIC LITERAL orders"], True, host="::1"),
    case("host-ipv6-python-form", ["ALLOW User:alice ::1 READ TOPIC LITERAL orders"], True,
         host="0:0:0:0:0:0:0:1"),
    case("host-ipv4-mapped", ["ALLOW User:alice 127.0.0.1 READ TOPIC LITERAL orders"], True, host="::ffff:127.0.0.1"),
    case("host-deny-other-ip-ignored", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                        "DENY User:alice 10.9.9.9 READ TOPIC LITERAL orders"], True),
    case("host-deny-this-ip", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                               "DENY User:alice 10.0.0.1 READ TOPIC LITERAL orders"], False),
    # operations: exact, ALL, implied (ALLOW only)
    case("other-operation", ["ALLOW User:alice * WRITE TOPIC LITERAL orders"], False),
    case("allow-all", ["ALLOW User:alice * ALL TOPIC LITERAL orders"], True, op="ALTER_CONFIGS"),
    case("read-implies-describe", ["ALLOW User:alice * READ TOPIC LITERAL orders"], True, op="DESCRIBE"),
    case("write-implies-describe", ["ALLOW User:alice * WRITE TOPIC LITERAL orders"], True, op="DESCRIBE"),
    case("delete-implies-describe", ["ALLOW User:alice * DELETE TOPIC LITERAL orders"], True, op="DESCRIBE"),
    case("alter-implies-describe", ["ALLOW User:alice * ALTER TOPIC LITERAL orders"], True, op="DESCRIBE"),
    case("create-does-not-imply-describe", ["ALLOW User:alice * CREATE TOPIC LITERAL orders"], False,
         op="DESCRIBE"),
    case("alter-configs-implies-describe-configs", ["ALLOW User:alice * ALTER_CONFIGS TOPIC LITERAL orders"], True,
         op="DESCRIBE_CONFIGS"),
    case("describe-configs-not-implied-by-alter", ["ALLOW User:alice * ALTER TOPIC LITERAL orders"], False,
         op="DESCRIBE_CONFIGS"),
    case("describe-does-not-imply-read", ["ALLOW User:alice * DESCRIBE TOPIC LITERAL orders"], False),
    case("implication-not-transitive", ["ALLOW User:alice * ALTER_CONFIGS TOPIC LITERAL orders"], False,
         op="DESCRIBE"),
    case("group-read-implies-describe", ["ALLOW User:alice * READ GROUP LITERAL app"], True, op="DESCRIBE",
         rtype="GROUP", name="app"),
    case("group-delete-implies-describe", ["ALLOW User:alice * DELETE GROUP LITERAL app"], True, op="DESCRIBE",
         rtype="GROUP", name="app"),
    # DENY beats ALLOW; DENY implies nothing; DENY ALL denies everything
    case("deny-beats-allow", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                              "DENY User:alice * READ TOPIC LITERAL orders"], False),
    case("deny-wildcard-principal-beats-allow", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                                 "DENY User:* * READ TOPIC LITERAL orders"], False),
    case("deny-prefixed-beats-literal-allow", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                               "DENY User:alice * READ TOPIC PREFIXED or"], False),
    case("deny-star-beats-literal-allow", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                           "DENY User:alice * READ TOPIC LITERAL *"], False),
    case("deny-read-does-not-deny-describe", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                              "DENY User:alice * READ TOPIC LITERAL orders"], True, op="DESCRIBE"),
    case("deny-all-denies-describe", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                      "DENY User:alice * ALL TOPIC LITERAL orders"], False, op="DESCRIBE"),
    case("deny-describe-beats-implied", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                         "DENY User:alice * DESCRIBE TOPIC LITERAL orders"], False, op="DESCRIBE"),
    case("deny-other-op-irrelevant", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                      "DENY User:alice * WRITE TOPIC LITERAL orders"], True),
    case("deny-other-principal-irrelevant", ["ALLOW User:alice * READ TOPIC LITERAL orders",
                                             "DENY User:bob * READ TOPIC LITERAL orders"], True),
    case("deny-other-resource-irrelevant", ["ALLOW User:alice * READ TOPIC PREFIXED ord",
                                            "DENY User:alice * READ TOPIC LITERAL ord"], True),
    # super users
    case("super-user", [], True, super_users=(ALICE,)),
    case("super-user-over-deny", ["DENY User:alice * ALL TOPIC LITERAL *"], True, super_users=(ALICE,)),
    case("super-user-case-sensitive", [], False, super_users=("User:Alice",)),
    case("super-user-exact-string", [], False, super_users=("alice",)),
    case("super-user-other", ["ALLOW User:alice * READ TOPIC LITERAL orders"], True, principal=BOB,
         super_users=(ALICE, BOB)),
]


@dataclass(frozen=True)
class ByTypeCase:
    """authorize_by_type(principal, host, op, rtype) over `acls` must return `expected`."""

    id: str
    acls: tuple[str, ...]
    op: str
    rtype: str
    expected: bool
    principal: str = ALICE
    host: str = IP
    super_users: tuple[str, ...] = ()
    allow_if_no_acl: bool = False


BY_TYPE_CASES: list[ByTypeCase] = [
    ByTypeCase("none", (), "WRITE", "TOPIC", False),
    ByTypeCase("allow-everyone-no-acls", (), "WRITE", "TOPIC", True, allow_if_no_acl=True),
    ByTypeCase("super-user", ("DENY User:alice * ALL TOPIC LITERAL *",), "WRITE", "TOPIC", True,
               super_users=(ALICE,)),
    ByTypeCase("literal-allow", ("ALLOW User:alice * WRITE TOPIC LITERAL t",), "WRITE", "TOPIC", True),
    ByTypeCase("prefixed-allow", ("ALLOW User:alice * WRITE TOPIC PREFIXED t",), "WRITE", "TOPIC", True),
    ByTypeCase("all-allow", ("ALLOW User:alice * ALL TOPIC LITERAL t",), "WRITE", "TOPIC", True),
    ByTypeCase("wildcard-principal", ("ALLOW User:* * WRITE TOPIC LITERAL t",), "WRITE", "TOPIC", True),
    ByTypeCase("other-principal", ("ALLOW User:bob * WRITE TOPIC LITERAL t",), "WRITE", "TOPIC", False),
    ByTypeCase("other-host", ("ALLOW User:alice 10.0.0.2 WRITE TOPIC LITERAL t",), "WRITE", "TOPIC", False),
    ByTypeCase("ipv6-host", ("ALLOW User:alice 0:0:0:0:0:0:0:1 WRITE TOPIC LITERAL t",), "WRITE", "TOPIC", True,
               host="::1"),
    ByTypeCase("other-type", ("ALLOW User:alice * WRITE GROUP LITERAL t",), "WRITE", "TOPIC", False),
    ByTypeCase("implied-does-not-count", ("ALLOW User:alice * READ TOPIC LITERAL t",), "DESCRIBE", "TOPIC",
               False),
    ByTypeCase("deny-star-dominates", ("ALLOW User:alice * WRITE TOPIC LITERAL t",
                                       "DENY User:alice * WRITE TOPIC LITERAL *"), "WRITE", "TOPIC", False),
    ByTypeCase("deny-all-star-dominates", ("ALLOW User:alice * WRITE TOPIC PREFIXED t",
                                           "DENY User:* * ALL TOPIC LITERAL *"), "WRITE", "TOPIC", False),
    ByTypeCase("deny-literal-same-name", ("ALLOW User:alice * WRITE TOPIC LITERAL t",
                                          "DENY User:alice * WRITE TOPIC LITERAL t"), "WRITE", "TOPIC", False),
    ByTypeCase("deny-literal-other-name", ("ALLOW User:alice * WRITE TOPIC LITERAL t",
                                           "DENY User:alice * WRITE TOPIC LITERAL u"), "WRITE", "TOPIC", True),
    ByTypeCase("deny-literal-does-not-dominate-prefixed", ("ALLOW User:alice * WRITE TOPIC PREFIXED t",
                                                           "DENY User:alice * WRITE TOPIC LITERAL t"),
               "WRITE", "TOPIC", True),
    ByTypeCase("deny-prefix-dominates-literal", ("ALLOW User:alice * WRITE TOPIC LITERAL tx",
                                                 "DENY User:alice * WRITE TOPIC PREFIXED t"), "WRITE", "TOPIC", False),
    ByTypeCase("deny-prefix-dominates-longer-prefix", ("ALLOW User:alice * WRITE TOPIC PREFIXED tx",
                                                       "DENY User:alice * WRITE TOPIC PREFIXED t"),
               "WRITE", "TOPIC", False),
    ByTypeCase("deny-longer-prefix-does-not-dominate", ("ALLOW User:alice * WRITE TOPIC PREFIXED t",
                                                        "DENY User:alice * WRITE TOPIC PREFIXED tx"),
               "WRITE", "TOPIC", True),
    ByTypeCase("one-undominated-allow-is-enough", ("ALLOW User:alice * WRITE TOPIC LITERAL t",
                                                   "ALLOW User:alice * WRITE TOPIC LITERAL u",
                                                   "DENY User:alice * WRITE TOPIC LITERAL t"), "WRITE", "TOPIC", True),
    ByTypeCase("allow-star-not-dominated-by-prefix", ("ALLOW User:alice * WRITE TOPIC LITERAL *",
                                                      "DENY User:alice * WRITE TOPIC PREFIXED *"), "WRITE", "TOPIC", True),
    ByTypeCase("deny-other-principal-ignored", ("ALLOW User:alice * WRITE TOPIC LITERAL t",
                                                "DENY User:bob * WRITE TOPIC LITERAL *"), "WRITE", "TOPIC", True),
    ByTypeCase("deny-other-op-ignored", ("ALLOW User:alice * WRITE TOPIC LITERAL t",
                                         "DENY User:alice * READ TOPIC LITERAL *"), "WRITE", "TOPIC", True),
]


def bits(*ops: str) -> int:
    """An authorized_operations bit field from operation names."""
    return sum(1 << AclOperation[op] for op in ops)


TOPIC_OPS = ("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")
GROUP_OPS = ("READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")
CLUSTER_OPS = ("CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
               "DESCRIBE")

# (id, acls, rtype, name, super users, expected bit field) for authorized_operations(ALICE, IP, ...)
OPERATIONS_CASES: list[tuple[str, tuple[str, ...], str, str, tuple[str, ...], int]] = [
    ("topic-none", (), "TOPIC", "t", (), 0),
    ("topic-read", ("ALLOW User:alice * READ TOPIC LITERAL t",), "TOPIC", "t", (), bits("READ", "DESCRIBE")),
    ("topic-all", ("ALLOW User:alice * ALL TOPIC LITERAL t",), "TOPIC", "t", (), bits(*TOPIC_OPS)),
    ("topic-all-deny-write", ("ALLOW User:alice * ALL TOPIC LITERAL t", "DENY User:alice * WRITE TOPIC LITERAL t"),
     "TOPIC", "t", (), bits(*(o for o in TOPIC_OPS if o != "WRITE"))),
    ("topic-alter-configs", ("ALLOW User:alice * ALTER_CONFIGS TOPIC PREFIXED t",), "TOPIC", "t", (),
     bits("ALTER_CONFIGS", "DESCRIBE_CONFIGS")),
    ("topic-super-user", (), "TOPIC", "t", (ALICE,), bits(*TOPIC_OPS)),
    ("group-all", ("ALLOW User:alice * ALL GROUP LITERAL g",), "GROUP", "g", (), bits(*GROUP_OPS)),
    ("group-delete", ("ALLOW User:alice * DELETE GROUP LITERAL g",), "GROUP", "g", (), bits("DELETE", "DESCRIBE")),
    ("cluster-all", ("ALLOW User:alice * ALL CLUSTER LITERAL kafka-cluster",), "CLUSTER", "kafka-cluster", (),
     bits(*CLUSTER_OPS)),
    ("cluster-describe", ("ALLOW User:* * DESCRIBE CLUSTER LITERAL kafka-cluster",), "CLUSTER", "kafka-cluster", (),
     bits("DESCRIBE")),
]

ORDERS_ACLS = (
    "ALLOW User:alice * READ TOPIC LITERAL orders",
    "ALLOW User:bob 10.0.0.2 WRITE TOPIC LITERAL orders",
    "ALLOW User:alice * READ TOPIC LITERAL *",
    "DENY User:bob * READ TOPIC PREFIXED ord",
    "ALLOW User:alice * READ TOPIC PREFIXED or",
    "ALLOW User:alice * READ TOPIC PREFIXED orders-archive",
    "ALLOW User:alice * READ GROUP LITERAL orders",
    "ALLOW User:alice * READ TOPIC LITERAL other",
)

# (id, filter, indexes into ORDERS_ACLS expected from describe(filter), in that order)
FILTER_CASES: list[tuple[str, AclFilter, tuple[int, ...]]] = [
    ("match-everything", AclFilter(), tuple(range(len(ORDERS_ACLS)))),
    ("type-topic", AclFilter(ResourceType.TOPIC), (0, 1, 2, 3, 4, 5, 7)),
    ("any-pattern-exact-name", AclFilter(ResourceType.ANY, "orders"), (0, 1, 6)),
    ("any-pattern-name-ord", AclFilter(ResourceType.TOPIC, "ord", PatternType.ANY), (3,)),
    ("literal-name", AclFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL), (0, 1)),
    ("literal-star-is-exact", AclFilter(ResourceType.TOPIC, "*", PatternType.LITERAL), (2,)),
    ("prefixed-any-name", AclFilter(ResourceType.TOPIC, None, PatternType.PREFIXED), (3, 4, 5)),
    ("prefixed-name-exact", AclFilter(ResourceType.TOPIC, "or", PatternType.PREFIXED), (4,)),
    ("match-orders", AclFilter(ResourceType.TOPIC, "orders", PatternType.MATCH), (0, 1, 2, 3, 4)),
    ("match-any-type", AclFilter(ResourceType.ANY, "orders", PatternType.MATCH), (0, 1, 2, 3, 4, 6)),
    ("match-no-name", AclFilter(ResourceType.TOPIC, None, PatternType.MATCH), (0, 1, 2, 3, 4, 5, 7)),
    ("principal", AclFilter(principal="User:bob"), (1, 3)),
    ("host-exact", AclFilter(host="10.0.0.2"), (1,)),
    ("operation", AclFilter(operation=AclOperation.WRITE), (1,)),
    ("permission", AclFilter(permission=AclPermission.DENY), (3,)),
    ("nothing", AclFilter(ResourceType.CLUSTER), ()),
]

# (id, acl spec, validation error expected: a substring of the message, or None when valid)
VALIDATE_CASES: list[tuple[str, AclBinding, str | None]] = [
    ("valid-literal", acl("ALLOW User:alice * READ TOPIC LITERAL t"), None),
    ("valid-prefixed", acl("DENY User:alice 10.0.0.1 WRITE GROUP PREFIXED g"), None),
    ("valid-cluster", acl("ALLOW User:alice * ALTER CLUSTER LITERAL kafka-cluster"), None),
    ("type-any", acl("ALLOW User:alice * READ ANY LITERAL t"), "resource type"),
    ("pattern-any", acl("ALLOW User:alice * READ TOPIC ANY t"), "pattern type"),
    ("pattern-match", acl("ALLOW User:alice * READ TOPIC MATCH t"), "pattern type"),
    ("operation-any", acl("ALLOW User:alice * ANY TOPIC LITERAL t"), "operation"),
    ("permission-any", acl("ANY User:alice * READ TOPIC LITERAL t"), "permission"),
    ("empty-name", AclBinding(ResourceType.TOPIC, "", PatternType.LITERAL, ALICE, "*", AclOperation.READ,
                              AclPermission.ALLOW), "name"),
    ("cluster-bad-name", acl("ALLOW User:alice * ALTER CLUSTER LITERAL my-cluster"), "kafka-cluster"),
    ("principal-no-type", acl("ALLOW alice * READ TOPIC LITERAL t"), "principal"),
    ("principal-empty-name", acl("ALLOW User: * READ TOPIC LITERAL t"), "principal"),
]

__all__ = ["AUTHORIZE_CASES", "BY_TYPE_CASES", "OPERATIONS_CASES", "FILTER_CASES", "VALIDATE_CASES", "ORDERS_ACLS",
           "AclCase", "ByTypeCase", "acl", "bits"]

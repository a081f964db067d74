"""server/api_checks.py: THE TABLE (reference security.md §4) as data, held against the
reference's rows; security/authorization.py: per-request Access decisions through S1's case
table; the ACL admin APIs of server/security_api.py over a local store (durable, reloaded,
SECURITY_DISABLED when off)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName

from offsetd.protocol.api_versions import SUPPORTED, ApiKey
from offsetd.protocol.errors import Error
from offsetd.security.acl import Authorizer
from offsetd.security.credentials import salted_password
from offsetd.security.authorization import Access, Op, Res, access
from offsetd.server.api_checks import API_CHECKS, Where, check
from offsetd.server.security_api import SecurityRuntime
from offsetd.storage.security_store import LocalSecurityStore

from security_acl_cases import AUTHORIZE_CASES, AclCase, acl

T, G, C, X = Res.TOPIC, Res.GROUP, Res.CLUSTER, Res.TRANSACTIONAL_ID

# The reference's rows, transcribed independently of the module: API -> [(resource, operation,
# error code)] in check order.
REFERENCE: dict[int, list[tuple[Res, Op, int]]] = {
    ApiKey.PRODUCE: [(X, Op.WRITE, 53), (T, Op.WRITE, 29)],
    ApiKey.FETCH: [(T, Op.READ, 29)],
    ApiKey.LIST_OFFSETS: [(T, Op.DESCRIBE, 29)],
    ApiKey.OFFSET_FOR_LEADER_EPOCH: [(C, Op.CLUSTER_ACTION, 29), (T, Op.DESCRIBE, 29)],
    ApiKey.METADATA: [(T, Op.DESCRIBE, 29), (C, Op.CREATE, 29)],
    ApiKey.CREATE_TOPICS: [(C, Op.CREATE, 29), (T, Op.DESCRIBE_CONFIGS, 29)],
    ApiKey.DELETE_TOPICS: [(C, Op.DELETE, 29), (T, Op.DESCRIBE, 29), (T, Op.DELETE, 29)],
    ApiKey.CREATE_PARTITIONS: [(T, Op.ALTER, 29)],
    ApiKey.DESCRIBE_CONFIGS: [(T, Op.DESCRIBE_CONFIGS, 29), (G, Op.DESCRIBE_CONFIGS, 30), (C, Op.DESCRIBE_CONFIGS, 31)],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [(T, Op.ALTER_CONFIGS, 29), (G, Op.ALTER_CONFIGS, 30), (C, Op.ALTER_CONFIGS, 31)],
    ApiKey.INIT_PRODUCER_ID: [(X, Op.WRITE, 53), (C, Op.IDEMPOTENT_WRITE, 31)],
    ApiKey.FIND_COORDINATOR: [(G, Op.DESCRIBE, 30), (X, Op.DESCRIBE, 53)],
    ApiKey.JOIN_GROUP: [(G, Op.READ, 30)],
    ApiKey.SYNC_GROUP: [(G, Op.READ, 30)],
    ApiKey.HEARTBEAT: [(G, Op.READ, 30)],
    ApiKey.LEAVE_GROUP: [(G, Op.READ, 30)],
    ApiKey.OFFSET_COMMIT: [(G, Op.READ, 30), (T, Op.READ, 29)],
    ApiKey.OFFSET_FETCH: [(G, Op.DESCRIBE, 30), (T, Op.DESCRIBE, 29)],
    ApiKey.OFFSET_DELETE: [(G, Op.DELETE, 30), (T, Op.READ, 29)],
    ApiKey.DESCRIBE_GROUPS: [(G, Op.DESCRIBE, 30)],
    ApiKey.LIST_GROUPS: [(C, Op.DESCRIBE, 0), (G, Op.DESCRIBE, 0)],
    ApiKey.DELETE_GROUPS: [(G, Op.DELETE, 30)],
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [(G, Op.READ, 30), (T, Op.DESCRIBE, 29)],
    ApiKey.CONSUMER_GROUP_DESCRIBE: [(G, Op.DESCRIBE, 30)],
    ApiKey.SHARE_GROUP_HEARTBEAT: [(G, Op.READ, 30), (T, Op.DESCRIBE, 29)],
    ApiKey.SHARE_GROUP_DESCRIBE: [(G, Op.DESCRIBE, 30)],
    ApiKey.SHARE_FETCH: [(G, Op.READ, 30), (T, Op.READ, 29)],
    ApiKey.SHARE_ACKNOWLEDGE: [(G, Op.READ, 30), (T, Op.READ, 29)],
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: [(G, Op.DESCRIBE, 30)],
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: [(G, Op.READ, 30), (T, Op.READ, 29)],
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: [(G, Op.DELETE, 30), (T, Op.READ, 29)],
    ApiKey.TXN_OFFSET_COMMIT: [(X, Op.WRITE, 53), (G, Op.READ, 30), (T, Op.READ, 29)],
    ApiKey.ADD_PARTITIONS_TO_TXN: [(X, Op.WRITE, 53), (T, Op.WRITE, 29)],
    ApiKey.ADD_OFFSETS_TO_TXN: [(X, Op.WRITE, 53), (G, Op.READ, 30)],
    ApiKey.END_TXN: [(X, Op.WRITE, 53)],
    ApiKey.WRITE_TXN_MARKERS: [(C, Op.CLUSTER_ACTION, 31)],
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: [(C, Op.CLUSTER_ACTION, 31)],
    ApiKey.READ_SHARE_GROUP_STATE: [(C, Op.CLUSTER_ACTION, 31)],
    ApiKey.WRITE_SHARE_GROUP_STATE: [(C, Op.CLUSTER_ACTION, 31)],
    ApiKey.DELETE_SHARE_GROUP_STATE: [(C, Op.CLUSTER_ACTION, 31)],
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: [(C, Op.CLUSTER_ACTION, 31)],
    ApiKey.DESCRIBE_TRANSACTIONS: [(X, Op.DESCRIBE, 53)],
    ApiKey.LIST_TRANSACTIONS: [(X, Op.DESCRIBE, 0)],
    ApiKey.DESCRIBE_PRODUCERS: [(T, Op.READ, 29)],
    ApiKey.DESCRIBE_ACLS: [(C, Op.DESCRIBE, 31)],
    ApiKey.CREATE_ACLS: [(C, Op.ALTER, 31)],
    ApiKey.DELETE_ACLS: [(C, Op.ALTER, 31)],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [(C, Op.DESCRIBE, 31)],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [(C, Op.ALTER, 31)],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [(C, Op.DESCRIBE_CONFIGS, 31)],
}

UNCHECKED = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def test_the_table_matches_the_reference_row_by_row():
    assert {api: [(c.resource, c.operation, c.error) for c in checks] for api, checks in API_CHECKS.items()} \
        == REFERENCE


def test_every_served_api_is_in_the_table_or_needs_no_check():
    assert set(SUPPORTED) - set(API_CHECKS) == UNCHECKED
    assert set(API_CHECKS) <= set(SUPPORTED)


def test_silent_filtering_is_where_the_reference_says():
    filtered = {api for api, checks in API_CHECKS.items() if any(c.where is Where.FILTERED for c in checks)}
    assert filtered == {ApiKey.LIST_GROUPS, ApiKey.LIST_TRANSACTIONS}
    assert "omitted silently" in check(ApiKey.METADATA, Res.TOPIC).note
    assert "omitted silently" in check(ApiKey.OFFSET_FETCH, Res.TOPIC).note
    assert check(ApiKey.OFFSET_COMMIT, Res.GROUP).where is Where.ALL_PARTITIONS


def _ctx(case: AclCase) -> SimpleNamespace:
    return SimpleNamespace(principal=case.principal, host=case.host, client_host=f"/{case.host}", client_id="c")


@pytest.mark.parametrize("case", AUTHORIZE_CASES, ids=lambda c: c.id)
def test_access_decides_as_the_case_table(case: AclCase):
    authorizer = Authorizer(case.bindings(), case.super_users, case.allow_if_no_acl)
    acc = Access(authorizer, _ctx(case))
    first = acc.allows(Op[case.op], Res[case.rtype], case.name)
    assert first is case.expected
    assert acc.allows(Op[case.op], Res[case.rtype], case.name) is case.expected  # memoised, same answer


def test_access_takes_the_host_from_client_host_when_the_shell_gives_none():
    authorizer = Authorizer([acl("ALLOW User:alice 10.0.0.1 READ TOPIC LITERAL t")])
    ctx = SimpleNamespace(principal="User:alice", host="", client_host="/10.0.0.1")
    assert Access(authorizer, ctx).allows(Op.READ, Res.TOPIC, "t")
    ctx = SimpleNamespace(principal="User:alice", host="", client_host="/10.0.0.2")
    assert not Access(authorizer, ctx).allows(Op.READ, Res.TOPIC, "t")


def test_no_authorizer_means_no_access_object():
    assert access(SimpleNamespace(authorizer=None), SimpleNamespace()) is None
    assert access(SimpleNamespace(), SimpleNamespace()) is None


# ------------------------------------------------------------------ ACL APIs, local store


def _config(tmp_path: Path, enabled: bool = True, super_users: tuple[str, ...] = ()) -> SimpleNamespace:
    values = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer" if enabled else "",
              "super.users": super_users, "allow.everyone.if.no.acl.found": False}
    return SimpleNamespace(get=values.__getitem__, log_dir=tmp_path)


def _runtime(tmp_path: Path, **kw: object) -> tuple[SecurityRuntime, SimpleNamespace]:
    broker = SimpleNamespace(authorizer=None)
    runtime = SecurityRuntime(broker, _config(tmp_path, **kw), LocalSecurityStore(tmp_path))  # type: ignore[arg-type]
    runtime.load_local()
    return runtime, broker


ADMIN = SimpleNamespace(principal="User:admin", host="127.0.0.1", client_host="/127.0.0.1", client_id="")
ALICE = SimpleNamespace(principal="User:alice", host="127.0.0.1", client_host="/127.0.0.1", client_id="")


def _creation(rtype: int, name: str, pattern: int, principal: str, op: int, permission: int = 3) -> AclCreation:
    return AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal,
                       host="*", operation=op, permission_type=permission)  # type: ignore[arg-type]


def _describe_all() -> DescribeAclsRequest:
    return DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,  # type: ignore[arg-type]
                               principal_filter=None, host_filter=None, operation=1, permission_type=1)  # type: ignore[arg-type]


def test_acl_apis_answer_security_disabled_without_an_authorizer(tmp_path: Path):
    runtime, broker = _runtime(tmp_path, enabled=False)
    assert broker.authorizer is None
    created = asyncio.run(runtime.create_acls(ADMIN, CreateAclsRequest(creations=(_creation(2, "t", 3, "User:a", 3),))))
    assert [r["error_code"] for r in created["results"]] == [Error.SECURITY_DISABLED]
    assert runtime.describe_acls(ADMIN, _describe_all())["error_code"] == Error.SECURITY_DISABLED
    deleted = asyncio.run(runtime.delete_acls(ADMIN, DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,  # type: ignore[arg-type]
        host_filter=None, operation=1, permission_type=1),))))  # type: ignore[arg-type]
    assert [r["error_code"] for r in deleted["filter_results"]] == [Error.SECURITY_DISABLED]


def test_create_describe_delete_acls_persist_and_need_alter_on_the_cluster(tmp_path: Path):
    runtime, broker = _runtime(tmp_path, super_users=("User:admin",))
    creations = (_creation(2, "orders", 3, "User:alice", 3),  # READ TOPIC LITERAL orders
                 _creation(3, "app-", 4, "User:alice", 3),  # READ GROUP PREFIXED app-
                 _creation(2, "orders", 3, "User:alice", 3),  # again: no duplicate
                 _creation(4, "my-cluster", 3, "User:alice", 7),  # CLUSTER not named kafka-cluster: 42
                 _creation(2, "t", 3, "alice", 3))  # principal without a type: 42
    denied = asyncio.run(runtime.create_acls(ALICE, CreateAclsRequest(creations=creations)))
    assert [r["error_code"] for r in denied["results"]] == [Error.CLUSTER_AUTHORIZATION_FAILED] * 5
    created = asyncio.run(runtime.create_acls(ADMIN, CreateAclsRequest(creations=creations)))
    assert [r["error_code"] for r in created["results"]] == [0, 0, 0, Error.INVALID_REQUEST, Error.INVALID_REQUEST]
    described = runtime.describe_acls(ADMIN, _describe_all())
    assert described["error_code"] == 0
    assert sorted((r["resource_type"], r["resource_name"], r["pattern_type"], len(r["acls"]))
                  for r in described["resources"]) == [(2, "orders", 3, 1), (3, "app-", 4, 1)]
    assert runtime.describe_acls(ALICE, _describe_all())["error_code"] == Error.CLUSTER_AUTHORIZATION_FAILED
    assert broker.authorizer.authorize("User:alice", "1.2.3.4", Op.READ, Res.GROUP, "app-x")
    # durable: a new runtime over the same directory sees them; only the file holds them
    stored = json.loads((tmp_path / "security" / "acls.json").read_text())
    assert len(stored["acls"]) == 2
    again, broker2 = _runtime(tmp_path, super_users=("User:admin",))
    assert broker2.authorizer.authorize("User:alice", "1.2.3.4", Op.READ, Res.TOPIC, "orders")
    deleted = asyncio.run(again.delete_acls(ADMIN, DeleteAclsRequest(filters=(
        DeleteAclsFilter(resource_type_filter=2, resource_name_filter="orders", pattern_type_filter=2,  # type: ignore[arg-type]
                         principal_filter=None, host_filter=None, operation=1, permission_type=1),  # type: ignore[arg-type]
        DeleteAclsFilter(resource_type_filter=3, resource_name_filter="nothing", pattern_type_filter=3,  # type: ignore[arg-type]
                         principal_filter=None, host_filter=None, operation=1, permission_type=1)))))  # type: ignore[arg-type]
    results = deleted["filter_results"]
    assert [r["error_code"] for r in results] == [0, 0]
    assert [(m["resource_name"], m["principal"]) for m in results[0]["matching_acls"]] == [("orders", "User:alice")]
    assert results[1]["matching_acls"] == []
    assert not broker2.authorizer.authorize("User:alice", "1.2.3.4", Op.READ, Res.TOPIC, "orders")
    assert len(json.loads((tmp_path / "security" / "acls.json").read_text())["acls"]) == 1


# ------------------------------------------------------------------ SCRAM credential APIs

SALT = b"0123456789abcdef"


def _upsert(name: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw") -> ScramCredentialUpsertion:
    mech = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-256")
    return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=SALT,  # type: ignore[arg-type]
                                    salted_password=salted_password(mech, password, SALT, max(iterations, 1)))


def _alter(runtime: SecurityRuntime, ctx: object, deletions=(), upsertions=()) -> dict[str, tuple[int, str | None]]:
    body = asyncio.run(runtime.alter_user_scram_credentials(ctx, AlterUserScramCredentialsRequest(
        deletions=tuple(deletions), upsertions=tuple(upsertions))))
    return {r["user"]: (r["error_code"], r["error_message"]) for r in body["results"]}


def _describe(runtime: SecurityRuntime, ctx: object, users: list[str] | None) -> dict:
    req = DescribeUserScramCredentialsRequest(users=None if users is None else tuple(UserName(name=u) for u in users))
    return runtime.describe_user_scram_credentials(ctx, req)


def test_alter_user_scram_credentials_errors_per_user(tmp_path: Path):
    runtime, _ = _runtime(tmp_path, super_users=("User:admin",))
    results = _alter(runtime, ADMIN, deletions=[ScramCredentialDeletion(name="ghost", mechanism=1)],  # type: ignore[arg-type]
                     upsertions=[_upsert("carol"), _upsert("dup"), _upsert("dup"), _upsert(""),
                                 _upsert("few", iterations=100), _upsert("many", iterations=20000),
                                 _upsert("odd", mechanism=9)])
    assert {u: code for u, (code, _) in results.items()} == {
        "ghost": Error.RESOURCE_NOT_FOUND, "carol": 0, "dup": Error.DUPLICATE_RESOURCE,
        "": Error.UNACCEPTABLE_CREDENTIAL, "few": Error.UNACCEPTABLE_CREDENTIAL,
        "many": Error.UNACCEPTABLE_CREDENTIAL, "odd": Error.UNSUPPORTED_SASL_MECHANISM}
    assert results["few"][1] == "Too few iterations"
    assert set(runtime.credentials) == {("carol", "SCRAM-SHA-256")}
    # the broker derived the keys from SaltedPassword: what SCRAM verifies against, never the password
    stored = runtime.scram_lookup("SCRAM-SHA-256", "carol")
    assert stored is not None and stored.salt == SALT and stored.iterations == 4096
    assert b"pw" not in (tmp_path / "security" / "scram-credentials.json").read_bytes()
    assert _alter(runtime, ALICE, upsertions=[_upsert("eve")]) == {"eve": (Error.CLUSTER_AUTHORIZATION_FAILED, None)}
    assert _alter(runtime, ADMIN, deletions=[ScramCredentialDeletion(name="carol", mechanism=1)]) == {  # type: ignore[arg-type]
        "carol": (0, None)}
    assert runtime.scram_lookup("SCRAM-SHA-256", "carol") is None


def test_describe_user_scram_credentials(tmp_path: Path):
    runtime, _ = _runtime(tmp_path, super_users=("User:admin",))
    _alter(runtime, ADMIN, upsertions=[_upsert("carol", 1, 8192), _upsert("carol", 2, 4096), _upsert("dan")])
    everyone = _describe(runtime, ADMIN, None)
    assert everyone["error_code"] == 0
    assert {r["user"]: [(i["mechanism"], i["iterations"]) for i in r["credential_infos"]]
            for r in everyone["results"]} == {"carol": [(1, 8192), (2, 4096)], "dan": [(1, 4096)]}
    assert [r["user"] for r in _describe(runtime, ADMIN, [])["results"]] == ["carol", "dan"]
    named = _describe(runtime, ADMIN, ["dan", "nobody", "x", "x"])
    assert [(r["user"], r["error_code"]) for r in named["results"]] == [
        ("dan", 0), ("nobody", Error.RESOURCE_NOT_FOUND), ("x", Error.DUPLICATE_RESOURCE)]
    assert _describe(runtime, ALICE, None)["error_code"] == Error.CLUSTER_AUTHORIZATION_FAILED


def test_scram_apis_work_without_an_authorizer_and_quotas_are_an_empty_stub(tmp_path: Path):
    runtime, broker = _runtime(tmp_path, enabled=False)
    assert broker.authorizer is None
    assert _alter(runtime, ALICE, upsertions=[_upsert("carol")]) == {"carol": (0, None)}
    assert [r["user"] for r in _describe(runtime, ALICE, None)["results"]] == ["carol"]
    quotas = DescribeClientQuotasRequest(components=(), strict=False)
    assert runtime.describe_client_quotas(ALICE, quotas)["entries"] == []
    secured, _ = _runtime(tmp_path / "on", super_users=("User:admin",))
    assert secured.describe_client_quotas(ALICE, quotas)["error_code"] == Error.CLUSTER_AUTHORIZATION_FAILED
    assert secured.describe_client_quotas(ADMIN, quotas) == {"throttle_time": 0, "error_code": 0,
                                                             "error_message": None, "entries": []}

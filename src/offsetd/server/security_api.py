"""The security admin APIs (reference security.md §2.6, §3): CreateAcls (30), DescribeAcls (29),
DeleteAcls (31), DescribeUserScramCredentials (50), AlterUserScramCredentials (51) and a
DescribeClientQuotas (48) stub; and SecurityRuntime, which keeps the broker's Authorizer and the
SCRAM credentials in memory, rebuilt from the store (local files, or PostgreSQL shared by every
broker, reloaded on its NOTIFY)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Iterable

from ..broker.request_context import current_context
from ..protocol.errors import Error
from ..security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
)
from ..security.authorization import Access, access, authorizer_enabled
from ..security.credentials import ScramCredential, credential_from_salted_password
from ..storage.security_store import AclRow, CredentialRow, LocalSecurityStore, SecurityStore

log = logging.getLogger("offsetd.security")

Body = dict[str, Any]

# AlterUserScramCredentials / DescribeUserScramCredentials mechanism codes (ScramMechanism.java).
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_CODES = {name: code for code, name in SCRAM_MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
POLL_INTERVAL_S = 30.0  # cluster mode: reload even if a NOTIFY was lost (a dropped LISTEN connection)


def binding_row(b: AclBinding) -> AclRow:
    return (int(b.resource_type), b.resource_name, int(b.pattern_type), b.principal, b.host, int(b.operation),
            int(b.permission))


def row_binding(row: AclRow) -> AclBinding:
    rtype, name, pattern, principal, host, op, permission = row
    return AclBinding(ResourceType(rtype), name, PatternType(pattern), principal, host, AclOperation(op),
                      AclPermission(permission))


class SecurityRuntime:
    """The broker's security state: its Authorizer (None: authorization off), the SCRAM
    credentials, and the store both come from. Handlers read `broker.authorizer`."""

    def __init__(self, broker: Any, config: Any, store: SecurityStore | None) -> None:
        self.broker = broker
        self.enabled = authorizer_enabled(config)
        self.super_users: tuple[str, ...] = tuple(config.get("super.users"))
        self.allow_if_no_acl: bool = config.get("allow.everyone.if.no.acl.found")
        self.store = store
        self.credentials: dict[tuple[str, str], CredentialRow] = {}
        self.acls: list[AclBinding] = []
        self._listener: Any = None
        self._poller: asyncio.Task[None] | None = None
        self._apply([], {})

    def _apply(self, acls: Iterable[AclRow], creds: dict[tuple[str, str], CredentialRow]) -> None:
        """Replace the in-memory state (a new Authorizer: requests in flight keep the old one)."""
        self.acls = [row_binding(r) for r in acls]
        self.credentials = dict(creds)
        self.broker.authorizer = Authorizer(self.acls, self.super_users, self.allow_if_no_acl) if self.enabled else None

    def load_local(self) -> None:
        """Local mode: read `<log.dirs>/security/` at start-up."""
        assert isinstance(self.store, LocalSecurityStore)
        self._apply(*self.store.load_now())

    async def reload(self) -> None:
        if self.store is not None:
            self._apply(*await self.store.load())

    async def start_cluster(self, store: SecurityStore) -> None:
        """Cluster mode: load from PostgreSQL, then follow its NOTIFYs (and poll, in case one is lost)."""
        self.store = store
        await self.reload()
        self._listener = await store.listen(lambda _payload: asyncio.ensure_future(self._reload_logged()))  # type: ignore[attr-defined]
        self._poller = asyncio.ensure_future(self._poll())

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception as exc:  # keep the previous state; the next NOTIFY or poll retries
            log.warning("cannot reload ACLs and SCRAM credentials: %s", exc)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            await self._reload_logged()

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._listener is not None:
            await self._listener.close()

    def scram_lookup(self, mechanism: str, username: str) -> ScramCredential | None:
        """What the SCRAM mechanisms verify a client against (None: unknown user)."""
        row = self.credentials.get((username, mechanism))
        if row is None:
            return None
        return ScramCredential(row.salt, row.stored_key, row.server_key, row.iterations)

    # ------------------------------------------------------------------------ ACL APIs

    def _checked(self, ctx: Any) -> tuple[int, Access | None]:
        """(SECURITY_DISABLED, None) with no authorizer, else (NONE, the request's Access)."""
        acc = access(self.broker, ctx)
        return (Error.SECURITY_DISABLED, None) if acc is None else (Error.NONE, acc)

    async def create_acls(self, ctx: Any, req: Any) -> Body:
        error, acc = self._checked(ctx)
        if acc is not None and not acc.cluster(AclOperation.ALTER):
            error = Error.CLUSTER_AUTHORIZATION_FAILED
        if error:
            return {"throttle_time": 0, "results": [_result(error) for _ in req.creations]}
        results: list[Body] = []
        valid: list[AclBinding] = []
        for c in req.creations:
            binding, problem = _binding(c)
            if problem is None:
                problem = Authorizer.validate(binding)
            if problem is not None:
                results.append(_result(Error.INVALID_REQUEST, problem))
            else:
                valid.append(binding)
                results.append(_result(Error.NONE))
        if valid:
            try:
                await self.store.add_acls([binding_row(b) for b in valid])  # type: ignore[union-attr]
            except Exception as exc:
                log.warning("CreateAcls: cannot store: %s", exc)
                return {"throttle_time": 0, "results": [
                    r if r["error_code"] else _result(Error.UNKNOWN_SERVER_ERROR, str(exc)) for r in results]}
            await self.reload()
        return {"throttle_time": 0, "results": results}

    def describe_acls(self, ctx: Any, req: Any) -> Body:
        error, acc = self._checked(ctx)
        if acc is not None and not acc.cluster(AclOperation.DESCRIBE):
            error = Error.CLUSTER_AUTHORIZATION_FAILED
        if error:
            return {"throttle_time": 0, "error_code": error, "error_message": None, "resources": ()}
        acl_filter, problem = _filter(req)
        if problem is not None:
            return {"throttle_time": 0, "error_code": Error.INVALID_REQUEST, "error_message": problem, "resources": ()}
        grouped: dict[tuple[int, str, int], list[Body]] = {}
        for b in self.broker.authorizer.describe(acl_filter):
            grouped.setdefault((int(b.resource_type), b.resource_name, int(b.pattern_type)), []).append(
                {"principal": b.principal, "host": b.host, "operation": int(b.operation),
                 "permission_type": int(b.permission)})
        return {"throttle_time": 0, "error_code": Error.NONE, "error_message": None, "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in grouped.items()]}

    async def delete_acls(self, ctx: Any, req: Any) -> Body:
        error, acc = self._checked(ctx)
        if acc is not None and not acc.cluster(AclOperation.ALTER):
            error = Error.CLUSTER_AUTHORIZATION_FAILED
        if error:
            return {"throttle_time": 0, "filter_results": [
                {"error_code": error, "error_message": None, "matching_acls": ()} for _ in req.filters]}
        results: list[Body] = []
        doomed: dict[AclRow, None] = {}
        authorizer = self.broker.authorizer
        for f in req.filters:
            acl_filter, problem = _filter(f)
            if problem is not None:
                results.append({"error_code": Error.INVALID_REQUEST, "error_message": problem, "matching_acls": ()})
                continue
            matching = authorizer.describe(acl_filter)
            doomed.update(dict.fromkeys(binding_row(b) for b in matching))
            results.append({"error_code": Error.NONE, "error_message": None, "matching_acls": [
                {"error_code": Error.NONE, "error_message": None, "resource_type": int(b.resource_type),
                 "resource_name": b.resource_name, "pattern_type": int(b.pattern_type), "principal": b.principal,
                 "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)}
                for b in matching]})
        if doomed:
            await self.store.remove_acls(list(doomed))  # type: ignore[union-attr]
            await self.reload()
        return {"throttle_time": 0, "filter_results": results}

    # --------------------------------------------------------------- SCRAM credentials

    def describe_user_scram_credentials(self, ctx: Any, req: Any) -> Body:
        acc = access(self.broker, ctx)
        if acc is not None and not acc.cluster(AclOperation.DESCRIBE):
            return {"throttle_time": 0, "error_code": Error.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None, "results": ()}
        by_user: dict[str, list[Body]] = {}
        for (user, mech), row in sorted(self.credentials.items()):
            by_user.setdefault(user, []).append({"mechanism": MECHANISM_CODES[mech], "iterations": row.iterations})
        if not req.users:  # null or empty: every user with a credential
            results = [_user_result(user, Error.NONE, infos) for user, infos in by_user.items()]
        else:
            names = [u.name for u in req.users]
            counts = Counter(names)
            results = []
            for name in dict.fromkeys(names):
                if counts[name] > 1:
                    results.append(_user_result(name, Error.DUPLICATE_RESOURCE, (),
                                                f"Cannot describe SCRAM credentials for the same user twice in a "
                                                f"single request: {name}"))
                elif name not in by_user:
                    results.append(_user_result(name, Error.RESOURCE_NOT_FOUND, (),
                                                f"Attempt to describe a user credential that does not exist: {name}"))
                else:
                    results.append(_user_result(name, Error.NONE, by_user[name]))
        return {"throttle_time": 0, "error_code": Error.NONE, "error_message": None, "results": results}

    async def alter_user_scram_credentials(self, ctx: Any, req: Any) -> Body:
        users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
        acc = access(self.broker, ctx)
        if acc is not None and not acc.cluster(AclOperation.ALTER):
            return {"throttle_time": 0, "results": [
                {"user": u, "error_code": Error.CLUSTER_AUTHORIZATION_FAILED, "error_message": None} for u in users]}
        errors: dict[str, tuple[int, str]] = {}
        seen = Counter([(d.name, d.mechanism) for d in req.deletions] + [(u.name, u.mechanism) for u in req.upsertions])
        for (name, _), count in seen.items():
            if count > 1:
                errors.setdefault(name, (Error.DUPLICATE_RESOURCE,
                                         "A user credential cannot be altered twice in the same request"))
        deletes: list[tuple[str, str]] = []
        upserts: dict[tuple[str, str], CredentialRow] = {}
        for d in req.deletions:
            problem = _mechanism_problem(d.name, d.mechanism)
            key = (d.name, SCRAM_MECHANISMS.get(d.mechanism, ""))
            if problem is None and key not in self.credentials:
                problem = (Error.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if problem is not None:
                errors.setdefault(d.name, problem)
            else:
                deletes.append(key)
        for u in req.upsertions:
            problem = _mechanism_problem(u.name, u.mechanism)
            if problem is None and u.iterations < MIN_ITERATIONS:
                problem = (Error.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            if problem is None and u.iterations > MAX_ITERATIONS:
                problem = (Error.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            if problem is not None:
                errors.setdefault(u.name, problem)
                continue
            mechanism = SCRAM_MECHANISMS[u.mechanism]
            cred = credential_from_salted_password(mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations)
            upserts[(u.name, mechanism)] = CredentialRow(cred.salt, cred.stored_key, cred.server_key, cred.iterations)
        # a user with any error changes nothing (Kafka validates a user's alterations as a whole)
        deletes = [k for k in deletes if k[0] not in errors]
        upserts = {k: v for k, v in upserts.items() if k[0] not in errors}
        if deletes:
            await self.store.delete_credentials(deletes)  # type: ignore[union-attr]
        if upserts:
            await self.store.upsert_credentials(upserts)  # type: ignore[union-attr]
        if deletes or upserts:
            await self.reload()
        return {"throttle_time": 0, "results": [
            {"user": u, "error_code": errors.get(u, (Error.NONE, None))[0],
             "error_message": errors.get(u, (Error.NONE, None))[1]} for u in users]}

    def describe_client_quotas(self, ctx: Any, req: Any) -> Body:
        """offsetd enforces no quotas: an empty answer (kafka-configs --describe asks first)."""
        acc = access(self.broker, ctx)
        if acc is not None and not acc.cluster(AclOperation.DESCRIBE_CONFIGS):
            return {"throttle_time": 0, "error_code": Error.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "Cluster authorization failed.", "entries": None}
        return {"throttle_time": 0, "error_code": Error.NONE, "error_message": None, "entries": []}


def _result(error: int, message: str | None = None) -> Body:
    return {"error_code": error, "error_message": message}


def _user_result(user: str, error: int, infos: Any, message: str | None = None) -> Body:
    return {"user": user, "error_code": error, "error_message": message, "credential_infos": infos}


def _mechanism_problem(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return (Error.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in SCRAM_MECHANISMS:
        return (Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


def _binding(c: Any) -> tuple[Any, str | None]:
    """A CreateAcls creation as an AclBinding, or a reason it is not one."""
    try:
        return AclBinding(ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type),
                          c.principal, c.host, AclOperation(c.operation), AclPermission(c.permission_type)), None
    except ValueError as exc:
        return None, f"Invalid ACL creation: {exc}"


def _filter(f: Any) -> tuple[Any, str | None]:
    """A Describe/DeleteAcls filter as an AclFilter, or a reason it is not one."""
    try:
        return AclFilter(ResourceType(f.resource_type_filter), f.resource_name_filter,
                         PatternType(f.pattern_type_filter), f.principal_filter, f.host_filter,
                         AclOperation(f.operation), AclPermission(f.permission_type)), None
    except ValueError as exc:
        return None, f"Invalid ACL filter: {exc}"


# ------------------------------------------------------------- the broker HANDLERS' form

def _security(broker: Any) -> SecurityRuntime:
    return broker.security


def handle_create_acls(broker: Any, req: Any, version: int, now_ms: int) -> Any:
    return _security(broker).create_acls(current_context(), req)


def handle_describe_acls(broker: Any, req: Any, version: int, now_ms: int) -> Body:
    return _security(broker).describe_acls(current_context(), req)


def handle_delete_acls(broker: Any, req: Any, version: int, now_ms: int) -> Any:
    return _security(broker).delete_acls(current_context(), req)


def handle_describe_user_scram_credentials(broker: Any, req: Any, version: int, now_ms: int) -> Body:
    return _security(broker).describe_user_scram_credentials(current_context(), req)


def handle_alter_user_scram_credentials(broker: Any, req: Any, version: int, now_ms: int) -> Any:
    return _security(broker).alter_user_scram_credentials(current_context(), req)


def handle_describe_client_quotas(broker: Any, req: Any, version: int, now_ms: int) -> Body:
    return _security(broker).describe_client_quotas(current_context(), req)


def install(server: Any) -> SecurityRuntime:
    """Give the server's broker its SecurityRuntime (local mode: loaded now from log.dirs; cluster
    mode: empty, every check denied but for super users, until start_cluster loads PostgreSQL)."""
    config = server.config
    local = config.get("storage.engine") == "local"
    runtime = SecurityRuntime(server.broker, config, LocalSecurityStore(config.log_dir) if local else None)
    server.broker.security = runtime
    if local:
        runtime.load_local()
    return runtime


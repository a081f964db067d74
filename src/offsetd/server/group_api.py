"""Group coordinator APIs on the wire: route each group to its shard, check the shard's load
state (§0.2), filter unknown topics (§1.1 step 3), shape responses per version. TxnOffsetCommit
asks the transaction side (`GroupApi.txn_verifier`, set by the server) whether the group's
offsets partition is part of the producer's transaction before writing (§1.2, reference A5)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any, Awaitable, Callable

from ..broker.broker import Broker
from ..broker.cluster_view import once_led
from ..coordinator.result import CoordinatorResult
from ..coordinator.classic_group_ops import JoinRequest
from ..coordinator.consumer_group_ops import TopicsImage
from ..coordinator.write_errors import WRITE_ERROR_REMAP, CoordinatorWriteError
from ..protocol.errors import Error
from ..records.offsets import OFFSETS_TOPIC, partition_for
from ..security.authorization import Access, Op, Res, access
from .api_checks import commit_denied
from .coordinator_runtime import ShardRuntime, ShardState, new_token
from .futures import then
from . import group_listing

Body = dict[str, Any]
Reply = Body | Awaitable[Body]

# (transactional id, producer id, producer epoch, topic, partition) -> error code (0 = the
# partition is in the producer's ongoing transaction); may answer later (an awaitable).
TxnVerifier = Callable[[str, int, int, str, int], "int | Awaitable[int]"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request: what JoinGroup records as client id and host, and for authorization
    the authenticated principal, the peer address and the listener it came in on."""

    client_id: str
    client_host: str
    version: int
    principal: str = "User:ANONYMOUS"
    host: str = ""  # the peer address without Kafka's "/" (ACL host match)
    listener: str = ""


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def reply_when_durable(token: "asyncio.Future[Any]", failure: Callable[[int], Body],
           shape: Callable[[Any], Body] = lambda body: body) -> Reply:
    """The shaped response now if the shard already answered, else a future of it. If the
    operation's write failed, the response is failure(code), with the code of §0.1's remapping:
    the same shape as for a coordinator state error (§0.2)."""
    if token.done() and token.exception() is None:
        return shape(token.result())
    return then(token, shape, lambda exc: write_failure(exc, failure))


def write_failure(exc: BaseException, failure: Callable[[int], Any]) -> Any:
    """failure(code) for a failed coordinator write; None (let it pass) for anything else."""
    return failure(exc.error_code) if isinstance(exc, CoordinatorWriteError) else None


class GroupApi:
    """The coordinator half of the broker: FindCoordinator and the group APIs."""

    def __init__(self, broker: Broker, runtimes: list[ShardRuntime]) -> None:
        self.broker = broker
        self.runtimes = runtimes
        # TxnOffsetCommit's check that the offsets partition was added to the transaction
        # (KIP-890); None: not checked
        self.txn_verifier: TxnVerifier | None = None
        # the broker's topics as the consumer groups see them (a classic member of a consumer
        # group subscribes with JoinGroup); set by the server to ConsumerGroupApi.topics_image
        self.topics_image: Callable[[], TopicsImage] = TopicsImage
        # DeleteGroups is deleting these groups: given their ids before, it answers what to run
        # with the ids deleted after (their share state goes too: ShareGroupOffsetsApi.groups_deleting)
        self.on_groups_deleted: Callable[[list[str]], Callable[[list[str]], Awaitable[None]]] | None = None
        # FindCoordinator key type 2 (share): the share coordinator's entry for a key (server/share_server.py)
        self.find_share_coordinator: Callable[[str], Body] | None = None

    def runtime_for(self, group_id: str) -> ShardRuntime:
        return self.runtimes[partition_for(group_id, len(self.runtimes))]

    def _led_nowhere(self, runtime: ShardRuntime) -> bool:
        """Cluster mode: no broker leads the partition in this view (released, not claimed yet). A
        client told to retry here (14) learns the new owner a moment later; told 16, it would ask
        peers whose view may still name this broker (librdkafka then waits 0.3-1 s to ask again).
        Only while this broker's lease holds: a view it cannot refresh must not keep clients here."""
        view = self.broker.cluster
        return getattr(view, "serving", False) and view.leader(self.broker.topics.get(OFFSETS_TOPIC), runtime.shard.partition)[0] == -1

    def state_error(self, runtime: ShardRuntime) -> int:
        """§0.2 steps 4-5: loading, or changing hands -> 14; failed, or owned by another broker -> 16."""
        if runtime.state is ShardState.LOADING or (runtime.state is ShardState.UNLOADED and self._led_nowhere(runtime)):
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        if runtime.state is ShardState.FAILED or runtime.state is ShardState.UNLOADED:
            return Error.NOT_COORDINATOR
        if not runtime.plog.leader:  # cluster mode: the lease ran out (a frozen or cut-off broker)
            return Error.NOT_COORDINATOR
        return Error.NONE

    # ----------------------------------------------------------------- FindCoordinator

    def find_coordinator(self, ctx: RequestContext, req: Any) -> Reply:
        """The leader of the group's `__consumer_offsets` partition (§5.2; this node on a single
        broker); COORDINATOR_NOT_AVAILABLE while it has none (never a broker whose lease
        expired), after waiting a moment for a handoff in progress (broker/cluster_view.py
        `once_led`); v4+ batches keys."""
        key_type = getattr(req, "key_type", 0)
        view = self.broker.cluster
        offsets_topic = self.broker.topics.get(OFFSETS_TOPIC)

        def entry(key: str) -> Body:
            if key_type == 2 and self.find_share_coordinator is not None:
                return self.find_share_coordinator(key)
            if key_type not in (0,):  # transactions are not coordinated here
                return {"key": key, "error_code": Error.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1,
                        "error_message": f"Unsupported coordinator key type {key_type}"}
            node, _ = view.leader(offsets_topic, partition_for(key, len(self.runtimes))) if self.runtimes \
                else (-1, -1)
            endpoint = view.endpoint(node) if node >= 0 else None
            if endpoint is None:
                return {"key": key, "error_code": Error.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "",
                        "port": -1, "error_message": "The coordinator is not available."}
            return {"key": key, "error_code": Error.NONE, "node_id": node,
                    "host": endpoint[0], "port": endpoint[1], "error_message": None}

        if ctx.version >= 4:
            return once_led(view, lambda: {"coordinators": [entry(k) for k in req.coordinator_keys]},
                            lambda body: any(e["error_code"] == Error.COORDINATOR_NOT_AVAILABLE
                                             for e in body["coordinators"]))
        return once_led(view, lambda: entry(req.key), lambda body: body["error_code"] == Error.COORDINATOR_NOT_AVAILABLE)

    # ------------------------------------------------------------------- membership

    def _read_denied(self, ctx: RequestContext, group_id: str) -> bool:
        """READ on the group refused (JoinGroup, SyncGroup, Heartbeat, LeaveGroup: 30 at top level,
        before any coordinator state, reference security.md §4)."""
        acc = access(self.broker, ctx)
        return acc is not None and not acc.allows(Op.READ, Res.GROUP, group_id or "")

    def join_group(self, ctx: RequestContext, req: Any) -> Reply:
        if self._read_denied(ctx, req.group_id):
            return _join_failure(Error.GROUP_AUTHORIZATION_FAILED, req.member_id)
        runtime = self.runtime_for(req.group_id)
        error = self.state_error(runtime)
        if error:
            return _join_failure(error, req.member_id)
        session = _ms(req.session_timeout)
        rebalance = _ms(getattr(req, "rebalance_timeout", -1))
        join = JoinRequest(
            group_id=req.group_id, member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None), client_id=ctx.client_id,
            client_host=ctx.client_host, session_timeout_ms=session,
            rebalance_timeout_ms=session if rebalance < 0 else rebalance,
            protocol_type=req.protocol_type, protocols=[(p.name, p.metadata) for p in req.protocols],
            require_known_member_id=ctx.version >= 4)
        token = new_token()
        runtime.submit(runtime.shard.join_group(token, join, runtime.clock(), self.topics_image()))
        return reply_when_durable(token, lambda code: _join_failure(code, req.member_id),
                      lambda body: _shape_join(body, ctx.version))

    def sync_group(self, ctx: RequestContext, req: Any) -> Reply:
        if self._read_denied(ctx, req.group_id):
            return _sync_failure(Error.GROUP_AUTHORIZATION_FAILED)
        runtime = self.runtime_for(req.group_id)
        error = self.state_error(runtime)
        if error:
            return _sync_failure(error)
        if ctx.version >= 5 and (req.protocol_type is None or req.protocol_name is None):
            return _sync_failure(Error.INCONSISTENT_GROUP_PROTOCOL)
        token = new_token()
        runtime.submit(runtime.shard.sync_group(
            token, req.group_id, req.member_id, getattr(req, "group_instance_id", None), req.generation_id,
            getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
            {a.member_id: a.assignment for a in req.assignments}, runtime.clock()))
        return reply_when_durable(token, _sync_failure)

    def heartbeat(self, ctx: RequestContext, req: Any) -> Reply:
        if self._read_denied(ctx, req.group_id):
            return {"error_code": Error.GROUP_AUTHORIZATION_FAILED}
        runtime = self.runtime_for(req.group_id)
        if runtime.state is ShardState.LOADING:
            return {"error_code": Error.NONE}  # Heartbeat answers NONE while loading (§0.2)
        if runtime.state is ShardState.FAILED or runtime.state is ShardState.UNLOADED or not runtime.plog.leader:
            return {"error_code": Error.NOT_COORDINATOR}
        token = new_token()
        runtime.submit(runtime.shard.heartbeat(token, req.group_id, req.member_id,
                                               getattr(req, "group_instance_id", None), req.generation_id,
                                               runtime.clock()))
        return reply_when_durable(token, lambda code: {"error_code": code})

    def leave_group(self, ctx: RequestContext, req: Any) -> Reply:
        runtime = self.runtime_for(req.group_id)
        legacy = ctx.version <= 2
        if self._read_denied(ctx, req.group_id):  # the whole batch fails
            return {"error_code": Error.GROUP_AUTHORIZATION_FAILED} if legacy else \
                {"error_code": Error.GROUP_AUTHORIZATION_FAILED, "members": ()}
        error = self.state_error(runtime)
        if error:
            return {"error_code": error, "members": ()}
        members = [(req.member_id, None)] if legacy else [(m.member_id, m.group_instance_id) for m in req.members]
        token = new_token()
        runtime.submit(runtime.shard.leave_group(token, req.group_id, members, runtime.clock()))

        def shape(body: Body) -> Body:
            if not legacy:
                return {"error_code": body["error_code"], "members": body["members"]}
            if body["error_code"]:
                return {"error_code": body["error_code"]}
            member_errors = [m["error_code"] for m in body["members"]]
            return {"error_code": member_errors[0] if member_errors else Error.NONE}

        return reply_when_durable(token, lambda code: shape({"error_code": code, "members": ()}), shape)

    # ---------------------------------------------------------------------- offsets

    def _commit_partitions(self, topics: Any, denied: dict[str, int] | None, *, stamped: bool = False
                           ) -> tuple[list[tuple[Any, ...]], dict[tuple[str, int], int]]:
        """An (Txn)OffsetCommit's partitions: (topic, partition, offset, leader epoch, metadata
        [, commit timestamp when `stamped`]) to commit, and the error of each other one -
        denied by authorization first, else unknown (UNKNOWN_TOPIC_OR_PARTITION, §1.1)."""
        known: list[tuple[Any, ...]] = []
        errors: dict[tuple[str, int], int] = {}
        registry = self.broker.topics
        for topic in topics:
            name = topic.name
            refused = denied.get(name) if denied else None
            found = registry.get(name)
            count = len(found.partitions) if found is not None else 0  # the topic looked up once, not per partition
            for p in topic.partitions:
                index = p.partition_index
                if refused is not None:
                    errors[(name, index)] = refused
                elif not 0 <= index < count:
                    errors[(name, index)] = Error.UNKNOWN_TOPIC_OR_PARTITION
                elif stamped:
                    known.append((name, index, p.committed_offset, -1, p.committed_metadata, p.commit_timestamp))
                else:
                    known.append((name, index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                  p.committed_metadata))
        return known, errors

    def offset_commit(self, ctx: RequestContext, req: Any) -> Reply:
        """§1.1: unknown topics/partitions answered 3 before any group check; no top-level error."""
        denied = commit_denied(access(self.broker, ctx), req.topics, req.group_id)
        # v1 only: a per-partition commit timestamp (-1 = now)
        known, errors = self._commit_partitions(req.topics, denied, stamped=ctx.version == 1)

        def shape(group_errors: dict[tuple[str, int], int]) -> Body:
            merged = {**errors, **group_errors}
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": merged[(t.name, p.partition_index)]}
                for p in t.partitions]} for t in req.topics]}

        if not known:
            return shape({})
        runtime = self.runtime_for(req.group_id)

        def failure(code: int) -> Body:
            return shape({(t, p): code for t, p, *_ in known})

        error = self.state_error(runtime)
        if error:
            return failure(error)
        token = new_token()
        runtime.submit(runtime.shard.commit_offsets(
            token, req.group_id, getattr(req, "member_id", ""), getattr(req, "group_instance_id", None),
            getattr(req, "generation_id_or_member_epoch", -1), known, _ms(getattr(req, "retention_time", -1)),
            ctx.version, runtime.clock()))
        return reply_when_durable(token, failure, shape)

    def offset_fetch(self, ctx: RequestContext, req: Any) -> Reply:
        """§1.3, in the three response layouts: v0-1, v2-7 (top-level error), v8+ (per group)."""
        if ctx.version >= 8:
            groups = [(g.group_id, None if g.topics is None else [(t.name, list(t.partition_indexes))
                                                                  for t in g.topics]) for g in req.groups]
        else:
            groups = [(req.group_id, None if req.topics is None else [(t.name, list(t.partition_indexes))
                                                                      for t in req.topics])]
        require_stable = getattr(req, "require_stable", False)
        # v9: the member asking, checked against a consumer group (B7); (None, -1): not checked
        members = [(getattr(g, "member_id", None), getattr(g, "member_epoch", -1)) for g in req.groups] \
            if ctx.version >= 9 else [(None, -1)] * len(groups)
        acc = access(self.broker, ctx)
        answers: list[Any] = [self._fetch_group(group_id, topics, require_stable, member) if acc is None else
                              self._fetch_authorized(acc, group_id, topics, require_stable, member)
                              for (group_id, topics), member in zip(groups, members)]

        def shape(results: list[tuple[int, list]]) -> Body:
            if ctx.version >= 8:
                return {"groups": [{"group_id": gid, "error_code": err, "topics": _fetch_topics(rows)}
                                   for (gid, _), (err, rows) in zip(groups, results)]}
            err, rows = results[0]
            if ctx.version <= 1 and err:  # no top-level error: copied into every partition
                return {"topics": [{"name": t, "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": err}
                    for p in parts]} for t, parts in (groups[0][1] or [])]}
            return {"error_code": err, "topics": _fetch_topics(rows)}

        if all(not asyncio.isfuture(a) for a in answers):
            return shape(answers)

        async def wait_all() -> Body:
            return shape([await a if asyncio.isfuture(a) else a for a in answers])

        return wait_all()

    def _fetch_authorized(self, acc: Access, group_id: str, topics: list[tuple[str, list[int]]] | None,
                          require_stable: bool, member: tuple[str | None, int]) -> Any:
        """_fetch_group under authorization (reference security.md §4 OffsetFetch): no DESCRIBE on
        the group: 30; a listed topic without DESCRIBE: 29 and offset -1 per partition, after
        the coordinator's topics; all topics (null): those without DESCRIBE are left out."""
        if not acc.allows(Op.DESCRIBE, Res.GROUP, group_id or ""):
            return (Error.GROUP_AUTHORIZATION_FAILED, [])
        if topics is None:
            def keep(rows: list[Any]) -> list[Any]:
                return [row for row in rows if acc.allows(Op.DESCRIBE, Res.TOPIC, row[0])]
            return _rows_then(self._fetch_group(group_id, None, require_stable, member), keep)
        allowed = [(t, parts) for t, parts in topics if acc.allows(Op.DESCRIBE, Res.TOPIC, t)]
        if len(allowed) == len(topics):
            return self._fetch_group(group_id, topics, require_stable, member)
        refused = [(t, [(p, -1, -1, "", Error.TOPIC_AUTHORIZATION_FAILED) for p in parts])
                   for t, parts in topics if not acc.allows(Op.DESCRIBE, Res.TOPIC, t)]
        return _rows_then(self._fetch_group(group_id, allowed, require_stable, member), lambda rows: rows + refused)

    def _fetch_group(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                     require_stable: bool, member: tuple[str | None, int] = (None, -1)) -> Any:
        runtime = self.runtime_for(group_id)
        error = self.state_error(runtime)
        if error:
            return (error, [])
        if group_id is None:
            return (Error.INVALID_GROUP_ID, [])
        consumer = runtime.shard.consumer.groups.get(group_id)
        if consumer is not None:
            error = consumer.validate_offset_fetch(*member)
            if error:
                return (error, [])
        if not require_stable:
            return (Error.NONE, [(topic, [(*row, Error.NONE) for row in rows])
                                 for topic, rows in runtime.shard.fetch_offsets(group_id, topics)])
        # require_stable: wait for every pending write of the shard, then read; partitions with
        # a pending transactional offset answer UNSTABLE_OFFSET_COMMIT (§1.3, §5.4)
        token = new_token()
        runtime.submit(CoordinatorResult(barrier=True).respond(
            token, lambda: (Error.NONE, runtime.shard.fetch_stable_offsets(group_id, topics))))
        # a failed wait answers NOT_COORDINATOR, not 15: pre-3.9 consumers do not retry 15 here (§1.3)
        return reply_when_durable(token, lambda code: (
            Error.NOT_COORDINATOR if code == Error.COORDINATOR_NOT_AVAILABLE else code, []))

    def txn_offset_commit(self, ctx: RequestContext, req: Any) -> Reply:
        """TxnOffsetCommit v0-5 (§1.2, reference A5): unknown topics/partitions 3 and dropped;
        group id null or "" -> 24; coordinator state; the verifier (its code for every
        partition, nothing written); then the shard's KIP-447 checks. v0-1 see 15 for 14."""
        denied = commit_denied(access(self.broker, ctx), req.topics, req.group_id, req.transactional_id)
        known, errors = self._commit_partitions(req.topics, denied)

        def shape(group_errors: dict[tuple[str, int], int]) -> Body:
            merged = {**errors, **group_errors}
            if ctx.version < 2:
                merged = {tp: Error.COORDINATOR_NOT_AVAILABLE if code == Error.COORDINATOR_LOAD_IN_PROGRESS
                          else code for tp, code in merged.items()}
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": merged[(t.name, p.partition_index)]}
                for p in t.partitions]} for t in req.topics]}

        def failure(code: int) -> Body:
            return shape({(t, p): code for t, p, *_ in known})

        if not known:
            return shape({})
        if not req.group_id:
            return failure(Error.INVALID_GROUP_ID)
        runtime = self.runtime_for(req.group_id)
        error = self.state_error(runtime)
        if error:
            return failure(error)

        def commit() -> Reply:
            error = self.state_error(runtime)  # again: the verifier may have answered later
            if error:
                return failure(error)
            token = new_token()
            runtime.submit(runtime.shard.txn_offset_commit(
                token, req.group_id, getattr(req, "member_id", ""), getattr(req, "group_instance_id", None),
                getattr(req, "generation_id", -1), known, req.producer_id, req.producer_epoch, runtime.clock()))
            return reply_when_durable(token, failure, shape)

        if self.txn_verifier is None:
            return commit()
        verdict = self.txn_verifier(req.transactional_id, req.producer_id, req.producer_epoch, OFFSETS_TOPIC,
                                    runtime.shard.partition)
        # the verifier's code is remapped like a failed write's (§0.1: NETWORK_EXCEPTION -> 14, ...)
        if not isawaitable(verdict):
            return failure(WRITE_ERROR_REMAP.get(verdict, verdict)) if verdict else commit()

        async def verified() -> Body:
            code = await verdict
            if code:
                return failure(WRITE_ERROR_REMAP.get(code, code))
            reply = commit()
            return await reply if isawaitable(reply) else reply

        return verified()

    # ------------------------------------------------------------------------ admin

    def describe_groups(self, ctx: RequestContext, req: Any) -> Reply:
        """DescribeGroups (§1.10; v6, KIP-1043: a group that is not a classic one answers 69)."""
        acc = access(self.broker, ctx)
        if acc is not None:
            return self._describe_authorized(acc, req, ctx.version)
        return {"groups": self._describe(req.groups, ctx.version)}

    def _describe(self, group_ids: list[str], api_version: int) -> list[Body]:
        groups = []
        for group_id in group_ids:
            runtime = self.runtime_for(group_id)
            error = self.state_error(runtime)
            if error:
                groups.append({"error_code": error, "group_id": group_id, "group_state": "",
                               "protocol_type": "", "protocol_data": "", "members": ()})
            else:
                groups.append(runtime.shard.describe_group(group_id, api_version))
        return groups

    def _describe_authorized(self, acc: Access, req: Any, api_version: int) -> Reply:
        """DescribeGroups under authorization (§4): a group without DESCRIBE answers 30, these
        entries first; v3+ asked for it: each described group's authorized_operations."""
        refused = [{"error_code": Error.GROUP_AUTHORIZATION_FAILED, "group_id": g, "group_state": "",
                    "protocol_type": "", "protocol_data": "", "members": ()}
                   for g in req.groups if not acc.allows(Op.DESCRIBE, Res.GROUP, g)]
        described = self._describe([g for g in req.groups if acc.allows(Op.DESCRIBE, Res.GROUP, g)], api_version)
        if getattr(req, "include_authorized_operations", False):
            described = [{**group, "authorized_operations": acc.operations(Res.GROUP, group["group_id"])}
                         for group in described]
        return {"groups": refused + described}

    def list_groups(self, ctx: RequestContext, req: Any) -> Reply:
        """§1.10, in slices when there are many groups (server/group_listing.py)."""
        return group_listing.list_groups(self.broker, self.runtimes, ctx, req)

    def delete_groups(self, ctx: RequestContext, req: Any) -> Reply:
        """§1.5: distinct ids, batched per shard; each shard's tombstones are one atomic write."""
        wanted = list(dict.fromkeys(req.groups_names))
        by_runtime: dict[int, list[str]] = {}
        errors: dict[str, int] = {}
        acc = access(self.broker, ctx)
        for group_id in wanted:
            if acc is not None and not acc.allows(Op.DELETE, Res.GROUP, group_id):
                errors[group_id] = Error.GROUP_AUTHORIZATION_FAILED
                continue
            runtime = self.runtime_for(group_id)
            error = self.state_error(runtime)
            if error:
                errors[group_id] = error
            else:
                by_runtime.setdefault(runtime.shard.partition, []).append(group_id)
        deleted = self.on_groups_deleted(wanted) if self.on_groups_deleted is not None else None
        tokens = []
        for partition, group_ids in by_runtime.items():
            runtime = self.runtimes[partition]
            token = new_token()
            runtime.submit(runtime.shard.delete_groups(token, group_ids))
            tokens.append(token)

        async def wait() -> Body:
            for group_ids, token in zip(by_runtime.values(), tokens):
                try:
                    errors.update(await token)
                except CoordinatorWriteError as exc:  # that shard's tombstones were not written
                    errors.update(dict.fromkeys(group_ids, exc.error_code))
            if deleted is not None:
                await deleted([g for g in wanted if errors[g] == Error.NONE])
            return {"results": [{"group_id": g, "error_code": errors[g]} for g in wanted]}

        return wait()

    def offset_delete(self, ctx: RequestContext, req: Any) -> Reply:
        """§1.4/§3: unknown partitions 3 (dropped first); a top-level error empties the topics."""
        known: list[tuple[str, list[int]]] = []
        unknown: dict[tuple[str, int], int] = {}
        acc = access(self.broker, ctx)
        denied: set[str] = set()
        if acc is not None:  # DELETE on the group (30, top level), then READ on each topic (29), §4
            if not acc.allows(Op.DELETE, Res.GROUP, req.group_id or ""):
                return {"error_code": Error.GROUP_AUTHORIZATION_FAILED, "topics": ()}
            denied = acc.denied(Op.READ, Res.TOPIC, {t.name for t in req.topics})
        for topic in req.topics:
            parts = []
            for p in topic.partitions:
                if topic.name in denied:
                    unknown[(topic.name, p.partition_index)] = Error.TOPIC_AUTHORIZATION_FAILED
                elif self.broker.topics.partition(topic.name, p.partition_index) is None:
                    unknown[(topic.name, p.partition_index)] = Error.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    parts.append(p.partition_index)
            known.append((topic.name, parts))
        if not req.group_id:
            return {"error_code": Error.INVALID_GROUP_ID, "topics": ()}
        runtime = self.runtime_for(req.group_id)

        def failure(code: int) -> Body:
            return {"error_code": code, "topics": ()}

        error = self.state_error(runtime)
        if error:
            return failure(error)
        token = new_token()
        runtime.submit(runtime.shard.delete_offsets(token, req.group_id, known))

        def shape(body: Body) -> Body:
            if body["error_code"]:
                return {"error_code": body["error_code"], "topics": ()}
            return {"error_code": Error.NONE, "topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": unknown.get((t.name, p.partition_index),
                                           body["topics"].get(t.name, {}).get(p.partition_index, Error.NONE))}
                for p in t.partitions]} for t in req.topics]}

        return reply_when_durable(token, failure, shape)


def _rows_then(answer: Any, fn: Callable[[list[Any]], list[Any]]) -> Any:
    """An OffsetFetch group answer (error, rows), or a future of it, with fn applied to its rows
    when it has no error."""
    def apply(result: tuple[int, list[Any]]) -> tuple[int, list[Any]]:
        return result if result[0] else (result[0], fn(result[1]))
    return then(answer, apply) if asyncio.isfuture(answer) else apply(answer)


def _fetch_topics(rows: list[tuple[str, list[tuple[int, int, int, str, int]]]]) -> list[Body]:
    return [{"name": topic, "partitions": [
        {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch,
         "metadata": metadata, "error_code": error} for p, offset, epoch, metadata, error in parts]}
        for topic, parts in rows]


def _join_failure(error: int, member_id: str) -> Body:
    return {"error_code": error, "generation_id": -1, "leader": "", "member_id": member_id,
            "protocol_name": None, "members": ()}


def _sync_failure(error: int) -> Body:
    return {"error_code": error, "assignment": b""}


def _shape_join(body: Body, version: int) -> Body:
    """protocol_name is nullable only from v7; older versions send "" (§1.6 version notes)."""
    if version < 7 and body.get("protocol_name") is None:
        body = {**body, "protocol_name": ""}
    return body


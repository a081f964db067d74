"""The console's routes of metrics/http.py in-process: the / page leading to it, the /v1/ index, static
files, /v1/lag, /v1/topics and /v1/groups/{group}/history over a LagSource holding a fixed snapshot,
and a guard that hides a group."""

from __future__ import annotations

import asyncio
import json

from offsetd.lag.model import GroupLag, GroupMember, LagSnapshot, PartitionLag, TopicPartitionEnds
from offsetd.metrics.guard import Caller, OpenGuard
from offsetd.metrics.history import HistoryUnavailable
from offsetd.metrics.http import MetricsHttpServer

NOW = 1_700_000_000_000


def snapshot() -> LagSnapshot:
    orders = [PartitionLag("orders", p, 10 * p, 0, 100, 100 - 10 * p, 1000 * p, NOW - 5, NOW + 60_000 + p,
                           "c-1", "app", "/10.0.0.1") for p in range(3)]
    return LagSnapshot(NOW, [
        GroupLag("billing", "Stable", "consumer", 1, orders, NOW + 60_000, 604_800_000, 0,
                 [GroupMember("c-1", None, "app", "/10.0.0.1", [("orders", 0), ("orders", 1), ("orders", 2)])]),
        GroupLag("secret", "Empty", "consumer", 0, [PartitionLag("orders", 0, 100, 0, 100, 0, 0)]),
    ], [TopicPartitionEnds("orders", p, 0, 100, 101, 1) for p in range(3)]
       + [TopicPartitionEnds("idle", 0, 5, 5, 5, 1)])


class FixedLag:
    async def snapshot(self) -> LagSnapshot:
        return snapshot()


class HideSecret(OpenGuard):
    """Everyone sees everything except the group `secret`."""

    def visible(self, caller: Caller, snap: LagSnapshot) -> LagSnapshot:
        return LagSnapshot(snap.taken_at_ms, [g for g in snap.groups if g.group != "secret"], snap.partitions)

    def may_describe_group(self, caller: Caller, group: str) -> bool:
        return group != "secret"


class FakeHistory:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int]] = []

    async def history(self, group: str, since_ms: int, points: int) -> dict:
        self.asked.append((group, since_ms, points))
        if group == "loading":
            raise HistoryUnavailable("COORDINATOR_LOAD_IN_PROGRESS", 7)
        return {"group": group, "times": [since_ms]}


def ask(server: MetricsHttpServer, target: str) -> tuple[int, str, bytes]:
    response = asyncio.run(server.respond("GET", target, Caller(None, "127.0.0.1")))
    return response.status, response.content_type, response.body


def test_root_page_links_the_console_metrics_and_api_index():
    server = MetricsHttpServer([])
    status, kind, body = ask(server, "/")
    assert status == 200 and kind == "text/html; charset=utf-8" and body.startswith(b"<!doctype html>")
    for link in (b'href="console/"', b'href="metrics"', b'href="v1/"', b'href="v1/lag"'):
        assert link in body
    assert b'href="v1/groups/{group}' not in body  # a template is named, not linked
    assert ("Vary", "Accept") in asyncio.run(server.respond("GET", "/")).headers
    for accept in ("text/html,application/json;q=0.9", "*/*", "text/plain"):
        assert asyncio.run(server.respond("GET", "/", accept=accept)).content_type.startswith("text/html"), accept


def test_api_index_at_v1_and_for_json_clients_of_root():
    server = MetricsHttpServer([])
    answers = [asyncio.run(server.respond("GET", "/v1/")), asyncio.run(server.respond("GET", "/v1")),
               asyncio.run(server.respond("GET", "/", accept="application/json")),
               asyncio.run(server.respond("GET", "/?x=1", accept="application/json; charset=utf-8"))]
    assert all(r.status == 200 and r.content_type == "application/json" for r in answers)
    assert len({r.body for r in answers}) == 1
    index = json.loads(answers[0].body)
    assert index["service"] == "offsetd"
    assert [e["path"] for e in index["endpoints"]] == ["/console/", "/metrics", "/v1/groups", "/v1/groups/{group}",
                                                       "/v1/groups/{group}/history", "/v1/lag", "/v1/topics"]
    assert asyncio.run(server.respond("POST", "/v1/")).status == 405


def test_console_static_files_are_served():
    server = MetricsHttpServer([])
    status, kind, body = ask(server, "/console/")
    assert status == 200 and kind.startswith("text/html") and b'src="app.js"' in body
    assert ask(server, "/console/app.js")[1].startswith("text/javascript")
    assert ask(server, "/console/style.css")[1].startswith("text/css")
    response = asyncio.run(server.respond("GET", "/console"))
    assert response.status == 301 and ("Location", "/console/") in response.headers
    assert ask(server, "/console/nope.js")[0] == 404


def test_lag_json_has_totals_members_and_one_group_filter():
    server = MetricsHttpServer([], lag=FixedLag())
    status, _, body = ask(server, "/v1/lag")
    answer = json.loads(body)
    assert status == 200 and answer["taken_at_ms"] == NOW
    billing = answer["groups"][0]
    assert billing["total_lag"] == 100 + 90 + 80 and billing["max_time_lag_ms"] == 2000
    assert billing["member_list"][0]["assignment"] == [["orders", 0], ["orders", 1], ["orders", 2]]
    assert billing["partitions"][1]["expires_at_ms"] == NOW + 60_001
    assert len(answer["partitions"]) == 4
    one = json.loads(ask(server, "/v1/lag?group=secret")[2])
    assert [g["group"] for g in one["groups"]] == ["secret"] and one["partitions"] == []
    assert ask(MetricsHttpServer([]), "/v1/lag")[0] == 404


def test_topics_json_lists_partitions_and_their_readers():
    answer = json.loads(ask(MetricsHttpServer([], lag=FixedLag()), "/v1/topics")[2])
    topics = {t["topic"]: t for t in answer["topics"]}
    assert list(topics) == ["idle", "orders"]
    assert topics["idle"]["groups"] == [] and topics["idle"]["records"] == 0
    orders = topics["orders"]
    assert orders["groups"] == ["billing", "secret"] and orders["records"] == 300
    assert [(r["group"], r["lag"]) for r in orders["partitions"][0]["groups"]] == [("billing", 100), ("secret", 0)]
    assert orders["partitions"][2]["high_watermark"] == 101


def test_guard_hides_groups_from_lists_and_refuses_their_routes():
    history = FakeHistory()
    server = MetricsHttpServer([], lag=FixedLag(), guard=HideSecret(), history=history)
    assert [g["group"] for g in json.loads(ask(server, "/v1/lag")[2])["groups"]] == ["billing"]
    assert json.loads(ask(server, "/v1/topics")[2])["topics"][1]["groups"] == ["billing"]
    status, _, body = ask(server, "/v1/groups/secret/history")
    assert status == 403 and json.loads(body)["error"] == "GROUP_AUTHORIZATION_FAILED"
    assert ask(server, "/v1/groups/secret")[0] == 403
    assert history.asked == []


def test_history_route_parameters_and_errors():
    history = FakeHistory()
    server = MetricsHttpServer([], lag=FixedLag(), history=history)
    status, _, body = ask(server, "/v1/groups/a%2Fb/history?since_ms=123&points=50")
    assert status == 200 and json.loads(body) == {"group": "a/b", "times": [123]}
    assert history.asked == [("a/b", 123, 50)]
    assert ask(server, "/v1/groups/a/history?points=x")[0] == 400
    status, _, body = ask(server, "/v1/groups/loading/history")
    assert status == 503 and json.loads(body)["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert ask(MetricsHttpServer([]), "/v1/groups/a/history")[0] == 404
    assert ask(server, "/v1/groups/a/history?points=1000000")[0] == 200 and history.asked[-1][2] == 2000


def test_large_json_is_gzipped_for_clients_that_accept_it():
    import gzip
    import urllib.request

    class ManyGroups:
        async def snapshot(self) -> LagSnapshot:
            base = snapshot()
            return LagSnapshot(NOW, [GroupLag(f"g{i:05d}", "Empty", "consumer", 0, base.groups[0].partitions)
                                     for i in range(400)], base.partitions)

    async def scenario():
        server = MetricsHttpServer([], lag=ManyGroups())
        await server.start("127.0.0.1", 0)
        try:
            def fetch(accept: str | None):
                request = urllib.request.Request(server.url.replace("0.0.0.0", "127.0.0.1") + "/v1/lag",
                                                 headers={"Accept-Encoding": accept} if accept else {})
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.headers.get("Content-Encoding"), response.read()
            return await asyncio.gather(asyncio.to_thread(fetch, "gzip, deflate"), asyncio.to_thread(fetch, None))
        finally:
            await server.stop()

    (encoding, zipped), (plain_encoding, plain) = asyncio.run(scenario())
    assert encoding == "gzip" and plain_encoding is None and len(plain) > 64 * 1024
    assert gzip.decompress(zipped) == plain and len(zipped) < len(plain) / 5

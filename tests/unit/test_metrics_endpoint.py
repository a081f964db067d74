"""The HTTP endpoint of `offsetd.metrics` in-process: a MetricsHttpServer on an ephemeral port over
real shards, spoken to with raw sockets (status lines, headers, error codes) and urllib."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest

from coordinator_helpers import OTHER_TOPIC, Harness, make_config
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.metrics import snapshot as snapshot_module
from offsetd.metrics.http import MetricsHttpServer
from offsetd.records.offsets import partition_for
from offsetd.server.coordinator_runtime import ShardState
from offsetd.storage.log_dir import LogDirectory

PARTITIONS = 3
NOW = 1_000_000
RETENTION_MS = 7 * 24 * 3600 * 1000


def cluster(groups: list[str]) -> tuple[list[Harness], list[SimpleNamespace]]:
    """PARTITIONS shards; each group commits partitions 0 and 1 of OTHER_TOPIC on its own shard."""
    hs = [Harness(GroupCoordinatorShard(p, make_config()), now=NOW) for p in range(PARTITIONS)]
    for group in groups:
        h = hs[partition_for(group, PARTITIONS)]
        errors, _, _ = h.commit(group, [(OTHER_TOPIC, 0, 5, -1, None), (OTHER_TOPIC, 1, 6, -1, None)])
        assert set(errors.values()) == {0}
    log_dir = SimpleNamespace(log_dir=LogDirectory(Path("/data")))
    runtimes = [SimpleNamespace(shard=h.shard, state=ShardState.ACTIVE, load_time_ms=1.0, records_loaded=0,
                                plog=log_dir, group_commit=None) for h in hs]
    return hs, runtimes


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes; (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, status, _ = status_line.split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    assert int(headers["content-length"]) == len(body)
    assert headers["connection"] == "close"
    return int(status), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n".encode()


def serve(runtimes, scenario):
    """Run `scenario(server)` against a started server on a fresh loop."""
    async def main():
        server = MetricsHttpServer(runtimes)
        await server.start("127.0.0.1", 0)
        try:
            return await scenario(server)
        finally:
            await server.stop()
    return asyncio.run(main())


def test_metrics_and_groups_endpoints():
    groups = ["alpha", "beta", "with space/and slash", "ünï"]
    _, runtimes = cluster(groups)

    async def scenario(server):
        status, headers, body = await exchange(server.port, get("/metrics"))
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
        text = body.decode()
        assert "offsetd_group_coordinator_offset_commit_total 8.0" in text
        assert 'offsetd_group_earliest_offset_expiry_timestamp_ms{group="alpha"}' in text

        status, headers, body = await exchange(server.port, get("/v1/groups"))
        assert status == 200 and headers["content-type"] == "application/json"
        rows = json.loads(body)
        assert [r["group"] for r in rows] == sorted(groups)
        assert all(r["offsets"] == 2 and r["earliest_expiry_ms"] == NOW + RETENTION_MS for r in rows)

        for group in groups:  # the group id is URL-decoded (a "/" in it comes as %2F)
            status, _, body = await exchange(server.port, get("/v1/groups/" + urllib.parse.quote(group, safe="")))
            assert status == 200, body
            detail = json.loads(body)
            assert detail["group"] == group and detail["state"] == "Empty"
            assert [(o["partition"], o["offset"], o["expires_at_ms"]) for o in detail["offsets"]] == [
                (0, 5, NOW + RETENTION_MS), (1, 6, NOW + RETENTION_MS)]
        # absolute-form request target and a query string are accepted
        status, _, body = await exchange(server.port, get(f"http://127.0.0.1:{server.port}/v1/groups/alpha?x=1"))
        assert status == 200 and json.loads(body)["group"] == "alpha"

    serve(runtimes, scenario)


@pytest.mark.parametrize("raw,status,error", [
    (b"GARBAGE\r\n\r\n", 400, "BAD_REQUEST"),
    (b"GET /metrics HTTP/2.0\r\n\r\n", 400, "BAD_REQUEST"),
    (b"GET metrics HTTP/1.1\r\n\r\n", 400, "BAD_REQUEST"),
    (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400, "BAD_REQUEST"),
    (b"GET /" + b"x" * 10000 + b" HTTP/1.1\r\n\r\n", 400, "BAD_REQUEST"),
    (b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 400, "BAD_REQUEST"),
    (b"GET /v1/groups/%FF HTTP/1.1\r\n\r\n", 400, "BAD_REQUEST"),
    (get("/nope"), 404, "NOT_FOUND"),
    (get("/metrics/extra"), 404, "NOT_FOUND"),
    (get("/v1/groups/nobody"), 404, "GROUP_ID_NOT_FOUND"),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 405, "METHOD_NOT_ALLOWED"),
    (b"HEAD /v1/groups HTTP/1.1\r\n\r\n", 405, "METHOD_NOT_ALLOWED"),
    (b"DELETE /v1/groups/alpha HTTP/1.1\r\n\r\n", 405, "METHOD_NOT_ALLOWED"),
])
def test_errors(raw, status, error):
    _, runtimes = cluster(["alpha"])

    async def scenario(server):
        got, headers, body = await exchange(server.port, raw)
        assert got == status, body
        assert headers["content-type"] == "application/json"
        assert json.loads(body)["error"] == error
        if status == 405:
            assert headers["allow"] == "GET"
        # the server is still fine afterwards
        assert (await exchange(server.port, get("/v1/groups")))[0] == 200

    serve(runtimes, scenario)


def test_group_on_a_loading_partition_is_503():
    _, runtimes = cluster(["alpha"])
    runtimes[partition_for("alpha", PARTITIONS)].state = ShardState.LOADING

    async def scenario(server):
        status, _, body = await exchange(server.port, get("/v1/groups/alpha"))
        assert status == 503 and json.loads(body)["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
        status, _, body = await exchange(server.port, get("/v1/groups"))
        assert status == 200 and json.loads(body) == []  # its groups are not listed while loading
        status, _, body = await exchange(server.port, get("/metrics"))
        partition = partition_for("alpha", PARTITIONS)
        assert f'partition_state{{partition="{partition}",state="loading"}} 1.0' in body.decode()

    serve(runtimes, scenario)


def test_a_slow_client_does_not_hold_up_others():
    _, runtimes = cluster(["alpha"])

    async def scenario(server):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")  # ... and never finishes its head
        await writer.drain()
        status, _, _ = await exchange(server.port, get("/v1/groups/alpha"))
        assert status == 200
        writer.close()

    serve(runtimes, scenario)


def test_building_a_large_answer_lets_the_loop_run(monkeypatch):
    """With a zero time slice the read pauses after every group; a concurrent task must get turns
    in between (the broker's Kafka connections, in the real process)."""
    monkeypatch.setattr(snapshot_module, "SLICE_SECONDS", 0.0)
    groups = [f"g{i}" for i in range(300)]
    _, runtimes = cluster(groups)

    async def scenario(server):
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        for path in ("/metrics", "/v1/groups"):
            before = ticks
            status, _, body = await exchange(server.port, get(path))
            assert status == 200
            assert ticks - before >= len(groups), (path, ticks - before)
        done = True
        await task
        return body

    assert len(json.loads(serve(runtimes, scenario))) == len(groups)


def test_concurrent_scrapes_share_one_build(monkeypatch):
    _, runtimes = cluster(["alpha", "beta"])
    builds = 0
    asked = 0
    all_asked = asyncio.Event()
    original_build, original_metrics = MetricsHttpServer._build_metrics, MetricsHttpServer.metrics

    async def counting_build(self):
        nonlocal builds
        builds += 1
        if builds == 1:
            await all_asked.wait()  # hold the first build open until all five scrapes want it
        return await original_build(self)

    async def counting_metrics(self):
        nonlocal asked
        asked += 1
        if asked == 5:
            all_asked.set()
        return await original_metrics(self)

    monkeypatch.setattr(MetricsHttpServer, "_build_metrics", counting_build)
    monkeypatch.setattr(MetricsHttpServer, "metrics", counting_metrics)

    async def scenario(server):
        answers = await asyncio.gather(*(exchange(server.port, get("/metrics")) for _ in range(5)))
        assert {a[0] for a in answers} == {200} and len({a[2] for a in answers}) == 1
        await exchange(server.port, get("/metrics"))

    serve(runtimes, scenario)
    assert builds == 2


def test_stop_closes_the_listener():
    _, runtimes = cluster([])

    async def main():
        server = MetricsHttpServer(runtimes)
        await server.start("127.0.0.1", 0)
        assert server.url == f"http://127.0.0.1:{server.port}"
        await server.stop()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", server.port)

    asyncio.run(main())


def test_bind_failure_names_the_key():
    _, runtimes = cluster([])

    async def main():
        first = MetricsHttpServer(runtimes)
        await first.start("127.0.0.1", 0)
        try:
            with pytest.raises(OSError, match=f"metrics.listener http://127.0.0.1:{first.port}"):
                await MetricsHttpServer(runtimes).start("127.0.0.1", first.port)
        finally:
            await first.stop()

    asyncio.run(main())

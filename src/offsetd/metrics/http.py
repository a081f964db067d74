"""The read-only HTTP endpoint (`metrics.listener`): a minimal HTTP/1.1 server on the broker's loop.

GET only, one request per connection (`Connection: close`), a Content-Length on every response.

| path | answer |
|---|---|
| `/metrics` | Prometheus text format 0.0.4 (exporter.py) |
| `/v1/groups` | JSON list: {group, state, protocol_type, members, offsets, earliest_expiry_ms} per group |
| `/v1/groups/{group}` | JSON: the group's state, members, retention and offsets with expiry times (snapshot.group_detail) |
| `/v1/groups/{group}/history` | JSON: the group's lag and time lag over time and its health (metrics/history.py) |
| `/v1/lag` | JSON: the lag snapshot (groups, partitions' lag, time lag, expiry, members); `?group=G` for one |
| `/v1/topics` | JSON: per topic its partitions' log start / end and the groups reading each |
| `/console/` | the web console (static pages in offsetd/console/ that read the JSON above) |
| `/v1/` (or `/v1`) | JSON: the index of these endpoints, for scripts |
| `/` | HTML: links to the console, /metrics and the index (the JSON index for an Accept of JSON, not HTML) |

Groups the caller may not DESCRIBE (guard.may_describe_group) are left out of lists and answered
403 GROUP_AUTHORIZATION_FAILED on their own routes; /v1/lag and /v1/topics show guard.visible's view.

Errors are JSON `{"error": NAME, "message": ...}`: 400 malformed request, 404 unknown path or group,
405 a method other than GET, 503 the group's `__consumer_offsets` partition is loading or failed.
Building a large answer pauses between time slices (snapshot.Slicer) so Kafka clients keep being
served; concurrent scrapes of /metrics share one build.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import re
import time
from itertools import islice
from operator import attrgetter
from typing import Any, Iterator, Sequence
from importlib import resources
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import generate_latest

from ..lag.model import GroupLag, GroupMember, LagSnapshot, LagSource, PartitionLag, TopicPartitionEnds
from .exporter import CONTENT_TYPE, render
from .guard import Caller, Guard, OpenGuard, Unauthorized
from .history import HistoryUnavailable
from .lag_exporter import render_lag
from .lag_view import collector_paused
from .snapshot import (CoordinatorUnavailable, GroupNotFound, Runtime, Slicer, Snapshot, group_detail, rows_json,
                       take_snapshot)

log = logging.getLogger("offsetd.metrics")

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"
MAX_LINE = 8192          # request line or one header line
MAX_HEADERS = 100
MAX_DISCARDED_BODY = 1 << 20
READ_TIMEOUT = 10.0      # seconds to send the request head
GROUPS_PREFIX = "/v1/groups/"
HISTORY_SUFFIX = "/history"
CONSOLE_PREFIX = "/console/"
CONSOLE_FILES = {"": ("index.html", HTML_TYPE), "app.js": ("app.js", "text/javascript; charset=utf-8"),
                 "style.css": ("style.css", "text/css; charset=utf-8")}
GZIP_MIN_BYTES = 64 * 1024  # larger JSON answers go gzipped to clients that accept it (the console's history)
DEFAULT_HISTORY_MS = 3_600_000  # the charts' default window: the last hour
JSON_CHUNK = 1000        # groups per json.dumps call

REASONS = {200: "OK", 301: "Moved Permanently", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 500: "Internal Server Error", 503: "Service Unavailable"}
_REQUEST_LINE = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/1\.[01]$")
API_INDEX_PATHS = ("/v1", "/v1/")
ENDPOINTS = (  # (path, what it answers): the API index, and the links of the / page
    ("/console/", "the web console"),
    ("/metrics", "Prometheus text format"),
    ("/v1/groups", "groups: state, members, offsets, earliest expiry (JSON)"),
    ("/v1/groups/{group}", "one group: members, offsets and their expiry times (JSON)"),
    ("/v1/groups/{group}/history", "lag and time lag over time, health (JSON)"),
    ("/v1/lag", "lag of every group and partition (JSON)"),
    ("/v1/topics", "topics, partitions' offsets and the groups reading them (JSON)"),
)
API_INDEX = json.dumps({"service": "offsetd", "endpoints": [{"path": path, "answer": answer}
                                                              for path, answer in ENDPOINTS]}).encode() + b"\n"
HOME_PAGE = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>offsetd</title></head>\n"
             "<body>\n<h1>offsetd</h1>\n<p><a href=\"console/\">Open the console</a></p>\n<p>Also here:</p>\n<ul>\n"
             + "".join(f"<li><a href=\"{path[1:]}\">{path}</a>: {answer}</li>\n" if "{" not in path
                       else f"<li>{path}: {answer}</li>\n" for path, answer in ENDPOINTS if path != CONSOLE_PREFIX)
             + "<li><a href=\"v1/\">/v1/</a>: the index of these paths as JSON, for scripts</li>\n</ul>\n"
             "</body></html>\n").encode()  # relative links, so a proxy may serve the listener under a prefix


class BadRequest(Exception):
    pass


class Response:
    def __init__(self, status: int, body: bytes, content_type: str = JSON_TYPE,
                 headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers

    def encode_head(self) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Unknown')}",
                 f"Content-Type: {self.content_type}", f"Content-Length: {len(self.body)}",
                 "Cache-Control: no-store", "Connection: close",
                 *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def error(status: int, name: str, message: str, **extra: Any) -> Response:
    return Response(status, json.dumps({"error": name, "message": message, **extra}).encode() + b"\n",
                    headers=(("Allow", "GET"),) if status == 405 else ())


def wants_json(accept: str) -> bool:
    """Whether an Accept header asks for JSON and not for HTML (a script, not a browser, asking for /)."""
    types = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return "application/json" in types and "text/html" not in types


async def pace(steps: Iterator[Any]) -> None:
    """Run a cooperative generator, giving the event loop a turn at every pause."""
    for _ in steps:
        await asyncio.sleep(0)


def groups_json(snapshot: Snapshot, out: list[bytes], slicer: Slicer | None = None) -> Iterator[None]:
    """Cooperative generator appending the /v1/groups JSON list (by group id) to `out` in pieces."""
    slicer = slicer or Slicer()
    rows = snapshot.groups()
    out.append(b"[")
    first = True
    while True:
        chunk = rows_json(islice(rows, JSON_CHUNK))
        if not chunk:
            break
        text = json.dumps(chunk)[1:-1].encode()
        out.append(text if first else b"," + text)
        first = False
        if slicer.due():
            yield
    out.append(b"]\n")


class MetricsHttpServer:
    """Serves the endpoints above for a list of shard runtimes, on the running event loop."""

    def __init__(self, runtimes: Sequence[Runtime], *, lag: LagSource | None = None, guard: Guard | None = None,
                 collectors: Sequence[Any] = (), history: Any = None, group_filter: re.Pattern[str] | None = None
                 ) -> None:
        self.runtimes = runtimes
        self.group_filter = group_filter  # metrics.group.filter: the groups with per-group series (None: all)
        self.history = history  # `async history(group, since_ms, points) -> dict` (metrics/history.py), or None
        self.lag = lag  # the lag families of /metrics (kafka_exporter's names) and the console's numbers
        self.guard: Guard = guard or OpenGuard()  # who asks, and what they may see
        self.collectors = collectors  # more families for /metrics (prometheus_client Collectors)
        self.port = 0
        self.host = ""
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._metrics_build: asyncio.Future[bytes] | None = None

    @property
    def url(self) -> str:
        host = self.host or "0.0.0.0"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def start(self, host: str, port: int) -> None:
        """Bind and serve; port 0 picks a free port (logged, and in `self.port`)."""
        try:
            self._server = await asyncio.start_server(self._accept, host or None, port, reuse_address=True,
                                                      limit=MAX_LINE)
        except OSError as exc:  # the CLI reports OSErrors as "cannot listen on ..."
            raise OSError(exc.errno, f"metrics.listener http://{host}:{port}: {exc.strerror}") from None
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics listening on %s", self.url)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._metrics_build is not None:
            self._metrics_build.cancel()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------------ connection

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, target, headers = await asyncio.wait_for(read_head(reader), READ_TIMEOUT)
        except BadRequest as exc:
            return await send(writer, error(400, "BAD_REQUEST", str(exc)))
        except asyncio.TimeoutError:
            return await send(writer, error(408, "REQUEST_TIMEOUT", "request head not received in time"))
        except asyncio.IncompleteReadError:
            return  # the client went away before finishing its request
        started = time.perf_counter()
        peer = writer.get_extra_info("peername")
        try:
            caller = self.guard.authenticate(headers, peer[0] if peer else "")
        except Unauthorized as exc:
            return await send(writer, Response(401, json.dumps({"error": "UNAUTHORIZED", "message": str(exc)}).encode()
                                               + b"\n", headers=(("WWW-Authenticate", 'Basic realm="offsetd"'),)))
        try:
            response = await self.respond(method, target, caller, headers.get("accept", ""))
        except Exception:
            log.exception("metrics endpoint failed on %s %s", method, target)
            response = error(500, "INTERNAL_ERROR", "see the broker log")
        if (response.content_type == JSON_TYPE and len(response.body) >= GZIP_MIN_BYTES
                and "gzip" in headers.get("accept-encoding", "")):
            response = Response(response.status, gzip.compress(response.body, 1), response.content_type,
                                response.headers + (("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")))
        if method != "GET":
            await discard_body(reader, headers)
        await send(writer, response)
        log.debug("%s %s -> %d, %d bytes in %.1f ms", method, target, response.status, len(response.body),
                  (time.perf_counter() - started) * 1000)

    # --------------------------------------------------------------------------- routing

    async def respond(self, method: str, target: str, caller: Caller | None = None, accept: str = "") -> Response:
        """The answer to one request (method, request-target and Accept header as sent)."""
        path = urlsplit(target).path if not target.startswith("/") else target.split("?", 1)[0].split("#", 1)[0]
        caller = caller or Caller(None, "")
        query = parse_qs(target.split("?", 1)[1].split("#", 1)[0]) if "?" in target else {}
        if path in ("/metrics", "/", "/v1/lag", "/v1/topics", "/console"):
            route = path
        elif path in API_INDEX_PATHS:
            route = "index"
        elif path.startswith(CONSOLE_PREFIX) and path[len(CONSOLE_PREFIX):] in CONSOLE_FILES:
            route = "console"
        elif path in ("/v1/groups", GROUPS_PREFIX):
            route = "groups"
        elif path.startswith(GROUPS_PREFIX) and path.endswith(HISTORY_SUFFIX) and len(path) > len(GROUPS_PREFIX
                                                                                                   + HISTORY_SUFFIX):
            route, path = "history", path[:-len(HISTORY_SUFFIX)]
        elif path.startswith(GROUPS_PREFIX):
            route = "group"
        else:
            return error(404, "NOT_FOUND", f"no such path: {path} (try /metrics, /v1/ or /console/)")
        if method != "GET":
            return error(405, "METHOD_NOT_ALLOWED", f"{method} is not allowed here: the endpoint is read-only (GET)")
        if route == "/":
            vary = (("Vary", "Accept"),)  # the same path answers a browser and a script differently
            if wants_json(accept):
                return Response(200, API_INDEX, headers=vary)
            return Response(200, HOME_PAGE, HTML_TYPE, vary)
        if route == "index":
            return Response(200, API_INDEX)
        if route == "/console":
            return Response(301, b"", TEXT_TYPE, (("Location", CONSOLE_PREFIX),))
        if route == "console":
            return console_file(path[len(CONSOLE_PREFIX):])
        if route == "/metrics":
            if isinstance(self.guard, OpenGuard):
                return Response(200, await self.metrics(), CONTENT_TYPE)
            return Response(200, await self._build_metrics(caller), CONTENT_TYPE)  # the caller's own view
        if route == "/v1/lag":
            return await self.lag_json(caller, query.get("group"))
        if route == "/v1/topics":
            return await self.topics_json(caller)
        if route == "groups":
            snapshot, out = Snapshot(), []
            await pace(take_snapshot(self.runtimes, snapshot))
            if not isinstance(self.guard, OpenGuard):
                for shard in snapshot.shards:
                    shard.groups = [r for r in shard.groups if self.guard.may_describe_group(caller, r[0])]
            await pace(groups_json(snapshot, out))
            return Response(200, b"".join(out))
        try:
            group_id = unquote(path[len(GROUPS_PREFIX):], errors="strict")
        except UnicodeDecodeError:
            return error(400, "BAD_REQUEST", "the group id is not percent-encoded UTF-8")
        if not self.guard.may_describe_group(caller, group_id):
            return error(403, "GROUP_AUTHORIZATION_FAILED", f"not authorized to describe group {group_id!r}",
                         group=group_id)
        if route == "history":
            return await self.history_json(group_id, query)
        if not self.runtimes:  # the any-cluster console: no shards here, /v1/lag has the groups
            return error(404, "GROUP_ID_NOT_FOUND", f"group {group_id!r} is not coordinated here", group=group_id)
        try:
            detail = group_detail(self.runtimes, group_id)
        except GroupNotFound:
            return error(404, "GROUP_ID_NOT_FOUND", f"group {group_id!r} does not exist", group=group_id)
        except CoordinatorUnavailable as exc:
            return error(503, exc.error, f"__consumer_offsets-{exc.partition}, which holds group {group_id!r}, "
                         f"is {'loading' if exc.error == 'COORDINATOR_LOAD_IN_PROGRESS' else 'not available'}",
                         group=group_id)
        return Response(200, json.dumps(detail).encode() + b"\n")

    async def visible_lag(self, caller: Caller) -> LagSnapshot | None:
        """The lag snapshot as this caller may see it (None: no lag source)."""
        if self.lag is None:
            return None
        return self.guard.visible(caller, await self.lag.snapshot())

    async def lag_json(self, caller: Caller, groups: list[str] | None) -> Response:
        """/v1/lag: the snapshot's groups (only `groups` when given) with their totals, and partitions."""
        snapshot = await self.visible_lag(caller)
        if snapshot is None:
            return error(404, "NOT_FOUND", "no lag source on this listener")
        out: list[bytes] = []
        await pace(lag_json(snapshot, set(groups) if groups else None, out))
        return Response(200, b"".join(out))

    async def topics_json(self, caller: Caller) -> Response:
        """/v1/topics: per topic its partitions (log start, end, high watermark, leader) and, per
        partition, the groups with a commit there and their lag."""
        snapshot = await self.visible_lag(caller)
        if snapshot is None:
            return error(404, "NOT_FOUND", "no lag source on this listener")
        readers: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for g in snapshot.groups:
            for p in g.partitions:
                if p.committed is not None:
                    readers.setdefault((p.topic, p.partition), []).append(
                        {"group": g.group, "committed": p.committed, "lag": p.lag, "time_lag_ms": p.time_lag_ms})
        topics: dict[str, dict[str, Any]] = {}
        for p in snapshot.partitions:
            topic = topics.setdefault(p.topic, {"topic": p.topic, "partitions": [], "groups": set()})
            read_by = readers.get((p.topic, p.partition), [])
            topic["partitions"].append({**_as_dict(p, _ENDS), "groups": read_by})
            topic["groups"].update(r["group"] for r in read_by)
        for topic in topics.values():
            topic["groups"] = sorted(topic["groups"])
            topic["records"] = sum(p["log_end"] - p["log_start"] for p in topic["partitions"])
        return Response(200, json.dumps({"taken_at_ms": snapshot.taken_at_ms,
                                         "topics": sorted(topics.values(), key=lambda t: t["topic"])}).encode()
                        + b"\n")

    async def history_json(self, group_id: str, query: dict[str, list[str]]) -> Response:
        """/v1/groups/{group}/history?since_ms=&points=: the group's lag over time and its health."""
        if self.history is None:
            return error(404, "NOT_FOUND", "no lag history on this listener")
        try:
            since = int(query["since_ms"][0]) if "since_ms" in query else int(time.time() * 1000) - DEFAULT_HISTORY_MS
            points = min(max(int(query.get("points", ["600"])[0]), 2), 2000)
        except ValueError:
            return error(400, "BAD_REQUEST", "since_ms and points are integers")
        try:
            answer = await self.history.history(group_id, since, points)
        except HistoryUnavailable as exc:
            return error(503, exc.error, f"__consumer_offsets-{exc.partition}, which holds group {group_id!r}, "
                         "is not available", group=group_id)
        return Response(200, json.dumps(answer).encode() + b"\n")

    async def metrics(self) -> bytes:
        """The /metrics payload; a scrape arriving while one is being built gets that one."""
        if self._metrics_build is None:
            self._metrics_build = asyncio.ensure_future(self._build_metrics())
            self._metrics_build.add_done_callback(self._metrics_built)
        return await asyncio.shield(self._metrics_build)

    def _metrics_built(self, future: asyncio.Future[bytes]) -> None:
        self._metrics_build = None
        if not future.cancelled():
            future.exception()  # retrieved here so an unawaited failure is not logged as "never retrieved"

    async def _build_metrics(self, caller: Caller | None = None) -> bytes:
        """The /metrics payload; with a caller (security on), only the groups and topics it may
        describe have series."""
        snapshot, out = Snapshot(), []
        await pace(take_snapshot(self.runtimes, snapshot,
                                 wanted=self.group_filter.fullmatch if self.group_filter is not None else None))
        if caller is not None:
            for shard in snapshot.shards:
                shard.groups = [r for r in shard.groups if self.guard.may_describe_group(caller, r[0])]
                shard.counts = None  # the caller's counts: of the groups it may describe (and the filter wants)
        await pace(render(snapshot, out))
        if self.lag is not None:
            lag = await self.lag.snapshot()
            with collector_paused():
                await pace(render_lag(lag if caller is None else self.guard.visible(caller, lag), out))
        if self.collectors:
            out.append(generate_latest(_Collectors(self.collectors)))
        return b"".join(out)


def _fields(cls: type, *skip: str) -> tuple[str, attrgetter]:  # type: ignore[type-arg]
    names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in skip)
    return names, attrgetter(*names)


_PARTITION = _fields(PartitionLag)
_GROUP = _fields(GroupLag, "partitions", "member_list", "revision")
_MEMBER = _fields(GroupMember)
_ENDS = _fields(TopicPartitionEnds)


def _as_dict(obj: Any, fields: tuple[tuple[str, ...], attrgetter]) -> dict[str, Any]:  # type: ignore[type-arg]
    """A flat dataclass as a dict (dataclasses.asdict deep-copies: ~10x slower for 100k rows)."""
    return dict(zip(fields[0], fields[1](obj)))


def group_lag_json(group: GroupLag) -> dict[str, Any]:
    """One group of /v1/lag: its fields, partitions and members, and its totals."""
    row = _as_dict(group, _GROUP)
    row["partitions"] = [_as_dict(p, _PARTITION) for p in group.partitions]
    row["member_list"] = [_as_dict(m, _MEMBER) for m in group.member_list]
    row["total_lag"], row["max_time_lag_ms"] = group.total_lag, group.max_time_lag_ms
    return row


def lag_json(snapshot: LagSnapshot, wanted: set[str] | None, out: list[bytes],
             slicer: Slicer | None = None) -> Iterator[None]:
    """Cooperative generator appending /v1/lag to `out`: {taken_at_ms, seconds, cluster, expiry_known,
    groups (only `wanted` when given), partitions (empty when `wanted` is given)}."""
    slicer = slicer or Slicer()
    head = {"taken_at_ms": snapshot.taken_at_ms, "seconds": snapshot.seconds, "cluster": snapshot.cluster,
            "expiry_known": snapshot.expiry_known}
    out.append(json.dumps(head)[:-1].encode() + b', "groups": ')
    yield from _json_array([g for g in snapshot.groups if wanted is None or g.group in wanted], group_lag_json,
                           100, out, slicer)
    out.append(b', "partitions": ')
    yield from _json_array(snapshot.partitions if wanted is None else [], lambda p: _as_dict(p, _ENDS), JSON_CHUNK,
                           out, slicer)
    out.append(b"}\n")


def _json_array(items: Sequence[Any], row: Any, chunk: int, out: list[bytes], slicer: Slicer) -> Iterator[None]:
    """Append `[row(item), ...]` to `out`, `chunk` items per json.dumps, pausing when the slice is used up."""
    out.append(b"[")
    for i in range(0, len(items), chunk):
        text = json.dumps([row(item) for item in items[i:i + chunk]])[1:-1].encode()
        out.append(text if i == 0 else b", " + text)
        if slicer.due():
            yield
    out.append(b"]")


_console_cache: dict[str, bytes] = {}


def console_file(name: str) -> Response:
    """One of the console's static files (package data of offsetd.console), read once."""
    filename, content_type = CONSOLE_FILES[name]
    if filename not in _console_cache:
        _console_cache[filename] = resources.files("offsetd.console").joinpath(filename).read_bytes()
    return Response(200, _console_cache[filename], content_type)


class _Collectors:
    """Several prometheus_client Collectors as one registry for generate_latest."""

    def __init__(self, collectors: Sequence[Any]) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Any]:
        for collector in self.collectors:
            yield from collector.collect()


# ------------------------------------------------------------------------------- HTTP/1.1

async def read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    """Request line and headers; BadRequest for anything that is not an HTTP/1.x request head."""
    line = await _read_line(reader)
    if not line:  # RFC 9112 2.2: ignore an empty line before the request line
        line = await _read_line(reader)
    match = _REQUEST_LINE.match(line)
    if not match:
        raise BadRequest(f"malformed request line {line[:100]!r}")
    method, target = match.group(1), match.group(2)
    if not (target.startswith("/") or target.startswith("http://") or target.startswith("https://")):
        raise BadRequest(f"unsupported request target {target[:100]!r}")
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _read_line(reader)
        if not line:
            return method, target, headers
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"malformed header line {line[:100]!r}")
        headers[name.lower()] = value.strip()
    raise BadRequest(f"more than {MAX_HEADERS} headers")


async def _read_line(reader: asyncio.StreamReader) -> str:
    try:
        raw = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(f"a request line or header is longer than {MAX_LINE} bytes") from None
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise BadRequest("request head ended early") from None
        raise
    try:
        return raw.rstrip(b"\r\n").decode("latin-1" if raw.isascii() else "utf-8")
    except UnicodeDecodeError:
        raise BadRequest("request head is not text") from None


async def discard_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    """Read a small request body before answering, so closing the socket does not reset it."""
    length = headers.get("content-length", "")
    if length.isdigit() and 0 < int(length) <= MAX_DISCARDED_BODY:
        try:
            await asyncio.wait_for(reader.readexactly(int(length)), READ_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass


async def send(writer: asyncio.StreamWriter, response: Response) -> None:
    writer.write(response.encode_head())
    if response.body:
        writer.write(response.body)
    await writer.drain()

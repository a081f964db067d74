"""Where lag alert events go: the log (always) and a webhook (JSON POST), without ever blocking
the event loop: events queue up and one task sends them in order, each POST on a worker thread
with its timeout. A webhook that is down costs a warning per event, never a stalled broker."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from collections import Counter

from .alerts import AlertEvent

log = logging.getLogger("offsetd.lag.alerts")

QUEUE_LIMIT = 10_000  # events waiting for the webhook; beyond it the oldest are dropped (and logged)


def log_line(event: AlertEvent, source: str) -> str:
    """The log line of an event: what, for which group, the value against the threshold."""
    value = "-" if event.value is None else f"{event.value:g}"
    return (f"lag alert {event.status.upper()}: {event.rule} of group {event.group!r} is {value} {event.unit} "
            f"(threshold {event.threshold:g}) on {source}")


class Notifier:
    """Sends events to the log and, when configured, to a webhook; counts what it sent."""

    def __init__(self, source: str, webhook_url: str | None = None, timeout_ms: int = 5000) -> None:
        self.source = source  # who judged: "broker 1 (cluster <id>)" or the bootstrap servers
        self.webhook_url = webhook_url
        self.timeout_s = timeout_ms / 1000
        self.sent: Counter[str] = Counter()    # status -> events notified
        self.webhook_failures = 0
        self._queue: asyncio.Queue[AlertEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def notify(self, events: list[AlertEvent]) -> None:
        for event in events:
            (log.warning if event.status == "firing" else log.info)(log_line(event, self.source))
            self.sent[event.status] += 1
            if self.webhook_url is None:
                continue
            if self._queue.qsize() >= QUEUE_LIMIT:
                dropped = self._queue.get_nowait()
                log.warning("lag alert webhook queue full: dropped %s of %r", dropped.rule, dropped.group)
            self._queue.put_nowait(event)
        if self.webhook_url is not None and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._send_all())

    async def _send_all(self) -> None:
        while not self._queue.empty():
            event = self._queue.get_nowait()
            body = json.dumps({**event.to_json(), "source": self.source}).encode()
            try:
                await asyncio.to_thread(self._post, body)
            except Exception as exc:
                self.webhook_failures += 1
                log.warning("lag alert webhook %s failed for %s of %r: %s", self.webhook_url, event.rule,
                            event.group, exc)

    def _post(self, body: bytes) -> None:
        assert self.webhook_url is not None
        request = urllib.request.Request(self.webhook_url, data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "User-Agent": "offsetd-lag-alerts"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            response.read()

    async def drain(self) -> None:
        """Wait until every queued event was sent (or failed); tools call it before exiting."""
        if self._task is not None:
            await self._task

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

"""The broker's built-in lag alerts (`lag.alert.*`): every `lag.alert.interval.ms` the rules of
lag/alerts.py judge the broker's own look at lag (the groups it coordinates) and the events go to
the log and the webhook (lag/notify.py). A prometheus_client Collector for /metrics as well:

| metric | meaning |
|---|---|
| offsetd_lag_alert_firing{rule,consumergroup} | 1 while the rule fires for the group |
| offsetd_lag_alert_notifications_total{status} | events notified (firing / resolved) |
| offsetd_lag_alert_webhook_failures_total | webhook POSTs that failed |
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..config import BrokerConfig
from ..lag.alerts import AlertEvaluator, rules_from_config
from ..lag.model import LagSource
from ..lag.notify import Notifier

log = logging.getLogger("offsetd.lag.alerts")


class LagAlerts:
    """Periodic evaluation of the configured lag alert rules; a prometheus_client Collector."""

    def __init__(self, evaluator: AlertEvaluator, notifier: Notifier, source: LagSource, clock: Callable[[], int],
                 interval_ms: int) -> None:
        self.evaluator = evaluator
        self.notifier = notifier
        self.source = source
        self.clock = clock
        self.interval_ms = interval_ms

    @classmethod
    def from_config(cls, config: BrokerConfig, source: LagSource, clock: Callable[[], int]) -> "LagAlerts | None":
        """None when no rule is configured."""
        rules = rules_from_config(config.get)
        if not rules.any:
            return None
        notifier = Notifier(f"broker {config.get('node.id')}", config.get("lag.alert.webhook.url"),
                            config.get("lag.alert.webhook.timeout.ms"))
        return cls(AlertEvaluator(rules), notifier, source, clock, config.get("lag.alert.interval.ms"))

    async def evaluate_once(self) -> None:
        snapshot = await self.source.snapshot()
        self.notifier.notify(self.evaluator.evaluate(snapshot, self.clock()))

    async def run(self) -> None:
        """Evaluate forever (cancelled at shutdown)."""
        try:
            while True:
                await asyncio.sleep(self.interval_ms / 1000)
                try:
                    await self.evaluate_once()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("evaluating the lag alert rules failed")
        finally:
            self.notifier.close()

    def collect(self) -> Iterator[Any]:
        firing = GaugeMetricFamily("offsetd_lag_alert_firing", "1 while the lag alert rule fires for the group.",
                                   labels=["rule", "consumergroup"])
        for rule, group, _value in self.evaluator.firing():
            firing.add_metric([rule, group], 1)
        yield firing
        sent = CounterMetricFamily("offsetd_lag_alert_notifications", "Lag alert events notified.",
                                   labels=["status"])
        for status in ("firing", "resolved"):
            sent.add_metric([status], self.notifier.sent[status])
        yield sent
        yield CounterMetricFamily("offsetd_lag_alert_webhook_failures", "Lag alert webhook POSTs that failed.",
                                  value=self.notifier.webhook_failures)
